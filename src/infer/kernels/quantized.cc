// PackedMatrix::Quantize and FromQuantizedRows: quantized weights in the layout ops.h
// describes, and the names of the quantization types. Runs once at load.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "infer/core/error.h"
#include "infer/core/splitmix.h"
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
    case Quantization::kInt4K:
      return "int4k";
    case Quantization::kInt6:
      return "int6";
    case Quantization::kInt6K:
      return "int6k";
    case Quantization::kInt5K:
      return "int5k";
    case Quantization::kInt5:
      return "int5";
  }
  return "unknown";
}

Quantization ParseQuantization(std::string_view name) {
  for (Quantization q : {Quantization::kNone, Quantization::kInt8, Quantization::kInt4,
                         Quantization::kInt4K, Quantization::kInt6}) {
    if (QuantizationName(q) == name) return q;
  }
  Fail("quantization '{}' is not one of none, int8, int4, int4k, int6", name);
}

namespace {

// Quantize's group_size 0: the type's own group of input channels.
int64_t DefaultGroupSize(Quantization quantization) {
  return quantization == Quantization::kInt4    ? kDefaultInt4Group
         : quantization == Quantization::kInt4K ? kSuperBlock
                                                : kQuantBlock;
}

// The largest scale an f16 holds exactly enough: finite and not rounded to infinity.
constexpr float kMaxF16 = 65504.0F;
// The scales tried per group: the range's, then kScaleStep smaller each.
constexpr int kScaleCandidates = 8;
constexpr float kScaleStep = 0.02F;
// kInt4K: the super-block scales d tried, from the largest sub-block's over 63 up in kScaleStep.
constexpr int kSuperScaleCandidates = 4;

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

// Squared error of a group quantized with scale d and minimum m (q in [q_lo, q_hi]), in f32,
// accumulated in 8 interleaved partial sums that are then added in order (a fixed order the
// compiler can vectorize; compiled for AVX2 too, picked at load, the same arithmetic). values holds
// `padded` entries, zeros past count, and the padding is masked out.
INFER_TARGET_CLONES_AVX2 float GroupError(const float* values, int64_t count, int64_t padded,
                                          float d, float m, float q_lo, float q_hi) {
  const float inverse = d > 0.0F ? 1.0F / d : 0.0F;
  float partial[8] = {};
  const int64_t full = count == padded ? padded : 0;  // a partial group takes the masked loop
  for (int64_t i = 0; i < full; i += 8) {
    for (int64_t j = 0; j < 8; ++j) {
      const float v = values[i + j];
      const float q = std::min(std::max(RoundToEven((v - m) * inverse), q_lo), q_hi);
      const float diff = d * q + m - v;
      partial[j] += diff * diff;
    }
  }
  for (int64_t i = full; i < count; ++i) {
    const float v = values[i];
    const float q = std::min(std::max(RoundToEven((v - m) * inverse), q_lo), q_hi);
    const float diff = d * q + m - v;
    partial[i % 8] += diff * diff;
  }
  float total = 0.0F;
  for (float p : partial) total += p;
  return total;
}

// kInt4K's squared error of one sub-block (32 entries, zeros past count, which are masked out)
// quantized with scale d and minimum m, for each of n scales d[i] with the one m: f32 squares in
// 8 interleaved partial sums (entry c in sum c % 8), added as a tree, ((p0 + p4) + (p2 + p6)) +
// ((p1 + p5) + (p3 + p7)), so that AVX2 adds them in three vector steps. The search for a
// super-block's scales calls this about 15 times per sub-block, for about 9 scales each: it is
// most of an int4k load's time.
void SubBlockErrorsScalar(const float* values, int64_t count, const float* d, int n, float m,
                          float* out) {
  for (int i = 0; i < n; ++i) {
    const float inverse = d[i] > 0.0F ? 1.0F / d[i] : 0.0F;
    float p[8] = {};
    for (int64_t c = 0; c < count; ++c) {
      const float q = std::min(std::max(RoundToEven((values[c] - m) * inverse), 0.0F), 15.0F);
      const float diff = d[i] * q + m - values[c];
      p[c % 8] += diff * diff;
    }
    out[i] = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void SubBlockErrorsAvx2(const float* values, int64_t count,
                                                        const float* d, int n, float m,
                                                        float* out) {
  __m256 v[4];
  __m256 keep[4];  // all ones where the entry is < count
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(values + 8 * j);
    const __m256i index =
        _mm256_add_epi32(_mm256_set1_epi32(8 * j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    keep[j] = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(count)), index));
  }
  const __m256 vm = _mm256_set1_ps(m);
  const __m256 magic = _mm256_set1_ps(12582912.0F);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 fifteen = _mm256_set1_ps(15.0F);
  for (int i = 0; i < n; ++i) {
    const __m256 vd = _mm256_set1_ps(d[i]);
    const __m256 inverse = _mm256_set1_ps(d[i] > 0.0F ? 1.0F / d[i] : 0.0F);
    __m256 acc = zero;
    for (int j = 0; j < 4; ++j) {
      __m256 q = _mm256_mul_ps(_mm256_sub_ps(v[j], vm), inverse);
      q = _mm256_sub_ps(_mm256_add_ps(q, magic), magic);  // RoundToEven
      q = _mm256_min_ps(_mm256_max_ps(q, zero), fifteen);
      const __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(vd, q), vm), v[j]);
      acc = _mm256_add_ps(acc, _mm256_and_ps(_mm256_mul_ps(diff, diff), keep[j]));
    }
    const __m128 half =
        _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // p_i + p_i+4
    const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    out[i] = _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)));
  }
}
#endif

