// MatMul y = x . w^T for f32 activations and bf16/f16/f32 weights, compiled once per ISA.
//
// Two paths, each in two precisions (ops.h MatMulPrecision):
// - Small m (decode): a matrix-vector kernel that streams each weight row once from memory
//   and reuses each loaded weight vector for up to kGemvX rows of x. Memory-bound: the aim is
//   the machine's read bandwidth.
// - Large m (prefill): a packed-panel GEMM (BLIS style). Weights are packed once per k-block
//   into [step][kNr] panels, x into [step][kMr] panels, and a kMr x kNr register tile of
//   multiply-adds with broadcast activations does the work. Compute-bound: the aim is the
//   multiply-add peak.
// kF32 is exact f32 arithmetic on exactly widened weights (the model's logits must match a
// float64 reference to 1e-4): bf16 weights are widened with one shift / one and per vector
// (even/odd lanes; the activations are de-interleaved to match), and a GEMM step is one k.
// kBf16 rounds x to bf16 and, with AVX512_BF16, multiplies bf16 pairs with vdpbf16ps (32
// products per instruction, twice f32 FMA): a GEMM step is then a pair of k, and the raw
// weight bytes need no widening. Without AVX512_BF16 the rounding is emulated and the f32
// kernels run on the rounded values. (vdpbf16ps on hi/lo bf16 halves of an f32 x would keep
// f32 accuracy, but takes two dot products per pair: no faster than f32 FMA.)
#include <algorithm>
#include <bit>
#include <cstring>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

// ---- Shared -------------------------------------------------------------------------------

template <DType kDType>
using Storage = std::conditional_t<kDType == DType::kF32, float, uint16_t>;

template <DType kDType>
inline float WidenOne(Storage<kDType> v) {
  if constexpr (kDType == DType::kF32) {
    return v;
  } else if constexpr (kDType == DType::kBF16) {
    return Bf16ToF32(v);
  } else {
    return F16ToF32(v);
  }
}

// ---- Matrix-vector path (small m) ---------------------------------------------------------

// Weights consumed per inner step: one 64-byte bf16 vector on AVX-512 (two f32 vectors).
constexpr int64_t kChunk = 2 * kLanes;
// Rows of x sharing each widened weight vector. AVX-512: 4 chains x 4 rows = 16 accumulators
// + 2 weight vectors; AVX2: 4 x 2 = 8 + 2 of 16 registers.
constexpr int kGemvX = kLanes == 16 ? 4 : 2;
// Chunks per inner step: independent accumulator chains that hide the FMA latency while a
// weight row is read as one sequential stream (each thread's rows are one contiguous block).
constexpr int kGemvUnroll = 4;
// Up to this many rows of x (a decode batch) use the matrix-vector path; above it the GEMM's
// packing pays off. Measured on real-size Llama, 8 and 16 concurrent decodes through the server:
// the GEMM path (which widens every weight into a packed panel per call) took 0.28 s per step
// at m = 8, this path 0.15 s.
constexpr int64_t kGemvMaxM = 16;
// Long rows go kGemvRows at a time, sharing each load of x: with x above 16 KiB a
// row-at-a-time stream re-reads x from L2. Measured side by side, one thread: at k = 8192,
// 4-row tiles 20-21 GB/s, one row at a time 15, 4096-element segments of 8 rows 8-9; at
// k = 2048 one row at a time wins, ~1.5x over 4-row tiles (whose four streams sit 4 KiB apart).
constexpr int kGemvRows = 4;
constexpr int64_t kGemvSingleRowMaxK = 4096;
constexpr int64_t kTilePrefetchBytes = 512;  // measured best of 0, 512, 1024, 2048, 4096
// Row blocks per thread, claimed dynamically: a thread slowed by the shared host takes fewer.
constexpr int64_t kGemvTasksPerThread = 4;
// Software prefetch distance along the weight stream: covers memory latency at ~20 GB/s per
// core, and runs on into the next row (the hardware prefetchers stop at 4 KiB pages).
constexpr int64_t kPrefetchBytes = 2048;

