// The quantized MatMul's many-row order on AMX-INT8 tiles (prefill on Sapphire Rapids and
// later): one TDPBSUD gives a block's integer sums for 16 rows x 16 features, and the streaming
// tile's f32 terms (AddBlockTerm) are added in the same order, so the results are the same bits
// as the vector path's, a row alone or in a batch. Compiled for avx512amx and, with the tile
// operations emulated (INFER_AMX_EMULATE), avx512amx_emulated.
#include <algorithm>
#include <span>

#include "infer/kernels/cpu/matmul_quant_tile.h"
#include "infer/kernels/cpu/scratch.h"

#if !defined(INFER_AMX_TILES)
#error "matmul_int8_tiles.cc needs -mamx-int8 or INFER_AMX_EMULATE"
#endif

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

// The tile path: rows and features per tile (16 x 16 int32 sums over one block of 32 channels).
constexpr int64_t kTileFeatures = 16;
static_assert(kPanel % kTileFeatures == 0 && kLanes == kTileFeatures);

// Two sets of tiles, for even and odd blocks (independent chains): C (16 rows x 16 int32) = 0
// and 3, A (16 rows x 32 activation bytes) = 1 and 4, B (8 quads x 16 features x 4 weight
// bytes) = 2 and 5.
const TileConfig& AmxConfig() {
  static const TileConfig kConfig = [] {
    TileConfig c;
    for (int t : {0, 3}) {
      c.rows[t] = kTileRows;
      c.colsb[t] = kTileFeatures * 4;
    }
    for (int t : {1, 4}) {
      c.rows[t] = kTileRows;
      c.colsb[t] = kQuantBlock;
    }
    for (int t : {2, 5}) {
      c.rows[t] = kQuantBlock / 4;
      c.colsb[t] = kTileFeatures * 4;
    }
    return c;
  }();
  return kConfig;
}

// acc[r] += row r's term of one block from its integer sums `c` (16 rows of 16 int32): d and mn
// are the 16 features' scale and minimum (int4) for the block's group.
template <bool kInt4>
inline void AmxBlockTerms(const int32_t* c, const QuantizedRows& x, int64_t row0, int64_t block,
                          V d, V mn, V* acc) {
#pragma GCC unroll 16
  for (int64_t r = 0; r < kTileRows; ++r) {
    const VI dot = LoadI(reinterpret_cast<const uint8_t*>(c + r * kTileFeatures));
    acc[r] = AddBlockTerm<kInt4>(acc[r], dot, d, mn, x.d[(row0 + r) * x.blocks + block],
                                 x.sum[(row0 + r) * x.blocks + block],
                                 QuantStoredOffset(Quantization::kInt8));
  }
}

thread_local Scratch tls_b_scratch;

