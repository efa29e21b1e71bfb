// MatMulPrecision::kBf16 on AMX-BF16 tiles: y = x . w^T for bf16 weights and x rounded to bf16,
// in TDPBF16PS's order for every m. Compiled as namespace avx512amx (the instructions) and
// avx512amx_emulated (amx_tiles.h's emulation, for the tests of CPUs without AMX).
//
// The order (Intel's definition of TDPBF16PS, checked bit for bit against the real tiles): k is
// cut into blocks of 32 (16 pairs); per output and block, the products of the even k and those
// of the odd k are summed apart from +0 in k order, each step one f32 fused multiply-add with
// denormals treated as zero and flushed (DAZ, FTZ); the block adds (even + odd) to the running
// sum, which starts at +0; the bias, when given, is added last. Zeros past k change no sum.
// - Many rows (kTileMinRows on): 32 x 32 outputs in four tiles of 16 x 16 f32 (two A tiles of
//   16 rows x 32 bf16 of x, two B tiles of 16 pairs x 16 features of w), the weights read in
//   their load-time packing (ops.h: a panel's step is one 64-byte B tile row per 16 features).
// - Fewer rows: vector code on the same packing with the same order (the even and odd halves of
//   each pair widened and multiplied into two accumulators per output, folded every block,
//   under FlushDenormalsScope), so that a row's bits never depend on how many rows run with it.
#include <algorithm>
#include <bit>
#include <cstring>
#include <span>

#include "infer/kernels/cpu/amx_tiles.h"
#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

static_assert(kLanes == 16, "the tile path is AVX-512 code");

constexpr int64_t kPanel = PackedMatrix::kPanelRows;  // features per panel: two B tiles
constexpr int64_t kBlockSteps = 16;                   // pairs of k per TDPBF16PS
constexpr int64_t kTileRows = 16;
// From this many rows the tiles run (fewer: the vector code).
constexpr int64_t kTileMinRows = 16;
// Steps of k per pass of the tile loop: an A block of 32 rows (32 KiB) stays in L1 while the
// task's panels pass under it.
constexpr int64_t kTileKcSteps = 256;
// Weight bytes a tile task covers (its panels x all of k), to stay in L2 while every row block
// passes over them.
constexpr int64_t kTileTaskBytes = int64_t{1} << 20;
// Steps of k per pass of the vector code over a panel (32 KiB: in L1 for each group of rows).
constexpr int64_t kVectorKcSteps = 256;
constexpr int kVectorRows = 4;  // rows per group in the vector code (6 zmm each)
constexpr int64_t kPrefetchSteps = 16;

