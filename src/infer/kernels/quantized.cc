// PackedMatrix::Quantize: int8 / int4 weights in the layout ops.h describes, and the names of
// the quantization types. Runs once at load.
#include <algorithm>
#include <cmath>
#include <vector>

#include "infer/core/error.h"
#include "infer/kernels/ops.h"

namespace infer::kernels {

std::string_view QuantizationName(Quantization quantization) {
  switch (quantization) {
    case Quantization::kNone:
      return "none";
    case Quantization::kInt8:
      return "int8";
    case Quantization::kInt4:
      return "int4";
  }
  return "unknown";
}

Quantization ParseQuantization(std::string_view name) {
  for (Quantization q : {Quantization::kNone, Quantization::kInt8, Quantization::kInt4}) {
    if (QuantizationName(q) == name) return q;
  }
  Fail("quantization '{}' is not one of none, int8, int4", name);
}

namespace {

// The largest scale an f16 holds exactly enough: finite and not rounded to infinity.
constexpr float kMaxF16 = 65504.0F;
// The scales tried per group: the range's, then kScaleStep smaller each.
constexpr int kScaleCandidates = 8;
constexpr float kScaleStep = 0.02F;

// x rounded to the nearest integer, ties to even, for |x| < 2^22 (adding 1.5 * 2^23 leaves no
// fraction bits; the default rounding mode rounds to nearest even). Inline and vectorizable,
// unlike a call to nearbyintf.
inline float RoundToEven(float x) {
  constexpr float kMagic = 12582912.0F;
  return (x + kMagic) - kMagic;
}

// An ifunc resolver (target_clones) runs before the sanitizer runtime starts; ThreadSanitizer
// instruments it and the process crashes while loading, so that build takes the default clone.
#if defined(__SANITIZE_THREAD__)
#define INFER_TARGET_CLONES_AVX2
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define INFER_TARGET_CLONES_AVX2
#endif
#endif
#ifndef INFER_TARGET_CLONES_AVX2
#define INFER_TARGET_CLONES_AVX2 __attribute__((target_clones("avx2", "default")))
#endif

// Squared error of an int4 group quantized with scale d and minimum m, in f32, accumulated in
// 8 interleaved partial sums that are then added in order (a fixed order the compiler can
// vectorize; compiled for AVX2 too, picked at load, the same arithmetic). values holds `padded`
// entries, zeros past count, and the padding is masked out.
INFER_TARGET_CLONES_AVX2 float Int4GroupError(const float* values, int64_t count, int64_t padded,
                                              float d, float m) {
  const float inverse = d > 0.0F ? 1.0F / d : 0.0F;
  float partial[8] = {};
  const int64_t full = count == padded ? padded : 0;  // a partial group takes the masked loop
  for (int64_t i = 0; i < full; i += 8) {
    for (int64_t j = 0; j < 8; ++j) {
      const float v = values[i + j];
      const float q = std::min(std::max(RoundToEven((v - m) * inverse), 0.0F), 15.0F);
      const float diff = d * q + m - v;
      partial[j] += diff * diff;
    }
  }
  for (int64_t i = full; i < count; ++i) {
    const float v = values[i];
    const float q = std::min(std::max(RoundToEven((v - m) * inverse), 0.0F), 15.0F);
    const float diff = d * q + m - v;
    partial[i % 8] += diff * diff;
  }
  float total = 0.0F;
  for (float p : partial) total += p;
  return total;
}

// Quantizes rows [row_begin, row_end) of w into packed's bytes.
template <bool kInt4>
void QuantizeRows(const Tensor& w, const PackedMatrix& packed, uint8_t* bytes, int64_t row_begin,
                  int64_t row_end) {
  const int64_t k = w.dim(1);
  const int64_t group = packed.group_size();
  const int64_t padded_k = packed.num_groups() * group;
  const int64_t sub_bytes = packed.sub_block_bytes();
  std::vector<float> row_values(static_cast<size_t>(padded_k));
  for (int64_t row = row_begin; row < row_end; ++row) {
    float* values_row = row_values.data();
    for (int64_t c = 0; c < k; ++c) {
      const float v = ElementAsF32(w, row * k + c);
      INFER_CHECK(std::isfinite(v), "quantize: weight [{}, {}] is {}", row, c, v);
      values_row[c] = v;
    }
    std::fill(values_row + k, values_row + padded_k, 0.0F);
    for (int64_t g = 0; g < packed.num_groups(); ++g) {
      const int64_t begin = g * group;
      const int64_t count = std::min(group, k - begin);
      const float* values = values_row + begin;
      float lo = values[0];
      float hi = values[0];
      float amax = 0.0F;
      for (int64_t i = 0; i < count; ++i) {
        lo = std::min(lo, values[i]);
        hi = std::max(hi, values[i]);
        amax = std::max(amax, std::fabs(values[i]));
      }
      // The scale (and minimum) are rounded to f16 first; q is chosen against the rounded
      // values. int4: among a few scales at and below the range's (clipping the extremes a
      // little), the one with the least squared error wins (int8's 255 levels gain nothing).
      const float m = kInt4 ? F16ToF32(F32ToF16(lo)) : 0.0F;
      const float base = kInt4 ? (hi - m) / 15.0F : amax / 127.0F;
      INFER_CHECK(base <= kMaxF16 && std::fabs(m) <= kMaxF16,
                  "quantize: weights of row {} near column {} (max |w| {}) are too large for an "
                  "f16 scale",
                  row, begin, amax);
      auto round_scale = [](float scale) { return F16ToF32(F32ToF16(scale)); };
      float d = round_scale(base);
      if constexpr (kInt4) {
        float best_error = Int4GroupError(values, count, group, d, m);
        for (int step = 1; step < kScaleCandidates; ++step) {
          const float candidate = round_scale(base * (1.0F - kScaleStep * step));
          const float error = Int4GroupError(values, count, group, candidate, m);
          if (error < best_error) {
            best_error = error;
            d = candidate;
          }
        }
      }
      const float inverse = d > 0.0F ? 1.0F / d : 0.0F;
      bool high = false;
      // The group's first byte: element i sits at first + sub-block offset + quad slot * 128
      // + i % 4 (ops.h).
      const int64_t first = packed.QuantIndex(row, begin, &high);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t quad = i % kQuantBlock / 4;
        const int64_t at = first + i / kQuantBlock * sub_bytes +
                           (kInt4 ? quad % 4 : quad) * PackedMatrix::kPanelRows * 4 + i % 4;
        if constexpr (kInt4) {
          const int q =
              static_cast<int>(std::clamp(RoundToEven((values[i] - m) * inverse), 0.0F, 15.0F));
          bytes[at] = static_cast<uint8_t>(quad >= 4 ? (bytes[at] & 0x0f) | (q << 4)
                                                     : (bytes[at] & 0xf0) | q);
        } else {
          const int q =
              static_cast<int>(std::clamp(RoundToEven(values[i] * inverse), -127.0F, 127.0F));
          bytes[at] = static_cast<uint8_t>(q + 128);
        }
      }
      if constexpr (!kInt4) {
        for (int64_t i = count; i < group; ++i) {  // zero: q = 0 stored as 128
          const int64_t quad = i % kQuantBlock / 4;
          bytes[first + i / kQuantBlock * sub_bytes + quad * PackedMatrix::kPanelRows * 4 + i % 4] =
              128;
        }
      }
      const int64_t scale = packed.ScaleIndex(row, g);
      const uint16_t d16 = F32ToF16(d);
      const uint16_t m16 = F32ToF16(m);
      std::copy_n(reinterpret_cast<const uint8_t*>(&d16), 2, bytes + scale);
      if constexpr (kInt4) {
        std::copy_n(reinterpret_cast<const uint8_t*>(&m16), 2,
                    bytes + scale + 2 * PackedMatrix::kPanelRows);
      }
    }
  }
}

}  // namespace