// Loads kChunk weights as two f32 vectors, in the lane order of PrepareX.
template <DType kDType>
inline void LoadChunk(const Storage<kDType>* w, V& a, V& b) {
  if constexpr (kDType == DType::kF32) {
    a = Load(w);
    b = Load(w + kLanes);
  } else if constexpr (kDType == DType::kBF16) {
    LoadBf16EvenOdd(w, a, b);
  } else {
    a = LoadF16(w);
    b = LoadF16(w + kLanes);
  }
}

// Copies x [m, k] into xs [m, k_pad] in chunk order: for bf16 each chunk holds its even
// elements then its odd ones (matching LoadBf16EvenOdd); zeros pad k up to k_pad.
void PrepareX(const float* x, int64_t m, int64_t k, int64_t x_stride, bool deinterleave,
              int64_t k_pad, float* xs) {
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * x_stride;
    float* dst = xs + i * k_pad;
    for (int64_t c = 0; c < k_pad; c += kChunk) {
      for (int64_t l = 0; l < kChunk; ++l) {
        const int64_t src = deinterleave ? c + (l < kLanes ? 2 * l : 2 * (l - kLanes) + 1) : c + l;
        dst[c + l] = src < k ? row[src] : 0.0F;
      }
    }
  }
}

// How kChunk weights meet kChunk prepared activations in the matrix-vector path: W and X are
// their element types, LoadW / LoadX bring a chunk into registers, Mac adds its dot product
// into the lanes of an f32 accumulator.
template <DType kDType>
struct F32Dot {
  using W = Storage<kDType>;
  using X = float;
  struct Chunk {
    V a, b;
  };
  static void PrepareRows(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t k_pad,
                          X* xs) {
    PrepareX(x, m, k, x_stride, kDType == DType::kBF16, k_pad, xs);
  }
  static Chunk LoadX(const X* p) { return {Load(p), Load(p + kLanes)}; }
  static Chunk LoadW(const W* p) {
    Chunk c;
    LoadChunk<kDType>(p, c.a, c.b);
    return c;
  }
  static V Mac(V acc, const Chunk& w, const Chunk& x) { return Fma(w.b, x.b, Fma(w.a, x.a, acc)); }
};

#if defined(__AVX512BF16__)
// acc[i] += a[2i] * b[2i] + a[2i+1] * b[2i+1] over 32 bf16 pairs (vdpbf16ps).
inline V DotBf16(V acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, std::bit_cast<__m512bh>(a), std::bit_cast<__m512bh>(b));
}

// x rows [m, k] rounded to bf16 (nearest even) into out [m, width], zeros past k.
void RoundRowsToBf16(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t width,
                     uint16_t* out) {
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * x_stride;
    uint16_t* dst = out + i * width;
    for (int64_t c = 0; c < width; c += 2 * kLanes) {
      const int64_t lo_n = std::clamp<int64_t>(k - c, 0, kLanes);
      const int64_t hi_n = std::clamp<int64_t>(k - c - kLanes, 0, kLanes);
      const V lo = lo_n > 0 ? LoadN(row + c, lo_n) : Zero();
      const V hi = hi_n > 0 ? LoadN(row + c + kLanes, hi_n) : Zero();
      const __m512i packed = std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      if (c + 2 * kLanes <= width) {
        _mm512_storeu_si512(dst + c, packed);
      } else {
        _mm512_mask_storeu_epi16(dst + c, (uint32_t{1} << (width - c)) - 1, packed);
      }
    }
  }
}

// Activations rounded to bf16 in natural order; a chunk of raw bf16 weights is one vector of
// 16 (even, odd) pairs, multiplied by vdpbf16ps without widening.
struct Bf16Dot {
  using W = uint16_t;
  using X = uint16_t;
  static void PrepareRows(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t k_pad,
                          X* xs) {
    RoundRowsToBf16(x, m, k, x_stride, k_pad, xs);
  }
  static __m512i LoadX(const X* p) { return _mm512_loadu_si512(p); }
  static __m512i LoadW(const W* p) { return _mm512_loadu_si512(p); }
  static V Mac(V acc, __m512i w, __m512i x) { return DotBf16(acc, w, x); }
};
#endif