inline void PrefetchLine(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// Rows [row0, row1) of x rounded to bf16 (nearest even) as pairs, into xb (row stride
// `pairs`), zeros past k.
void RoundRows(const float* x, int64_t k, int64_t x_stride, int64_t row0, int64_t row1,
               int64_t pairs, uint32_t* xb) {
  for (int64_t i = row0; i < row1; ++i) {
    const float* row = x + i * x_stride;
    auto* dst = reinterpret_cast<uint16_t*>(xb + i * pairs);
    for (int64_t c = 0; c < 2 * pairs; c += 2 * kLanes) {
      const int64_t lo_n = std::clamp<int64_t>(k - c, 0, kLanes);
      const int64_t hi_n = std::clamp<int64_t>(k - c - kLanes, 0, kLanes);
      const V lo = lo_n > 0 ? LoadN(row + c, lo_n) : Zero();
      const V hi = hi_n > 0 ? LoadN(row + c + kLanes, hi_n) : Zero();
      const auto packed = std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      if (c + 2 * kLanes <= 2 * pairs) {
        _mm512_storeu_si512(dst + c, packed);
      } else {
        _mm512_mask_storeu_epi16(dst + c, (uint32_t{1} << (2 * pairs - c)) - 1, packed);
      }
    }
  }
}

// ---- The vector code (fewer than kTileMinRows rows) ----

// kRows rows of xb (from `xr`, row stride `pairs`) against one panel (`wp`: its step s0) over
// steps [s0, s1) (s0 a block's first): acc (kRows x 32 features, in y) += the blocks' sums.
template <int kRows>
void VectorRows(const uint32_t* xr, int64_t pairs, const uint32_t* wp, int64_t s0, int64_t s1,
                float* y, int64_t y_stride, int64_t cols, bool first) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000U));
  const int64_t cols0 = std::min<int64_t>(cols, kLanes);
  const int64_t cols1 = cols - cols0;
  V acc[kRows][2];
  for (int r = 0; r < kRows; ++r) {
    acc[r][0] = first ? Zero() : LoadN(y + r * y_stride, cols0);
    acc[r][1] = first || cols1 <= 0 ? Zero() : LoadN(y + r * y_stride + kLanes, cols1);
  }
  for (int64_t b = s0; b < s1; b += kBlockSteps) {
    V even[kRows][2];
    V odd[kRows][2];
    for (int r = 0; r < kRows; ++r) {
      even[r][0] = even[r][1] = odd[r][0] = odd[r][1] = Zero();
    }
    const int64_t b1 = std::min(s1, b + kBlockSteps);
    for (int64_t s = b; s < b1; ++s) {
      const uint32_t* step = wp + (s - s0) * kPanel;
      PrefetchLine(step + kPrefetchSteps * kPanel);
      PrefetchLine(step + kPrefetchSteps * kPanel + kLanes);
      const __m512i w0 = _mm512_loadu_si512(step);
      const __m512i w1 = _mm512_loadu_si512(step + kLanes);
      const V we0 = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16));
      const V we1 = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16));
      const V wo0 = _mm512_castsi512_ps(_mm512_and_si512(w0, high_half));
      const V wo1 = _mm512_castsi512_ps(_mm512_and_si512(w1, high_half));
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        const uint32_t pair = xr[r * pairs + s];
        const V xe = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(pair << 16)));
        const V xo = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(pair & 0xffff0000U)));
        even[r][0] = Fma(xe, we0, even[r][0]);
        even[r][1] = Fma(xe, we1, even[r][1]);
        odd[r][0] = Fma(xo, wo0, odd[r][0]);
        odd[r][1] = Fma(xo, wo1, odd[r][1]);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      acc[r][0] = Add(acc[r][0], Add(even[r][0], odd[r][0]));
      acc[r][1] = Add(acc[r][1], Add(even[r][1], odd[r][1]));
    }
  }
  for (int r = 0; r < kRows; ++r) {
    StoreN(y + r * y_stride, acc[r][0], cols0);
    if (cols1 > 0) StoreN(y + r * y_stride + kLanes, acc[r][1], cols1);
  }
}

template <int kRows = kVectorRows>
void VectorRowGroup(int rows, const uint32_t* xr, int64_t pairs, const uint32_t* wp, int64_t s0,
                    int64_t s1, float* y, int64_t y_stride, int64_t cols, bool first) {
  if constexpr (kRows > 1) {
    if (rows < kRows) {
      VectorRowGroup<kRows - 1>(rows, xr, pairs, wp, s0, s1, y, y_stride, cols, first);
      return;
    }
  }
  VectorRows<kRows>(xr, pairs, wp, s0, s1, y, y_stride, cols, first);
}

// Panels [p0, p1) of output o for all m rows, k-pass by k-pass, the rows in groups. Not inlined:
// the caller's FlushDenormalsScope must be in force before any of its arithmetic.
[[gnu::noinline]] void VectorPanels(const uint32_t* xb, int64_t m, int64_t pairs, const Product& o,
                                    int64_t p0, int64_t p1) {
  const PackedMatrix& w = *o.w;
  const int64_t steps = w.steps();
  const auto* data = static_cast<const uint32_t*>(w.data());
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t j0 = p * kPanel;
    const int64_t cols = std::min(kPanel, w.rows() - j0);
    const uint32_t* panel = data + p * steps * kPanel;
    for (int64_t s0 = 0; s0 < steps; s0 += kVectorKcSteps) {
      const int64_t s1 = std::min(steps, s0 + kVectorKcSteps);
      for (int64_t r0 = 0; r0 < m; r0 += kVectorRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kVectorRows, m - r0));
        VectorRowGroup(rows, xb + r0 * pairs, pairs, panel + s0 * kPanel, s0, s1,
                       o.y + r0 * o.y_stride + j0, o.y_stride, cols, s0 == 0);
      }
    }
    if (o.bias != nullptr) {
      const int64_t cols0 = std::min<int64_t>(cols, kLanes);
      for (int64_t r = 0; r < m; ++r) {
        float* yr = o.y + r * o.y_stride + j0;
        StoreN(yr, Add(LoadN(yr, cols0), LoadN(o.bias + j0, cols0)), cols0);
        if (cols > kLanes) {
          StoreN(yr + kLanes, Add(LoadN(yr + kLanes, cols - kLanes), LoadN(o.bias + j0 + kLanes,
                                                                            cols - kLanes)),
                 cols - kLanes);
        }
      }
    }
  }
}

