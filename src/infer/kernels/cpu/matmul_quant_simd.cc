// MatMul y = x . w^T for int8 / int6 / int4 weights (ops.h PackedMatrix, Quantization), compiled
// once per ISA.
//
// Activations are rounded to int8 per row and block of 32 channels (QuantizeActivations); each
// block's integer dot products with the weights' unsigned values run on the integer units:
// vpdpbusd (u8 x s8, four products per 32-bit lane) where the CPU has AVX-512 VNNI or AVX-VNNI
// (ymm; namespace avxvnni, and avxvnni_emulated for the tests), otherwise the same sums from
// vpmaddwd on 16-bit halves, and on AVX2's many-row tiles from vpmaddubsw arranged never to
// saturate (ManyRowTile, Int8PanelTile) (exact either way). A block's integer sum r
// then becomes a float term, with dx the activation block's scale, s its sum of q, d and m the
// weight group's scale and minimum:
//   int8 (stored q + 128):  (r - 128 s) * (d dx)
//   int6 (stored q + 32):   (r - 32 s) * (d dx)
//   int4 (w = d q + m):     r * (d dx) + m * (dx s)
// added to one f32 accumulator per output in ascending block order. That order depends on k
// and the group only, never on m or on the loop order around the tile, so a row's result is
// the same bit for bit alone or in a batch.
// Loop orders, as in matmul_simd.cc: few row blocks (decode) stream ranges of weight panels
// with prefetch far ahead (on AVX-512 up to 64 rows, every row block passing over a panel from
// L2 while the memory brings the next one); many (prefill) take tasks of kNc features whose
// weights stay in L2 while every row block passes over them.
// Compiled with AMX (namespace avx512amx, or avx512amx_emulated for the tests), the many-row
// order runs on tiles: one TDPBSUD gives a block's integer sums for 16 rows x 16 features, and
// the same f32 terms as above are added in the same order, so the results are the same bits as
// This file: the dispatch (QuantizedMatMuls), the streaming order and AVX-512's k-blocked
// many-row order (QuantGemm); the tile they share is matmul_quant_tile.h's, AVX2's many-row
// GEMMs matmul_quant_avx2.cc's, the AMX tiles matmul_int8_tiles.cc's, the activations' rounding
// quantize_activations.cc's.
#include <algorithm>
#include <cstring>
#include <span>

#include "infer/kernels/cpu/matmul_quant_tile.h"
#include "infer/kernels/cpu/scratch.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

thread_local Scratch tls_q_scratch;
thread_local Scratch tls_d_scratch;
thread_local Scratch tls_sum_scratch;
thread_local Scratch tls_sum_lo_scratch;

// The streaming order's tasks: ranges of whole panels, about kStreamTasksPerThread per thread
// over all outputs.
int64_t StreamTilesPerTask(std::span<const Product> outputs, int threads) {
  constexpr int64_t kPanelTiles = kPanel / kNr;
  int64_t total_tiles = 0;
  for (const Product& o : outputs) total_tiles += (o.w->rows() + kNr - 1) / kNr;
  const int64_t max_tasks = kStreamTasksPerThread * threads;
  const int64_t panels =
      std::max<int64_t>(1, (total_tiles + max_tasks - 1) / max_tasks / kPanelTiles);
  return panels * kPanelTiles;
}

