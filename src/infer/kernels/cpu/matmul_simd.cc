// MatMul y = x . w^T for f32 activations and packed bf16/f16/f32 weights (ops.h PackedMatrix),
// compiled once per ISA.
//
// One kernel for every m: a kMr x kNr register tile of multiply-adds with broadcast
// activations (BLIS style), reading the weights straight from their load-time packing (no
// per-call packing of weights). Each output sums over k in blocks of kKc steps: within a block
// one accumulator in k order, then the block's sum is added to the running total. That order
// depends on k and the precision only, never on m or on which rows share the call, so a row's
// result is the same bit for bit alone or in a batch (the serving engine relies on this).
// Two loop orders around the tile, chosen by the number of x panels:
// - Few (decode, small batches): tasks are ranges of weight panels read as one sequential
//   stream with software prefetch far ahead; each panel's k-block serves the x panels while it
//   is in L1. Memory-bound: the aim is the machine's read bandwidth.
// - Many (prefill): tasks of kNc output features; a kNc x kKc weight block stays in L2 while
//   every x panel (in L1) passes over it. Compute-bound: the aim is the multiply-add peak.
// kF32 is exact f32 arithmetic on exactly widened weights (the model's logits must match a
// float64 reference to 1e-4): a packed bf16 step (the even and odd k of each feature, paired)
// widens with one shift / one and per vector.
// kBf16 rounds x to bf16 and, with AVX512_BF16, multiplies the packed bf16 pairs with
// vdpbf16ps (32 products per instruction, twice f32 FMA), no widening. Without AVX512_BF16
// the rounding is emulated and the f32 kernel runs on the rounded values.
#include <algorithm>
#include <bit>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"
#include "infer/kernels/cpu/tuning.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

template <DType kDType>
using Storage = std::conditional_t<kDType == DType::kF32, float, uint16_t>;

// The packed layout (ops.h): panels of kPanel features, steps of two k.
constexpr int64_t kPanel = PackedMatrix::kPanelRows;
constexpr int64_t kStepElems = 2 * kPanel;

// Register tile kMr x kNr (tuning.h); AVX-512's covers a whole panel, AVX2's half of one.
constexpr int kMr = kTuning.float_mr;
constexpr int kNr = 2 * kLanes;
static_assert(kPanel % kNr == 0);
// Output features per task in the many-panel order: kNc x kKc steps of weights (128-256 KiB)
// stay in L2 (1 MiB) while every x panel passes over them.
constexpr int64_t kNc = 256;
// Up to this many x panels (56 rows on AVX-512) take the streaming order.
constexpr int64_t kStreamMaxPanels = 4;
// Software prefetch distance (steps) along the weights: from L2 into L1 in the many-panel
// order (measured faster than the hardware prefetcher alone), from memory in the streaming
// order (StreamPrefetchSteps).
constexpr int64_t kBlockPrefetchSteps = 8;
// Column tiles the streaming order takes together (TilesPerCall(1) of them in one call).
constexpr int64_t kStreamGroup = 4;
// Tile groups per thread in the streaming order, claimed dynamically: a thread slowed by the
// shared host takes fewer.
constexpr int64_t kStreamTasksPerThread = 4;

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
#endif

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