PackedMatrix PackedMatrix::Quantize(const Tensor& w, Quantization quantization, int64_t group_size,
                                    ThreadPool* pool, bool huge_pages) {
  if (quantization == Quantization::kNone) return Pack(w, pool, huge_pages);
  INFER_CHECK(w.rank() == 2, "quantize: weight has shape {}, expected [n, k]",
              ShapeString(w.shape()));
  INFER_CHECK(w.dtype() == DType::kF32 || w.dtype() == DType::kBF16 || w.dtype() == DType::kF16,
              "quantize: weight has dtype {}, expected f32, bf16 or f16", DTypeName(w.dtype()));
  INFER_CHECK(w.is_contiguous(), "quantize: weight {} is not contiguous", ShapeString(w.shape()));
  INFER_CHECK(w.raw() != nullptr || w.numel() == 0, "quantize: weight has no data");
  if (group_size == 0) group_size = quantization == Quantization::kInt8 ? 32 : kDefaultInt4Group;
  INFER_CHECK(quantization == Quantization::kInt8
                  ? group_size == 32
                  : group_size == 32 || group_size == 64 || group_size == 128,
              "quantize: {} takes groups of {}, got {}", QuantizationName(quantization),
              quantization == Quantization::kInt8 ? "32" : "32, 64 or 128", group_size);
  PackedMatrix packed;
  packed.rows_ = w.dim(0);
  packed.cols_ = w.dim(1);
  packed.quantization_ = quantization;
  packed.group_size_ = group_size;
  const int64_t bytes = std::max<int64_t>(4, packed.num_panels() * packed.panel_bytes());
  // Zero bytes: padding rows dequantize to 0 (int4: d = m = 0; int8: d = 0).
  packed.storage_ = Tensor::Empty(DType::kI32, {(bytes + 3) / 4}, huge_pages);
  if (w.numel() == 0) return packed;
  auto* data = static_cast<uint8_t*>(packed.storage_.raw());
  auto run = [&](int64_t begin, int64_t end) {
    const int64_t row_begin = begin * kPanelRows;
    const int64_t row_end = std::min(packed.rows_, end * kPanelRows);
    if (quantization == Quantization::kInt4) {
      QuantizeRows<true>(w, packed, data, row_begin, row_end);
    } else {
      QuantizeRows<false>(w, packed, data, row_begin, row_end);
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(packed.num_panels(), 1, run);
  } else {
    run(0, packed.num_panels());
  }
  return packed;
}

}  // namespace infer::kernels
