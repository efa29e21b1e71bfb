// MatMul y = x . w^T for f32 activations and bf16/f16/f32 weights, compiled once per ISA.
//
// Two paths, both exact f32 arithmetic on exactly widened weights (the model's logits must
// match a float64 reference to 1e-4, so activations are never rounded to bf16):
// - Small m (decode): a matrix-vector kernel that streams each weight row once from memory,
//   widening bf16 with one shift / one and per vector (even/odd lanes; the activations are
//   de-interleaved to match), and reuses each widened vector for up to kGemvX rows of x.
//   Memory-bound: the aim is the machine's read bandwidth.
// - Large m (prefill): a packed-panel GEMM (BLIS style). Weights are widened to f32 once per
//   k-block into [k][kNr] panels, x is packed into [k][kMr] panels, and a kMr x kNr register
//   tile of f32 FMAs with broadcast activations does the work. Compute-bound: the aim is the
//   f32 FMA peak. Why not vdpbf16ps on hi/lo bf16 halves of x: it needs two dot products per
//   product pair, the same instruction count as f32 FMA on this core, and is less exact.
#include <algorithm>
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

// out[i][j] = dot(w row i, xs row j) for kRows weight rows (stride k) and kX rows of xs.
template <DType kDType, int kRows, int kX>
inline void DotTile(const Storage<kDType>* w, int64_t k, const float* xs, int64_t k_pad,
                    float out[kRows][kX]) {
  V acc[kRows][kX];
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kX; ++j) acc[i][j] = Zero();
  }
  const int64_t k_main = k / kChunk * kChunk;
  auto step = [&](int64_t c, const Storage<kDType>* const* rows) {
    V xa[kX];
    V xb[kX];
    for (int j = 0; j < kX; ++j) {
      xa[j] = Load(xs + j * k_pad + c);
      xb[j] = Load(xs + j * k_pad + c + kLanes);
    }
    for (int i = 0; i < kRows; ++i) {
      V a;
      V b;
      LoadChunk<kDType>(rows[i], a, b);
      for (int j = 0; j < kX; ++j) {
        acc[i][j] = Fma(a, xa[j], acc[i][j]);
        acc[i][j] = Fma(b, xb[j], acc[i][j]);
      }
    }
  };
  for (int64_t c = 0; c < k_main; c += kChunk) {
    const Storage<kDType>* rows[kRows];
    for (int i = 0; i < kRows; ++i) {
      rows[i] = w + i * k + c;
      _mm_prefetch(reinterpret_cast<const char*>(rows[i]) + kTilePrefetchBytes, _MM_HINT_T0);
    }
    step(c, rows);
  }
  if (k_main < k) {
    // The ragged end of each row, copied into zero-padded chunks (x is zero there too).
    alignas(64) Storage<kDType> tail[kRows][kChunk] = {};
    const Storage<kDType>* rows[kRows];
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
template <DType kDType, int kRows>
void DotRows(const Storage<kDType>* w, int64_t j0, int64_t k, const float* xs, int64_t k_pad,
             int64_t m, const float* bias, float* y, int64_t y_stride) {
  for (int64_t i0 = 0; i0 < m; i0 += kGemvX) {
    float out[kRows][kGemvX];
    const int64_t x_rows = std::min<int64_t>(kGemvX, m - i0);
    const float* x_block = xs + i0 * k_pad;
    const Storage<kDType>* w_block = w + j0 * k;
    switch (x_rows) {
      case 1:
        DotTile<kDType, kRows, 1>(w_block, k, x_block, k_pad, reinterpret_cast<float(*)[1]>(out));
        break;
      case 2:
        DotTile<kDType, kRows, 2>(w_block, k, x_block, k_pad, reinterpret_cast<float(*)[2]>(out));
        break;
#if defined(__AVX512F__)
      case 3:
        DotTile<kDType, kRows, 3>(w_block, k, x_block, k_pad, reinterpret_cast<float(*)[3]>(out));
        break;
      case 4:
        DotTile<kDType, kRows, 4>(w_block, k, x_block, k_pad, reinterpret_cast<float(*)[4]>(out));
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
template <DType kDType, int kX>
inline void DotRow(const Storage<kDType>* w, int64_t k, const float* xs, int64_t k_pad,
                   float* out) {
  V acc[kGemvUnroll][kX];
  for (int u = 0; u < kGemvUnroll; ++u) {
    for (int j = 0; j < kX; ++j) acc[u][j] = Zero();
  }
  auto step = [&](const Storage<kDType>* chunk, int64_t c, int u) {
    V a;
    V b;
    LoadChunk<kDType>(chunk, a, b);
    for (int j = 0; j < kX; ++j) {
      acc[u][j] = Fma(a, Load(xs + j * k_pad + c), acc[u][j]);
      acc[u][j] = Fma(b, Load(xs + j * k_pad + c + kLanes), acc[u][j]);
    }
  };
  constexpr int64_t kStep = kGemvUnroll * kChunk;
  constexpr int64_t kStepBytes = kStep * sizeof(Storage<kDType>);
  int64_t c = 0;
  for (; c + kStep <= k; c += kStep) {
    const char* ahead = reinterpret_cast<const char*>(w + c) + kPrefetchBytes;
    for (int64_t line = 0; line < kStepBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    for (int u = 0; u < kGemvUnroll; ++u) step(w + c + u * kChunk, c + u * kChunk, u);
  }
  for (; c + kChunk <= k; c += kChunk) step(w + c, c, 0);
  if (c < k) {
    // The ragged end, copied into a zero-padded chunk (x is zero-padded there too).
    alignas(64) Storage<kDType> tail[kChunk] = {};
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

template <DType kDType>
void Gemv(const float* x, int64_t m, int64_t k, int64_t x_stride, const Storage<kDType>* w,
          int64_t n, const float* bias, float* y, int64_t y_stride, ThreadPool& pool) {
  const int64_t k_pad = (k + kChunk - 1) / kChunk * kChunk;
  float* xs = tls_x_scratch.Floats(static_cast<size_t>(m * k_pad));
  PrepareX(x, m, k, x_stride, kDType == DType::kBF16, k_pad, xs);
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
        DotRows<kDType, kGemvRows>(w, row, k, xs, k_pad, m, bias, y, y_stride);
      }
    }
    for (; row < n_end; ++row) {
      const Storage<kDType>* w_row = w + row * k;
      const float b = bias != nullptr ? bias[row] : 0.0F;
      for (int64_t i0 = 0; i0 < m; i0 += kGemvX) {
        float out[kGemvX];
        const float* x_block = xs + i0 * k_pad;
        const int64_t x_rows = std::min<int64_t>(kGemvX, m - i0);
        switch (x_rows) {
          case 1:
            DotRow<kDType, 1>(w_row, k, x_block, k_pad, out);
            break;
          case 2:
            DotRow<kDType, 2>(w_row, k, x_block, k_pad, out);
            break;
#if defined(__AVX512F__)
          case 3:
            DotRow<kDType, 3>(w_row, k, x_block, k_pad, out);
            break;
          case 4:
            DotRow<kDType, 4>(w_row, k, x_block, k_pad, out);
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
// k-block: an x micro-panel (kKc x kMr f32, 14 KiB) stays in L1 while weight micro-panels
// stream from L2; long enough that the tile's load/store of y is noise.
constexpr int64_t kKc = 256;
// Output features per packed weight block: kNc x kKc f32 = 256 KiB, resident in L2 (1 MiB)
// while every x panel passes over it.
constexpr int64_t kNc = 256;

// The weight micro-panel streams from L2; fetch it this many k-steps (1 KiB) ahead into L1.
// Measured: +2-5% over the hardware prefetcher alone.
constexpr int64_t kPanelPrefetchSteps = 8;

template <int kRows>
inline void GemmTile(const float* xp, const float* wp, int64_t kc, float* y, int64_t y_stride,
                     int64_t cols, bool accumulate, const float* bias) {
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
    const V w0 = Load(wp);
    const V w1 = Load(wp + kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const V xb = Set1(xp[r]);
      acc0[r] = Fma(xb, w0, acc0[r]);
      acc1[r] = Fma(xb, w1, acc1[r]);
    }
    xp += kMr;
    wp += kNr;
  }
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

template <int kRows = kMr>
inline void GemmTileRows(int rows, const float* xp, const float* wp, int64_t kc, float* y,
                         int64_t y_stride, int64_t cols, bool accumulate, const float* bias) {
  if constexpr (kRows > 0) {
    if (rows == kRows) {
      GemmTile<kRows>(xp, wp, kc, y, y_stride, cols, accumulate, bias);
    } else {
      GemmTileRows<kRows - 1>(rows, xp, wp, kc, y, y_stride, cols, accumulate, bias);
    }
  }
}

// x rows [p * kMr, +kMr) into [k][kMr], zero rows past m.
void PackX(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t panel, float* xp) {
  const int64_t row0 = panel * kMr;
  const int64_t rows = std::min<int64_t>(kMr, m - row0);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t r = 0; r < kMr; ++r) {
      xp[kk * kMr + r] = r < rows ? x[(row0 + r) * x_stride + kk] : 0.0F;
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

// Weight rows [n0, n0 + kNr) x columns [k0, k0 + kc) into [kc][kNr] f32, zero past n_end.
template <DType kDType>
void PackW(const Storage<kDType>* w, int64_t k, int64_t n0, int64_t n_end, int64_t k0, int64_t kc,
           float* wp) {
  const int64_t rows = std::min<int64_t>(kNr, n_end - n0);
  int64_t kk = 0;
#if defined(__AVX512F__)
  // Whole 16 x 16 blocks: 16 widening row loads, one transpose, 16 stores.
  if (rows == kNr) {
    for (; kk + kLanes <= kc; kk += kLanes) {
      for (int half = 0; half < kNr / kLanes; ++half) {
        V r[kLanes];
        for (int i = 0; i < kLanes; ++i) {
          r[i] = LoadRow<kDType>(w + (n0 + half * kLanes + i) * k + k0 + kk);
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
    const Storage<kDType>* src = w + (n0 + c) * k + k0;
    for (int64_t j = kk; j < kc; ++j) dst[j * kNr] = WidenOne<kDType>(src[j]);
  }
}

thread_local Scratch tls_w_scratch;

template <DType kDType>
void Gemm(const float* x, int64_t m, int64_t k, int64_t x_stride, const Storage<kDType>* w,
          int64_t n, const float* bias, float* y, int64_t y_stride, ThreadPool& pool) {
  const int64_t num_panels = (m + kMr - 1) / kMr;
  float* xpack = tls_x_scratch.Floats(static_cast<size_t>(num_panels * k * kMr));
  pool.RunTasks(static_cast<int>(num_panels),
                [&](int p) { PackX(x, m, k, x_stride, p, xpack + p * k * kMr); });
  // One task per kNc output features, claimed dynamically (a busy core on the shared host
  // then takes fewer).
  const int64_t num_tasks = (n + kNc - 1) / kNc;
  pool.RunTasks(static_cast<int>(num_tasks), [&](int task) {
    const int64_t n_begin = task * kNc;
    const int64_t n_end = std::min(n, n_begin + kNc);
    float* wpack = tls_w_scratch.Floats(static_cast<size_t>(kNc * kKc));
    for (int64_t nc0 = n_begin; nc0 < n_end; nc0 += kNc) {
      const int64_t nc_end = std::min(n_end, nc0 + kNc);
      for (int64_t k0 = 0; k0 < k; k0 += kKc) {
        const int64_t kc = std::min(kKc, k - k0);
        for (int64_t j0 = nc0; j0 < nc_end; j0 += kNr) {
          PackW<kDType>(w, k, j0, nc_end, k0, kc, wpack + (j0 - nc0) * kKc);
        }
        const bool last_k = k0 + kc == k;
        for (int64_t p = 0; p < num_panels; ++p) {
          const int rows = static_cast<int>(std::min<int64_t>(kMr, m - p * kMr));
          const float* xp = xpack + p * k * kMr + k0 * kMr;
          for (int64_t j0 = nc0; j0 < nc_end; j0 += kNr) {
            const int64_t cols = std::min<int64_t>(kNr, nc_end - j0);
            GemmTileRows(rows, xp, wpack + (j0 - nc0) * kKc, kc, y + p * kMr * y_stride + j0,
                         y_stride, cols, k0 > 0, last_k && bias != nullptr ? bias + j0 : nullptr);
          }
        }
      }
    }
  });
}

template <DType kDType>
void MatMulTyped(const float* x, int64_t m, int64_t k, int64_t x_stride, const void* w, int64_t n,
                 const float* bias, float* y, int64_t y_stride, ThreadPool& pool) {
  const auto* wt = static_cast<const Storage<kDType>*>(w);
  if (m <= kGemvMaxM) {
    Gemv<kDType>(x, m, k, x_stride, wt, n, bias, y, y_stride, pool);
  } else {
    Gemm<kDType>(x, m, k, x_stride, wt, n, bias, y, y_stride, pool);
  }
}

}  // namespace

void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, DType w_dtype, const void* w,
            int64_t n, const float* bias, float* y, int64_t y_stride, ThreadPool& pool) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) y[i * y_stride + j] = bias != nullptr ? bias[j] : 0.0F;
    }
    return;
  }
  switch (w_dtype) {
    case DType::kBF16:
      return MatMulTyped<DType::kBF16>(x, m, k, x_stride, w, n, bias, y, y_stride, pool);
    case DType::kF16:
      return MatMulTyped<DType::kF16>(x, m, k, x_stride, w, n, bias, y, y_stride, pool);
    default:
      return MatMulTyped<DType::kF32>(x, m, k, x_stride, w, n, bias, y, y_stride, pool);
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
