// Vectorised elementwise and per-row kernels (norms, RoPE, activations, widening), compiled
// once per ISA. Each loop runs whole vectors, then one masked vector for the tail.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

template <typename Op>
inline void Unary(const float* x, float* y, int64_t n, Op&& op) {
  ForEachVector(n,
                [&](int64_t i, int64_t count) { StoreN(y + i, op(LoadN(x + i, count)), count); });
}

}  // namespace

void RmsNorm(const float* x, int64_t rows, int64_t dim, DType w_dtype, const void* w, float eps,
             float weight_offset, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    // Sum of squares in double (two f64 halves per f32 vector): exact enough for any dim.
    double sum_squares = 0.0;
    {
      double partial[kLanes] = {};
      ForEachVector(dim, [&](int64_t i, int64_t count) {
        alignas(64) float sq[kLanes];
        const V v = LoadN(row + i, count);
        Store(sq, v);
        for (int lane = 0; lane < kLanes; ++lane) {
          partial[lane] += static_cast<double>(sq[lane]) * sq[lane];
        }
      });
      for (double p : partial) sum_squares += p;
    }
    const auto inv_rms =
        static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(dim) + eps));
    const V scale = Set1(inv_rms);
    const V offset = Set1(weight_offset);
    ForEachVector(dim, [&](int64_t i, int64_t count) {
      const V weight = Add(offset, LoadWidened(w_dtype, w, i, count));
      StoreN(y + r * dim + i, Mul(Mul(LoadN(row + i, count), scale), weight), count);
    });
  }
}

void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t token_stride,
          const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c_row = cos + t * half;
    const float* s_row = sin + t * half;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + t * token_stride + h * head_dim;
      ForEachVector(half, [&](int64_t i, int64_t count) {
        const V a = LoadN(v + i, count);
        const V b = LoadN(v + half + i, count);
        const V c = LoadN(c_row + i, count);
        const V s = LoadN(s_row + i, count);
        StoreN(v + i, FNma(b, s, Mul(a, c)), count);
        StoreN(v + half + i, Fma(a, s, Mul(b, c)), count);
      });
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  ForEachVector(n, [&](int64_t i, int64_t count) {
    StoreN(out + i, Mul(Silu(LoadN(gate + i, count)), LoadN(up + i, count)), count);
  });
}

void GeluTanhMul(const float* gate, const float* up, float* out, int64_t n) {
  ForEachVector(n, [&](int64_t i, int64_t count) {
    StoreN(out + i, Mul(GeluTanh(LoadN(gate + i, count)), LoadN(up + i, count)), count);
  });
}

void Add(float* x, const float* y, int64_t n) {
  ForEachVector(n, [&](int64_t i, int64_t count) {
    StoreN(x + i, Add(LoadN(x + i, count), LoadN(y + i, count)), count);
  });
}

void WidenScale(DType dtype, const void* src, int64_t n, float scale, float* out) {
  const V s = Set1(scale);
  ForEachVector(n, [&](int64_t i, int64_t count) {
    StoreN(out + i, Mul(LoadWidened(dtype, src, i, count), s), count);
  });
}

void SoftCap(float* x, int64_t n, float cap) {
  const V c = Set1(cap);
  Unary(x, x, n, [&](V v) { return Mul(Tanh(Div(v, c)), c); });
}

void ExpArray(const float* x, float* y, int64_t n) {
  Unary(x, y, n, [](V v) { return Exp(v); });
}

void TanhArray(const float* x, float* y, int64_t n) {
  Unary(x, y, n, [](V v) { return Tanh(v); });
}

// ExpShifted in double lanes. d = x - shift <= 0 is written d = k ln2 + r (k = round(d / ln2),
// |r| <= ln2 / 2 + 2^-40), exp(r) by its Taylor series to r^13 (truncation under 5e-18
// relative) in Horner's order with FMAs, and 2^k (k in [-1021, 0]) from the bits of the
// rounding's magic sum. d < -700 (-inf among them) gives 0, under 1e-304 from the truth.
namespace {

inline VD ExpNonPositive(VD d) {
  constexpr double kMagic = 0x1.8p52;  // adding it rounds |v| < 2^51 to an integer
  constexpr double kLn2Hi = 0x1.62e42fefa39efp-1;
  constexpr double kLn2Lo = 0x1.abc9e3b39803fp-56;  // ln 2 - kLn2Hi
  const VD floor = SetD(-700.0);
  // max(-708, d) lifts -inf into range and keeps a NaN d (max returns its second operand).
  const VD dc = MaxD(SetD(-708.0), d);
  const VD t = FmaD(dc, SetD(0x1.71547652b82fep0), SetD(kMagic));  // magic + round(d / ln2)
  const VD k = SubD(t, SetD(kMagic));
  const VD r = FNmaD(k, SetD(kLn2Lo), FNmaD(k, SetD(kLn2Hi), dc));
  // 1/13!, ..., 1/2!, 1, 1.
  constexpr double kInverseFactorials[] = {1.0 / 6227020800.0,
                                           1.0 / 479001600.0,
                                           1.0 / 39916800.0,
                                           1.0 / 3628800.0,
                                           1.0 / 362880.0,
                                           1.0 / 40320.0,
                                           1.0 / 5040.0,
                                           1.0 / 720.0,
                                           1.0 / 120.0,
                                           1.0 / 24.0,
                                           1.0 / 6.0,
                                           0.5,
                                           1.0,
                                           1.0};
  VD p = SetD(kInverseFactorials[0]);
  for (size_t i = 1; i < std::size(kInverseFactorials); ++i) {
    p = FmaD(p, r, SetD(kInverseFactorials[i]));
  }
  return ZeroWhereLessD(d, floor, MulD(p, Pow2FromMagicD(t)));
}

}  // namespace