inline void PrefetchLine(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// How the tile multiplies: W is the packed weight element, Unit the packed x element (kUnits
// of them per row and step), kKc the steps per k-block. LoadW brings features
// [col, col + kNr) of one step into registers (Prefetch asks for the same lines of a later
// step); Mac adds one row's step into its two accumulators; PackX lays x rows [row0, row0 + kMr)
// out as [steps][kMr][kUnits], zeros past m and past k.
template <DType kDType>
struct F32Gemm {
  using W = Storage<kDType>;
  using Unit = float;
  static constexpr int64_t kUnits = 2;  // x[2s], x[2s + 1]
  // An x panel block (kKc x kMr x 8 bytes, 14 KiB) stays in L1.
  static constexpr int64_t kKc = 128;
  struct Weights {
    V even0, even1, odd0, odd1;
  };

  static Weights LoadW(const W* step, int64_t col) {
    Weights w;
    if constexpr (kDType == DType::kBF16) {
      // Pairs (k even, k odd) per feature: one shift / one and gives both halves.
      LoadBf16EvenOdd(step + 2 * col, w.even0, w.odd0);
      LoadBf16EvenOdd(step + 2 * (col + kLanes), w.even1, w.odd1);
    } else if constexpr (kDType == DType::kF16) {
      w.even0 = LoadF16(step + col);
      w.even1 = LoadF16(step + col + kLanes);
      w.odd0 = LoadF16(step + kPanel + col);
      w.odd1 = LoadF16(step + kPanel + col + kLanes);
    } else {
      w.even0 = Load(step + col);
      w.even1 = Load(step + col + kLanes);
      w.odd0 = Load(step + kPanel + col);
      w.odd1 = Load(step + kPanel + col + kLanes);
    }
    return w;
  }
  static void Prefetch(const W* step, int64_t col) {
    if constexpr (kDType == DType::kBF16) {
      PrefetchLine(step + 2 * col);
      PrefetchLine(step + 2 * (col + kLanes));
    } else {
      PrefetchLine(step + col);
      PrefetchLine(step + col + kLanes);
      PrefetchLine(step + kPanel + col);
      PrefetchLine(step + kPanel + col + kLanes);
    }
  }
  static void Mac(V& acc0, V& acc1, const Unit* x, const Weights& w) {
    const V even = Set1(x[0]);
    acc0 = Fma(even, w.even0, acc0);
    acc1 = Fma(even, w.even1, acc1);
    const V odd = Set1(x[1]);
    acc0 = Fma(odd, w.odd0, acc0);
    acc1 = Fma(odd, w.odd1, acc1);
  }
  static void PackX(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t row0,
                    Unit* xp) {
    const int64_t rows = std::min<int64_t>(kMr, m - row0);
    const int64_t steps = (k + 1) / 2;
    for (int64_t r = 0; r < kMr; ++r) {
      if (r >= rows) {
        for (int64_t s = 0; s < steps; ++s) {
          xp[(s * kMr + r) * 2] = 0.0F;
          xp[(s * kMr + r) * 2 + 1] = 0.0F;
        }
        continue;
      }
      const float* src = x + (row0 + r) * x_stride;
      for (int64_t s = 0; s < steps; ++s) {
        xp[(s * kMr + r) * 2] = src[2 * s];
        xp[(s * kMr + r) * 2 + 1] = 2 * s + 1 < k ? src[2 * s + 1] : 0.0F;
      }
    }
  }
};

#if defined(__AVX2__) && !defined(__AVX512F__) && defined(__x86_64__)
// The AVX2 6 x 16 tile on packed bf16 weights, the prefill's hot loop, in assembly: AVX2 has 16
// ymm registers, and the tile needs 12 accumulators, two weight vectors, a broadcast and the
// odd-half mask; compiled from the intrinsics, one or two accumulators lived on the stack (their
// chains through a store and a load every step) and the tile fell well short of the FMA peak. Here
// every step widens the even k's weights (shift), multiplies them into all rows, then the odd
// k's (and), the same multiply-adds in the same order per accumulator as F32Gemm::Mac, so the
// same bits. xp: the x panel block ([steps][6][2] f32); w: the tile's first step (at its
// column); kc steps of 64 packed values (128 bytes); prefetch_bytes ahead along w.
inline void Bf16Tile6x16(V (&acc0)[6], V (&acc1)[6], const float* xp, const uint16_t* w, int64_t kc,
                         int64_t prefetch_bytes) {
  static_assert(kLanes == 8 && kPanel == 32 && kMr == 6);
  if (kc <= 0) return;
  asm volatile(
      "mov %[w0], %%rax\n\t"
      "mov %[x0], %%rdx\n\t"
      "mov %[n0], %%rcx\n\t"
      "vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\t"
      "vpslld $16, %%ymm15, %%ymm15\n\t"  // 0xffff0000: the odd k's halves
      ".p2align 5\n"
      "1:\n\t"
      "prefetcht0 (%%rax, %[pf])\n\t"
      "vmovdqu (%%rax), %%ymm12\n\t"
      "vmovdqu 32(%%rax), %%ymm13\n\t"
      "vpslld $16, %%ymm12, %%ymm12\n\t"
      "vpslld $16, %%ymm13, %%ymm13\n\t"
      "vbroadcastss 0(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a0]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b0]\n\t"
      "vbroadcastss 8(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a1]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b1]\n\t"
      "vbroadcastss 16(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a2]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b2]\n\t"
      "vbroadcastss 24(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a3]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b3]\n\t"
      "vbroadcastss 32(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a4]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b4]\n\t"
      "vbroadcastss 40(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a5]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b5]\n\t"
      "vpand (%%rax), %%ymm15, %%ymm12\n\t"
      "vpand 32(%%rax), %%ymm15, %%ymm13\n\t"
      "vbroadcastss 4(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a0]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b0]\n\t"
      "vbroadcastss 12(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a1]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b1]\n\t"
      "vbroadcastss 20(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a2]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b2]\n\t"
      "vbroadcastss 28(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a3]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b3]\n\t"
      "vbroadcastss 36(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a4]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b4]\n\t"
      "vbroadcastss 44(%%rdx), %%ymm14\n\t"
      "vfmadd231ps %%ymm12, %%ymm14, %t[a5]\n\t"
      "vfmadd231ps %%ymm13, %%ymm14, %t[b5]\n\t"
      "add $128, %%rax\n\t"
      "add $48, %%rdx\n\t"
      "dec %%rcx\n\t"
      "jnz 1b\n\t"
      : [a0] "+x"(acc0[0]), [a1] "+x"(acc0[1]), [a2] "+x"(acc0[2]), [a3] "+x"(acc0[3]),
        [a4] "+x"(acc0[4]), [a5] "+x"(acc0[5]), [b0] "+x"(acc1[0]), [b1] "+x"(acc1[1]),
        [b2] "+x"(acc1[2]), [b3] "+x"(acc1[3]), [b4] "+x"(acc1[4]), [b5] "+x"(acc1[5])
      : [w0] "r"(w), [x0] "r"(xp), [n0] "r"(kc), [pf] "r"(prefetch_bytes)
      : "rax", "rcx", "rdx", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
}
#endif

#if defined(__AVX512BF16__)
// A step is a pair (k, k + 1): a Unit holds bf16 x[k] in its low half and x[k + 1] in its
// high half, and the packed weights hold the same pairs of 16 features per vector.
struct Bf16Gemm {
  using W = uint16_t;
  using Unit = uint32_t;
  static constexpr int64_t kUnits = 1;
  static constexpr int64_t kKc = 256;  // x panel block 14 KiB, as for f32
  struct Weights {
    __m512i lo, hi;
  };

  static Weights LoadW(const W* step, int64_t col) {
    return {_mm512_loadu_si512(step + 2 * col), _mm512_loadu_si512(step + 2 * (col + kLanes))};
  }
  static void Prefetch(const W* step, int64_t col) {
    PrefetchLine(step + 2 * col);
    PrefetchLine(step + 2 * (col + kLanes));
  }
  static void Mac(V& acc0, V& acc1, const Unit* x, const Weights& w) {
    const __m512i xb = _mm512_set1_epi32(static_cast<int>(*x));
    acc0 = DotBf16(acc0, xb, w.lo);
    acc1 = DotBf16(acc1, xb, w.hi);
  }
  // Rounded to bf16 32 values of k at a time.
  static void PackX(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t row0,
                    Unit* xp) {
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
};
#endif

// Column tiles per microkernel call for kRows rows (tuning.h): with few rows, several tiles
// (adjacent panels: more independent accumulator chains and weight streams in flight) keep the
// loads going; with many, the register file is full with one.
constexpr int TilesPerCall(int rows) {
  return rows <= kTuning.float_four_tiles_rows ? 4 : rows <= kTuning.float_two_tiles_rows ? 2 : 1;
}

// The streaming order's prefetch distance along each of a call's weight streams (the panels
// its `tiles_per_call` tiles span), for steps of `step_bytes` (tuning.h).
constexpr int64_t StreamPrefetchSteps(int tiles_per_call, int64_t step_bytes) {
  if constexpr (kTuning.float_ahead_steps > 0) {
    return kTuning.float_ahead_steps;
  } else {
    const int64_t streams = std::max<int64_t>(1, tiles_per_call * kNr / kPanel);
    return std::max<int64_t>(1, kTuning.float_ahead_bytes / (streams * step_bytes));
  }
}

// The microkernel: kRows rows of y (x panel block xp) against kTiles column tiles from feature
// j0, over steps [s0, s0 + kc). Every output is one accumulator chain in k order, whatever
// kRows and kTiles are. y holds the sum of the earlier k-blocks when `accumulate`; bias
// (features from j0, or null) is added after the last one.
template <class G, int kRows, int kTiles>
inline void GemmTile(const typename G::Unit* xp, const PackedMatrix& w, int64_t s0, int64_t j0,
                     int64_t kc, int64_t prefetch_steps, float* y, int64_t y_stride,
                     bool accumulate, const float* bias) {
  using W = typename G::W;
  const W* wp[kTiles];  // step s0 of each tile's panel
  int64_t col[kTiles];  // the tile's first feature within its panel
  for (int t = 0; t < kTiles; ++t) {
    const int64_t jt = j0 + t * kNr;
    col[t] = jt % kPanel;
    wp[t] = static_cast<const W*>(w.data()) + w.Index(jt - col[t], 2 * s0);
  }
  V acc0[kTiles][kRows];
  V acc1[kTiles][kRows];
  for (int t = 0; t < kTiles; ++t) {
    for (int r = 0; r < kRows; ++r) {
      acc0[t][r] = Zero();
      acc1[t][r] = Zero();
    }
  }
#if defined(__AVX2__) && !defined(__AVX512F__) && defined(__x86_64__)
  if constexpr (std::is_same_v<G, F32Gemm<DType::kBF16>> && kRows == kMr && kTiles == 1) {
    Bf16Tile6x16(acc0[0], acc1[0], xp, wp[0] + 2 * col[0], kc,
                 prefetch_steps * kStepElems * static_cast<int64_t>(sizeof(W)));
    kc = 0;  // done
  }
#endif
  for (int64_t kk = 0; kk < kc; ++kk) {
#pragma GCC unroll 4
    for (int t = 0; t < kTiles; ++t) {
      G::Prefetch(wp[t] + prefetch_steps * kStepElems, col[t]);
      const auto w = G::LoadW(wp[t], col[t]);
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) G::Mac(acc0[t][r], acc1[t][r], xp + r * G::kUnits, w);
      wp[t] += kStepElems;
    }
    xp += kMr * G::kUnits;
  }
  for (int t = 0; t < kTiles; ++t) {
    StoreTile<kRows>(acc0[t], acc1[t], y + t * kNr, y_stride,
                     std::min<int64_t>(kNr, w.rows() - (j0 + t * kNr)), accumulate,
                     bias != nullptr ? bias + t * kNr : nullptr);
  }
}

// `rows` rows against `tiles` column tiles from j0, TilesPerCall(rows) tiles per call.
template <class G, int kRows = kMr>
inline void GemmTiles(int rows, int64_t tiles, const typename G::Unit* xp, const PackedMatrix& w,
                      int64_t s0, int64_t j0, int64_t kc, int64_t prefetch_steps, float* y,
                      int64_t y_stride, bool accumulate, const float* bias) {
  if constexpr (kRows > 0) {
    if (rows != kRows) {
      GemmTiles<G, kRows - 1>(rows, tiles, xp, w, s0, j0, kc, prefetch_steps, y, y_stride,
                              accumulate, bias);
      return;
    }
    constexpr int kGroup = TilesPerCall(kRows);
    int64_t t = 0;
    auto at = [&](int64_t tile) {
      return std::pair{y + tile * kNr, bias != nullptr ? bias + tile * kNr : nullptr};
    };
    if constexpr (kGroup > 1) {
      for (; t + kGroup <= tiles; t += kGroup) {
        const auto [yt, bt] = at(t);
        GemmTile<G, kRows, kGroup>(xp, w, s0, j0 + t * kNr, kc, prefetch_steps, yt, y_stride,
                                   accumulate, bt);
      }
    }
    for (; t < tiles; ++t) {
      const auto [yt, bt] = at(t);
      GemmTile<G, kRows, 1>(xp, w, s0, j0 + t * kNr, kc, prefetch_steps, yt, y_stride, accumulate,
                            bt);
    }
  }
}

thread_local Scratch tls_x_scratch;

// x's rows against every output's weights (one dtype, one k), x packed once, one region.
template <class G>
void Gemm(const float* x, int64_t m, int64_t k, int64_t x_stride, std::span<const Product> outputs,
          ThreadPool& pool) {
  using Unit = typename G::Unit;
  const int64_t steps = outputs.front().w->steps();
  const int64_t num_panels = (m + kMr - 1) / kMr;
  const int64_t panel_units = steps * kMr * G::kUnits;
  Unit* xpack = tls_x_scratch.Array<Unit>(static_cast<size_t>(num_panels * panel_units));
  if (num_panels == 1) {
    G::PackX(x, m, k, x_stride, 0, xpack);
  } else {
    pool.RunTasks(static_cast<int>(num_panels),
                  [&](int p) { G::PackX(x, m, k, x_stride, p * kMr, xpack + p * panel_units); });
  }
  // Panel p's rows against `tiles` column tiles of output o from feature j0 over steps
  // [s0, s0 + kc): the same arithmetic per output in both loop orders.
  auto run = [&](const Product& o, int64_t p, int64_t j0, int64_t tiles, int64_t s0, int64_t kc,
                 int64_t prefetch_steps) {
    const int rows = static_cast<int>(std::min<int64_t>(kMr, m - p * kMr));
    GemmTiles<G>(rows, tiles, xpack + p * panel_units + s0 * kMr * G::kUnits, *o.w, s0, j0, kc,
                 prefetch_steps, o.y + p * kMr * o.y_stride + j0, o.y_stride, s0 > 0,
                 s0 + kc == steps && o.bias != nullptr ? o.bias + j0 : nullptr);
  };
  if (num_panels <= kStreamMaxPanels) {
    // Contiguous ranges of kStreamGroup tiles, about kStreamTasksPerThread per thread over all
    // outputs. With one x panel, the tiles of one microkernel call run all their k-blocks before
    // the next call's, so the weights are read as one sequential stream per panel in the call
    // (whole panels at few rows), which StreamPrefetchSteps keeps ahead of; calls alternating
    // every k-block would restart each stream every 16 KiB, measured slower on AVX2 bf16 at 2 and
    // 4 rows. With more, each group runs all its k-blocks, every x panel per block.
    int64_t groups = 0;
    for (const Product& o : outputs) {
      groups += ((o.w->rows() + kNr - 1) / kNr + kStreamGroup - 1) / kStreamGroup;
    }
    const int64_t max_tasks = kStreamTasksPerThread * pool.num_threads();
    const int64_t step = (groups + max_tasks - 1) / max_tasks * kStreamGroup * kNr;
    const int64_t sub = num_panels == 1 ? TilesPerCall(static_cast<int>(m)) : kStreamGroup;
    const int64_t stream_prefetch =
        StreamPrefetchSteps(TilesPerCall(static_cast<int>(std::min<int64_t>(m, kMr))),
                            kStepElems * static_cast<int64_t>(sizeof(typename G::W)));
    pool.RunTasks(static_cast<int>(ProductTasks(outputs, step)), [&](int task) {
      const auto [o, j0] = ProductTask(outputs, task, step);
      const int64_t num_tiles = (o->w->rows() + kNr - 1) / kNr;
      const int64_t t_end = std::min(num_tiles, (j0 + step) / kNr);
      for (int64_t t = j0 / kNr; t < t_end; t += sub) {
        const int64_t tiles = std::min(sub, t_end - t);
        for (int64_t s0 = 0; s0 < steps; s0 += G::kKc) {
          const int64_t kc = std::min(G::kKc, steps - s0);
          for (int64_t p = 0; p < num_panels; ++p) {
            run(*o, p, t * kNr, tiles, s0, kc, p == 0 ? stream_prefetch : kBlockPrefetchSteps);
          }
        }
      }
    });
    return;
  }
  // One task per kNc output features, claimed dynamically (a busy core on the shared host
  // then takes fewer).
  pool.RunTasks(static_cast<int>(ProductTasks(outputs, kNc)), [&](int task) {
    const auto [o, j0] = ProductTask(outputs, task, kNc);
    const int64_t tiles = (std::min(o->w->rows(), j0 + kNc) - j0 + kNr - 1) / kNr;
    for (int64_t s0 = 0; s0 < steps; s0 += G::kKc) {
      const int64_t kc = std::min(G::kKc, steps - s0);
      for (int64_t p = 0; p < num_panels; ++p) run(*o, p, j0, tiles, s0, kc, kBlockPrefetchSteps);
    }
  });
}

#if !defined(__AVX512BF16__)
thread_local Scratch tls_rounded_scratch;
#endif

}  // namespace

void MatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,
             std::span<const Product> outputs, ThreadPool& pool, bool bf16_activations) {
  if (m == 0 || outputs.empty()) return;
  if (k == 0) {
    FillWithBias(m, outputs);
    return;
  }
  if (bf16_activations) {
#if defined(__AVX512BF16__)
    return Gemm<Bf16Gemm>(x, m, k, x_stride, outputs, pool);
#else
    // No vdpbf16ps: the same rounding, then exact f32 products of the rounded values.
    float* rounded = tls_rounded_scratch.Floats(static_cast<size_t>(m * k));
    RoundActivationsToBf16(x, m, k, x_stride, rounded);
    x = rounded;
    x_stride = k;
#endif
  }
  switch (outputs.front().w->dtype()) {
    case DType::kBF16:
      return Gemm<F32Gemm<DType::kBF16>>(x, m, k, x_stride, outputs, pool);
    case DType::kF16:
      return Gemm<F32Gemm<DType::kF16>>(x, m, k, x_stride, outputs, pool);
    default:
      return Gemm<F32Gemm<DType::kF32>>(x, m, k, x_stride, outputs, pool);
  }
}

void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const PackedMatrix& w,
            const float* bias, float* y, int64_t y_stride, ThreadPool& pool,
            bool bf16_activations) {
  if (w.rows() == 0) return;
  const Product product{&w, bias, y, y_stride};
  MatMuls(x, m, k, x_stride, std::span<const Product>(&product, 1), pool, bf16_activations);
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
