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

float WidenAt(const Tensor& w, int64_t index) {
  switch (w.dtype()) {
    case DType::kBF16:
      return Bf16ToF32(w.data<const uint16_t>()[index]);
    case DType::kF16:
      return F16ToF32(w.data<const uint16_t>()[index]);
    default:
      return w.data<const float>()[index];
  }
}

// The largest scale an f16 holds exactly enough: finite and not rounded to infinity.
constexpr float kMaxF16 = 65504.0F;
// The scales tried per group: the range's, then kScaleStep smaller each.
constexpr int kScaleCandidates = 8;
constexpr float kScaleStep = 0.02F;

// Quantizes rows [row_begin, row_end) of w into packed's bytes.
void QuantizeRows(const Tensor& w, const PackedMatrix& packed, uint8_t* bytes, int64_t row_begin,
                  int64_t row_end) {
  const int64_t k = w.dim(1);
  const int64_t group = packed.group_size();
  const bool int4 = packed.quantization() == Quantization::kInt4;
  std::vector<float> values(static_cast<size_t>(group));
  for (int64_t row = row_begin; row < row_end; ++row) {
    for (int64_t g = 0; g < packed.num_groups(); ++g) {
      const int64_t begin = g * group;
      const int64_t count = std::min(group, k - begin);
      float lo = 0.0F;
      float hi = 0.0F;
      float amax = 0.0F;
      for (int64_t i = 0; i < count; ++i) {
        const float v = WidenAt(w, row * k + begin + i);
        INFER_CHECK(std::isfinite(v), "quantize: weight [{}, {}] is {}", row, begin + i, v);
        values[static_cast<size_t>(i)] = v;
        lo = i == 0 ? v : std::min(lo, v);
        hi = i == 0 ? v : std::max(hi, v);
        amax = std::max(amax, std::fabs(v));
      }
      // The scale (and minimum) are rounded to f16 first; q is chosen against the rounded
      // values. int4: among a few scales at and below the range's (clipping the extremes a
      // little), the one with the least squared error wins (int8's 255 levels gain nothing).
      const float m = int4 ? F16ToF32(F32ToF16(lo)) : 0.0F;
      const float base = int4 ? (hi - m) / 15.0F : amax / 127.0F;
      INFER_CHECK(base <= kMaxF16 && std::fabs(m) <= kMaxF16,
                  "quantize: weights of row {} near column {} (max |w| {}) are too large for an "
                  "f16 scale",
                  row, begin, amax);
      auto quantize = [&](float v, float inverse) {
        return int4 ? std::clamp(static_cast<int>(std::nearbyint((v - m) * inverse)), 0, 15)
                    : std::clamp(static_cast<int>(std::nearbyint(v * inverse)), -127, 127);
      };
      auto round_scale = [](float scale) { return F16ToF32(F32ToF16(scale)); };
      float d = round_scale(base);
      double best_error = -1.0;
      for (int step = 0; step < (int4 ? kScaleCandidates : 1); ++step) {
        const float candidate = round_scale(base * (1.0F - kScaleStep * step));
        const float inverse = candidate > 0.0F ? 1.0F / candidate : 0.0F;
        double error = 0.0;
        for (int64_t i = 0; i < count; ++i) {
          const float v = values[static_cast<size_t>(i)];
          const double diff = static_cast<double>(candidate) * quantize(v, inverse) + m - v;
          error += diff * diff;
        }
        if (best_error < 0.0 || error < best_error) {
          best_error = error;
          d = candidate;
        }
      }
      const float inverse = d > 0.0F ? 1.0F / d : 0.0F;
      for (int64_t i = 0; i < group; ++i) {
        int q = 0;
        if (i < count) {
          q = quantize(values[static_cast<size_t>(i)], inverse) + (int4 ? 0 : 128);
        } else if (!int4) {
          q = 128;  // zero
        }
        bool high = false;
        uint8_t& byte = bytes[packed.QuantIndex(row, begin + i, &high)];
        if (int4) {
          byte = static_cast<uint8_t>(high ? (byte & 0x0f) | (q << 4) : (byte & 0xf0) | q);
        } else {
          byte = static_cast<uint8_t>(q);
        }
      }
      const int64_t scale = packed.ScaleIndex(row, g);
      const uint16_t d16 = F32ToF16(d);
      const uint16_t m16 = F32ToF16(m);
      std::copy_n(reinterpret_cast<const uint8_t*>(&d16), 2, bytes + scale);
      if (int4) {
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
    QuantizeRows(w, packed, data, begin * kPanelRows, std::min(packed.rows_, end * kPanelRows));
  };
  if (pool != nullptr) {
    pool->ParallelFor(packed.num_panels(), 1, run);
  } else {
    run(0, packed.num_panels());
  }
  return packed;
}

}  // namespace infer::kernels