// ---- The tile code (kTileMinRows rows on) ----

// Tiles 0-3: C (16 rows x 16 f32) for rows +0/+16 x features +0/+16; 4, 5: A (16 rows x 16
// pairs) for rows +0, +16; 6, 7: B (16 pairs x 16 features) for features +0, +16.
const TileConfig& TileBf16Config() {
  static const TileConfig kConfig = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.rows[t] = kTileRows;
      c.colsb[t] = 64;
    }
    return c;
  }();
  return kConfig;
}

thread_local Scratch tls_c_scratch;
thread_local Scratch tls_tail_scratch;

// Panels [p0, p1) of output o for all rows (xb holds them padded with zero rows to a multiple
// of 32, row stride `pairs`, a multiple of kBlockSteps): row block by row block, each over all
// of k in passes of kTileKcSteps, the sums in `c` ([32][task features]) between passes. Not
// inlined, as VectorPanels: the bias is added under the caller's FlushDenormalsScope.
[[gnu::noinline]] void TilePanels(const uint32_t* xb, int64_t m, int64_t pairs, const Product& o, int64_t p0,
                int64_t p1) {
  const PackedMatrix& w = *o.w;
  const int64_t steps = w.steps();
  const auto* data = static_cast<const uint32_t*>(w.data());
  const int64_t width = (p1 - p0) * kPanel;
  float* c = tls_c_scratch.Floats(static_cast<size_t>(2 * kTileRows * width));
  const int64_t c_stride = width * 4;  // bytes
  // The last block of a panel whose steps end inside it, padded with zero steps.
  const int64_t tail_steps = steps % kBlockSteps;
  uint32_t* tail = tls_tail_scratch.Array<uint32_t>(static_cast<size_t>(kBlockSteps * kPanel));
  for (int64_t r0 = 0; r0 < m; r0 += 2 * kTileRows) {
    const bool two = r0 + kTileRows < m;  // a second A tile
    const uint32_t* a = xb + r0 * pairs;
    for (int64_t s0 = 0; s0 < steps; s0 += kTileKcSteps) {
      const int64_t s1 = std::min(steps, s0 + kTileKcSteps);
      for (int64_t p = p0; p < p1; ++p) {
        const uint32_t* panel = data + p * steps * kPanel;
        float* cp = c + (p - p0) * kPanel;
        if (s0 == 0) {
          INFER_TILE_ZERO(0);
          INFER_TILE_ZERO(1);
          INFER_TILE_ZERO(2);
          INFER_TILE_ZERO(3);
        } else {
          INFER_TILE_LOAD(0, cp, c_stride);
          INFER_TILE_LOAD(1, cp + kLanes, c_stride);
          INFER_TILE_LOAD(2, cp + kTileRows * width, c_stride);
          INFER_TILE_LOAD(3, cp + kTileRows * width + kLanes, c_stride);
        }
        for (int64_t s = s0; s < s1; s += kBlockSteps) {
          const uint32_t* b = panel + s * kPanel;
          if (s + kBlockSteps > steps) {
            std::memset(tail, 0, kBlockSteps * kPanel * sizeof(uint32_t));
            std::memcpy(tail, b, static_cast<size_t>(tail_steps * kPanel) * sizeof(uint32_t));
            b = tail;
          }
          INFER_TILE_LOAD(4, a + s, pairs * 4);
          INFER_TILE_LOAD(6, b, kPanel * 4);
          INFER_TILE_LOAD(7, b + kLanes, kPanel * 4);
          INFER_TILE_DPBF16PS(0, 4, 6);
          INFER_TILE_DPBF16PS(1, 4, 7);
          if (two) {
            INFER_TILE_LOAD(5, a + kTileRows * pairs + s, pairs * 4);
            INFER_TILE_DPBF16PS(2, 5, 6);
            INFER_TILE_DPBF16PS(3, 5, 7);
          }
        }
        INFER_TILE_STORE(0, cp, c_stride);
        INFER_TILE_STORE(1, cp + kLanes, c_stride);
        if (two) {
          INFER_TILE_STORE(2, cp + kTileRows * width, c_stride);
          INFER_TILE_STORE(3, cp + kTileRows * width + kLanes, c_stride);
        }
      }
    }
    // The block's sums into y (valid rows and features), the bias added last.
    const int64_t rows = std::min(2 * kTileRows, m - r0);
    const int64_t j0 = p0 * kPanel;
    const int64_t cols = std::min(width, w.rows() - j0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* cr = c + r * width;
      float* yr = o.y + (r0 + r) * o.y_stride + j0;
      for (int64_t j = 0; j < cols; j += kLanes) {
        const int64_t n = std::min<int64_t>(kLanes, cols - j);
        V v = LoadN(cr + j, n);
        if (o.bias != nullptr) v = Add(v, LoadN(o.bias + j0 + j, n));
        StoreN(yr + j, v, n);
      }
    }
  }
}

