// The rows of the paged attention kernel (attention_simd.cc), per ISA: the scores of a run of
// query rows against a partition of keys, its softmax state and p . v accumulation, the fold of
// two states, the query and output layouts. Included by attention_simd.cc only, once per ISA
// (namespace cpu::INFER_ISA_NS); attention_simd.cc states the arithmetic.
//
// Speed. Decode is the case that matters: one query position, thousands of keys, K/V streamed
// from memory. The query heads of a kv head (the GQA group) run together, so each K/V row is
// loaded and widened once for all of them. q . k needs no key transpose: per (row, key) an FMA
// chain over head_dim in kLanes-wide vectors, then kLanes such vectors are reduced together (a
// transpose-and-add tree, about two shuffles and one add per score). bf16 K/V are widened on
// the fly with the even/odd trick (one shift or one and per kLanes elements); q and acc use
// the matching deinterleaved order inside each chunk of 2 * kLanes. Software prefetch brings K
// two groups ahead and V (read after the partition's q . k) in slices spread through the
// q . k work: bursts small enough not to stall the core on a full miss queue.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

// Its own namespace: the names here are external and must not meet another file's.
namespace infer::kernels::cpu::INFER_ISA_NS::attention {

constexpr int64_t kChunk = 2 * kLanes;  // head_dim elements per K/V load step
constexpr int64_t kPartition = kAttentionPartition;
constexpr int kMaxRows = 4;  // query heads of one position processed together
// A position's heads of one kv head go in runs of 4, then 2, then 1 (fixed by the group size,
// so a row always runs in the same kind of run).
inline int RowsAt(int64_t left) { return left >= kMaxRows ? kMaxRows : left >= 2 ? 2 : 1; }
static_assert(kMaxRows == 4, "PartitionStateR instantiates runs of 1, 2 and 4 rows");
#if defined(__AVX512F__)
constexpr int kKeysAtOnce = 4;                  // q . k: kMaxRows x 4 accumulators of 32 registers
constexpr int kAccRegs = 16;                    // p . v accumulators per pass
constexpr int64_t kFixedChunks[3] = {2, 4, 8};  // head_dim 64, 128, 256
#else
constexpr int kKeysAtOnce = 2;  // 16 registers
constexpr int kAccRegs = 8;
constexpr int64_t kFixedChunks[3] = {4, 8, 16};  // head_dim 64, 128, 256
#endif
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

static_assert(kPartition % kPagedBlockMultiple == 0 && kPagedBlockMultiple % kLanes == 0,
              "a group of kLanes keys must lie inside one cache block and one partition");
static_assert(kLanes % kKeysAtOnce == 0 && kKeysAtOnce % 2 == 0);

// ---- Reduction of kLanes per-key partial vectors into one vector of kLanes scores ----------

#if defined(__AVX512F__)
// Lanes 0-7: a[l] + a[l + 8]; lanes 8-15: the same for b.
inline V PairSum(V a, V b) {
  return Add(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}
// pairs[i] = PairSum(key 2i, key 2i + 1). Returns the 16 sums in key order.
inline V FinishGroup(const V* pairs) {
  V t[4];
  for (int i = 0; i < 4; ++i) {  // quarter q of t[i]: key 4i + q, 4 lanes
    const V a = pairs[2 * i];
    const V b = pairs[2 * i + 1];
    t[i] = Add(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  }
  V u[2];
  for (int i = 0; i < 2; ++i) {  // quarter q of u[i]: keys 8i + q, 8i + 4 + q, 2 lanes each
    const __m512d a = _mm512_castps_pd(t[2 * i]);
    const __m512d b = _mm512_castps_pd(t[2 * i + 1]);
    u[i] =
        Add(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Quarter q: keys q, q + 4, q + 8, q + 12.
  const V w = Add(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                  _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, w);
}
// Lanes whose key base + lane lies outside [lo, hi) become -inf.
inline V MaskKeys(V v, int64_t base, int64_t lo, int64_t hi) {
  const int64_t from = std::clamp<int64_t>(lo - base, 0, kLanes);
  const int64_t to = std::clamp<int64_t>(hi - base, 0, kLanes);
  const M keep = static_cast<M>(FirstN(to) & ~FirstN(from));
  return _mm512_mask_blend_ps(keep, Set1(kNegInf), v);
}
#else
// Lanes 0-3: a[l] + a[l + 4]; lanes 4-7: the same for b.
inline V PairSum(V a, V b) {
  return Add(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
inline V FinishGroup(const V* pairs) {
  V t[2];
  for (int i = 0; i < 2; ++i) {  // half 0: keys 4i, 4i + 2; half 1: keys 4i + 1, 4i + 3
    const __m256d a = _mm256_castps_pd(pairs[2 * i]);
    const __m256d b = _mm256_castps_pd(pairs[2 * i + 1]);
    t[i] =
        Add(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
  // Lanes: keys 0, 2, 4, 6, 1, 3, 5, 7.
  const V w = Add(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                  _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
inline V MaskKeys(V v, int64_t base, int64_t lo, int64_t hi) {
  const int from = static_cast<int>(std::clamp<int64_t>(lo - base, 0, kLanes));
  const int to = static_cast<int>(std::clamp<int64_t>(hi - base, 0, kLanes));
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i keep = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(from), index),
                                           _mm256_cmpgt_epi32(_mm256_set1_epi32(to), index));
  return _mm256_blendv_ps(Set1(kNegInf), v, _mm256_castsi256_ps(keep));
}
#endif

// ---- K/V element types -------------------------------------------------------------------

// Loads one chunk (kChunk elements, of which the first n are valid; n > 0) of a K/V row as two
// f32 vectors. f32: elements [0, kLanes) and [kLanes, kChunk). bf16: even and odd elements.
struct F32Kv {
  using T = float;
  static constexpr bool kDeinterleaved = false;
  template <bool kFull>
  static void LoadChunk(const float* p, int64_t n, V& a, V& b) {
    if (kFull || n >= kChunk) {
      a = Load(p);
      b = Load(p + kLanes);
    } else {
      a = LoadN(p, n);
      b = LoadN(p + kLanes, std::max<int64_t>(0, n - kLanes));
    }
  }
};

struct Bf16Kv {
  using T = uint16_t;
  static constexpr bool kDeinterleaved = true;
  template <bool kFull>
  static void LoadChunk(const uint16_t* p, int64_t n, V& a, V& b) {
    if (kFull || n >= kChunk) {
      LoadBf16EvenOdd(p, a, b);
    } else {
      alignas(64) uint16_t tail[kChunk] = {};
      std::memcpy(tail, p, static_cast<size_t>(n) * sizeof(uint16_t));
      LoadBf16EvenOdd(tail, a, b);
    }
  }
};

// Where element d of a head_dim row sits in the prepared q / accumulator layout.
template <class Kv>
inline int64_t LayoutIndex(int64_t d) {
  if constexpr (!Kv::kDeinterleaved) {
    return d;
  } else {
    const int64_t i = d % kChunk;
    return d - i + (i % 2) * kLanes + i / 2;
  }
}

// ---- The call's fixed facts ----------------------------------------------------------------

template <class Kv>
struct Context {
  using T = typename Kv::T;
  const float* q;
  float* out;
  const T* k;
  const T* v;
  int64_t block_size, block_stride, head_stride;
  int64_t head_dim;
  int64_t padded_dim;  // head_dim rounded up to kChunk: rows of prepared q and accumulators
  int64_t num_chunks;
  int64_t last_chunk;  // valid elements of the last chunk
  int64_t num_heads, num_kv_heads;
  int64_t group;       // query heads per kv head
  int64_t row_stride;  // num_heads * head_dim
  int64_t window;
  float scale;

  int64_t FirstKey(int64_t pos) const {
    return window > 0 ? std::max<int64_t>(0, pos - window + 1) : int64_t{0};
  }
  // Offset of the K/V row of position pos, kv head h.
  int64_t RowOffset(const int32_t* table, int64_t kv_head, int64_t pos) const {
    return table[pos / block_size] * block_stride + kv_head * head_stride +
           (pos % block_size) * head_dim;
  }
};

// ---- One partition of R rows (heads of one position) ----------------------------------------

// Software prefetch. A decode streams its K/V from memory in runs of block_size positions at
// scattered places, which the hardware prefetchers follow poorly. While q . k runs on a group,
// K kPrefetchGroups groups ahead and V of the group itself (wanted after the partition's
// q . k) are prefetched, a slice per kKeysAtOnce keys: short bursts, so that the core does not
// stall on a full miss queue.
constexpr int64_t kPrefetchGroups = 2;

// kNch > 0: head_dim is kNch whole chunks, known at compile time (the models' 64, 128, 256):
// no load needs a mask and the trip counts are constants. kNch = 0: any head_dim, from the
// context.

// Scores of R prepared query rows (stride padded_dim) against the kLanes keys starting at
// `keys`, into out[r * kPartition + 0 .. kLanes).
template <int R, class Kv, int kNch>
inline void GroupScores(const Context<Kv>& c, const float* qp, const typename Kv::T* keys,
                        float* out, const char* pf_k, const char* pf_v) {
  constexpr bool kFull = kNch > 0;
  const int64_t num_chunks = kFull ? kNch : c.num_chunks;
  const int64_t head_dim = kFull ? kNch * kChunk : c.head_dim;
  const int64_t padded_dim = kFull ? kNch * kChunk : c.padded_dim;
  const int64_t batch_bytes = kKeysAtOnce * head_dim * static_cast<int64_t>(sizeof(typename Kv::T));
  V pairs[R][kLanes / 2];
#pragma GCC unroll 4
  for (int j = 0; j < kLanes; j += kKeysAtOnce) {
    if (pf_k != nullptr) {
      for (int64_t i = 0; i < batch_bytes; i += 64)
        _mm_prefetch(pf_k + j * batch_bytes / kKeysAtOnce + i, _MM_HINT_T0);
    }
    if (pf_v != nullptr) {
      for (int64_t i = 0; i < batch_bytes; i += 64)
        _mm_prefetch(pf_v + j * batch_bytes / kKeysAtOnce + i, _MM_HINT_T0);
    }
    V acc[R][kKeysAtOnce];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < kKeysAtOnce; ++i) acc[r][i] = Zero();
    }
    const typename Kv::T* k = keys + j * head_dim;
    const float* q = qp;
    for (int64_t ch = 0; ch < num_chunks; ++ch, k += kChunk, q += kChunk) {
      const int64_t n = kFull || ch + 1 < num_chunks ? kChunk : c.last_chunk;
      V ka[kKeysAtOnce], kb[kKeysAtOnce];
#pragma GCC unroll 4
      for (int i = 0; i < kKeysAtOnce; ++i) {
        Kv::template LoadChunk<kFull>(k + i * head_dim, n, ka[i], kb[i]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const V qa = Load(q + r * padded_dim);
        const V qb = Load(q + r * padded_dim + kLanes);
#pragma GCC unroll 4
        for (int i = 0; i < kKeysAtOnce; ++i) {
          acc[r][i] = Fma(qa, ka[i], acc[r][i]);
          acc[r][i] = Fma(qb, kb[i], acc[r][i]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < kKeysAtOnce; i += 2) {
        pairs[r][(j + i) / 2] = PairSum(acc[r][i], acc[r][i + 1]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) Store(out + r * kPartition, FinishGroup(pairs[r]));
}

// In place over scores [0, n) (a multiple of kLanes; masked keys are -inf): p = exp(s - max).
// m = the max, s = the sum of p (lane-wise in order, then ReduceSum).
[[gnu::noinline]] inline void Softmax(float* scores, int64_t n, float& m, float& s) {
  V max_v = Set1(kNegInf);
  for (int64_t j = 0; j < n; j += kLanes) max_v = Max(max_v, Load(scores + j));
  m = ReduceMax(max_v);
  const V mb = Set1(m);
  V sum = Zero();
  for (int64_t j = 0; j < n; j += kLanes) {
    const V p = Exp(Sub(Load(scores + j), mb));
    Store(scores + j, p);
    sum = Add(sum, p);
  }
  s = ReduceSum(sum);
}

// acc[r][chunks first .. first + NC) = sum over keys [lo, hi) of p[r][key - base] * v[key],
// one FMA chain per element, keys ascending.
template <int R, int NC, class Kv, int kNch>
inline void AccumulateValues(const Context<Kv>& c, const int32_t* table, int64_t kv_head,
                             int64_t first, const float* p, int64_t base, int64_t lo, int64_t hi,
                             float* acc) {
  constexpr bool kFull = kNch > 0;
  const int64_t head_dim = kFull ? kNch * kChunk : c.head_dim;
  const int64_t padded_dim = kFull ? kNch * kChunk : c.padded_dim;
  V a[R][2 * NC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int s = 0; s < 2 * NC; ++s) a[r][s] = Zero();
  }
  int64_t valid[NC];
  for (int ch = 0; ch < NC; ++ch) {
    valid[ch] = kFull || first + ch + 1 < c.num_chunks ? kChunk : c.last_chunk;
  }
  const float* pj = p + (lo - base);
  for (int64_t j = lo; j < hi;) {
    const int64_t run_end = std::min(hi, (j / c.block_size + 1) * c.block_size);
    const typename Kv::T* row = c.v + c.RowOffset(table, kv_head, j) + first * kChunk;
    for (; j < run_end; ++j, ++pj, row += head_dim) {
      V x[2 * NC];
#pragma GCC unroll 4
      for (int ch = 0; ch < NC; ++ch) {
        Kv::template LoadChunk<kFull>(row + ch * kChunk, valid[ch], x[2 * ch], x[2 * ch + 1]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const V pr = Set1(pj[r * kPartition]);
#pragma GCC unroll 8
        for (int s = 0; s < 2 * NC; ++s) a[r][s] = Fma(pr, x[s], a[r][s]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int s = 0; s < 2 * NC; ++s) {
      Store(acc + r * padded_dim + first * kChunk + s * kLanes, a[r][s]);
    }
  }
}

// All of head_dim: slices of as many chunks as the accumulators allow (fixed when kNch > 0).
template <int R, class Kv, int kNch>
inline void AccumulateAllValues(const Context<Kv>& c, const int32_t* table, int64_t kv_head,
                                const float* p, int64_t base, int64_t lo, int64_t hi, float* acc) {
  constexpr int kMaxChunks = std::clamp(kAccRegs / (2 * R), 1, 4);
  if constexpr (kNch > 0) {
    for (int first = 0; first + kMaxChunks <= kNch; first += kMaxChunks) {
      AccumulateValues<R, kMaxChunks, Kv, kNch>(c, table, kv_head, first, p, base, lo, hi, acc);
    }
    constexpr int kRest = kNch % kMaxChunks;
    if constexpr (kRest > 0) {
      AccumulateValues<R, kRest, Kv, kNch>(c, table, kv_head, kNch - kRest, p, base, lo, hi, acc);
    }
  } else {
    for (int64_t first = 0; first < c.num_chunks; ++first) {
      AccumulateValues<R, 1, Kv, 0>(c, table, kv_head, first, p, base, lo, hi, acc);
    }
  }
}

// The partition state of R rows over their visible keys [lo, hi) (lo < hi, inside one
// partition): m[r], s[r], acc[r * padded_dim ...]. scores: R x kPartition scratch.
template <int R, class Kv, int kNch>
void PartitionState(const Context<Kv>& c, const int32_t* table, int64_t kv_head, const float* qp,
                    int64_t lo, int64_t hi, int64_t prefetch_end, float* scores, float* m, float* s,
                    float* acc) {
  const int64_t base = lo / kLanes * kLanes;
  const int64_t end = (hi + kLanes - 1) / kLanes * kLanes;
  for (int64_t g = base; g < end; g += kLanes) {
    float* out = scores + (g - base);
    const int64_t ahead = g + kPrefetchGroups * kLanes;
    const char* pf_k = ahead < prefetch_end
                           ? reinterpret_cast<const char*>(c.k + c.RowOffset(table, kv_head, ahead))
                           : nullptr;
    const char* pf_v = reinterpret_cast<const char*>(c.v + c.RowOffset(table, kv_head, g));
    GroupScores<R, Kv, kNch>(c, qp, c.k + c.RowOffset(table, kv_head, g), out, pf_k, pf_v);
    if (g < lo || g + kLanes > hi) {
      for (int r = 0; r < R; ++r) {
        Store(out + r * kPartition, MaskKeys(Load(out + r * kPartition), g, lo, hi));
      }
    }
  }
  for (int r = 0; r < R; ++r) Softmax(scores + r * kPartition, end - base, m[r], s[r]);
  AccumulateAllValues<R, Kv, kNch>(c, table, kv_head, scores, base, lo, hi, acc);
}

// Folds the partition state (pm, ps, pacc) into the running state (tm, ts, tacc): the one merge
// of the kernel. An empty partition (pm = -inf) is skipped; into an empty total it copies.
[[gnu::noinline]] inline void Merge(float& tm, float& ts, float* tacc, float pm, float ps,
                                    const float* pacc, int64_t padded_dim) {
  if (pm == kNegInf) return;
  if (tm == kNegInf) {
    tm = pm;
    ts = ps;
    std::memcpy(tacc, pacc, static_cast<size_t>(padded_dim) * sizeof(float));
    return;
  }
  const float m = std::max(tm, pm);
  const float ct = std::exp(tm - m);
  const float cp = std::exp(pm - m);
  ts = std::fma(ps, cp, ts * ct);
  const V vt = Set1(ct);
  const V vp = Set1(cp);
  for (int64_t d = 0; d < padded_dim; d += kLanes) {
    Store(tacc + d, Fma(Load(pacc + d), vp, Mul(Load(tacc + d), vt)));
  }
  tm = m;
}

#if defined(__AVX512F__)
// Elements 0, 2, .., 30 and 1, 3, .., 31 of the 32 at p (the bf16 K/V layout of a chunk).
inline void Deinterleave(const float* p, V& even, V& odd) {
  const V a = Load(p);
  const V b = Load(p + kLanes);
  even = _mm512_permutex2var_ps(
      a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
  odd = _mm512_permutex2var_ps(
      a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
}
// The inverse: stores the 32 elements in order.
inline void Interleave(V even, V odd, float* p) {
  Store(p,
        _mm512_permutex2var_ps(
            even, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), odd));
  Store(p + kLanes,
        _mm512_permutex2var_ps(
            even, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31),
            odd));
}
#else
inline void Deinterleave(const float* p, V& even, V& odd) {
  const V a = Load(p);
  const V b = Load(p + kLanes);
  // Per 128-bit half: a0 a2 b0 b2 | a4 a6 b4 b6, then the 64-bit pieces in order.
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(
      _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0)));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(
      _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0)));
}
inline void Interleave(V even, V odd, float* p) {
  const V lo = _mm256_unpacklo_ps(even, odd);  // e0 o0 e1 o1 | e4 o4 e5 o5
  const V hi = _mm256_unpackhi_ps(even, odd);  // e2 o2 e3 o3 | e6 o6 e7 o7
  Store(p, _mm256_permute2f128_ps(lo, hi, 0x20));
  Store(p + kLanes, _mm256_permute2f128_ps(lo, hi, 0x31));
}
#endif

// q row (head_dim) -> prepared row (padded_dim): scaled, in the K/V layout, zero padded.
// (Each element is q[d] * scale whichever way it is computed.)
template <class Kv>
void PrepareQuery(const Context<Kv>& c, const float* q, float* qp) {
  const V scale = Set1(c.scale);
  const int64_t whole = c.head_dim / kChunk * kChunk;
  for (int64_t d = 0; d < whole; d += kChunk) {
    V a, b;
    if constexpr (Kv::kDeinterleaved) {
      Deinterleave(q + d, a, b);
    } else {
      a = Load(q + d);
      b = Load(q + d + kLanes);
    }
    Store(qp + d, Mul(a, scale));
    Store(qp + d + kLanes, Mul(b, scale));
  }
  std::fill(qp + whole, qp + c.padded_dim, 0.0F);
  for (int64_t d = whole; d < c.head_dim; ++d) qp[LayoutIndex<Kv>(d)] = q[d] * c.scale;
}

template <class Kv>
void WriteOutput(const Context<Kv>& c, const float* acc, float s, float* o) {
  const float inv = 1.0F / s;
  const V inv_v = Set1(inv);
  const int64_t whole = c.head_dim / kChunk * kChunk;
  for (int64_t d = 0; d < whole; d += kChunk) {
    const V a = Mul(Load(acc + d), inv_v);
    const V b = Mul(Load(acc + d + kLanes), inv_v);
    if constexpr (Kv::kDeinterleaved) {
      Interleave(a, b, o + d);
    } else {
      Store(o + d, a);
      Store(o + d + kLanes, b);
    }
  }
  for (int64_t d = whole; d < c.head_dim; ++d) o[d] = acc[LayoutIndex<Kv>(d)] * inv;
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS::attention
