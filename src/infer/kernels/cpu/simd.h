// A thin vector layer over AVX2 or AVX-512 (chosen by the compiler flags of the including
// file), so that each *_simd.cc kernel source is written once and compiled once per ISA.
// Included only by kernel sources built with per-ISA flags; never by baseline code.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "infer/core/dtype.h"

#ifndef INFER_ISA_NS
#error "simd.h is for kernel sources compiled per ISA (INFER_ISA_NS must be defined)"
#endif

namespace infer::kernels::cpu::INFER_ISA_NS {

#if defined(__AVX512F__)

using V = __m512;
using M = __mmask16;
constexpr int kLanes = 16;

inline M FirstN(int64_t n) { return static_cast<M>(n >= 16 ? 0xffff : (1u << n) - 1u); }
inline V Zero() { return _mm512_setzero_ps(); }
inline V Set1(float v) { return _mm512_set1_ps(v); }
inline V Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V LoadN(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(FirstN(n), p); }
inline void StoreN(float* p, V v, int64_t n) { _mm512_mask_storeu_ps(p, FirstN(n), v); }
inline V Add(V a, V b) { return _mm512_add_ps(a, b); }
inline V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V Div(V a, V b) { return _mm512_div_ps(a, b); }
inline V Max(V a, V b) { return _mm512_max_ps(a, b); }
inline V Min(V a, V b) { return _mm512_min_ps(a, b); }
inline V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }    // a * b + c
inline V FNma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
inline V And(V a, V b) { return _mm512_and_ps(a, b); }
inline V Or(V a, V b) { return _mm512_or_ps(a, b); }
inline V AndNot(V a, V b) { return _mm512_andnot_ps(a, b); }  // ~a & b
inline M Less(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline V Select(M m, V if_true, V if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
inline V Round(V v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// 2^n for integral n in [-126, 127].
inline V Pow2(V n) {
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_castsi512_ps(bits);
}
inline float ReduceSum(V v) { return _mm512_reduce_add_ps(v); }
inline float ReduceMax(V v) { return _mm512_reduce_max_ps(v); }

// Widening loads of kLanes weights.
inline V LoadBf16(const uint16_t* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline V LoadF16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// 2 * kLanes bf16 weights as two f32 vectors: elements 0, 2, 4, ... and 1, 3, 5, ... (in that
// order within each vector). Two cheap integer ops instead of a widening shuffle; the
// activations are laid out to match (see DeinterleaveChunk).
inline void LoadBf16EvenOdd(const uint16_t* p, V& even, V& odd) {
  const __m512i raw = _mm512_loadu_si512(p);
  even = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
  odd =
      _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// In-register transpose of a 16 x 16 f32 block (r[i] holds row i; afterwards column i).
inline void Transpose16x16(V r[16]) {
  V t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  auto lo_pd = [](V a, V b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  auto hi_pd = [](V a, V b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  for (int i = 0; i < 16; i += 4) {
    r[i] = lo_pd(t[i], t[i + 2]);
    r[i + 1] = hi_pd(t[i], t[i + 2]);
    r[i + 2] = lo_pd(t[i + 1], t[i + 3]);
    r[i + 3] = hi_pd(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

#elif defined(__AVX2__)

using V = __m256;
using M = __m256;
constexpr int kLanes = 8;

inline __m256i FirstNMask(int64_t n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n > 8 ? 8 : n)), index);
}
inline V Zero() { return _mm256_setzero_ps(); }
inline V Set1(float v) { return _mm256_set1_ps(v); }
inline V Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
// The masked moves only for a partial vector: AMD's Zen 2 and 3 run vmaskmovps as microcode
// (the masked store many times slower than vmovups, enough to bound an elementwise kernel).
inline V LoadN(const float* p, int64_t n) {
  return n >= kLanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, FirstNMask(n));
}
inline void StoreN(float* p, V v, int64_t n) {
  if (n >= kLanes) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, FirstNMask(n), v);
  }
}
inline V Add(V a, V b) { return _mm256_add_ps(a, b); }
inline V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V Div(V a, V b) { return _mm256_div_ps(a, b); }
inline V Max(V a, V b) { return _mm256_max_ps(a, b); }
inline V Min(V a, V b) { return _mm256_min_ps(a, b); }
inline V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V FNma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
inline V And(V a, V b) { return _mm256_and_ps(a, b); }
inline V Or(V a, V b) { return _mm256_or_ps(a, b); }
inline V AndNot(V a, V b) { return _mm256_andnot_ps(a, b); }
inline M Less(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline V Select(M m, V if_true, V if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
inline V Round(V v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V Pow2(V n) {
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_castsi256_ps(bits);
}
inline float ReduceSum(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float ReduceMax(V v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline V LoadBf16(const uint16_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
inline V LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline void LoadBf16EvenOdd(const uint16_t* p, V& even, V& odd) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
  odd =
      _mm256_castsi256_ps(_mm256_and_si256(raw, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

#else
#error "simd.h needs -mavx2 -mfma -mf16c or -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif

// Double vectors (VD, half of V's lanes), for sums that need double precision (the sampler's
// softmax weights).
#if defined(__AVX512F__)
using VD = __m512d;
constexpr int kDoubleLanes = 8;
inline VD ZeroD() { return _mm512_setzero_pd(); }
inline VD SetD(double v) { return _mm512_set1_pd(v); }
inline void StoreD(double* p, VD v) { _mm512_storeu_pd(p, v); }
inline VD AddD(VD a, VD b) { return _mm512_add_pd(a, b); }
inline VD SubD(VD a, VD b) { return _mm512_sub_pd(a, b); }
inline VD MulD(VD a, VD b) { return _mm512_mul_pd(a, b); }
inline VD MaxD(VD a, VD b) { return _mm512_max_pd(a, b); }               // a NaN in either: b
inline VD FmaD(VD a, VD b, VD c) { return _mm512_fmadd_pd(a, b, c); }    // a * b + c
inline VD FNmaD(VD a, VD b, VD c) { return _mm512_fnmadd_pd(a, b, c); }  // c - a * b
// p[i] - shift, rounded to f32, then widened, for kDoubleLanes floats.
inline VD LoadShiftedD(const float* p, float shift) {
  return _mm512_cvtps_pd(_mm256_sub_ps(_mm256_loadu_ps(p), _mm256_set1_ps(shift)));
}
// 2^k for t = 0x1.8p52 + k, k integral in [-1022, 1023]: k + 1023 (t's low bits) as the exponent.
inline VD Pow2FromMagicD(VD t) {
  const __m512i bits = _mm512_add_epi64(_mm512_castpd_si512(t), _mm512_set1_epi64(1023));
  return _mm512_castsi512_pd(_mm512_slli_epi64(bits, 52));
}
// 0 where d < floor, else value (a NaN d keeps value).
inline VD ZeroWhereLessD(VD d, VD floor, VD value) {
  return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(d, floor, _CMP_NLT_UQ), value);
}
inline double ReduceSumD(VD v) { return _mm512_reduce_add_pd(v); }
#else
using VD = __m256d;
constexpr int kDoubleLanes = 4;
inline VD ZeroD() { return _mm256_setzero_pd(); }
inline VD SetD(double v) { return _mm256_set1_pd(v); }
inline void StoreD(double* p, VD v) { _mm256_storeu_pd(p, v); }
inline VD AddD(VD a, VD b) { return _mm256_add_pd(a, b); }
inline VD SubD(VD a, VD b) { return _mm256_sub_pd(a, b); }
inline VD MulD(VD a, VD b) { return _mm256_mul_pd(a, b); }
inline VD MaxD(VD a, VD b) { return _mm256_max_pd(a, b); }
inline VD FmaD(VD a, VD b, VD c) { return _mm256_fmadd_pd(a, b, c); }
inline VD FNmaD(VD a, VD b, VD c) { return _mm256_fnmadd_pd(a, b, c); }
inline VD LoadShiftedD(const float* p, float shift) {
  return _mm256_cvtps_pd(_mm_sub_ps(_mm_loadu_ps(p), _mm_set1_ps(shift)));
}
inline VD Pow2FromMagicD(VD t) {
  const __m256i bits = _mm256_add_epi64(_mm256_castpd_si256(t), _mm256_set1_epi64x(1023));
  return _mm256_castsi256_pd(_mm256_slli_epi64(bits, 52));
}
inline VD ZeroWhereLessD(VD d, VD floor, VD value) {
  return _mm256_andnot_pd(_mm256_cmp_pd(d, floor, _CMP_LT_OQ), value);
}
inline double ReduceSumD(VD v) {
  const __m128d pair = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(pair, _mm_unpackhi_pd(pair, pair)));
}
#endif

// Integer vectors of the quantized MatMul (VI; 32-bit lanes unless the name says otherwise),
// the width of V. DotU8S8 is vpdpbusd where the CPU has it (AVX512_VNNI, AVX-VNNI), else the
// same sums from vpmaddwd on 16-bit halves (AVX-VNNI emulated under INFER_AVXVNNI_EMULATE).
#if defined(__AVX512F__)
using VI = __m512i;
inline VI LoadI(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline VI Set1I(int32_t v) { return _mm512_set1_epi32(v); }
inline VI ZeroI() { return _mm512_setzero_si512(); }
inline VI LowNibbles(VI v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
inline VI HighNibbles(VI v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
}
[[maybe_unused]] inline VI HighNibblesTimes16(VI v) {
  return _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(0xf0)));
}
[[maybe_unused]] inline VI AddI(VI a, VI b) { return _mm512_add_epi32(a, b); }
inline VI AndI(VI a, VI b) { return _mm512_and_si512(a, b); }
[[maybe_unused]] inline VI AddI16(VI a, VI b) { return _mm512_add_epi16(a, b); }
// u8 x s8 products, adjacent pairs summed to int16 (saturating: callers keep within range).
[[maybe_unused]] inline VI MulU8S8PairsI16(VI u, VI s) { return _mm512_maddubs_epi16(u, s); }
[[maybe_unused]] inline VI WidenI16Pairs(VI v) {
  return _mm512_madd_epi16(v, _mm512_set1_epi16(1));
}
// Exact on multiples of 16.
[[maybe_unused]] inline VI Shr4I32(VI v) { return _mm512_srai_epi32(v, 4); }
inline VI SubI(VI a, VI b) { return _mm512_sub_epi32(a, b); }
// The low 32 bits of each lane's product.
[[maybe_unused]] inline VI MulLoI(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
// kLanes signed bytes from p, one per lane.
[[maybe_unused]] inline VI LoadS8AsI32(const uint8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline V ToFloat(VI v) { return _mm512_cvtepi32_ps(v); }
// The 6 bits of each lane from bit `shift` on; the top 2 bits of each lane, moved to `to`.
inline VI SixBits(VI v, int shift) {
  return _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(63));
}
inline VI TopTwoBits(VI v, int to) {
  return _mm512_sll_epi32(_mm512_srli_epi32(v, 30), _mm_cvtsi32_si128(to));
}
inline VI OrI(VI a, VI b) { return _mm512_or_si512(a, b); }
template <int kShift>
inline VI ShiftI16(VI v) {  // left by kShift, or right by -kShift
  return kShift >= 0 ? _mm512_slli_epi16(v, kShift) : _mm512_srli_epi16(v, -kShift);
}
#if defined(__AVX512VNNI__)
// acc[i] += u[4i] s[4i] + ... + u[4i+3] s[4i+3] (u unsigned, s signed bytes).
inline VI DotU8S8(VI acc, VI u, VI s) { return _mm512_dpbusd_epi32(acc, u, s); }
#else
inline VI DotU8S8(VI acc, VI u, VI s) {
  const VI u_even = _mm512_and_si512(u, _mm512_set1_epi16(0x00ff));
  const VI u_odd = _mm512_srli_epi16(u, 8);
  const VI s_even = _mm512_srai_epi16(_mm512_slli_epi16(s, 8), 8);
  const VI s_odd = _mm512_srai_epi16(s, 8);
  acc = _mm512_add_epi32(acc, _mm512_madd_epi16(u_even, s_even));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(u_odd, s_odd));
}
#endif
#else
using VI = __m256i;
inline VI LoadI(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const VI*>(p)); }
inline VI Set1I(int32_t v) { return _mm256_set1_epi32(v); }
inline VI ZeroI() { return _mm256_setzero_si256(); }
inline VI LowNibbles(VI v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline VI HighNibbles(VI v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
}
[[maybe_unused]] inline VI HighNibblesTimes16(VI v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(0xf0)));
}
[[maybe_unused]] inline VI AddI(VI a, VI b) { return _mm256_add_epi32(a, b); }
inline VI AndI(VI a, VI b) { return _mm256_and_si256(a, b); }
[[maybe_unused]] inline VI AddI16(VI a, VI b) { return _mm256_add_epi16(a, b); }
[[maybe_unused]] inline VI MulU8S8PairsI16(VI u, VI s) { return _mm256_maddubs_epi16(u, s); }
[[maybe_unused]] inline VI WidenI16Pairs(VI v) {
  return _mm256_madd_epi16(v, _mm256_set1_epi16(1));
}
// Exact on multiples of 16.
[[maybe_unused]] inline VI Shr4I32(VI v) { return _mm256_srai_epi32(v, 4); }
inline VI SubI(VI a, VI b) { return _mm256_sub_epi32(a, b); }
[[maybe_unused]] inline VI MulLoI(VI a, VI b) { return _mm256_mullo_epi32(a, b); }
[[maybe_unused]] inline VI LoadS8AsI32(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline V ToFloat(VI v) { return _mm256_cvtepi32_ps(v); }
inline VI SixBits(VI v, int shift) {
  return _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(63));
}
inline VI TopTwoBits(VI v, int to) {
  return _mm256_sll_epi32(_mm256_srli_epi32(v, 30), _mm_cvtsi32_si128(to));
}
inline VI OrI(VI a, VI b) { return _mm256_or_si256(a, b); }
template <int kShift>
inline VI ShiftI16(VI v) {  // left by kShift, or right by -kShift
  return kShift >= 0 ? _mm256_slli_epi16(v, kShift) : _mm256_srli_epi16(v, -kShift);
}
#if defined(__AVXVNNI__)
inline VI DotU8S8(VI acc, VI u, VI s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#else
// vpdpbusd as Intel's manual defines it: each 32-bit lane adds the four products of its
// unsigned bytes of u and signed bytes of s (each within 16 bits, exact here in vpmaddwd's
// 32-bit pair sums) to acc, wrapping. Integer adds in any order give the same bits, so this is
// the instruction exactly (Isa::kAvxVnni's kernels run on it in the avxvnni_emulated build).
inline VI DotU8S8(VI acc, VI u, VI s) {
  const VI u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00ff));
  const VI u_odd = _mm256_srli_epi16(u, 8);
  const VI s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8);
  const VI s_odd = _mm256_srai_epi16(s, 8);
  acc = _mm256_add_epi32(acc, _mm256_madd_epi16(u_even, s_even));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(u_odd, s_odd));
}
#endif
#endif

inline V Abs(V v) { return AndNot(Set1(-0.0F), v); }

// exp(x) in the Cephes style: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial for e^r, then
// scale by 2^n. Max error about 2 ulp for x in [-87.3, 88]; below that it returns 0 (exact
// enough: e^-87.3 < FLT_MIN), above it e^88 instead of overflowing. NaN stays NaN.
inline V Exp(V x) {
  const V lo = Set1(-87.33654F);
  const V clamped = Min(Set1(88.0F), Max(lo, x));  // NaN in x passes through
  const V n = Round(Mul(clamped, Set1(1.44269504088896341F)));
  V r = FNma(n, Set1(0.693359375F), clamped);
  r = FNma(n, Set1(-2.12194440e-4F), r);
  V p = Set1(1.9875691500E-4F);
  p = Fma(p, r, Set1(1.3981999507E-3F));
  p = Fma(p, r, Set1(8.3334519073E-3F));
  p = Fma(p, r, Set1(4.1665795894E-2F));
  p = Fma(p, r, Set1(1.6666665459E-1F));
  p = Fma(p, r, Set1(5.0000001201E-1F));
  p = Fma(p, Mul(r, r), Add(r, Set1(1.0F)));
  return Select(Less(x, lo), Zero(), Mul(p, Pow2(n)));
}

// tanh(x): an odd polynomial below |x| = 0.625 (Cephes tanhf), 1 - 2 / (e^2|x| + 1) above,
// where there is no cancellation. About 2-3 ulp.
inline V Tanh(V x) {
  const V ax = Abs(x);
  const V z = Mul(x, x);
  V p = Set1(-5.70498872745E-3F);
  p = Fma(p, z, Set1(2.06390887954E-2F));
  p = Fma(p, z, Set1(-5.37397155531E-2F));
  p = Fma(p, z, Set1(1.33314422036E-1F));
  p = Fma(p, z, Set1(-3.33332819422E-1F));
  const V small = Fma(Mul(p, z), x, x);
  const V e = Exp(Add(ax, ax));
  const V big_abs = Sub(Set1(1.0F), Div(Set1(2.0F), Add(e, Set1(1.0F))));
  const V big = Or(big_abs, And(x, Set1(-0.0F)));
  return Select(Less(ax, Set1(0.625F)), small, big);
}

// x / (1 + e^-x).
inline V Silu(V x) { return Div(x, Add(Set1(1.0F), Exp(Sub(Zero(), x)))); }

// 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as x / (1 + e^(-2u))
// (the same function) so that the negative tail has no cancellation.
inline V GeluTanh(V x) {
  const V x3 = Mul(Mul(x, x), x);
  const V u = Mul(Set1(0.7978845608028654F), Fma(Set1(0.044715F), x3, x));
  return Div(x, Add(Set1(1.0F), Exp(Mul(Set1(-2.0F), u))));
}

// Calls fn(offset, count) over [0, n) in vectors of kLanes, the last one possibly partial.
template <typename Fn>
inline void ForEachVector(int64_t n, Fn&& fn) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) fn(i, int64_t{kLanes});
  if (i < n) fn(i, n - i);
}

// Widens `count` (<= kLanes) weights at src + offset to f32.
inline V LoadWidened(DType dtype, const void* src, int64_t offset, int64_t count) {
  if (dtype == DType::kF32) return LoadN(static_cast<const float*>(src) + offset, count);
  const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
  if (count >= kLanes) return dtype == DType::kBF16 ? LoadBf16(p) : LoadF16(p);
  alignas(64) uint16_t tail[kLanes] = {};
  for (int64_t i = 0; i < count; ++i) tail[i] = p[i];
  return dtype == DType::kBF16 ? LoadBf16(tail) : LoadF16(tail);
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