void SubBlockErrors(const float* values, int64_t count, const float* d, int n, float m,
                    float* out) {
#if defined(__x86_64__)
  static const bool kAvx2 = __builtin_cpu_supports("avx2");
  if (kAvx2) {
    SubBlockErrorsAvx2(values, count, d, n, m, out);
    return;
  }
#endif
  SubBlockErrorsScalar(values, count, d, n, m, out);
}

// kInt4K's scales for one super-block of a row (values: kSuperBlock entries, zeros past
// count): the f16 d and dm, and per sub-block the 6-bit sc and mn, chosen as llama.cpp's Q4_K
// chooses them in spirit: each sub-block's own best (scale, minimum <= 0) first; dm the least
// of those minimums over 63; then, for each of a few d from the largest scale over 63 up, every
// sub-block's (sc, mn) near its own best with the least squared error against the rounded
// d sc and dm mn; the d with the least total wins.
struct SuperBlockScales {
  float d = 0.0F;
  float dm = 0.0F;
  int sc[kSuperBlock / kQuantBlock] = {};
  int mn[kSuperBlock / kQuantBlock] = {};
};

SuperBlockScales ChooseSuperBlockScales(const float* values, int64_t count, int64_t row,
                                        int64_t begin) {
  constexpr int64_t kSubs = kSuperBlock / kQuantBlock;
  float own_scale[kSubs] = {};
  float own_min[kSubs] = {};
  float hi[kSubs] = {};
  float max_scale = 0.0F;
  float min_min = 0.0F;
  for (int64_t j = 0; j < kSubs; ++j) {
    const int64_t n = std::clamp<int64_t>(count - j * kQuantBlock, 0, kQuantBlock);
    if (n == 0) continue;
    const float* v = values + j * kQuantBlock;
    hi[j] = *std::max_element(v, v + n);
    own_min[j] = std::min(*std::min_element(v, v + n), 0.0F);
    // The sub-block's own best scale, as int4's search (unrounded).
    float scales[kScaleCandidates];
    float errors[kScaleCandidates];
    for (int i = 0; i < kScaleCandidates; ++i) {
      scales[i] = (hi[j] - own_min[j]) / 15.0F * (1.0F - kScaleStep * i);
    }
    SubBlockErrors(v, n, scales, kScaleCandidates, own_min[j], errors);
    own_scale[j] = scales[std::min_element(errors, errors + kScaleCandidates) - errors];
    max_scale = std::max(max_scale, own_scale[j]);
    min_min = std::min(min_min, own_min[j]);
  }
  INFER_CHECK(max_scale / 63.0F <= kMaxF16 && -min_min / 63.0F <= kMaxF16,
              "quantize: weights of row {} near column {} are too large for an f16 scale", row,
              begin);
  // Each sub-block's best (sc, mn) for a given d and dm, and the super-block's total error.
  auto fit = [&](SuperBlockScales& out) {
    float total = 0.0F;
    for (int64_t j = 0; j < kSubs; ++j) {
      const int64_t n = std::clamp<int64_t>(count - j * kQuantBlock, 0, kQuantBlock);
      if (n == 0) continue;
      const float* v = values + j * kQuantBlock;
      float best_error = INFINITY;
      const float exact_mn = out.dm < 0.0F ? own_min[j] / out.dm : 0.0F;
      for (int mn = static_cast<int>(std::floor(exact_mn)) - 1; mn <= std::ceil(exact_mn) + 1;
           ++mn) {
        if (mn < 0 || mn > 63) continue;
        const float m = out.dm * static_cast<float>(mn);
        // sc that spans the sub-block exactly, and the candidates around and a little below it
        // (none but 0 when the whole super-block has no spread).
        const float top = out.d > 0.0F ? (hi[j] - m) / 15.0F / out.d : 0.0F;
        const int least = out.d > 0.0F ? 1 : 0;
        const int sc_hi = std::clamp(static_cast<int>(std::ceil(top)) + 1, least, 63);
        const int sc_lo = std::clamp(
            static_cast<int>(std::floor(top * (1.0F - kScaleStep * (kScaleCandidates - 1)))), least,
            63);
        float scales[64];
        float errors[64];
        const int candidates = sc_hi - sc_lo + 1;
        for (int i = 0; i < candidates; ++i) scales[i] = out.d * static_cast<float>(sc_lo + i);
        SubBlockErrors(v, n, scales, candidates, m, errors);
        for (int i = 0; i < candidates; ++i) {
          if (errors[i] < best_error) {
            best_error = errors[i];
            out.sc[j] = sc_lo + i;
            out.mn[j] = mn;
          }
        }
      }
      total += best_error;
    }
    return total;
  };
  // d from the largest sub-block scale over 63, or a little above (a coarser grid that may
  // fit the other sub-blocks better): the least total error wins.
  SuperBlockScales out;
  float best_total = INFINITY;
  for (int i = 0; i < kSuperScaleCandidates; ++i) {
    SuperBlockScales candidate;
    candidate.d = F16ToF32(F32ToF16(max_scale / 63.0F * (1.0F + kScaleStep * i)));
    candidate.dm = F16ToF32(F32ToF16(min_min / 63.0F));
    const float total = fit(candidate);
    if (total < best_total) {
      best_total = total;
      out = candidate;
    }
  }
  return out;
}