// out[i][j] = dot(w row i, xs row j) for kRows weight rows (stride k) and kX rows of xs.
template <class Dot, int kRows, int kX>
inline void DotTile(const typename Dot::W* w, int64_t k, const typename Dot::X* xs, int64_t k_pad,
                    float out[kRows][kX]) {
  using W = typename Dot::W;
  V acc[kRows][kX];
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kX; ++j) acc[i][j] = Zero();
  }
  const int64_t k_main = k / kChunk * kChunk;
  auto step = [&](int64_t c, const W* const* rows) {
    decltype(Dot::LoadX(xs)) xc[kX];
    for (int j = 0; j < kX; ++j) xc[j] = Dot::LoadX(xs + j * k_pad + c);
    for (int i = 0; i < kRows; ++i) {
      const auto wc = Dot::LoadW(rows[i]);
      for (int j = 0; j < kX; ++j) acc[i][j] = Dot::Mac(acc[i][j], wc, xc[j]);
    }
  };
  for (int64_t c = 0; c < k_main; c += kChunk) {
    const W* rows[kRows];
    for (int i = 0; i < kRows; ++i) {
      rows[i] = w + i * k + c;
      _mm_prefetch(reinterpret_cast<const char*>(rows[i]) + kTilePrefetchBytes, _MM_HINT_T0);
    }
    step(c, rows);
  }
  if (k_main < k) {
    // The ragged end of each row, copied into zero-padded chunks (x is zero there too).
    alignas(64) W tail[kRows][kChunk] = {};
    const W* rows[kRows];
    for (int i = 0; i < kRows; ++i) {
      std::memcpy(tail[i], w + i * k + k_main,
                  static_cast<size_t>(k - k_main) * sizeof(tail[i][0]));
      rows[i] = tail[i];
    }
    step(k_main, rows);
  }
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kX; ++j) out[i][j] = ReduceSum(acc[i][j]);
  }
}

// Weight rows [j0, j0 + kRows) against all m rows of xs.
template <class Dot, int kRows>
void DotRows(const typename Dot::W* w, int64_t j0, int64_t k, const typename Dot::X* xs,
             int64_t k_pad, int64_t m, const float* bias, float* y, int64_t y_stride) {
  for (int64_t i0 = 0; i0 < m; i0 += kGemvX) {
    float out[kRows][kGemvX];
    const int64_t x_rows = std::min<int64_t>(kGemvX, m - i0);
    const auto* x_block = xs + i0 * k_pad;
    const auto* w_block = w + j0 * k;
    switch (x_rows) {
      case 1:
        DotTile<Dot, kRows, 1>(w_block, k, x_block, k_pad, reinterpret_cast<float(*)[1]>(out));
        break;
      case 2:
        DotTile<Dot, kRows, 2>(w_block, k, x_block, k_pad, reinterpret_cast<float(*)[2]>(out));
        break;
#if defined(__AVX512F__)
      case 3:
        DotTile<Dot, kRows, 3>(w_block, k, x_block, k_pad, reinterpret_cast<float(*)[3]>(out));
        break;
      case 4:
        DotTile<Dot, kRows, 4>(w_block, k, x_block, k_pad, reinterpret_cast<float(*)[4]>(out));
        break;
#endif
      default:
        break;
    }
    // out was filled as [kRows][x_rows].
    const float* flat = &out[0][0];
    for (int r = 0; r < kRows; ++r) {
      const float b = bias != nullptr ? bias[j0 + r] : 0.0F;
      for (int64_t j = 0; j < x_rows; ++j)
        y[(i0 + j) * y_stride + j0 + r] = flat[r * x_rows + j] + b;
    }
  }
}