double ExpShifted(const float* x, int64_t n, float shift, double* out) {
  constexpr int kStep = kDoubleLanes;
  VD sum = ZeroD();
  const auto one = [&](const float* in, double* o) {
    const VD e = ExpNonPositive(LoadShiftedD(in, shift));
    StoreD(o, e);
    sum = AddD(sum, e);
  };
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) one(x + i, out + i);
  if (i < n) {
    float tail[kStep];
    double tail_out[kStep];
    for (int j = 0; j < kStep; ++j) {
      tail[j] = i + j < n ? x[i + j] : -std::numeric_limits<float>::infinity();
    }
    one(tail, tail_out);
    for (int64_t j = 0; i + j < n; ++j) out[i + j] = tail_out[j];
  }
  return ReduceSumD(sum);
}

RowExtremes Extremes(const float* x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr float kPosInf = std::numeric_limits<float>::infinity();
  RowExtremes result;
  // Per lane: the largest value and the first index holding it (strictly greater replaces), the
  // smallest value above -inf, whether a NaN was seen; -inf entries counted.
#if defined(__AVX512F__)
  __m512 max_v = _mm512_set1_ps(kNegInf);
  __m512 min_v = _mm512_set1_ps(kPosInf);
  __m512i at_v = _mm512_set1_epi32(-1);
  __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 valid = FirstN(n - i);
    const __m512 v = _mm512_mask_loadu_ps(neg_inf, valid, x + i);
    const __mmask16 greater = _mm512_cmp_ps_mask(v, max_v, _CMP_GT_OQ);
    max_v = _mm512_mask_blend_ps(greater, max_v, v);
    at_v = _mm512_mask_blend_epi32(greater, at_v, index);
    const __mmask16 masked = _mm512_cmp_ps_mask(v, neg_inf, _CMP_EQ_OQ);
    min_v = _mm512_mask_min_ps(min_v, static_cast<__mmask16>(~masked), v, min_v);  // NaN: min_v
    nan = static_cast<__mmask16>(nan | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
    result.num_neg_inf += __builtin_popcount(static_cast<unsigned>(masked & valid));
    index = _mm512_add_epi32(index, _mm512_set1_epi32(16));
  }
  alignas(64) float maxes[16];
  alignas(64) float mins[16];
  alignas(64) int32_t ats[16];
  _mm512_store_ps(maxes, max_v);
  _mm512_store_ps(mins, min_v);
  _mm512_store_si512(ats, at_v);
  constexpr int kN = 16;
  result.has_nan = nan != 0;
#else
  __m256 max_v = _mm256_set1_ps(kNegInf);
  __m256 min_v = _mm256_set1_ps(kPosInf);
  __m256i at_v = _mm256_set1_epi32(-1);
  __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  __m256 nan = _mm256_setzero_ps();
  int64_t neg_inf_lanes = 0;
  for (int64_t i = 0; i < n; i += 8) {
    __m256 v;
    if (i + 8 <= n) {
      v = _mm256_loadu_ps(x + i);
    } else {
      alignas(32) float tail[8];
      for (int64_t j = 0; j < 8; ++j) tail[j] = i + j < n ? x[i + j] : kNegInf;
      v = _mm256_load_ps(tail);
      neg_inf_lanes -= i + 8 - n;  // the padding is not counted
    }
    const __m256 greater = _mm256_cmp_ps(v, max_v, _CMP_GT_OQ);
    max_v = _mm256_blendv_ps(max_v, v, greater);
    at_v = _mm256_blendv_epi8(at_v, index, _mm256_castps_si256(greater));
    const __m256 masked = _mm256_cmp_ps(v, neg_inf, _CMP_EQ_OQ);
    min_v = _mm256_blendv_ps(_mm256_min_ps(v, min_v), min_v, masked);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    neg_inf_lanes += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(masked)));
    index = _mm256_add_epi32(index, _mm256_set1_epi32(8));
  }
  alignas(32) float maxes[8];
  alignas(32) float mins[8];
  alignas(32) int32_t ats[8];
  _mm256_store_ps(maxes, max_v);
  _mm256_store_ps(mins, min_v);
  _mm256_store_si256(reinterpret_cast<__m256i*>(ats), at_v);
  constexpr int kN = 8;
  result.has_nan = _mm256_movemask_ps(nan) != 0;
  result.num_neg_inf = neg_inf_lanes;
#endif
  result.max = kNegInf;
  result.min_above_neg_inf = kPosInf;
  for (int l = 0; l < kN; ++l) {
    result.max = std::max(result.max, maxes[l]);
    result.min_above_neg_inf = std::min(result.min_above_neg_inf, mins[l]);
  }
  result.argmax = 0;  // every entry -inf: the first
  if (result.max > kNegInf) {
    result.argmax = n;
    for (int l = 0; l < kN; ++l) {
      if (maxes[l] == result.max) result.argmax = std::min<int64_t>(result.argmax, ats[l]);
    }
  }
  return result;
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