// Stores u (what the type stores for q) as element i of the group whose first byte is `first`:
// element i sits at first + sub-block offset + quad slot * 128 + i % 4 (ops.h); kInt6's layout's
// top 2 bits Int6TopDelta on. The bytes start zeroed.
template <Quantization kType>
inline void StoreQuant(uint8_t* bytes, int64_t first, int64_t sub_bytes, int64_t i, int u) {
  const int64_t quad = i % kQuantBlock / 4;
  const int64_t sub = first + i / kQuantBlock * sub_bytes + i % 4;
  if constexpr (HasTopPlane(kType)) {
    const int64_t at = sub + quad % 4 * PackedMatrix::kPanelRows * 4;
    bytes[at] |= static_cast<uint8_t>((u & 15) << (quad >= 4 ? 4 : 0));
    bytes[at + PackedMatrix::Int6TopDelta(quad)] |=
        static_cast<uint8_t>((u >> 4) << PackedMatrix::Int6TopShift(quad));
  } else if constexpr (IsInt4(kType)) {
    uint8_t& byte = bytes[sub + quad % 4 * PackedMatrix::kPanelRows * 4];
    byte = static_cast<uint8_t>(quad >= 4 ? (byte & 0x0f) | (u << 4) : (byte & 0xf0) | u);
  } else {
    bytes[sub + quad * PackedMatrix::kPanelRows * 4] = static_cast<uint8_t>(u);
  }
}

// A sub-block's 16 nibble bytes (byte c: value c low, value c + 16 high; QuantizedRow::nibbles)
// at `at`, its first byte: slot j takes bytes [4 j, 4 j + 4).
inline void StoreNibbles(uint8_t* at, const uint8_t* nibbles) {
  constexpr int64_t kSlot = PackedMatrix::kPanelRows * 4;
  for (int64_t j = 0; j < 4; ++j) std::memcpy(at + j * kSlot, nibbles + 4 * j, 4);
}