// out[j] = dot(w, xs row j) for one weight row and kX rows of xs.
template <class Dot, int kX>
inline void DotRow(const typename Dot::W* w, int64_t k, const typename Dot::X* xs, int64_t k_pad,
                   float* out) {
  using W = typename Dot::W;
  V acc[kGemvUnroll][kX];
  for (int u = 0; u < kGemvUnroll; ++u) {
    for (int j = 0; j < kX; ++j) acc[u][j] = Zero();
  }
  auto step = [&](const W* chunk, int64_t c, int u) {
    const auto wc = Dot::LoadW(chunk);
    for (int j = 0; j < kX; ++j)
      acc[u][j] = Dot::Mac(acc[u][j], wc, Dot::LoadX(xs + j * k_pad + c));
  };
  constexpr int64_t kStep = kGemvUnroll * kChunk;
  constexpr int64_t kStepBytes = kStep * sizeof(W);
  int64_t c = 0;
  for (; c + kStep <= k; c += kStep) {
    const char* ahead = reinterpret_cast<const char*>(w + c) + kPrefetchBytes;
    for (int64_t line = 0; line < kStepBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    for (int u = 0; u < kGemvUnroll; ++u) step(w + c + u * kChunk, c + u * kChunk, u);
  }
  for (; c + kChunk <= k; c += kChunk) step(w + c, c, 0);
  if (c < k) {
    // The ragged end, copied into a zero-padded chunk (x is zero-padded there too).
    alignas(64) W tail[kChunk] = {};
    std::memcpy(tail, w + c, static_cast<size_t>(k - c) * sizeof(tail[0]));
    step(tail, c, 0);
  }
  for (int j = 0; j < kX; ++j) {
    V sum = acc[0][j];
    for (int u = 1; u < kGemvUnroll; ++u) sum = Add(sum, acc[u][j]);
    out[j] = ReduceSum(sum);
  }
}

thread_local Scratch tls_x_scratch;

template <class Dot>
void Gemv(const float* x, int64_t m, int64_t k, int64_t x_stride, const typename Dot::W* w,
          int64_t n, const float* bias, float* y, int64_t y_stride, ThreadPool& pool) {
  using X = typename Dot::X;
  const int64_t k_pad = (k + kChunk - 1) / kChunk * kChunk;
  X* xs = tls_x_scratch.Array<X>(static_cast<size_t>(m * k_pad));
  Dot::PrepareRows(x, m, k, x_stride, k_pad, xs);
  // Contiguous blocks of whole tiles, at least 64 rows each.
  const int64_t rows_per_task = std::max<int64_t>(
      64, (n / (kGemvTasksPerThread * pool.num_threads()) + kGemvRows - 1) / kGemvRows * kGemvRows);
  const int64_t num_tasks = (n + rows_per_task - 1) / rows_per_task;
  pool.RunTasks(static_cast<int>(num_tasks), [&](int task) {
    const int64_t n_begin = task * rows_per_task;
    const int64_t n_end = std::min(n, n_begin + rows_per_task);
    int64_t row = n_begin;
    // Row tiles also when x has more rows than one DotRow takes: each x load then serves
    // kGemvRows weight rows (a row at a time re-read all of x from L2 per weight row; 4x the
    // traffic, 1.4x slower end to end at m = 8).
    if (k > kGemvSingleRowMaxK || m > kGemvX) {
      for (; row + kGemvRows <= n_end; row += kGemvRows) {
        DotRows<Dot, kGemvRows>(w, row, k, xs, k_pad, m, bias, y, y_stride);
      }
    }
    for (; row < n_end; ++row) {
      const auto* w_row = w + row * k;
      const float b = bias != nullptr ? bias[row] : 0.0F;
      for (int64_t i0 = 0; i0 < m; i0 += kGemvX) {
        float out[kGemvX];
        const X* x_block = xs + i0 * k_pad;
        const int64_t x_rows = std::min<int64_t>(kGemvX, m - i0);
        switch (x_rows) {
          case 1:
            DotRow<Dot, 1>(w_row, k, x_block, k_pad, out);
            break;
          case 2:
            DotRow<Dot, 2>(w_row, k, x_block, k_pad, out);
            break;
#if defined(__AVX512F__)
          case 3:
            DotRow<Dot, 3>(w_row, k, x_block, k_pad, out);
            break;
          case 4:
            DotRow<Dot, 4>(w_row, k, x_block, k_pad, out);
            break;
#endif
          default:
            break;
        }
        for (int64_t j = 0; j < x_rows; ++j) y[(i0 + j) * y_stride + row] = out[j] + b;
      }
    }
  });
}

// ---- Packed GEMM path (large m) -----------------------------------------------------------

// Register tile kMr x kNr. AVX-512: 14 x 32 = 28 zmm accumulators + 2 weight vectors + 1
// broadcast = 31 of 32 registers. AVX2: 6 x 16 = 12 + 2 + 1 = 15 of 16.
constexpr int kMr = kLanes == 16 ? 14 : 6;
constexpr int kNr = 2 * kLanes;
// k-block in steps (one k for f32, a pair of k for bf16; a packed element is 4 bytes either
// way): an x micro-panel (kKc x kMr, 14 KiB) stays in L1 while weight micro-panels stream
// from L2; long enough that the tile's load/store of y is noise.
constexpr int64_t kKc = 256;
// Output features per packed weight block: kNc x kKc x 4 bytes = 256 KiB, resident in L2
// (1 MiB) while every x panel passes over it.
constexpr int64_t kNc = 256;

// The weight micro-panel streams from L2; fetch it this many k-steps (1 KiB) ahead into L1.
// Measured: +2-5% over the hardware prefetcher alone.
constexpr int64_t kPanelPrefetchSteps = 8;

// Adds y (when accumulating) and bias to a finished kRows x cols tile and stores it.
template <int kRows>
inline void StoreTile(const V (&acc0)[kRows], const V (&acc1)[kRows], float* y, int64_t y_stride,
                      int64_t cols, bool accumulate, const float* bias) {
  const int64_t cols0 = std::min<int64_t>(cols, kLanes);
  const int64_t cols1 = cols - cols0;
  for (int r = 0; r < kRows; ++r) {
    float* yr = y + r * y_stride;
    V v0 = acc0[r];
    V v1 = acc1[r];
    if (cols == kNr) {
      if (accumulate) {
        v0 = Add(v0, Load(yr));
        v1 = Add(v1, Load(yr + kLanes));
      }
      if (bias != nullptr) {
        v0 = Add(v0, Load(bias));
        v1 = Add(v1, Load(bias + kLanes));
      }
      Store(yr, v0);
      Store(yr + kLanes, v1);
    } else {
      if (accumulate) {
        v0 = Add(v0, LoadN(yr, cols0));
        v1 = Add(v1, LoadN(yr + kLanes, cols1));
      }
      if (bias != nullptr) {
        v0 = Add(v0, LoadN(bias, cols0));
        v1 = Add(v1, LoadN(bias + kLanes, cols1));
      }
      StoreN(yr, v0, cols0);
      if (cols1 > 0) StoreN(yr + kLanes, v1, cols1);
    }
  }
}

// Widens kLanes weights of one row.
template <DType kDType>
inline V LoadRow(const Storage<kDType>* p) {
  if constexpr (kDType == DType::kF32) {
    return Load(p);
  } else if constexpr (kDType == DType::kBF16) {
    return LoadBf16(p);
  } else {
    return LoadF16(p);
  }
}

// How the GEMM packs and multiplies. Unit is one packed element (4 bytes); kStepK values of
// k make one step. PackX fills panel `panel` of x as [steps][kMr]; PackW fills weight rows
// [n0, n0 + kNr) x steps [s0, s0 + kc) as [kc][kNr]; Broadcast / LoadW / Mac form the
// register tile's multiply-add.
template <DType kDType>
struct F32Gemm {
  using W = Storage<kDType>;
  using Unit = float;
  static constexpr int64_t kStepK = 1;

  static V Broadcast(const Unit* p) { return Set1(*p); }
  static V LoadW(const Unit* p) { return Load(p); }
  static V Mac(V acc, V x, V w) { return Fma(x, w, acc); }

  // Zero rows past m.
  static void PackX(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t panel,
                    Unit* xp) {
    const int64_t row0 = panel * kMr;
    const int64_t rows = std::min<int64_t>(kMr, m - row0);
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t r = 0; r < kMr; ++r) {
        xp[kk * kMr + r] = r < rows ? x[(row0 + r) * x_stride + kk] : 0.0F;
      }
    }
  }

  // Widened to f32, zero past n_end.
  static void PackW(const W* w, int64_t k, int64_t n0, int64_t n_end, int64_t s0, int64_t kc,
                    Unit* wp) {
    const int64_t rows = std::min<int64_t>(kNr, n_end - n0);
    int64_t kk = 0;
#if defined(__AVX512F__)
    // Whole 16 x 16 blocks: 16 widening row loads, one transpose, 16 stores.
    if (rows == kNr) {
      for (; kk + kLanes <= kc; kk += kLanes) {
        for (int half = 0; half < kNr / kLanes; ++half) {
          V r[kLanes];
          for (int i = 0; i < kLanes; ++i) {
            r[i] = LoadRow<kDType>(w + (n0 + half * kLanes + i) * k + s0 + kk);
          }
          Transpose16x16(r);
          for (int i = 0; i < kLanes; ++i) Store(wp + (kk + i) * kNr + half * kLanes, r[i]);
        }
      }
    }
#endif
    for (int64_t c = 0; c < kNr; ++c) {
      float* dst = wp + c;
      if (c >= rows) {
        for (int64_t j = kk; j < kc; ++j) dst[j * kNr] = 0.0F;
        continue;
      }
      const W* src = w + (n0 + c) * k + s0;
      for (int64_t j = kk; j < kc; ++j) dst[j * kNr] = WidenOne<kDType>(src[j]);
    }
  }
};