// x's rows against every output's weights (all quantized as kInt4 says), in one region.
template <bool kInt4>
void QuantGemm(const QuantizedRows& x, int64_t m, std::span<const Product> outputs,
               ThreadPool& pool) {
  const int64_t block_rows = m <= kStreamRows ? m : kMr;
  const int64_t row_blocks = (m + block_rows - 1) / block_rows;
  // Row block p of output o against `tiles` tiles from j0 over groups [g0, g1).
  auto run = [&](const Product& o, int64_t p, int64_t j0, int64_t tiles, int64_t g0, int64_t g1) {
    const int64_t row0 = p * block_rows;
    const int rows = static_cast<int>(std::min<int64_t>(block_rows, m - row0));
    const int64_t groups = o.w->num_groups();
    QuantTiles<kInt4, kStreamRows>(rows, tiles, x, row0, *o.w, j0, g0, g1,
                                   o.y + row0 * o.y_stride + j0, o.y_stride, g0 > 0,
                                   g1 == groups && o.bias != nullptr ? o.bias + j0 : nullptr);
  };
  if (StreamingOrder(m, outputs.front().w->quantization())) {
    if (row_blocks > 1 || (!kInt4 && m > kMr)) {
      // Panel after panel, every row block (of kMr rows from 7 rows: 6-row passes there mostly
      // ran slower, int8's output head the most) over the whole panel, the passes asking for the
      // next panel (NextPanel). From 8 to 32 rows this beats the k-blocked passes, which read
      // each k-block from memory in the first and from L2 in the others. int8 and int6 take it
      // from 5 rows too, one block asking for the next panel instead of 1 KiB ahead: faster at 5
      // and 6 rows, in the kernels and in the whole model (at 2-3 rows no faster, and the 4-bit
      // types lost at two threads: those keep the 1 KiB stream).
      // AVX2 (int4 at 3-8 rows; a panel is two tiles, each row block passes over both): faster
      // than the k-blocked passes, in the kernels and with 3-8 sequences of a 4-bit model.
      constexpr int64_t kHalves = kPanel / kNr;
      const int64_t step = StreamTilesPerTask(outputs, pool.num_threads()) * kNr;
      pool.RunTasks(static_cast<int>(ProductTasks(outputs, step)), [&](int task) {
        const auto [o, j0] = ProductTask(outputs, task, step);
        const PackedMatrix& w = *o->w;
        const int64_t end = std::min(w.rows(), j0 + step);
        const auto* data = static_cast<const uint8_t*>(w.data());
        for (int64_t panel = j0; panel < end; panel += kPanel) {
          const uint8_t* next =
              panel + kPanel < end ? data + (panel / kPanel + 1) * w.panel_bytes() : nullptr;
          for (int64_t p = 0; p < row_blocks; ++p) {
            const int64_t row0 = p * block_rows;
            const int rows = static_cast<int>(std::min<int64_t>(block_rows, m - row0));
            for (int64_t h = 0; h < kHalves; ++h) {
              const int64_t j = panel + h * kNr;
              if (j >= end) break;
              QuantTiles<kInt4, kStreamRows, true>(
                  rows, 1, x, row0, w, j, 0, w.num_groups(), o->y + row0 * o->y_stride + j,
                  o->y_stride, false, o->bias != nullptr ? o->bias + j : nullptr,
                  NextPanel{.next = next, .pass = p * kHalves + h, .passes = row_blocks * kHalves});
            }
          }
        }
      });
      return;
    }
    // One row block: its tiles stream the task's panels with the 1 KiB prefetch.
    const int64_t step = StreamTilesPerTask(outputs, pool.num_threads()) * kNr;
    pool.RunTasks(static_cast<int>(ProductTasks(outputs, step)), [&](int task) {
      const auto [o, j0] = ProductTask(outputs, task, step);
      const int64_t tiles = (std::min(o->w->rows(), j0 + step) - j0 + kNr - 1) / kNr;
      run(*o, 0, j0, tiles, 0, o->w->num_groups());
    });
    return;
  }
#if defined(INFER_AMX_TILES)
  // (kInt6, the output head's type, and the 5-bit types take the vector tiles below.)
  if (outputs.front().w->quantization() != Quantization::kInt6 &&
      !IsInt5(outputs.front().w->quantization())) {
    AmxGemm<kInt4>(x, m, outputs, pool);
    return;
  }
#elif !defined(__AVX512F__)
  ManyRowGemm<kInt4>(x, m, outputs, pool);
#endif
#if defined(__AVX512F__)
  pool.RunTasks(static_cast<int>(ProductTasks(outputs, kNc)), [&](int task) {
    const auto [o, j0] = ProductTask(outputs, task, kNc);
    const int64_t tiles = (std::min(o->w->rows(), j0 + kNc) - j0 + kNr - 1) / kNr;
    const int64_t groups = o->w->num_groups();
    const int64_t kc_groups = KcGroups(*o->w);
    for (int64_t g0 = 0; g0 < groups; g0 += kc_groups) {
      const int64_t g1 = std::min(groups, g0 + kc_groups);
      for (int64_t p = 0; p < row_blocks; ++p) run(*o, p, j0, tiles, g0, g1);
    }
  });
#endif
}

}  // namespace

void QuantizedMatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Product> outputs, ThreadPool& pool) {
  if (m == 0 || outputs.empty()) return;
  const PackedMatrix& first = *outputs.front().w;
  const int64_t padded_k = first.num_groups() * first.group_size();
  if (padded_k == 0) {
    FillWithBias(m, outputs);
    return;
  }
  const int64_t blocks = padded_k / kQuantBlock;
  QuantizedRows rows{.padded_k = padded_k, .blocks = blocks};
  [[maybe_unused]] const bool streaming = StreamingOrder(m, first.quantization());
#if defined(INFER_AMX_TILES)
  // The tile path (QuantGemm's many-row order) reads whole tiles of rows: the rows past m are
  // zeros. Fewer rows never reach it, and decode pays nothing.
  const int64_t padded_m = streaming ? m : (m + kTileRows - 1) / kTileRows * kTileRows;
#elif !defined(__AVX512F__)
  // AVX2's many-row order reads its rows kGemmRows together (QuantizedRows), the last group
  // filled up with rows of zeros.
  if (!streaming) rows.group_rows = kGemmRows;
  const int64_t padded_m = (m + rows.group_rows - 1) / rows.group_rows * rows.group_rows;
#else
  const int64_t padded_m = m;
#endif
  auto* q = tls_q_scratch.Array<int8_t>(static_cast<size_t>(padded_m * padded_k));
  auto* d = tls_d_scratch.Array<float>(static_cast<size_t>(padded_m * blocks));
  auto* sum = tls_sum_scratch.Array<int32_t>(static_cast<size_t>(padded_m * blocks));
  if (padded_m > m) {
    // From the last group's first row: its blocks lie among the real rows' (group_rows > 1), and
    // those are written over below.
    const int64_t from = m / rows.group_rows * rows.group_rows;
    std::memset(q + from * padded_k, 0, static_cast<size_t>((padded_m - from) * padded_k));
    std::fill(d + from * blocks, d + padded_m * blocks, 0.0F);
    std::fill(sum + from * blocks, sum + padded_m * blocks, 0);
  }
  if (m <= kQuantizeRowsPerTask) {
    QuantizeRows(x, 0, m, k, x_stride, rows, q, d, sum);
  } else {
    pool.ParallelFor(m, kQuantizeRowsPerTask, [&](int64_t begin, int64_t end) {
      QuantizeRows(x, begin, end, k, x_stride, rows, q, d, sum);
    });
  }
  rows.q = q;
  rows.d = d;
  rows.sum = sum;
  if (first.quantization() == Quantization::kInt6K) {
    // Its blocks' halves scale apart: each block's sum of q over its first 16 channels too.
    auto* sum_lo = tls_sum_lo_scratch.Array<int32_t>(static_cast<size_t>(m * blocks));
    for (int64_t i = 0; i < m * blocks; ++i) {
      int32_t total = 0;
      for (int64_t c = 0; c < 16; ++c) total += q[i * kQuantBlock + c];
      sum_lo[i] = total;
    }
    rows.sum_lo = sum_lo;
  }
#if !defined(__AVX512F__)
  if (!streaming) PrepareManyRowRows(rows, padded_m, first.quantization(), pool);
#endif
  if (HasMinimum(first.quantization())) {
    QuantGemm<true>(rows, m, outputs, pool);
  } else {
    QuantGemm<false>(rows, m, outputs, pool);
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