// Stores the 32 values u (what the type stores for q) of one row's sub-block whose first byte
// (QuantIndex of its first channel) is `at`: StoreQuant's places, each byte written whole once.
template <Quantization kType>
inline void StoreSubBlock(uint8_t* at, const uint8_t* u) {
  constexpr int64_t kSlot = PackedMatrix::kPanelRows * 4;  // bytes from one quad slot to the next
  if constexpr (kType == Quantization::kInt8) {
    for (int64_t j = 0; j < 8; ++j) std::memcpy(at + j * kSlot, u + 4 * j, 4);
    return;
  }
  uint8_t nibbles[16];
  for (int64_t i = 0; i < 16; ++i) {  // quads j and j + 4 share slot j's nibbles
    nibbles[i] = static_cast<uint8_t>((u[i] & 15) | (u[16 + i] & 15) << 4);
  }
  StoreNibbles(at, nibbles);
  if constexpr (HasTopPlane(kType)) {
    // The top 2 bits of quads s, s + 2, s + 4, s + 6 in slot s (0, 1) of the plane after the
    // nibbles, at bits 0-1, 2-3, 4-5, 6-7 (PackedMatrix::Int6TopDelta, Int6TopShift).
    uint8_t top[8];
    for (int64_t slot = 0; slot < 2; ++slot) {
      for (int64_t e = 0; e < 4; ++e) {
        int bits = 0;
        for (int64_t t = 0; t < 4; ++t) bits |= (u[4 * (slot + 2 * t) + e] >> 4 & 3) << (2 * t);
        top[slot * 4 + e] = static_cast<uint8_t>(bits);
      }
    }
    std::memcpy(at + 4 * kSlot, top, 4);
    std::memcpy(at + 5 * kSlot, top + 4, 4);
  }
}

