// The CPU kernels' size thresholds that differ between ISA builds, in one table: a row per build
// (the namespace a per-ISA source compiles into), a field per threshold, each with the rule
// that sets it. The kernels read their own row as kTuning. Included by per-ISA kernel sources
// only.
#pragma once

#include <cstdint>

#ifndef INFER_ISA_NS
#error "tuning.h is for kernel sources compiled per ISA (INFER_ISA_NS must be defined)"
#endif

namespace infer::kernels::cpu {

// The builds with rows of their own. avx512bf16 shares avx512's row; the emulated builds share
// the row of the build they emulate.
enum class TuningRow { kAvx2, kAvxVnni, kAvx512, kAvx512Amx };

struct KernelTuning {
  // Float MatMul (matmul_simd.cc).
  // Rows per register tile: as many as two accumulator vectors a row leave registers for the
  // weights and a broadcast (14 of 32 zmm, 6 of 16 ymm).
  int float_mr;
  // Column tiles per call: 4 up to float_four_tiles_rows rows, 2 up to float_two_tiles_rows,
  // then 1 (the accumulators fill the register file).
  int float_four_tiles_rows;
  int float_two_tiles_rows;
  // Streaming order's prefetch distance per weight stream: float_ahead_steps steps, or where 0,
  // float_ahead_bytes split over the call's streams (AVX2 reaches the read bandwidth only with
  // about 8 KiB in flight per thread; AVX-512's 4 streams saturate at 16 steps).
  int64_t float_ahead_steps;
  int64_t float_ahead_bytes;

  // Quantized MatMul (matmul_quant_tile.h).
  // Rows per register tile: 2 f32 + 2 int32 accumulators a row and tile (4 rows of 32 zmm,
  // 2 of 16 ymm).
  int quant_mr;
  // Rows of one streaming row block: 6 on AVX-512, so that a draft check or a few decoding
  // sequences (5-6 rows) pass over the weights once.
  int quant_stream_rows;
  // Row blocks that still take the streaming order (more: the many-row order): where the two
  // orders measured level (AVX-512 at 64-128 rows, AVX2 at 24-32); AMX leaves at 16 rows for
  // its tiles.
  int64_t quant_stream_max_blocks;
  // Where not 0, the streaming order's row limit for int8, for int4k and int6, and for every
  // type: on AVX2 without VNNI, int8's and int4k's streaming tiles are compute-bound from 2 and
  // 3 rows, int6's many-row stream is faster from memory on every shape; on AVX-VNNI the
  // many-row stream wins from 3 rows for every type.
  int64_t quant_stream_max_rows_int8;
  int64_t quant_stream_max_rows_k;
  int64_t quant_stream_max_rows_all;
  // Column tiles per call at one row and at two (then 1): more weight streams and independent
  // dot chains in flight while the registers allow.
  int quant_tiles_one_row;
  int quant_tiles_two_rows;
  // Prefetch distance along a panel's stream, in bytes, at one row (int6: its top bits are a
  // second set of lines), and at more rows (several row blocks share each k-block): on AVX2 one
  // stream a thread needs 8 KiB in flight to reach the read bandwidth, and more rows do better
  // with 1 KiB; AVX-512 runs 4 streams a thread, where 1 KiB (2 KiB for int6) came nearest it.
  int64_t quant_ahead_one_row;
  int64_t quant_ahead_one_row_int6;
  int64_t quant_ahead_rows;
  // Whether those prefetches bring the lines to L2 (prefetcht1) instead of L1 (prefetcht0): on
  // Zen 4 the L1 prefetches held a one-row 4-bit or int6 stream near half the read bandwidth
  // (the L1's few outstanding misses), the L2 ones let the core's own L1 prefetcher and the L2's
  // deeper miss queue stream it; int8 and the many-row passes gained or held. AVX2's rows keep L1
  // until a Zen 3 measures the change (their distances were set there, with L1 prefetches).
  bool quant_prefetch_l2;

  // AMX-BF16 MatMul (matmul_bf16_tiles.cc): from this many rows the tiles (fewer: the vector
  // code); below it both stream the weights, from it the vector code is bound by its FMAs.
  int64_t bf16_tile_min_rows;
};

constexpr KernelTuning Avx2Tuning() {
  return {.float_mr = 6,
          .float_four_tiles_rows = 1,
          .float_two_tiles_rows = 2,
          .float_ahead_steps = 0,
          .float_ahead_bytes = 8192,
          .quant_mr = 2,
          .quant_stream_rows = 2,
          .quant_stream_max_blocks = 12,
          .quant_stream_max_rows_int8 = 1,
          .quant_stream_max_rows_k = 2,
          .quant_stream_max_rows_all = 0,
          .quant_tiles_one_row = 2,
          .quant_tiles_two_rows = 1,
          .quant_ahead_one_row = 8192,
          .quant_ahead_one_row_int6 = 8192,
          .quant_ahead_rows = 1024,
          .quant_prefetch_l2 = false,
          .bf16_tile_min_rows = 0};
}

// AVX2's row, but for the streaming order's row limit: every type leaves it from 3 rows.
constexpr KernelTuning AvxVnniTuning() {
  KernelTuning t = Avx2Tuning();
  t.quant_stream_max_rows_int8 = 0;
  t.quant_stream_max_rows_k = 0;
  t.quant_stream_max_rows_all = 2;
  return t;
}

constexpr KernelTuning Avx512Tuning() {
  return {.float_mr = 14,
          .float_four_tiles_rows = 2,
          .float_two_tiles_rows = 6,
          .float_ahead_steps = 16,
          .float_ahead_bytes = 0,
          .quant_mr = 4,
          .quant_stream_rows = 6,
          .quant_stream_max_blocks = 16,
          .quant_stream_max_rows_int8 = 0,
          .quant_stream_max_rows_k = 0,
          .quant_stream_max_rows_all = 0,
          .quant_tiles_one_row = 4,
          .quant_tiles_two_rows = 2,
          .quant_ahead_one_row = 1024,
          .quant_ahead_one_row_int6 = 2048,
          .quant_ahead_rows = 1024,
          .quant_prefetch_l2 = true,
          .bf16_tile_min_rows = 0};
}

// AVX-512's row, but for the tiles' thresholds.
constexpr KernelTuning Avx512AmxTuning() {
  KernelTuning t = Avx512Tuning();
  t.quant_stream_max_blocks = 4;
  t.bf16_tile_min_rows = 5;
  return t;
}

// In TuningRow's order.
inline constexpr KernelTuning kTuningTable[] = {Avx2Tuning(), AvxVnniTuning(), Avx512Tuning(),
                                                Avx512AmxTuning()};

}  // namespace infer::kernels::cpu

namespace infer::kernels::cpu::INFER_ISA_NS {

// (GCC names the AMX macro __AMX_INT8__, clang __AMXINT8__.)
#if defined(__AMX_INT8__) || defined(__AMXINT8__) || defined(INFER_AMX_EMULATE)
inline constexpr TuningRow kTuningRow = TuningRow::kAvx512Amx;
#elif defined(__AVX512F__)
inline constexpr TuningRow kTuningRow = TuningRow::kAvx512;
#elif defined(__AVXVNNI__) || defined(INFER_AVXVNNI_EMULATE)
inline constexpr TuningRow kTuningRow = TuningRow::kAvxVnni;
#else
inline constexpr TuningRow kTuningRow = TuningRow::kAvx2;
#endif
inline constexpr KernelTuning kTuning = kTuningTable[static_cast<int>(kTuningRow)];

}  // namespace infer::kernels::cpu::INFER_ISA_NS
