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
#include "infer/kernels/cpu/tuning.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

static_assert(kLanes == 16, "the tile path is AVX-512 code");

constexpr int64_t kPanel = PackedMatrix::kPanelRows;  // features per panel: two B tiles
constexpr int64_t kBlockSteps = 16;                   // pairs of k per TDPBF16PS
constexpr int64_t kTileRows = 16;
// From this many rows the tiles run (fewer: the vector code; tuning.h).
constexpr int64_t kTileMinRows = kTuning.bf16_tile_min_rows;
static_assert(kTileMinRows > 0);
// Steps of k per pass of the tile loop: an A block of 32 rows (16 KiB) stays in L1 while the
// task's panels pass under it (128 measured ahead of 512 and of all of k at m = 128-512).
constexpr int64_t kTileKcSteps = 128;
// Panels per tile task (256 features): an A block serves them all while in L1; their slices of
// a k pass (128 KiB) stay in L2 while every row block passes under them.
constexpr int64_t kTileTaskPanels = 8;
// Rows per chunk of a tile task: its sums (512 KiB) stay in L2 between k passes.
constexpr int64_t kTileChunkRows = 512;
// Steps of k per pass of the vector code over a panel (32 KiB: in L1 for each group of rows).
constexpr int64_t kVectorKcSteps = 256;
constexpr int kVectorRows = 4;  // rows per group in the vector code (6 zmm each)
constexpr int64_t kPrefetchSteps = 16;

inline void PrefetchLine(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// Rows [row0, row1) of x rounded to bf16 (nearest even) as `pairs` pairs, into xb (row stride
// xb_stride pairs), zeros past k.
void RoundRows(const float* x, int64_t k, int64_t x_stride, int64_t row0, int64_t row1,
               int64_t pairs, int64_t xb_stride, uint32_t* xb) {
  for (int64_t i = row0; i < row1; ++i) {
    const float* row = x + i * x_stride;
    auto* dst = reinterpret_cast<uint16_t*>(xb + i * xb_stride);
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

// kRows rows of x as widened bf16 (from `xr`, row stride xr_stride: k even, k odd per step)
// against kPanels adjacent panels (`wp`: the
// first one's step s0; `panel_stride` elements apart) over steps [s0, s1) (s0 a block's first):
// acc (kRows x 32 features per panel, in y from `y`; `cols` valid in all) += the blocks' sums.
// Several panels per call keep several weight streams in flight at few rows.
template <int kRows, int kPanels>
void VectorRows(const float* xr, int64_t xr_stride, const uint32_t* wp, int64_t panel_stride,
                int64_t s0, int64_t s1, float* y, int64_t y_stride, int64_t cols, bool first) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000U));
  V acc[kPanels][kRows][2];
  for (int p = 0; p < kPanels; ++p) {
    const int64_t c = std::clamp<int64_t>(cols - p * kPanel, 0, kPanel);
    const int64_t c0 = std::min<int64_t>(c, kLanes);
    for (int r = 0; r < kRows; ++r) {
      float* yr = y + r * y_stride + p * kPanel;
      acc[p][r][0] = first || c0 <= 0 ? Zero() : LoadN(yr, c0);
      acc[p][r][1] = first || c <= kLanes ? Zero() : LoadN(yr + kLanes, c - kLanes);
    }
  }
  for (int64_t b = s0; b < s1; b += kBlockSteps) {
    V even[kPanels][kRows][2];
    V odd[kPanels][kRows][2];
    for (int p = 0; p < kPanels; ++p) {
      for (int r = 0; r < kRows; ++r) {
        even[p][r][0] = even[p][r][1] = odd[p][r][0] = odd[p][r][1] = Zero();
      }
    }
    const int64_t b1 = std::min(s1, b + kBlockSteps);
    for (int64_t s = b; s < b1; ++s) {
      V xe[kRows];
      V xo[kRows];
      for (int r = 0; r < kRows; ++r) {
        xe[r] = Set1(xr[r * xr_stride + 2 * s]);
        xo[r] = Set1(xr[r * xr_stride + 2 * s + 1]);
      }
#pragma GCC unroll 4
      for (int p = 0; p < kPanels; ++p) {
        const uint32_t* step = wp + p * panel_stride + (s - s0) * kPanel;
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
          even[p][r][0] = Fma(xe[r], we0, even[p][r][0]);
          even[p][r][1] = Fma(xe[r], we1, even[p][r][1]);
          odd[p][r][0] = Fma(xo[r], wo0, odd[p][r][0]);
          odd[p][r][1] = Fma(xo[r], wo1, odd[p][r][1]);
        }
      }
    }
    for (int p = 0; p < kPanels; ++p) {
      for (int r = 0; r < kRows; ++r) {
        acc[p][r][0] = Add(acc[p][r][0], Add(even[p][r][0], odd[p][r][0]));
        acc[p][r][1] = Add(acc[p][r][1], Add(even[p][r][1], odd[p][r][1]));
      }
    }
  }
  for (int p = 0; p < kPanels; ++p) {
    const int64_t c = std::clamp<int64_t>(cols - p * kPanel, 0, kPanel);
    const int64_t c0 = std::min<int64_t>(c, kLanes);
    for (int r = 0; r < kRows; ++r) {
      float* yr = y + r * y_stride + p * kPanel;
      if (c0 > 0) StoreN(yr, acc[p][r][0], c0);
      if (c > kLanes) StoreN(yr + kLanes, acc[p][r][1], c - kLanes);
    }
  }
}