// Features [j0, j0 + nc) of output o for every row (x has its rows padded with zeros to whole
// tiles), k-block by k-block of kKc channels as QuantGemm's many-row order.
template <bool kInt4>
void AmxTask(const QuantizedRows& x, int64_t m, const Product& o, int64_t j0, int64_t nc) {
  const PackedMatrix& w = *o.w;
  const auto* data = static_cast<const uint8_t*>(w.data());
  const int64_t subs = w.group_size() / kQuantBlock;
  const int64_t sub_bytes = w.sub_block_bytes();
  const int64_t group_bytes = w.group_bytes();
  const int64_t values_bytes = subs * sub_bytes;
  [[maybe_unused]] const bool super = w.quantization() == Quantization::kInt4K;
  const int64_t groups = w.num_groups();
  const int64_t j1 = std::min(w.rows(), j0 + nc);
  alignas(64) int32_t sums[2][kTileRows * kTileFeatures];
  const int64_t kc_groups = KcGroups(w);
  for (int64_t g0 = 0; g0 < groups; g0 += kc_groups) {
    const int64_t g1 = std::min(groups, g0 + kc_groups);
    const int64_t blocks = (g1 - g0) * subs;
    for (int64_t jh = j0; jh < j1; jh += kTileFeatures) {
      const int64_t cols = std::min(kTileFeatures, j1 - jh);
      const uint8_t* panel = data + jh / kPanel * w.panel_bytes();
      const int64_t lane0 = jh % kPanel;
      // Block i's B rows (8 quads of these 16 features): int8 in place (a row per 128 bytes);
      // int4 unpacked once here for every row block, low nibbles as quads 0-3, high as 4-7.
      auto values = [&](int64_t i) {
        return panel + (g0 + i / subs) * group_bytes + i % subs * sub_bytes + lane0 * 4;
      };
      uint8_t* unpacked = nullptr;
      if constexpr (kInt4) {
        unpacked = tls_b_scratch.Array<uint8_t>(static_cast<size_t>(blocks * 512));
        for (int64_t i = 0; i < blocks; ++i) {
          for (int64_t j = 0; j < 4; ++j) {
            const VI raw = LoadI(values(i) + j * kPanel * 4);
            _mm512_store_si512(unpacked + i * 512 + j * 64, LowNibbles(raw));
            _mm512_store_si512(unpacked + i * 512 + (j + 4) * 64, HighNibbles(raw));
          }
        }
      }
      const int64_t b_stride = kInt4 ? kTileFeatures * 4 : kPanel * 4;
      auto b_rows = [&](int64_t i) -> const uint8_t* {
        return kInt4 ? unpacked + i * 512 : values(i);
      };
      // The 16 features' scales (and minima) for block i's group.
      auto scales = [&](int64_t i, V& d, V& mn) {
        SubBlockScales<kInt4>(panel + (g0 + i / subs) * group_bytes + values_bytes, lane0, i % subs,
                              super, d, mn);
      };
      for (int64_t row0 = 0; row0 < m; row0 += kTileRows) {
        const int64_t rows = std::min(kTileRows, m - row0);
        float* y = o.y + row0 * o.y_stride + jh;
        V acc[kTileRows];
#pragma GCC unroll 16
        for (int64_t r = 0; r < kTileRows; ++r) {
          acc[r] = g0 > 0 && r < rows ? LoadN(y + r * o.y_stride, cols) : Zero();
        }
        const int8_t* a = x.q + row0 * x.padded_k + g0 * subs * kQuantBlock;
        for (int64_t i = 0; i < blocks; i += 2) {
          INFER_TILE_ZERO(0);
          INFER_TILE_LOAD(1, a + i * kQuantBlock, x.padded_k);
          INFER_TILE_LOAD(2, b_rows(i), b_stride);
          INFER_TILE_DPBSUD(0, 1, 2);
          INFER_TILE_STORE(0, sums[0], kTileFeatures * 4);
          const bool odd = i + 1 < blocks;
          if (odd) {
            INFER_TILE_ZERO(3);
            INFER_TILE_LOAD(4, a + (i + 1) * kQuantBlock, x.padded_k);
            INFER_TILE_LOAD(5, b_rows(i + 1), b_stride);
            INFER_TILE_DPBSUD(3, 4, 5);
            INFER_TILE_STORE(3, sums[1], kTileFeatures * 4);
          }
          V d, mn;
          scales(i, d, mn);
          AmxBlockTerms<kInt4>(sums[0], x, row0, g0 * subs + i, d, mn, acc);
          if (odd) {
            scales(i + 1, d, mn);
            AmxBlockTerms<kInt4>(sums[1], x, row0, g0 * subs + i + 1, d, mn, acc);
          }
        }
        const bool bias = g1 == groups && o.bias != nullptr;
        for (int64_t r = 0; r < rows; ++r) {
          StoreN(y + r * o.y_stride, bias ? Add(acc[r], LoadN(o.bias + jh, cols)) : acc[r], cols);
        }
      }
    }
  }
}

}  // namespace

// The many-row order on tiles: tasks of kNc features, each with the tile configuration loaded
// on its thread for the task.
template <bool kInt4>
void AmxGemm(const QuantizedRows& x, int64_t m, std::span<const Product> outputs,
             ThreadPool& pool) {
  pool.RunTasks(static_cast<int>(ProductTasks(outputs, kNc)), [&](int task) {
    const auto [o, j0] = ProductTask(outputs, task, kNc);
    INFER_TILE_LOAD_CONFIG(&AmxConfig());
    AmxTask<kInt4>(x, m, *o, j0, kNc);
    INFER_TILE_RELEASE();
  });
}

template void AmxGemm<false>(const QuantizedRows&, int64_t, std::span<const Product>, ThreadPool&);
template void AmxGemm<true>(const QuantizedRows&, int64_t, std::span<const Product>, ThreadPool&);

}  // namespace infer::kernels::cpu::INFER_ISA_NS
