// Paged causal (optionally sliding-window) GQA attention, compiled once per ISA.
//
// Arithmetic (what makes a row's result independent of the call it is in):
// - A query row's keys are cut into partitions of kAttentionPartition keys at absolute
//   positions. A partition's state (max m, sum s, accumulator acc[head_dim]) is computed from
//   nothing but the row and the partition: scores of the visible keys, m = their max,
//   p = exp(score - m), s = sum of p, acc = sum of p * v (keys ascending, one FMA chain per
//   element from zero). Scores come in groups of kLanes keys at absolute positions (a group
//   never straddles a cache block), each score a fixed FMA chain over head_dim followed by a
//   fixed tree over the lanes.
// - Partition states are folded left, in ascending order, by one function (Merge). A task that
//   owns all of a row's partitions folds them as it goes; when a long context is split across
//   tasks, each partition's state goes to scratch and the item's last task folds them in the
//   same order with the same function.
// So the work split (threads, batch, prefill chunks, decode) never changes a row's arithmetic.
//
// Speed. Decode is the case that matters: one query position, thousands of keys, K/V streamed
// from memory. All query heads that share a kv head (the GQA group, up to kMaxRows at once) are
// processed together, so each K/V row is loaded and widened once for all of them. q . k runs
// without a key transpose: per (row, key) an FMA chain over head_dim in kLanes-wide vectors,
// then kLanes such vectors are reduced together (a transpose-and-add tree: about two shuffles
// and one add per score). bf16 K/V are widened on the fly with the even/odd trick (one shift or
// one and per kLanes elements); q and acc use the matching deinterleaved order inside each
// chunk of 2 * kLanes. A decode task walks a partition group by group over all kv heads at
// once: the cache stores a block's heads next to each other, so K (then V) is read in long
// contiguous runs, with software prefetch a few groups ahead, instead of short runs at
// scattered places.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

constexpr int64_t kChunk = 2 * kLanes;  // head_dim elements per K/V load step
constexpr int64_t kPartition = kAttentionPartition;
constexpr int kMaxRows = 4;  // query heads (of one position and kv head) processed together
#if defined(__AVX512F__)
constexpr int kKeysAtOnce = 4;                  // q . k: kMaxRows x 4 accumulators, 32 registers
constexpr int kAccRegs = 16;                    // p . v accumulators per pass
constexpr int64_t kFixedChunks[3] = {2, 4, 8};  // head_dim 64, 128, 256
#else
constexpr int kKeysAtOnce = 2;  // 16 registers
constexpr int kAccRegs = 8;
constexpr int64_t kFixedChunks[3] = {4, 8, 16};  // head_dim 64, 128, 256
#endif
// Query positions per item of a prefill.
constexpr int64_t kQueryBlock = 16;
// Items of at most this many positions keep all kv heads in one task (decode: long contiguous
// K/V runs); larger ones get a task per kv head (prefill: a head's partition stays in cache
// across the positions).
constexpr int64_t kStreamMaxPositions = 4;
// Tasks per thread that the split aims at, so that dynamic claiming balances the load.
constexpr int kTasksPerThread = 4;
// Groups of kLanes keys that K and V are prefetched ahead.
#ifndef INFER_PF_GROUPS
#define INFER_PF_GROUPS 2
#endif
constexpr int64_t kPrefetchGroups = INFER_PF_GROUPS;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

static_assert(kPartition % kPagedBlockMultiple == 0 && kPagedBlockMultiple % kLanes == 0,
              "a group of kLanes keys must lie inside one cache block and one partition");
static_assert(kLanes % kKeysAtOnce == 0 && kKeysAtOnce % 2 == 0);

thread_local Scratch tls_task_scratch;  // per task: prepared queries, scores, states
thread_local Scratch tls_call_scratch;  // per call, on the calling thread: split states

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
// kFull: the chunk is whole (n = kChunk), no mask needed.
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