// Quantizes rows [row_begin, row_end) of w into packed's bytes.
template <Quantization kType>
void QuantizeRows(const Tensor& w, const PackedMatrix& packed, uint8_t* bytes, int64_t row_begin,
                  int64_t row_end) {
  constexpr bool kInt4 = IsInt4(kType);
  // The symmetric types' largest |q|, and what they store for q (q + kOffset).
  constexpr int kMaxQ = kType == Quantization::kInt6 ? 31 : 127;
  constexpr int kOffset = QuantStoredOffset(kType);
  const int64_t k = w.dim(1);
  const int64_t group = packed.group_size();
  const int64_t subs = group / kQuantBlock;
  const int64_t padded_k = packed.num_groups() * group;
  const int64_t sub_bytes = packed.sub_block_bytes();
  std::vector<float> row_values(static_cast<size_t>(padded_k));
  std::vector<float> sub_d(static_cast<size_t>(subs));
  std::vector<float> sub_m(static_cast<size_t>(subs));
  std::vector<float> sub_inverse(static_cast<size_t>(subs));
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
      // The stored f16 scale and minimum (kInt4K: d and dm), and each sub-block's (exact) scale
      // and minimum, against which q is chosen.
      float d = 0.0F;
      float m = 0.0F;
      if constexpr (kType == Quantization::kInt4K) {
        const SuperBlockScales scales = ChooseSuperBlockScales(values, count, row, begin);
        d = scales.d;
        m = scales.dm;
        uint32_t words[3] = {};
        for (int64_t j = 0; j < subs; ++j) {
          sub_d[j] = d * static_cast<float>(scales.sc[j]);
          sub_m[j] = m * static_cast<float>(scales.mn[j]);
          SetInt4KScaleBits(words, j, false, scales.sc[j]);
          SetInt4KScaleBits(words, j, true, scales.mn[j]);
        }
        for (int i = 0; i < 3; ++i) {
          std::copy_n(reinterpret_cast<const uint8_t*>(&words[i]), 4,
                      bytes + packed.ScaleWordIndex(row, g, i));
        }
      } else {
        float lo = values[0];
        float hi = values[0];
        float amax = 0.0F;
        for (int64_t i = 0; i < count; ++i) {
          lo = std::min(lo, values[i]);
          hi = std::max(hi, values[i]);
          amax = std::max(amax, std::fabs(values[i]));
        }
        // The scale (and minimum) are rounded to f16 first; q is chosen against the rounded
        // values. int4 and int6: among a few scales at and below the range's (clipping the
        // extremes a little), the one with the least squared error wins (int8's 255 levels gain
        // nothing; int6's head gained top-1 and KL on the fixtures' 1024 positions).
        m = kInt4 ? F16ToF32(F32ToF16(lo)) : 0.0F;
        const float base = kInt4 ? (hi - m) / 15.0F : amax / static_cast<float>(kMaxQ);
        INFER_CHECK(base <= kMaxF16 && std::fabs(m) <= kMaxF16,
                    "quantize: weights of row {} near column {} (max |w| {}) are too large for "
                    "an f16 scale",
                    row, begin, amax);
        auto round_scale = [](float scale) { return F16ToF32(F32ToF16(scale)); };
        d = round_scale(base);
        if constexpr (kType != Quantization::kInt8) {
          const float q_lo = kInt4 ? 0.0F : -static_cast<float>(kMaxQ);
          const float q_hi = kInt4 ? 15.0F : static_cast<float>(kMaxQ);
          float best_error = GroupError(values, count, group, d, m, q_lo, q_hi);
          for (int step = 1; step < kScaleCandidates; ++step) {
            const float candidate = round_scale(base * (1.0F - kScaleStep * step));
            const float error = GroupError(values, count, group, candidate, m, q_lo, q_hi);
            if (error < best_error) {
              best_error = error;
              d = candidate;
            }
          }
        }
        std::fill(sub_d.begin(), sub_d.end(), d);
        std::fill(sub_m.begin(), sub_m.end(), m);
      }
      for (int64_t j = 0; j < subs; ++j) sub_inverse[j] = sub_d[j] > 0.0F ? 1.0F / sub_d[j] : 0.0F;
      bool high = false;
      const int64_t first = packed.QuantIndex(row, begin, &high);
      auto store = [&](int64_t i, int u) { StoreQuant<kType>(bytes, first, sub_bytes, i, u); };
      for (int64_t i = 0; i < count; ++i) {
        const float inverse = sub_inverse[i / kQuantBlock];
        if constexpr (kInt4) {
          const float sm = sub_m[i / kQuantBlock];
          store(i,
                static_cast<int>(std::clamp(RoundToEven((values[i] - sm) * inverse), 0.0F, 15.0F)));
        } else {
          const auto limit = static_cast<float>(kMaxQ);
          store(i, static_cast<int>(std::clamp(RoundToEven(values[i] * inverse), -limit, limit)) +
                       kOffset);
        }
      }
      if constexpr (!kInt4) {
        for (int64_t i = count; i < group; ++i) store(i, kOffset);  // zero: q = 0 stored as kOffset
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
                                    ThreadPool* pool, TensorArena* arena) {
  if (quantization == Quantization::kNone) return Pack(w, pool, arena);
  INFER_CHECK(quantization != Quantization::kInt6K && !IsInt5(quantization),
              "quantize: {} is taken from GGUF {} blocks as given (FromQuantizedRows), not made "
              "from floats",
              QuantizationName(quantization),
              quantization == Quantization::kInt6K   ? "Q6_K"
              : quantization == Quantization::kInt5K ? "Q5_K"
                                                     : "Q5_1");
  INFER_CHECK(w.rank() == 2, "quantize: weight has shape {}, expected [n, k]",
              ShapeString(w.shape()));
  INFER_CHECK(w.dtype() == DType::kF32 || w.dtype() == DType::kBF16 || w.dtype() == DType::kF16,
              "quantize: weight has dtype {}, expected f32, bf16 or f16", DTypeName(w.dtype()));
  INFER_CHECK(w.is_contiguous(), "quantize: weight {} is not contiguous", ShapeString(w.shape()));
  INFER_CHECK(w.raw() != nullptr || w.numel() == 0, "quantize: weight has no data");
  if (group_size == 0) group_size = DefaultGroupSize(quantization);
  INFER_CHECK(quantization == Quantization::kInt4
                  ? group_size == 32 || group_size == 64 || group_size == 128
              : quantization == Quantization::kInt4K ? group_size == kSuperBlock
                                                     : group_size == 32,
              "quantize: {} takes groups of {}, got {}", QuantizationName(quantization),
              quantization == Quantization::kInt4    ? "32, 64 or 128"
              : quantization == Quantization::kInt4K ? "256"
                                                     : "32",
              group_size);
  PackedMatrix packed;
  packed.rows_ = w.dim(0);
  packed.cols_ = w.dim(1);
  packed.quantization_ = quantization;
  packed.group_size_ = group_size;
  const int64_t bytes = std::max<int64_t>(4, packed.num_panels() * packed.panel_bytes());
  // Zero bytes (both kinds of storage start zeroed): padding rows dequantize to 0 (int4:
  // d = m = 0; int8: d = 0).
  packed.storage_ = EmptyIn(arena, DType::kI32, {(bytes + 3) / 4});
  if (w.numel() == 0) return packed;
  auto* data = static_cast<uint8_t*>(packed.storage_.raw());
  auto run = [&](int64_t begin, int64_t end) {
    const int64_t row_begin = begin * kPanelRows;
    const int64_t row_end = std::min(packed.rows_, end * kPanelRows);
    switch (quantization) {
      case Quantization::kInt4:
        QuantizeRows<Quantization::kInt4>(w, packed, data, row_begin, row_end);
        break;
      case Quantization::kInt4K:
        QuantizeRows<Quantization::kInt4K>(w, packed, data, row_begin, row_end);
        break;
      case Quantization::kInt6:
        QuantizeRows<Quantization::kInt6>(w, packed, data, row_begin, row_end);
        break;
      default:
        QuantizeRows<Quantization::kInt8>(w, packed, data, row_begin, row_end);
        break;
    }
  };
  ParallelForOn(pool, packed.num_panels(), 1, run);
  return packed;
}

namespace {

// Rows [row_begin, row_end) from `fill`, stored as given.
template <Quantization kType>
void StoreQuantizedRows(const PackedMatrix& packed, uint8_t* bytes, int64_t row_begin,
                        int64_t row_end,
                        const std::function<void(int64_t, PackedMatrix::QuantizedRow&)>& fill) {
  const int64_t cols = packed.cols();
  const int64_t group = packed.group_size();
  const int64_t groups = packed.num_groups();
  // The stored values' largest: any bit above it marks a q out of range.
  constexpr int kMaxStored = kType == Quantization::kInt8    ? 255
                             : kType == Quantization::kInt6K ? 63
                             : IsInt5(kType)                 ? 31
                                                             : 15;
  constexpr auto kOutside = static_cast<uint8_t>(~kMaxStored);
  constexpr bool kNibbles = kType == Quantization::kInt4 || kType == Quantization::kInt4K;
  PackedMatrix::QuantizedRow out;
  for (int64_t row = row_begin; row < row_end; ++row) {
    out.q.assign(static_cast<size_t>(cols), 0);
    out.d.assign(static_cast<size_t>(groups), 0);
    out.m.assign(static_cast<size_t>(groups), 0);
    out.sc.assign(static_cast<size_t>(cols / kQuantBlock), 0);
    out.mn.assign(static_cast<size_t>(cols / kQuantBlock), 0);
    out.sc16.assign(static_cast<size_t>(cols / 16), 0);
    if constexpr (kNibbles) out.nibbles.assign(static_cast<size_t>(cols / 2), 0);
    out.as_nibbles = false;
    fill(row, out);
    INFER_CHECK(kNibbles || !out.as_nibbles, "quantized row {}: {} takes no nibbles", row,
                QuantizationName(kType));
    if (kOutside != 0 && !out.as_nibbles) {
      uint8_t bits = 0;
      for (const uint8_t u : out.q) bits |= u;
      if ((bits & kOutside) != 0) {
        const auto bad = std::ranges::find_if(out.q, [](uint8_t u) { return (u & kOutside) != 0; });
        constexpr int kOffset = QuantStoredOffset(kType);
        Fail("quantized row {}: q[{}] = {} is outside [{}, {}]", row, bad - out.q.begin(),
             static_cast<int>(*bad) - kOffset, -kOffset, kMaxStored - kOffset);
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      bool high = false;
      const int64_t first = packed.QuantIndex(row, g * group, &high);
      for (int64_t b = 0; b < group / kQuantBlock; ++b) {
        uint8_t* at = bytes + first + b * packed.sub_block_bytes();
        if (kNibbles && out.as_nibbles) {
          StoreNibbles(at, out.nibbles.data() + (g * group + b * kQuantBlock) / 2);
        } else {
          StoreSubBlock<kType>(at, out.q.data() + g * group + b * kQuantBlock);
        }
      }
      const int64_t scale = packed.ScaleIndex(row, g);
      std::copy_n(reinterpret_cast<const uint8_t*>(&out.d[static_cast<size_t>(g)]), 2,
                  bytes + scale);
      if constexpr (HasMinimum(kType)) {
        std::copy_n(reinterpret_cast<const uint8_t*>(&out.m[static_cast<size_t>(g)]), 2,
                    bytes + scale + 2 * PackedMatrix::kPanelRows);
      }
      if constexpr (kType == Quantization::kInt6K) {
        for (int64_t h = 0; h < kInt6KHalves; ++h) {
          bytes[packed.Int6KScaleIndex(row, g, h)] =
              static_cast<uint8_t>(out.sc16[static_cast<size_t>(g * kInt6KHalves + h)]);
        }
      }
      if constexpr (HasInt4KScales(kType)) {
        uint32_t words[3] = {};
        for (int64_t j = 0; j < group / kQuantBlock; ++j) {
          const auto at = static_cast<size_t>(g * group / kQuantBlock + j);
          INFER_CHECK(out.sc[at] <= 63 && out.mn[at] <= 63,
                      "quantized row {}: sub-block {} has 6-bit values {} and {}", row, at,
                      out.sc[at], out.mn[at]);
          SetInt4KScaleBits(words, j, false, out.sc[at]);
          SetInt4KScaleBits(words, j, true, out.mn[at]);
        }
        for (int w = 0; w < 3; ++w) {
          std::copy_n(reinterpret_cast<const uint8_t*>(&words[w]), 4,
                      bytes + packed.ScaleWordIndex(row, g, w));
        }
      }
    }
  }
}

}  // namespace

namespace {

void StoreF16(uint8_t* data, int64_t at, float value) {
  const uint16_t bits = F32ToF16(value);
  std::memcpy(data + at, &bits, 2);
}

}  // namespace

PackedMatrix PackedMatrix::Random(Quantization quantization, int64_t rows, int64_t cols,
                                  uint64_t seed, float stddev, ThreadPool* pool,
                                  TensorArena* arena) {
  INFER_CHECK(quantization == Quantization::kInt8 || quantization == Quantization::kInt4 ||
                  quantization == Quantization::kInt4K || quantization == Quantization::kInt6,
              "random weights: {} is not one of int8, int4, int4k, int6",
              QuantizationName(quantization));
  INFER_CHECK(rows >= 0 && cols >= 0, "random weights: shape [{}, {}]", rows, cols);
  PackedMatrix packed;
  packed.rows_ = rows;
  packed.cols_ = cols;
  packed.quantization_ = quantization;
  packed.group_size_ = DefaultGroupSize(quantization);
  const int64_t bytes = std::max<int64_t>(4, packed.num_panels() * packed.panel_bytes());
  packed.storage_ = EmptyIn(arena, DType::kI32, {(bytes + 3) / 4});
  if (rows == 0 || cols == 0) return packed;
  // The standard deviation of q uniform over the stored levels: 256 (int8), 16 (the 4-bit
  // types) or 64 (int6) of them.
  const double levels = quantization == Quantization::kInt8   ? 256.0
                        : quantization == Quantization::kInt6 ? 64.0
                                                              : 16.0;
  const double q_stddev = std::sqrt((levels * levels - 1.0) / 12.0);
  constexpr int kSubBlockScale = 32;  // kInt4K's sc and mn
  const double step = quantization == Quantization::kInt4K ? stddev / q_stddev / kSubBlockScale
                                                           : stddev / q_stddev;  // d
  // kInt4K's scale words, the same in every group: sc = mn = kSubBlockScale in each sub-block.
  uint32_t words[3] = {0, 0, 0};
  for (int64_t b = 0; b < kSuperBlock / kQuantBlock; ++b) {
    SetInt4KScaleBits(words, b, false, kSubBlockScale);
    SetInt4KScaleBits(words, b, true, kSubBlockScale);
  }
  auto* data = static_cast<uint8_t*>(packed.storage_.raw());
  const int64_t panel_bytes = packed.panel_bytes();
  const int64_t values_bytes = packed.group_size_ / kQuantBlock * packed.sub_block_bytes();
  ParallelForOn(pool, packed.num_panels(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t panel = begin; panel < end; ++panel) {
      uint8_t* at = data + panel * panel_bytes;
      const int64_t first = panel * panel_bytes;
      int64_t i = 0;
      for (; i + 8 <= panel_bytes; i += 8) {
        const uint64_t bits = SplitMix64(seed + static_cast<uint64_t>((first + i) / 8));
        std::memcpy(at + i, &bits, 8);
      }
      for (; i < panel_bytes; ++i) {
        at[i] = static_cast<uint8_t>(SplitMix64(seed + static_cast<uint64_t>((first + i) / 8)));
      }
      for (int64_t group = 0; group < packed.num_groups(); ++group) {
        const int64_t group_start = panel * panel_bytes + group * packed.group_bytes();
        std::memset(data + group_start + values_bytes, 0,
                    static_cast<size_t>(packed.group_bytes() - values_bytes));
        for (int64_t lane = 0; lane < kPanelRows; ++lane) {
          const int64_t row = panel * kPanelRows + lane;
          if (row >= rows) break;  // padding rows keep d = 0
          const int64_t scale = packed.ScaleIndex(row, group);
          StoreF16(data, scale, static_cast<float>(step));
          if (HasMinimum(quantization)) {
            // Mean 0: the minimum (kInt4K: the minimum step, times mn = 32) is -7.5 d (sc).
            StoreF16(data, scale + 2 * kPanelRows, static_cast<float>(-7.5 * step));
          }
          if (quantization == Quantization::kInt4K) {
            for (int w = 0; w < 3; ++w) {
              std::memcpy(data + packed.ScaleWordIndex(row, group, w), &words[w], 4);
            }
          }
        }
      }
    }
  });
  return packed;
}

PackedMatrix PackedMatrix::FromQuantizedRows(
    Quantization quantization, int64_t rows, int64_t cols,
    const std::function<void(int64_t, QuantizedRow&)>& fill, ThreadPool* pool, TensorArena* arena) {
  INFER_CHECK(quantization == Quantization::kInt8 || quantization == Quantization::kInt4 ||
                  quantization == Quantization::kInt4K || quantization == Quantization::kInt6K ||
                  IsInt5(quantization),
              "quantized rows: {} is not taken as given", QuantizationName(quantization));
  const bool super = HasInt4KScales(quantization) || quantization == Quantization::kInt6K;
  const int64_t group = super ? kSuperBlock : kQuantBlock;
  INFER_CHECK(rows >= 0 && cols > 0 && cols % group == 0,
              "quantized rows: [{}, {}] is not in whole groups of {}", rows, cols, group);
  PackedMatrix packed;
  packed.rows_ = rows;
  packed.cols_ = cols;
  packed.quantization_ = quantization;
  packed.group_size_ = group;
  const int64_t bytes = std::max<int64_t>(4, packed.num_panels() * packed.panel_bytes());
  packed.storage_ = EmptyIn(arena, DType::kI32, {(bytes + 3) / 4});
  auto* data = static_cast<uint8_t*>(packed.storage_.raw());
  auto run = [&](int64_t begin, int64_t end) {
    const int64_t row_begin = begin * kPanelRows;
    const int64_t row_end = std::min(rows, end * kPanelRows);
    if (quantization == Quantization::kInt8) {
      StoreQuantizedRows<Quantization::kInt8>(packed, data, row_begin, row_end, fill);
    } else if (quantization == Quantization::kInt4) {
      StoreQuantizedRows<Quantization::kInt4>(packed, data, row_begin, row_end, fill);
    } else if (quantization == Quantization::kInt6K) {
      StoreQuantizedRows<Quantization::kInt6K>(packed, data, row_begin, row_end, fill);
    } else if (quantization == Quantization::kInt5K) {
      StoreQuantizedRows<Quantization::kInt5K>(packed, data, row_begin, row_end, fill);
    } else if (quantization == Quantization::kInt5) {
      StoreQuantizedRows<Quantization::kInt5>(packed, data, row_begin, row_end, fill);
    } else {
      StoreQuantizedRows<Quantization::kInt4K>(packed, data, row_begin, row_end, fill);
    }
  };
  ParallelForOn(pool, packed.num_panels(), 1, run);
  return packed;
}

}  // namespace infer::kernels