#if defined(__AVX512BF16__)
// A step is a pair (k, k + 1): a Unit holds bf16 x[k] in its low half and x[k + 1] in its
// high half (zero past k), and a weight vector holds the same pairs of 16 output features.
struct Bf16Gemm {
  using W = uint16_t;
  using Unit = uint32_t;
  static constexpr int64_t kStepK = 2;

  static __m512i Broadcast(const Unit* p) { return _mm512_set1_epi32(static_cast<int>(*p)); }
  static __m512i LoadW(const Unit* p) { return _mm512_loadu_si512(p); }
  static V Mac(V acc, __m512i x, __m512i w) { return DotBf16(acc, x, w); }

  // Rounded to bf16 32 values of k at a time, zero rows past m.
  static void PackX(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t panel,
                    Unit* xp) {
    const int64_t row0 = panel * kMr;
    const int64_t rows = std::min<int64_t>(kMr, m - row0);
    const int64_t steps = (k + 1) / 2;
    constexpr int64_t kBlock = 2 * kLanes;  // values of k per conversion
    alignas(64) uint16_t pairs[kBlock];
    for (int64_t r = 0; r < kMr; ++r) {
      if (r >= rows) {
        for (int64_t s = 0; s < steps; ++s) xp[s * kMr + r] = 0;
        continue;
      }
      const float* src = x + (row0 + r) * x_stride;
      for (int64_t k0 = 0; k0 < k; k0 += kBlock) {
        const int64_t count = std::min(kBlock, k - k0);
        RoundRowsToBf16(src + k0, 1, count, x_stride, kBlock, pairs);
        const int64_t s0 = k0 / 2;
        for (int64_t i = 0; i < (count + 1) / 2; ++i) {
          xp[(s0 + i) * kMr + r] =
              static_cast<Unit>(pairs[2 * i]) | (static_cast<Unit>(pairs[2 * i + 1]) << 16);
        }
      }
    }
  }