inline void Prefetch(const void* p, int64_t bytes) {
  const char* b = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(b + i, _MM_HINT_T0);
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

// ---- Kernels on one group of kLanes keys ------------------------------------------------------
// kNch > 0: head_dim is kNch whole chunks, known at compile time (the models' 64, 128, 256):
// no load needs a mask and the chunk loops unroll. kNch = 0: any head_dim, from the context.

// Scores of R prepared query rows (stride padded_dim) against the kLanes keys starting at
// `keys`, into out[r * kPartition + 0 .. kLanes).
template <int R, class Kv, int kNch>
inline void GroupScores(const Context<Kv>& c, const float* qp, const typename Kv::T* keys,
                        float* out) {
  constexpr bool kFull = kNch > 0;
  const int64_t num_chunks = kFull ? kNch : c.num_chunks;
  const int64_t head_dim = kFull ? kNch * kChunk : c.head_dim;
  const int64_t padded_dim = kFull ? kNch * kChunk : c.padded_dim;
  V pairs[R][kLanes / 2];
#pragma GCC unroll 4
  for (int j = 0; j < kLanes; j += kKeysAtOnce) {
    V acc[R][kKeysAtOnce];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < kKeysAtOnce; ++i) acc[r][i] = Zero();
    }
    const typename Kv::T* k = keys + j * head_dim;
    const float* q = qp;
#pragma GCC unroll 16
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

template <class Kv, int kNch>
inline void GroupScoresN(int rows, const Context<Kv>& c, const float* qp,
                         const typename Kv::T* keys, float* out) {
  switch (rows) {
    case 1:
      return GroupScores<1, Kv, kNch>(c, qp, keys, out);
    case 2:
      return GroupScores<2, Kv, kNch>(c, qp, keys, out);
    case 3:
      return GroupScores<3, Kv, kNch>(c, qp, keys, out);
    default:
      return GroupScores<4, Kv, kNch>(c, qp, keys, out);
  }
}

// acc[r][chunks first .. first + NC) += sum over the `count` consecutive value rows at `values`
// (already offset to chunk `first`) of p[r * kPartition + j] * v[j]: one FMA chain per element,
// keys ascending (the running sums go through memory between groups, exactly).
template <int R, int NC, class Kv, int kNch>
inline void AccumulateSlice(const Context<Kv>& c, const typename Kv::T* values, int64_t first,
                            const float* p, int64_t count, float* acc) {
  constexpr bool kFull = kNch > 0;
  const int64_t head_dim = kFull ? kNch * kChunk : c.head_dim;
  const int64_t padded_dim = kFull ? kNch * kChunk : c.padded_dim;
  float* a_base = acc + first * kChunk;
  V a[R][2 * NC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int s = 0; s < 2 * NC; ++s) a[r][s] = Load(a_base + r * padded_dim + s * kLanes);
  }
  int64_t valid[NC];
  for (int ch = 0; ch < NC; ++ch) {
    valid[ch] = kFull || first + ch + 1 < c.num_chunks ? kChunk : c.last_chunk;
  }
  const typename Kv::T* row = values;
  for (int64_t j = 0; j < count; ++j, row += head_dim) {
    V x[2 * NC];
#pragma GCC unroll 4
    for (int ch = 0; ch < NC; ++ch) {
      Kv::template LoadChunk<kFull>(row + ch * kChunk, valid[ch], x[2 * ch], x[2 * ch + 1]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const V pr = Set1(p[r * kPartition + j]);
#pragma GCC unroll 8
      for (int s = 0; s < 2 * NC; ++s) a[r][s] = Fma(pr, x[s], a[r][s]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int s = 0; s < 2 * NC; ++s) Store(a_base + r * padded_dim + s * kLanes, a[r][s]);
  }
}

template <int R, int NC, class Kv, int kNch>
inline void AccumulateSliceN(int nc, const Context<Kv>& c, const typename Kv::T* values,
                             int64_t first, const float* p, int64_t count, float* acc) {
  if (nc == NC) return AccumulateSlice<R, NC, Kv, kNch>(c, values, first, p, count, acc);
  if constexpr (NC > 1) {
    AccumulateSliceN<R, NC - 1, Kv, kNch>(nc, c, values, first, p, count, acc);
  }
}

template <int R, class Kv, int kNch>
inline void AccumulateGroup(const Context<Kv>& c, const typename Kv::T* values, const float* p,
                            int64_t count, float* acc) {
  constexpr int kMaxChunks = std::clamp(kAccRegs / (2 * R), 1, 4);
  const int64_t num_chunks = kNch > 0 ? kNch : c.num_chunks;
  for (int64_t first = 0; first < num_chunks; first += kMaxChunks) {
    const int nc = static_cast<int>(std::min<int64_t>(kMaxChunks, num_chunks - first));
    AccumulateSliceN<R, kMaxChunks, Kv, kNch>(nc, c, values + first * kChunk, first, p, count, acc);
  }
}

template <class Kv, int kNch>
inline void AccumulateGroupN(int rows, const Context<Kv>& c, const typename Kv::T* values,
                             const float* p, int64_t count, float* acc) {
  switch (rows) {
    case 1:
      return AccumulateGroup<1, Kv, kNch>(c, values, p, count, acc);
    case 2:
      return AccumulateGroup<2, Kv, kNch>(c, values, p, count, acc);
    case 3:
      return AccumulateGroup<3, Kv, kNch>(c, values, p, count, acc);
    default:
      return AccumulateGroup<4, Kv, kNch>(c, values, p, count, acc);
  }
}

// In place over scores [0, n) (a multiple of kLanes; masked keys are -inf): p = exp(s - max).
// m = the max, s = the sum of p (lane-wise in order, then ReduceSum).
[[gnu::noinline]] void Softmax(float* scores, int64_t n, float& m, float& s) {
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

// ---- One query position over one partition --------------------------------------------------

// The partition states of the rows of one position for kv heads [h0, h1) (row
// (h - h0) * group + g is query head h * group + g) over their visible keys [lo, hi) (lo < hi,
// inside one partition): m[row], s[row], acc[row * padded_dim ...]. qp: the rows' prepared
// queries. scores: rows x kPartition scratch. K is prefetched up to prefetch_end (the
// position's last key + 1, past this partition).
template <class Kv, int kNch>
void PositionPartition(const Context<Kv>& c, const int32_t* table, int64_t h0, int64_t h1,
                       const float* qp, int64_t lo, int64_t hi, int64_t prefetch_end, float* scores,
                       float* m, float* s, float* acc) {
  const int64_t dp = c.padded_dim;
  const int64_t rows = (h1 - h0) * c.group;
  const int64_t base = lo / kLanes * kLanes;
  const int64_t end = (hi + kLanes - 1) / kLanes * kLanes;
  const int64_t group_bytes = kLanes * c.head_dim * static_cast<int64_t>(sizeof(typename Kv::T));
  // q . k, group by group over the heads: a cache block keeps its heads side by side.
  for (int64_t g = base; g < end; g += kLanes) {
    const int64_t ahead = g + kPrefetchGroups * kLanes;
    for (int64_t h = h0; h < h1; ++h) {
      if (ahead < prefetch_end) {
        Prefetch(c.k + c.RowOffset(table, h, ahead), group_bytes);
      }
      const typename Kv::T* keys = c.k + c.RowOffset(table, h, g);
      for (int64_t g0 = 0; g0 < c.group; g0 += kMaxRows) {
        const int64_t row0 = (h - h0) * c.group + g0;
        GroupScoresN<Kv, kNch>(static_cast<int>(std::min<int64_t>(kMaxRows, c.group - g0)), c,
                               qp + row0 * dp, keys, scores + row0 * kPartition + (g - base));
      }
    }
    if (g < lo || g + kLanes > hi) {
      for (int64_t row = 0; row < rows; ++row) {
        float* out = scores + row * kPartition + (g - base);
        Store(out, MaskKeys(Load(out), g, lo, hi));
      }
    }
    // The first values, wanted right after this loop.
    const int64_t v_ahead = g + kPrefetchGroups * kLanes - (end - base);
    if (v_ahead >= base && v_ahead < end) {
      for (int64_t h = h0; h < h1; ++h) {
        Prefetch(c.v + c.RowOffset(table, h, v_ahead), group_bytes);
      }
    }
  }
  for (int64_t row = 0; row < rows; ++row) {
    Softmax(scores + row * kPartition, end - base, m[row], s[row]);
  }
  // p . v in the same order.
  std::fill(acc, acc + rows * dp, 0.0F);
  for (int64_t g = base; g < end; g += kLanes) {
    const int64_t ahead = g + kPrefetchGroups * kLanes;
    const int64_t j0 = std::max(g, lo);
    const int64_t j1 = std::min(g + kLanes, hi);
    for (int64_t h = h0; h < h1; ++h) {
      if (ahead < end) Prefetch(c.v + c.RowOffset(table, h, ahead), group_bytes);
      const typename Kv::T* values = c.v + c.RowOffset(table, h, j0);
      for (int64_t g0 = 0; g0 < c.group; g0 += kMaxRows) {
        const int64_t row0 = (h - h0) * c.group + g0;
        AccumulateGroupN<Kv, kNch>(static_cast<int>(std::min<int64_t>(kMaxRows, c.group - g0)), c,
                                   values, scores + row0 * kPartition + (j0 - base), j1 - j0,
                                   acc + row0 * dp);
      }
    }
  }
}

template <class Kv>
void PositionPartitionN(const Context<Kv>& c, const int32_t* table, int64_t h0, int64_t h1,
                        const float* qp, int64_t lo, int64_t hi, int64_t prefetch_end,
                        float* scores, float* m, float* s, float* acc) {
  // The models' head dims get unrolled kernels; any other runs the generic one.
  const int64_t fixed = c.last_chunk == kChunk ? c.num_chunks : 0;
  switch (fixed) {
    case kFixedChunks[0]:
      return PositionPartition<Kv, kFixedChunks[0]>(c, table, h0, h1, qp, lo, hi, prefetch_end,
                                                    scores, m, s, acc);
    case kFixedChunks[1]:
      return PositionPartition<Kv, kFixedChunks[1]>(c, table, h0, h1, qp, lo, hi, prefetch_end,
                                                    scores, m, s, acc);
    case kFixedChunks[2]:
      return PositionPartition<Kv, kFixedChunks[2]>(c, table, h0, h1, qp, lo, hi, prefetch_end,
                                                    scores, m, s, acc);
    default:
      return PositionPartition<Kv, 0>(c, table, h0, h1, qp, lo, hi, prefetch_end, scores, m, s,
                                      acc);
  }
}

// ---- Partition states -------------------------------------------------------------------------

// Folds the partition state (pm, ps, pacc) into the running state (tm, ts, tacc): the one merge
// of the kernel. An empty partition (pm = -inf) is skipped; into an empty total it copies.
[[gnu::noinline]] void Merge(float& tm, float& ts, float* tacc, float pm, float ps,
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

// q row (head_dim) -> prepared row (padded_dim): scaled, in the K/V layout, zero padded.
template <class Kv>
void PrepareQuery(const Context<Kv>& c, const float* q, float* qp) {
  std::fill(qp, qp + c.padded_dim, 0.0F);
  for (int64_t d = 0; d < c.head_dim; ++d) qp[LayoutIndex<Kv>(d)] = q[d] * c.scale;
}

template <class Kv>
void WriteOutput(const Context<Kv>& c, const float* acc, float s, float* o) {
  const float inv = 1.0F / s;
  for (int64_t d = 0; d < c.head_dim; ++d) o[d] = acc[LayoutIndex<Kv>(d)] * inv;
}

// ---- Work items and tasks ------------------------------------------------------------------

// A block of query positions of one sequence, all heads: rows (t - t_begin) * num_heads + head.
struct Item {
  const AttentionSequence* seq;
  int64_t t_begin, t_end;   // query tokens of the sequence
  int64_t p_first, p_last;  // partitions its rows see, inclusive
  double cost;              // (query head, visible key) pairs
  int64_t slots = -1;       // split items: offset of their partition states in the call's buffer
  int split_index = -1;
};

// Kv heads [h_begin, h_end) of an item over partitions [p_begin, p_end).
struct Task {
  int item;
  int64_t h_begin, h_end;
  int64_t p_begin, p_end;
  double cost;
};

template <class Kv>
struct Call {
  Context<Kv> c;
  const Item* items;
  const Task* tasks;
  float* slots;
  std::atomic<int>* pending;  // per split item: tasks not yet finished
  int64_t slot_stride;        // floats per (partition, row) state: acc, then m, s
};

template <class Kv>
float* OutputRow(const Context<Kv>& c, const Item& item, int64_t row) {
  const int64_t t = item.t_begin + row / c.num_heads;
  return c.out + (item.seq->row + t) * c.row_stride + (row % c.num_heads) * c.head_dim;
}

// Folds a split item's partition states in ascending order and writes its output rows.
template <class Kv>
void FoldSplitItem(const Call<Kv>& call, const Item& item) {
  const Context<Kv>& c = call.c;
  const int64_t rows = (item.t_end - item.t_begin) * c.num_heads;
  float* acc = tls_task_scratch.Floats(static_cast<size_t>(c.padded_dim));
  for (int64_t row = 0; row < rows; ++row) {
    float m = kNegInf;
    float s = 0.0F;
    for (int64_t p = item.p_first; p <= item.p_last; ++p) {
      const float* state =
          call.slots + item.slots + ((p - item.p_first) * rows + row) * call.slot_stride;
      Merge(m, s, acc, state[c.padded_dim], state[c.padded_dim + 1], state, c.padded_dim);
    }
    WriteOutput(c, acc, s, OutputRow(c, item, row));
  }
}

template <class Kv>
void RunTask(const Call<Kv>& call, const Task& task) {
  const Context<Kv>& c = call.c;
  const Item& item = call.items[task.item];
  const AttentionSequence& seq = *item.seq;
  const bool split = item.slots >= 0;
  const int64_t dp = c.padded_dim;
  const int64_t positions = item.t_end - item.t_begin;
  const int64_t item_rows = positions * c.num_heads;
  const int64_t rows = (task.h_end - task.h_begin) * c.group;  // per position, in this task
  const int64_t head0 = task.h_begin * c.group;
  // Scratch: prepared queries, scores, one partition state, then (unsplit) the running states,
  // all [position][rows].
  float* qp = tls_task_scratch.Floats(static_cast<size_t>(
      positions * rows * dp + rows * kPartition + rows * (dp + 2) + positions * rows * (dp + 2)));
  float* scores = qp + positions * rows * dp;
  float* part_acc = scores + rows * kPartition;
  float* part_m = part_acc + rows * dp;
  float* part_s = part_m + rows;
  float* total_acc = part_s + rows;
  float* total_m = total_acc + positions * rows * dp;
  float* total_s = total_m + positions * rows;
  for (int64_t t = 0; t < positions; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* q = c.q + (seq.row + item.t_begin + t) * c.row_stride + (head0 + r) * c.head_dim;
      PrepareQuery(c, q, qp + (t * rows + r) * dp);
      total_m[t * rows + r] = kNegInf;
      total_s[t * rows + r] = 0.0F;
    }
  }
  for (int64_t p = task.p_begin; p < task.p_end; ++p) {
    for (int64_t t = 0; t < positions; ++t) {
      const int64_t pos = seq.first_pos + item.t_begin + t;
      const int64_t lo = std::max(c.FirstKey(pos), p * kPartition);
      const int64_t hi = std::min(pos + 1, (p + 1) * kPartition);
      if (lo < hi) {
        PositionPartitionN(c, seq.block_table, task.h_begin, task.h_end, qp + t * rows * dp, lo, hi,
                           pos + 1, scores, part_m, part_s, part_acc);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const float pm = lo < hi ? part_m[r] : kNegInf;
        if (split) {
          const int64_t item_row = t * c.num_heads + head0 + r;
          float* state = call.slots + item.slots +
                         ((p - item.p_first) * item_rows + item_row) * call.slot_stride;
          if (lo < hi)
            std::memcpy(state, part_acc + r * dp, static_cast<size_t>(dp) * sizeof(float));
          state[dp] = pm;
          state[dp + 1] = lo < hi ? part_s[r] : 0.0F;
        } else {
          Merge(total_m[t * rows + r], total_s[t * rows + r], total_acc + (t * rows + r) * dp, pm,
                lo < hi ? part_s[r] : 0.0F, part_acc + r * dp, dp);
        }
      }
    }
  }
  if (!split) {
    for (int64_t t = 0; t < positions; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        WriteOutput(c, total_acc + (t * rows + r) * dp, total_s[t * rows + r],
                    OutputRow(c, item, t * c.num_heads + head0 + r));
      }
    }
    return;
  }
  // The last task of a split item folds its partitions (acquire: the others' states).
  if (call.pending[item.split_index].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    FoldSplitItem(call, item);
  }
}

thread_local std::vector<Item> tls_items;
thread_local std::vector<Task> tls_tasks;

template <class Kv>
void Run(const float* q, std::span<const AttentionSequence> seqs, const PagedKvLayer& kv,
         const AttentionParams& params, float* out, ThreadPool& pool) {
  Call<Kv> call{};
  Context<Kv>& c = call.c;
  c.q = q;
  c.out = out;
  c.k = static_cast<const typename Kv::T*>(kv.k);
  c.v = static_cast<const typename Kv::T*>(kv.v);
  c.block_size = kv.block_size;
  c.block_stride = kv.block_stride;
  c.head_stride = kv.head_stride;
  c.head_dim = params.head_dim;
  c.num_chunks = (params.head_dim + kChunk - 1) / kChunk;
  c.padded_dim = c.num_chunks * kChunk;
  c.last_chunk = params.head_dim - (c.num_chunks - 1) * kChunk;
  c.num_heads = params.num_heads;
  c.num_kv_heads = params.num_kv_heads;
  c.group = params.num_heads / params.num_kv_heads;
  c.row_stride = params.num_heads * params.head_dim;
  c.window = params.sliding_window;
  c.scale = params.scale;
  call.slot_stride = c.padded_dim + kLanes;

  // Items: (sequence, block of query positions), with their cost in (row, key) pairs.
  std::vector<Item>& items = tls_items;
  items.clear();
  double total_cost = 0;
  for (const AttentionSequence& seq : seqs) {
    for (int64_t t0 = 0; t0 < seq.num_tokens; t0 += kQueryBlock) {
      const int64_t t1 = std::min(seq.num_tokens, t0 + kQueryBlock);
      double keys = 0;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t pos = seq.first_pos + t;
        keys += static_cast<double>(pos + 1 - c.FirstKey(pos));
      }
      const double cost = keys * static_cast<double>(c.num_heads);
      items.push_back(Item{.seq = &seq,
                           .t_begin = t0,
                           .t_end = t1,
                           .p_first = c.FirstKey(seq.first_pos + t0) / kPartition,
                           .p_last = (seq.first_pos + t1 - 1) / kPartition,
                           .cost = cost});
      total_cost += cost;
    }
  }
  if (items.empty()) return;

  // Tasks. An item whose cost is well above its share of the call is cut into pieces: ranges
  // of partitions first (each partition's state to scratch, folded by the item's last task),
  // then ranges of kv heads.
  std::vector<Task>& tasks = tls_tasks;
  tasks.clear();
  const int threads = pool.num_threads();
  const double target = total_cost / (kTasksPerThread * threads);
  int64_t slot_floats = 0;
  int num_split = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Item& item = items[i];
    const int64_t num_partitions = item.p_last - item.p_first + 1;
    const bool stream = item.t_end - item.t_begin <= kStreamMaxPositions;
    const int64_t pieces =
        threads > 1 ? std::max<int64_t>(1, static_cast<int64_t>(std::ceil(item.cost / target))) : 1;
    const int64_t p_ranges = std::min(num_partitions, pieces);
    const int64_t h_ranges =
        stream ? std::min(c.num_kv_heads, (pieces + p_ranges - 1) / p_ranges) : c.num_kv_heads;
    if (p_ranges > 1) {
      item.slots = slot_floats;
      item.split_index = num_split++;
      slot_floats += num_partitions * (item.t_end - item.t_begin) * c.num_heads * call.slot_stride;
    }
    for (int64_t hr = 0; hr < h_ranges; ++hr) {
      const int64_t h0 = c.num_kv_heads * hr / h_ranges;
      const int64_t h1 = c.num_kv_heads * (hr + 1) / h_ranges;
      for (int64_t pr = 0; pr < p_ranges; ++pr) {
        const int64_t p0 = item.p_first + num_partitions * pr / p_ranges;
        const int64_t p1 = item.p_first + num_partitions * (pr + 1) / p_ranges;
        tasks.push_back(Task{static_cast<int>(i), h0, h1, p0, p1,
                             item.cost * static_cast<double>((h1 - h0) * (p1 - p0)) /
                                 static_cast<double>(c.num_kv_heads * num_partitions)});
      }
    }
  }
  // Biggest first: tasks are claimed in order, so the tail of the call is short ones.
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& a, const Task& b) { return a.cost > b.cost; });
  std::unique_ptr<std::atomic<int>[]> pending;
  if (num_split > 0) {
    pending = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(num_split));
    for (int i = 0; i < num_split; ++i) pending[i].store(0, std::memory_order_relaxed);
    for (const Task& task : tasks) {
      const Item& item = items[static_cast<size_t>(task.item)];
      if (item.split_index >= 0) pending[item.split_index].fetch_add(1, std::memory_order_relaxed);
    }
    call.slots = tls_call_scratch.Floats(static_cast<size_t>(slot_floats));
  }
  call.items = items.data();
  call.tasks = tasks.data();
  call.pending = pending.get();
  pool.RunTasks(static_cast<int>(tasks.size()),
                [&call](int task) { RunTask(call, call.tasks[task]); });
}

}  // namespace

void PagedAttention(const float* q, std::span<const AttentionSequence> seqs, const PagedKvLayer& kv,
                    const AttentionParams& params, float* out, ThreadPool& pool) {
  if (kv.dtype == DType::kBF16) {
    Run<Bf16Kv>(q, seqs, kv, params, out, pool);
  } else {
    Run<F32Kv>(q, seqs, kv, params, out, pool);
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