thread_local Scratch tls_x_scratch;

}  // namespace

void MatMulsBf16Tiles(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Product> outputs, ThreadPool& pool) {
  if (m == 0 || outputs.empty()) return;
  if (k == 0) {
    for (const Product& o : outputs) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < o.w->rows(); ++j) {
          o.y[i * o.y_stride + j] = o.bias != nullptr ? o.bias[j] : 0.0F;
        }
      }
    }
    return;
  }
  const int64_t steps = outputs.front().w->steps();
  const int64_t pairs = (steps + kBlockSteps - 1) / kBlockSteps * kBlockSteps;
  const bool tiles = m >= kTileMinRows;
  const int64_t padded_m = tiles ? (m + 2 * kTileRows - 1) / (2 * kTileRows) * (2 * kTileRows) : m;
  auto* xb = tls_x_scratch.Array<uint32_t>(static_cast<size_t>(padded_m * pairs));
  constexpr int64_t kRoundRows = 32;
  pool.RunTasks(static_cast<int>((m + kRoundRows - 1) / kRoundRows), [&](int task) {
    const int64_t row0 = task * kRoundRows;
    RoundRows(x, k, x_stride, row0, std::min(m, row0 + kRoundRows), pairs, xb);
  });
  if (padded_m > m) {
    std::memset(xb + m * pairs, 0, static_cast<size_t>((padded_m - m) * pairs) * sizeof(uint32_t));
  }
  if (!tiles) {
    // Ranges of panels, about four per thread over all outputs.
    int64_t panels = 0;
    for (const Product& o : outputs) panels += (o.w->rows() + kPanel - 1) / kPanel;
    const int64_t per_task =
        std::max<int64_t>(1, (panels + 4 * pool.num_threads() - 1) / (4 * pool.num_threads()));
    pool.RunTasks(static_cast<int>(ProductTasks(outputs, per_task * kPanel)), [&](int task) {
      const auto [o, j0] = ProductTask(outputs, task, per_task * kPanel);
      const int64_t p0 = j0 / kPanel;
      const int64_t p1 = std::min((o->w->rows() + kPanel - 1) / kPanel, p0 + per_task);
      const FlushDenormalsScope flush;
      VectorPanels(xb, m, pairs, *o, p0, p1);
    });
    return;
  }
  const int64_t task_panels =
      std::clamp<int64_t>(kTileTaskBytes / (steps * kPanel * 4), 1, 8);
  pool.RunTasks(static_cast<int>(ProductTasks(outputs, task_panels * kPanel)), [&](int task) {
    const auto [o, j0] = ProductTask(outputs, task, task_panels * kPanel);
    const int64_t p0 = j0 / kPanel;
    const int64_t p1 = std::min((o->w->rows() + kPanel - 1) / kPanel, p0 + task_panels);
    INFER_TILE_LOAD_CONFIG(&TileBf16Config());
    const FlushDenormalsScope flush;
    TilePanels(xb, m, pairs, *o, p0, p1);
    INFER_TILE_RELEASE();
  });
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