  // Raw bf16 pairs (no widening), zero past n_end and past k.
  static void PackW(const W* w, int64_t k, int64_t n0, int64_t n_end, int64_t s0, int64_t kc,
                    Unit* wp) {
    const int64_t rows = std::min<int64_t>(kNr, n_end - n0);
    int64_t kk = 0;
    // Whole 16 x 16 blocks of pairs: 16 row loads of 32 bf16, one 32-bit transpose, 16 stores.
    if (rows == kNr) {
      for (; kk + kLanes <= kc && 2 * (s0 + kk + kLanes) <= k; kk += kLanes) {
        for (int half = 0; half < kNr / kLanes; ++half) {
          V r[kLanes];
          for (int i = 0; i < kLanes; ++i) {
            r[i] = _mm512_castsi512_ps(
                _mm512_loadu_si512(w + (n0 + half * kLanes + i) * k + 2 * (s0 + kk)));
          }
          Transpose16x16(r);
          for (int i = 0; i < kLanes; ++i) {
            _mm512_storeu_si512(wp + (kk + i) * kNr + half * kLanes, _mm512_castps_si512(r[i]));
          }
        }
      }
    }
    for (int64_t c = 0; c < kNr; ++c) {
      Unit* dst = wp + c;
      for (int64_t j = kk; j < kc; ++j) {
        const int64_t k_index = 2 * (s0 + j);
        Unit pair = 0;
        if (c < rows) {
          const W* src = w + (n0 + c) * k;
          pair = src[k_index];
          if (k_index + 1 < k) pair |= static_cast<Unit>(src[k_index + 1]) << 16;
        }
        dst[j * kNr] = pair;
      }
    }
  }
};
#endif