// Panels per call for `rows` rows: four at one row, two at two, one from three.
constexpr int VectorPanelsPerCall(int rows) { return rows <= 1 ? 4 : rows == 2 ? 2 : 1; }

// `rows` (1 to kVectorRows) rows against kPanels panels from wp (kPanels <= 1 for more than two
// rows).
template <int kPanels, int kRows = kVectorRows>
void VectorRowGroup(int rows, const float* xr, int64_t xr_stride, const uint32_t* wp,
                    int64_t panel_stride, int64_t s0, int64_t s1, float* y, int64_t y_stride,
                    int64_t cols, bool first) {
  if constexpr (kRows > 1) {
    if (rows < kRows) {
      VectorRowGroup<kPanels, kRows - 1>(rows, xr, xr_stride, wp, panel_stride, s0, s1, y, y_stride,
                                         cols, first);
      return;
    }
  }
  if constexpr (kPanels == 1 || kRows <= 2) {
    VectorRows<kRows, kPanels>(xr, xr_stride, wp, panel_stride, s0, s1, y, y_stride, cols, first);
  }
}

// Panels [p0, p1) of output o for all m rows: VectorPanelsPerCall(m) panels at a time, each
// group over all of k (m <= kVectorRows: one stream per panel from start to end) or in passes of
// kVectorKcSteps that every group of kVectorRows rows runs while the pass's weights are in L1.
// Not inlined: the caller's FlushDenormalsScope must be in force before any of its arithmetic.
[[gnu::noinline]] void VectorPanels(const float* xf, int64_t m, int64_t xf_stride, const Product& o,
                                    int64_t p0, int64_t p1) {
  const PackedMatrix& w = *o.w;
  const int64_t steps = w.steps();
  const auto* data = static_cast<const uint32_t*>(w.data());
  const int64_t panel_stride = steps * kPanel;
  const int64_t group = VectorPanelsPerCall(static_cast<int>(std::min<int64_t>(m, 3)));
  const int64_t pass = m <= kVectorRows ? steps : kVectorKcSteps;
  for (int64_t p = p0; p < p1; p += group) {
    const int64_t panels = std::min(group, p1 - p);
    const int64_t j0 = p * kPanel;
    const int64_t cols = std::min(panels * kPanel, w.rows() - j0);
    for (int64_t s0 = 0; s0 < steps; s0 += pass) {
      const int64_t s1 = std::min(steps, s0 + pass);
      for (int64_t r0 = 0; r0 < m; r0 += kVectorRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kVectorRows, m - r0));
        const uint32_t* wp = data + p * panel_stride + s0 * kPanel;
        float* y = o.y + r0 * o.y_stride + j0;
        const bool first = s0 == 0;
        if (panels == 4) {
          VectorRowGroup<4>(rows, xf + r0 * xf_stride, xf_stride, wp, panel_stride, s0, s1, y,
                            o.y_stride, cols, first);
        } else if (panels == 2) {
          VectorRowGroup<2>(rows, xf + r0 * xf_stride, xf_stride, wp, panel_stride, s0, s1, y,
                            o.y_stride, cols, first);
        } else {
          for (int64_t q = 0; q < panels; ++q) {
            VectorRowGroup<1>(rows, xf + r0 * xf_stride, xf_stride, wp + q * panel_stride,
                              panel_stride, s0, s1, y + q * kPanel, o.y_stride, cols - q * kPanel,
                              first);
          }
        }
      }
    }
    if (o.bias != nullptr) {
      for (int64_t r = 0; r < m; ++r) {
        float* yr = o.y + r * o.y_stride + j0;
        for (int64_t j = 0; j < cols; j += kLanes) {
          const int64_t n = std::min<int64_t>(kLanes, cols - j);
          StoreN(yr + j, Add(LoadN(yr + j, n), LoadN(o.bias + j0 + j, n)), n);
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
// of 32, row stride xb_stride pairs), in chunks of kTileChunkRows rows: per chunk, k in passes
// of kTileKcSteps; per pass, row block (two A tiles, in L1) by row block, each under every
// panel's slice of the pass (in L2), the sums in `c` ([chunk rows][task features]) between
// passes. Not inlined, as VectorPanels: the bias is added under the caller's
// FlushDenormalsScope.
[[gnu::noinline]] void TilePanels(const uint32_t* xb, int64_t m, int64_t xb_stride,
                                  const Product& o, int64_t p0, int64_t p1) {
  const PackedMatrix& w = *o.w;
  const int64_t steps = w.steps();
  const auto* data = static_cast<const uint32_t*>(w.data());
  const int64_t width = (p1 - p0) * kPanel;
  const int64_t chunk_rows =
      std::min(kTileChunkRows, (m + 2 * kTileRows - 1) / (2 * kTileRows) * (2 * kTileRows));
  float* c = tls_c_scratch.Floats(static_cast<size_t>(chunk_rows * width));
  const int64_t c_stride = width * 4;  // bytes
  const int64_t a_stride = xb_stride * 4;
  // The last block of a panel whose steps end inside it, padded with zero steps.
  const int64_t tail_steps = steps % kBlockSteps;
  uint32_t* tail = tls_tail_scratch.Array<uint32_t>(static_cast<size_t>(kBlockSteps * kPanel));
  for (int64_t chunk0 = 0; chunk0 < m; chunk0 += kTileChunkRows) {
    const int64_t chunk1 = std::min(m, chunk0 + kTileChunkRows);
    for (int64_t s0 = 0; s0 < steps; s0 += kTileKcSteps) {
      const int64_t s1 = std::min(steps, s0 + kTileKcSteps);
      for (int64_t r0 = chunk0; r0 < chunk1; r0 += 2 * kTileRows) {
        const bool two = r0 + kTileRows < m;  // a second A tile
        const uint32_t* a = xb + r0 * xb_stride;
        for (int64_t p = p0; p < p1; ++p) {
          const uint32_t* panel = data + p * steps * kPanel;
          float* cp = c + (r0 - chunk0) * width + (p - p0) * kPanel;
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
            INFER_TILE_LOAD(4, a + s, a_stride);
            INFER_TILE_LOAD(6, b, kPanel * 4);
            INFER_TILE_LOAD(7, b + kLanes, kPanel * 4);
            INFER_TILE_DPBF16PS(0, 4, 6);
            INFER_TILE_DPBF16PS(1, 4, 7);
            if (two) {
              INFER_TILE_LOAD(5, a + kTileRows * xb_stride + s, a_stride);
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
    }
    // The chunk's sums into y (valid rows and features), the bias added last.
    const int64_t j0 = p0 * kPanel;
    const int64_t cols = std::min(width, w.rows() - j0);
    for (int64_t r = chunk0; r < chunk1; ++r) {
      const float* cr = c + (r - chunk0) * width;
      float* yr = o.y + r * o.y_stride + j0;
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
thread_local Scratch tls_xf_scratch;

}  // namespace

void MatMulsBf16Tiles(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Product> outputs, ThreadPool& pool) {
  if (m == 0 || outputs.empty()) return;
  if (k == 0) {
    FillWithBias(m, outputs);
    return;
  }
  const int64_t steps = outputs.front().w->steps();
  const int64_t pairs = (steps + kBlockSteps - 1) / kBlockSteps * kBlockSteps;
  // One line more per row: the 16 rows of an A tile then fall in different L1 sets (at a row
  // stride of a multiple of 4 KiB they would all share one).
  const int64_t xb_stride = pairs + 16;
  const bool tiles = m >= kTileMinRows;
  const int64_t padded_m = tiles ? (m + 2 * kTileRows - 1) / (2 * kTileRows) * (2 * kTileRows) : m;
  auto* xb = tls_x_scratch.Array<uint32_t>(static_cast<size_t>(padded_m * xb_stride));
  constexpr int64_t kRoundRows = 32;
  pool.RunTasks(static_cast<int>((m + kRoundRows - 1) / kRoundRows), [&](int task) {
    const int64_t row0 = task * kRoundRows;
    RoundRows(x, k, x_stride, row0, std::min(m, row0 + kRoundRows), pairs, xb_stride, xb);
  });
  if (padded_m > m) {
    std::memset(xb + m * xb_stride, 0,
                static_cast<size_t>((padded_m - m) * xb_stride) * sizeof(uint32_t));
  }
  if (!tiles) {
    // The vector code broadcasts each value from memory: x's bf16 widened (exactly) to f32.
    const int64_t xf_stride = 2 * xb_stride;
    float* xf = tls_xf_scratch.Floats(static_cast<size_t>(m * xf_stride));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < 2 * pairs; c += kLanes) {
        const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
            reinterpret_cast<const uint16_t*>(xb + i * xb_stride) + c));
        Store(xf + i * xf_stride + c,
              _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16)));
      }
    }
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
      VectorPanels(xf, m, xf_stride, *o, p0, p1);
    });
    return;
  }
  const int64_t task_panels = kTileTaskPanels;
  pool.RunTasks(static_cast<int>(ProductTasks(outputs, task_panels * kPanel)), [&](int task) {
    const auto [o, j0] = ProductTask(outputs, task, task_panels * kPanel);
    const int64_t p0 = j0 / kPanel;
    const int64_t p1 = std::min((o->w->rows() + kPanel - 1) / kPanel, p0 + task_panels);
    INFER_TILE_LOAD_CONFIG(&TileBf16Config());
    const FlushDenormalsScope flush;
    TilePanels(xb, m, xb_stride, *o, p0, p1);
    INFER_TILE_RELEASE();
  });
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