template <class G, int kRows>
inline void GemmTile(const typename G::Unit* xp, const typename G::Unit* wp, int64_t kc, float* y,
                     int64_t y_stride, int64_t cols, bool accumulate, const float* bias) {
  V acc0[kRows];
  V acc1[kRows];
  for (int r = 0; r < kRows; ++r) {
    acc0[r] = Zero();
    acc1[r] = Zero();
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    _mm_prefetch(reinterpret_cast<const char*>(wp + kPanelPrefetchSteps * kNr), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wp + kPanelPrefetchSteps * kNr + kLanes),
                 _MM_HINT_T0);
    const auto w0 = G::LoadW(wp);
    const auto w1 = G::LoadW(wp + kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const auto xb = G::Broadcast(xp + r);
      acc0[r] = G::Mac(acc0[r], xb, w0);
      acc1[r] = G::Mac(acc1[r], xb, w1);
    }
    xp += kMr;
    wp += kNr;
  }
  StoreTile<kRows>(acc0, acc1, y, y_stride, cols, accumulate, bias);
}

template <class G, int kRows = kMr>
inline void GemmTileRows(int rows, const typename G::Unit* xp, const typename G::Unit* wp,
                         int64_t kc, float* y, int64_t y_stride, int64_t cols, bool accumulate,
                         const float* bias) {
  if constexpr (kRows > 0) {
    if (rows == kRows) {
      GemmTile<G, kRows>(xp, wp, kc, y, y_stride, cols, accumulate, bias);
    } else {
      GemmTileRows<G, kRows - 1>(rows, xp, wp, kc, y, y_stride, cols, accumulate, bias);
    }
  }
}

thread_local Scratch tls_w_scratch;

template <class G>
void Gemm(const float* x, int64_t m, int64_t k, int64_t x_stride, const typename G::W* w, int64_t n,
          const float* bias, float* y, int64_t y_stride, ThreadPool& pool) {
  using Unit = typename G::Unit;
  const int64_t steps = (k + G::kStepK - 1) / G::kStepK;
  const int64_t num_panels = (m + kMr - 1) / kMr;
  Unit* xpack = tls_x_scratch.Array<Unit>(static_cast<size_t>(num_panels * steps * kMr));
  pool.RunTasks(static_cast<int>(num_panels),
                [&](int p) { G::PackX(x, m, k, x_stride, p, xpack + p * steps * kMr); });
  // One task per kNc output features, claimed dynamically (a busy core on the shared host
  // then takes fewer).
  const int64_t num_tasks = (n + kNc - 1) / kNc;
  pool.RunTasks(static_cast<int>(num_tasks), [&](int task) {
    const int64_t n_begin = task * kNc;
    const int64_t n_end = std::min(n, n_begin + kNc);
    Unit* wpack = tls_w_scratch.Array<Unit>(static_cast<size_t>(kNc * kKc));
    for (int64_t nc0 = n_begin; nc0 < n_end; nc0 += kNc) {
      const int64_t nc_end = std::min(n_end, nc0 + kNc);
      for (int64_t s0 = 0; s0 < steps; s0 += kKc) {
        const int64_t kc = std::min(kKc, steps - s0);
        for (int64_t j0 = nc0; j0 < nc_end; j0 += kNr) {
          G::PackW(w, k, j0, nc_end, s0, kc, wpack + (j0 - nc0) * kKc);
        }
        const bool last_k = s0 + kc == steps;
        for (int64_t p = 0; p < num_panels; ++p) {
          const int rows = static_cast<int>(std::min<int64_t>(kMr, m - p * kMr));
          const Unit* xp = xpack + p * steps * kMr + s0 * kMr;
          for (int64_t j0 = nc0; j0 < nc_end; j0 += kNr) {
            const int64_t cols = std::min<int64_t>(kNr, nc_end - j0);
            GemmTileRows<G>(rows, xp, wpack + (j0 - nc0) * kKc, kc, y + p * kMr * y_stride + j0,
                            y_stride, cols, s0 > 0,
                            last_k && bias != nullptr ? bias + j0 : nullptr);
          }
        }
      }
    }
  });
}

// The matrix-vector path for small m, the GEMM for large m.
template <class Dot, class G>
void MatMulWith(const float* x, int64_t m, int64_t k, int64_t x_stride, const void* w, int64_t n,
                const float* bias, float* y, int64_t y_stride, ThreadPool& pool) {
  const auto* wt = static_cast<const typename Dot::W*>(w);
  if (m <= kGemvMaxM) {
    Gemv<Dot>(x, m, k, x_stride, wt, n, bias, y, y_stride, pool);
  } else {
    Gemm<G>(x, m, k, x_stride, wt, n, bias, y, y_stride, pool);
  }
}

#if !defined(__AVX512BF16__)
thread_local Scratch tls_rounded_scratch;
#endif

}  // namespace

void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, DType w_dtype, const void* w,
            int64_t n, const float* bias, float* y, int64_t y_stride, ThreadPool& pool,
            bool bf16_activations) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) y[i * y_stride + j] = bias != nullptr ? bias[j] : 0.0F;
    }
    return;
  }
  if (bf16_activations) {
#if defined(__AVX512BF16__)
    return MatMulWith<Bf16Dot, Bf16Gemm>(x, m, k, x_stride, w, n, bias, y, y_stride, pool);
#else
    // No vdpbf16ps: the same rounding, then exact f32 products of the rounded values.
    float* rounded = tls_rounded_scratch.Floats(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t kk = 0; kk < k; ++kk) {
        rounded[i * k + kk] = Bf16ToF32(F32ToBf16(x[i * x_stride + kk]));
      }
    }
    x = rounded;
    x_stride = k;
#endif
  }
  switch (w_dtype) {
    case DType::kBF16:
      return MatMulWith<F32Dot<DType::kBF16>, F32Gemm<DType::kBF16>>(x, m, k, x_stride, w, n, bias,
                                                                     y, y_stride, pool);
    case DType::kF16:
      return MatMulWith<F32Dot<DType::kF16>, F32Gemm<DType::kF16>>(x, m, k, x_stride, w, n, bias, y,
                                                                   y_stride, pool);
    default:
      return MatMulWith<F32Dot<DType::kF32>, F32Gemm<DType::kF32>>(x, m, k, x_stride, w, n, bias, y,
                                                                   y_stride, pool);
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
