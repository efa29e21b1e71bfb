// AVX2's many-row order of the quantized MatMul (prefill and batches of AVX2 and AVX-VNNI
// CPUs): ManyRowTile and Int8PanelTile over rows kGemmRows together, with the streaming tile's
// f32 terms in the same order (matmul_quant_simd.cc), so a row's bits do not depend on the
// order. Compiled for the AVX2 namespaces only (avx2, avxvnni, avxvnni_emulated).
#include <algorithm>
#include <span>
#include <utility>

#include "infer/kernels/cpu/matmul_quant_tile.h"
#include "infer/kernels/cpu/scratch.h"

#if defined(__AVX512F__)
#error "matmul_quant_avx2.cc is AVX2's many-row order; AVX-512 runs the streaming tile's"
#endif

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

// AVX2's many-row order (prefill, batches): without VNNI the integer sums come from
// vpmaddubsw (u8 x s8, pairs summed to int16, saturating) and vpmaddwd, arranged so that no
// int16 can saturate, so the sums are exact and the f32 terms are the streaming tile's bits:
// - int8 (Int8PanelTile): maddubs(|x|, u ^ f), u the stored q + 128 and f = 0x80 where x >= 0
//   (u ^ f = q), 0x7f where x < 0 (u ^ f = ~q = -q - 1). Pairwise that is q x less |x| where
//   x < 0, within 2 * 127 * 128 = 32512; vpmaddwd by ones widens to int32 per quad, and the
//   block's sum of |x| over x < 0 (QuantizedRows::neg) is added back: the exact sum of q x.
// - int4: maddubs(w, x), w in [0, 15], |w x + w' x'| <= 2 * 15 * 127 = 3810; a block's 8 such
//   int16 sums (4 steps, low and high nibbles) stay within 30480 < 32767, so they add in int16
//   and are widened once per block.
// A tile is kGemmRows rows x kNr features: 8 integer accumulators; the f32 sums stay in memory
// (L1), loaded and stored once per block, to leave the registers to the integer work.

// The 4-bit types' scales of every sub-block of the group whose scales start at `scales`, for
// the kNr features from lane `lane`: d (out[2 b kNr + ...]) and m (out[(2 b + 1) kNr + ...]),
// for kInt4K (`super`) d sc and dm mn, the exact f32 values SubBlockScales gives (kInt4K's
// with immediate shifts, b a constant in the unrolled loop). Made once per task, for every row
// block (ManyRowGemm), where the tile would convert f16 or unpack 6-bit scales per block.
inline void Int4GroupScales(const uint8_t* scales, int64_t lane, bool super, int64_t subs,
                            float* out) {
  for (int64_t half = 0; half < 2; ++half) {
    V db, mb;
    if (super) {
#pragma GCC unroll 8
      for (int64_t b = 0; b < kSuperBlock / kQuantBlock; ++b) {
        SubBlockScales<true>(scales, lane + half * kLanes, b, true, db, mb);
        Store(out + 2 * b * kNr + half * kLanes, db);
        Store(out + (2 * b + 1) * kNr + half * kLanes, mb);
      }
    } else {
      // (kInt4's d and m are the group's, the same for each sub-block.)
      SubBlockScales<true>(scales, lane + half * kLanes, 0, false, db, mb);
      for (int64_t b = 0; b < subs; ++b) {
        Store(out + 2 * b * kNr + half * kLanes, db);
        Store(out + (2 * b + 1) * kNr + half * kLanes, mb);
      }
    }
  }
}

// Keeps an accumulator's chain of adds as written: integer adds being associative, GCC would
// otherwise regroup a block's unrolled steps into a tree whose partial sums spill to the stack.
inline void KeepChain(VI& v) { asm("" : "+x"(v)); }

// A sub-block's lines (`bytes` from wb) kStreamAhead bytes on: the many-row tiles' prefetch when
// the weights stream from memory (one panel at a time over all of k: ManyRowGemm's batched
// decode).
inline void PrefetchSubBlock(const uint8_t* wb, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64) PrefetchLine(wb + kStreamAhead + line);
}

// The 4-bit types' sub-block scales come from `table` (Int4GroupScales of the tile's groups g0
// to g1, one after another), made once per task for every row block. x's rows in groups of
// kGemmRows (QuantizedRows), row0 the first of one.
// kStream: the weights come from memory (ManyRowGemm's first row block over them), asked for
// kStreamAhead bytes ahead (a template argument: the later row blocks' loop is compiled without
// it).
template <bool kInt4, int kRows, bool kStream>
void ManyRowTile(const QuantizedRows& x, int64_t row0, const PackedMatrix& w, int64_t j0,
                 int64_t g0, int64_t g1, float* y, int64_t y_stride, bool accumulate,
                 const float* bias, const float* table) {
  const auto* data = static_cast<const uint8_t*>(w.data());
  const int64_t subs = w.group_size() / kQuantBlock;
  const int64_t sub_bytes = w.sub_block_bytes();
  const int64_t group_bytes = w.group_bytes();
  const int64_t values_bytes = subs * sub_bytes;
  [[maybe_unused]] const bool six = w.quantization() == Quantization::kInt6;
  [[maybe_unused]] const int32_t offset = QuantStoredOffset(w.quantization());
  const int64_t lane = j0 % kPanel;
  const uint8_t* base = data + (j0 / kPanel) * w.panel_bytes() + g0 * group_bytes + lane * 4;
  const int64_t cols = std::min<int64_t>(kNr, w.rows() - j0);
  const int64_t c0 = std::min<int64_t>(cols, kLanes);
  const int64_t c1 = cols - c0;
  alignas(32) float acc[kRows][kNr];
  for (int r = 0; r < kRows; ++r) {
    const float* yr = y + r * y_stride;
    Store(acc[r], accumulate ? LoadN(yr, c0) : Zero());
    Store(acc[r] + kLanes, accumulate && c1 > 0 ? LoadN(yr + kLanes, c1) : Zero());
  }
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);  // (vpmaddwd's widening)
  const int64_t x_row0 = x.Index(row0, 0);
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* scales = base - lane * 4 + values_bytes;
    for (int64_t b = 0; b < subs; ++b) {
      const int64_t block = g * subs + b;
      // Row r's block at x0 + r (row0 starts a group of x.group_rows = kGemmRows rows).
      const int64_t x0 = x_row0 + block * x.group_rows;
      const uint8_t* wb = base + b * sub_bytes;
      if (kStream && lane == 0) PrefetchSubBlock(wb, sub_bytes);  // (the panel's first tile)
      VI dot[kRows][2];
#if defined(INFER_YMM_VNNI)
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) dot[r][0] = dot[r][1] = ZeroI();
      if (kInt4 || six) {
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
          VI lo0, hi0, lo1, hi1;
          QuadPair<false>(wb, j, /*six=*/!kInt4, 0, lo0, hi0, lo1, hi1);
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            const int8_t* xr = x.q + (x0 + r) * kQuantBlock;
            const VI xlo = Set1I(Quad(xr + 4 * j));
            const VI xhi = Set1I(Quad(xr + 4 * (j + 4)));
            dot[r][0] = DotU8S8(DotU8S8(dot[r][0], lo0, xlo), hi0, xhi);
            dot[r][1] = DotU8S8(DotU8S8(dot[r][1], lo1, xlo), hi1, xhi);
            KeepChain(dot[r][0]);
            KeepChain(dot[r][1]);
          }
        }
      } else {
#pragma GCC unroll 8
        for (int64_t j = 0; j < 8; ++j) {
          const VI w0 = LoadI(wb + j * kPanel * 4);
          const VI w1 = LoadI(wb + j * kPanel * 4 + kLanes * 4);
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            const VI xb = Set1I(Quad(x.q + (x0 + r) * kQuantBlock + 4 * j));
            dot[r][0] = DotU8S8(dot[r][0], w0, xb);
            dot[r][1] = DotU8S8(dot[r][1], w1, xb);
            KeepChain(dot[r][0]);
            KeepChain(dot[r][1]);
          }
        }
      }
#else
      if constexpr (kInt4) {
        const VI low = _mm256_set1_epi8(0x0f);
        VI sum16[kRows][2];
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) sum16[r][0] = sum16[r][1] = ZeroI();
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
          const VI raw0 = LoadI(wb + j * kPanel * 4);
          const VI raw1 = LoadI(wb + j * kPanel * 4 + kLanes * 4);
          const VI lo0 = _mm256_and_si256(raw0, low), lo1 = _mm256_and_si256(raw1, low);
          const VI hi0 = _mm256_and_si256(_mm256_srli_epi16(raw0, 4), low);
          const VI hi1 = _mm256_and_si256(_mm256_srli_epi16(raw1, 4), low);
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            const int8_t* xr = x.q + (x0 + r) * kQuantBlock;
            const VI xlo = Set1I(Quad(xr + 4 * j));
            sum16[r][0] = _mm256_add_epi16(sum16[r][0], _mm256_maddubs_epi16(lo0, xlo));
            sum16[r][1] = _mm256_add_epi16(sum16[r][1], _mm256_maddubs_epi16(lo1, xlo));
            const VI xhi = Set1I(Quad(xr + 4 * (j + 4)));
            sum16[r][0] = _mm256_add_epi16(sum16[r][0], _mm256_maddubs_epi16(hi0, xhi));
            sum16[r][1] = _mm256_add_epi16(sum16[r][1], _mm256_maddubs_epi16(hi1, xhi));
            KeepChain(sum16[r][0]);
            KeepChain(sum16[r][1]);
          }
        }
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          dot[r][0] = _mm256_madd_epi16(sum16[r][0], ones);
          dot[r][1] = _mm256_madd_epi16(sum16[r][1], ones);
        }
      } else {
        // kInt6 (int8 takes Int8PanelTile): u <= 63, so vpmaddubsw(u, x) needs no sign trick: a
        // quad's products stay within 4 * 63 * 127 = 32004 in int16, widened per quad; the term
        // subtracts 32 s.
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) dot[r][0] = dot[r][1] = ZeroI();
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
          VI lo0, hi0, lo1, hi1;
          QuadPair<false>(wb, j, /*six=*/true, 0, lo0, hi0, lo1, hi1);
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            const int8_t* xr = x.q + (x0 + r) * kQuantBlock;
            const VI xlo = Set1I(Quad(xr + 4 * j));
            const VI xhi = Set1I(Quad(xr + 4 * (j + 4)));
            dot[r][0] = _mm256_add_epi32(
                dot[r][0], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo0, xlo),
                                                              _mm256_maddubs_epi16(hi0, xhi)),
                                             ones));
            dot[r][1] = _mm256_add_epi32(
                dot[r][1], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo1, xlo),
                                                              _mm256_maddubs_epi16(hi1, xhi)),
                                             ones));
            KeepChain(dot[r][0]);
            KeepChain(dot[r][1]);
          }
        }
      }
#endif
      V d0, m0, d1, m1;
      if constexpr (kInt4) {
        const float* sb = table + ((g - g0) * subs + b) * 2 * kNr;
        d0 = Load(sb);
        d1 = Load(sb + kLanes);
        m0 = Load(sb + kNr);
        m1 = Load(sb + kNr + kLanes);
      } else {
        SubBlockScales<kInt4>(scales, lane, b, false, d0, m0);
        SubBlockScales<kInt4>(scales, lane + kLanes, b, false, d1, m1);
      }
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const float dx = x.d[x0 + r];
        if constexpr (kInt4) {
          const float dx_sx = x.d_sum[x0 + r];
          Store(acc[r], AddInt4Term(Load(acc[r]), dot[r][0], d0, m0, dx, dx_sx));
          Store(acc[r] + kLanes, AddInt4Term(Load(acc[r] + kLanes), dot[r][1], d1, m1, dx, dx_sx));
        } else {
          // (The sums are of the stored q + offset.)
          const int32_t sx = x.sum[x0 + r];
          Store(acc[r], AddBlockTerm<false>(Load(acc[r]), dot[r][0], d0, Zero(), dx, sx, offset));
          Store(acc[r] + kLanes,
                AddBlockTerm<false>(Load(acc[r] + kLanes), dot[r][1], d1, Zero(), dx, sx, offset));
        }
      }
    }
    base += group_bytes;
  }
  for (int r = 0; r < kRows; ++r) {
    float* yr = y + r * y_stride;
    V v0 = Load(acc[r]);
    V v1 = Load(acc[r] + kLanes);
    if (bias != nullptr) {
      v0 = Add(v0, LoadN(bias, c0));
      if (c1 > 0) v1 = Add(v1, LoadN(bias + kLanes, c1));
    }
    StoreN(yr, v0, c0);
    if (c1 > 0) StoreN(yr + kLanes, v1, c1);
  }
}

#if !defined(INFER_YMM_VNNI)
// Rows r0 and, kPair, r0 + 1 of Int8PanelTile's block at x0 (as ManyRowTile's) against the
// panel's weights at wb: the exact sums of q x, 4 vectors of kLanes features per row. Each
// broadcast of x feeds four weight vectors, which vpxor reads straight from L1; per 32 products
// two instructions take the multiply pipes (vpmaddubsw, vpmaddwd), where the sign trick's
// vpsignb made three on Zen 3.
template <bool kPair>
inline void Int8PanelDots(const QuantizedRows& x, int64_t x0, int r0, const uint8_t* wb,
                          VI (&dot)[2][kPanel / kLanes]) {
  constexpr int kVecs = kPanel / kLanes;
  constexpr int kPairRows = kPair ? 2 : 1;
  const VI ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
  for (int r = 0; r < kPairRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) dot[r][v] = Set1I(x.neg[x0 + r0 + r]);
  }
#pragma GCC unroll 8
  for (int64_t j = 0; j < kQuantBlock / 4; ++j) {
#pragma GCC unroll 2
    for (int r = 0; r < kPairRows; ++r) {
      const int64_t at = (x0 + r0 + r) * kQuantBlock + 4 * j;
      const VI ax = Set1I(Quad(reinterpret_cast<const int8_t*>(x.abs_q) + at));
      const VI fx = Set1I(Quad(reinterpret_cast<const int8_t*>(x.flip) + at));
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) {
        const VI qx = _mm256_xor_si256(fx, LoadI(wb + (j * kPanel + v * kLanes) * 4));
        dot[r][v] =
            _mm256_add_epi32(dot[r][v], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, qx), ones));
        KeepChain(dot[r][v]);
      }
    }
  }
}

// AVX2's many-row int8 tile without VNNI: kRows rows (1 to kGemmRows, row0 a group's first, as
// ManyRowTile's) against the whole panel at j0 (a panel's first feature), over groups [g0, g1).
// Two rows at a time: 8 integer accumulators; the f32 sums stay in memory, as ManyRowTile's.
// `stream`: the weights come from memory (ManyRowGemm's first row block over them), so the tile
// asks for them kStreamAhead bytes ahead.
template <int kRows>
void Int8PanelTile(const QuantizedRows& x, int64_t row0, const PackedMatrix& w, int64_t j0,
                   int64_t g0, int64_t g1, float* y, int64_t y_stride, bool accumulate,
                   const float* bias, bool stream) {
  constexpr int kVecs = kPanel / kLanes;
  const auto* data = static_cast<const uint8_t*>(w.data());
  const int64_t subs = w.group_size() / kQuantBlock;
  const int64_t sub_bytes = w.sub_block_bytes();
  const int64_t group_bytes = w.group_bytes();
  const int64_t values_bytes = subs * sub_bytes;
  const uint8_t* base = data + (j0 / kPanel) * w.panel_bytes() + g0 * group_bytes;
  const int64_t cols = std::min<int64_t>(kPanel, w.rows() - j0);
  int64_t count[kVecs];
  for (int v = 0; v < kVecs; ++v) count[v] = std::clamp<int64_t>(cols - v * kLanes, 0, kLanes);
  alignas(32) float acc[kRows][kPanel];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVecs; ++v) {
      const float* yv = y + r * y_stride + v * kLanes;
      Store(acc[r] + v * kLanes, accumulate && count[v] > 0 ? LoadN(yv, count[v]) : Zero());
    }
  }
  const int64_t x_row0 = x.Index(row0, 0);
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* scales = base + values_bytes;
    if (stream) PrefetchLine(scales + kStreamAhead);
    for (int64_t b = 0; b < subs; ++b) {
      const int64_t x0 = x_row0 + (g * subs + b) * x.group_rows;
      const uint8_t* wb = base + b * sub_bytes;
      if (stream) PrefetchSubBlock(wb, sub_bytes);
      V d[kVecs];
      for (int v = 0; v < kVecs; ++v) {
        V unused;
        SubBlockScales<false>(scales, v * kLanes, b, false, d[v], unused);
      }
#pragma GCC unroll 2
      for (int r0 = 0; r0 < kRows; r0 += 2) {
        VI dot[2][kVecs];
        const bool pair = r0 + 1 < kRows;
        if (pair) {
          Int8PanelDots<true>(x, x0, r0, wb, dot);
        } else {
          Int8PanelDots<false>(x, x0, r0, wb, dot);
        }
        for (int r = r0; r < r0 + (pair ? 2 : 1); ++r) {
          const float dx = x.d[x0 + r];
#pragma GCC unroll 4
          for (int v = 0; v < kVecs; ++v) {
            float* a = acc[r] + v * kLanes;
            Store(a, AddInt8Term(Load(a), dot[r - r0][v], d[v], dx));
          }
        }
      }
    }
    base += group_bytes;
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVecs; ++v) {
      if (count[v] == 0) continue;
      V sum = Load(acc[r] + v * kLanes);
      if (bias != nullptr) sum = Add(sum, LoadN(bias + v * kLanes, count[v]));
      StoreN(y + r * y_stride + v * kLanes, sum, count[v]);
    }
  }
}
#endif  // !INFER_YMM_VNNI

// `rows` (1 to kGemmRows) rows against `tiles` tiles from j0.
// The 4-bit types: `table` holds each tile's Int4GroupScales for groups [g0, g1), tile after
// tile.
template <bool kInt4, int kRows = kGemmRows>
void ManyRowTiles(int rows, int64_t tiles, const QuantizedRows& x, int64_t row0,
                  const PackedMatrix& w, int64_t j0, int64_t g0, int64_t g1, float* y,
                  int64_t y_stride, bool accumulate, const float* bias, const float* table,
                  bool stream) {
  if constexpr (kRows > 0) {
    if (rows != kRows) {
      ManyRowTiles<kInt4, kRows - 1>(rows, tiles, x, row0, w, j0, g0, g1, y, y_stride, accumulate,
                                     bias, table, stream);
      return;
    }
#if !defined(INFER_YMM_VNNI)
    if (!kInt4 && w.quantization() == Quantization::kInt8) {
      // A panel (two tiles) at a time; j0 is a panel's first feature (ManyRowGemm's tasks).
      for (int64_t t = 0; t < tiles; t += kPanel / kNr) {
        Int8PanelTile<kRows>(x, row0, w, j0 + t * kNr, g0, g1, y + t * kNr, y_stride, accumulate,
                             bias != nullptr ? bias + t * kNr : nullptr, stream);
      }
      return;
    }
#endif
    const int64_t table_stride = (g1 - g0) * (w.group_size() / kQuantBlock) * 2 * kNr;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t jt = j0 + t * kNr;
      const float* tile_table = table != nullptr ? table + t * table_stride : nullptr;
      const float* tile_bias = bias != nullptr ? bias + t * kNr : nullptr;
      if (stream) {
        ManyRowTile<kInt4, kRows, true>(x, row0, w, jt, g0, g1, y + t * kNr, y_stride, accumulate,
                                        tile_bias, tile_table);
      } else {
        ManyRowTile<kInt4, kRows, false>(x, row0, w, jt, g0, g1, y + t * kNr, y_stride, accumulate,
                                         tile_bias, tile_table);
      }
    }
  }
}

thread_local Scratch tls_scale_table_scratch;

// The many-row order with ManyRowTile: tasks of kNc features, whose k-blocks of kKc channels
// stay in L2 while every block of kGemmRows rows passes over them.
// Narrower tasks where kNc would give few: gemma-3-1b's down projection (1152 features) makes 5
// tasks of 256, so one of 2 threads would do 3 while the other waits.
constexpr int64_t kMinTasksPerThread = 8;
// Up to this many row blocks take the panel-after-panel stream (ManyRowGemm).
constexpr int64_t kStreamRowBlocks = 4;

// The 4-bit types' sub-block scales of `tiles` tiles from j0 over groups [g0, g1) in f32
// (Int4GroupScales, tile after tile), in this thread's scratch.
const float* ScaleTable(const PackedMatrix& w, int64_t j0, int64_t tiles, int64_t g0, int64_t g1) {
  const bool super = w.quantization() == Quantization::kInt4K;
  const int64_t subs = w.group_size() / kQuantBlock;
  const int64_t group_floats = subs * 2 * kNr;
  float* table =
      tls_scale_table_scratch.Floats(static_cast<size_t>(tiles * (g1 - g0) * group_floats));
  const auto* data = static_cast<const uint8_t*>(w.data());
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t jt = j0 + t * kNr;
    const int64_t panel_row = jt - jt % kPanel;  // (the group's scales from lane 0)
    for (int64_t g = g0; g < g1; ++g) {
      Int4GroupScales(data + w.ScaleIndex(panel_row, g), jt % kPanel, super, subs,
                      table + (t * (g1 - g0) + (g - g0)) * group_floats);
    }
  }
  return table;
}

thread_local Scratch tls_abs_scratch;
thread_local Scratch tls_flip_scratch;
thread_local Scratch tls_neg_scratch;
thread_local Scratch tls_d_sum_scratch;

}  // namespace

template <bool kInt4>
void ManyRowGemm(const QuantizedRows& x, int64_t m, std::span<const Product> outputs,
                 ThreadPool& pool) {
  const int64_t row_blocks = (m + kGemmRows - 1) / kGemmRows;
  int64_t step = kNc;
  while (step > 4 * kNr && ProductTasks(outputs, step) < kMinTasksPerThread * pool.num_threads()) {
    step /= 2;
  }
  pool.RunTasks(static_cast<int>(ProductTasks(outputs, step)), [&](int task) {
    // (Not a structured binding: clang's C++20 lambdas cannot capture one.)
    const std::pair<const Product*, int64_t> range = ProductTask(outputs, task, step);
    const Product* const o = range.first;
    const int64_t j0 = range.second;
    const int64_t tiles = (std::min(o->w->rows(), j0 + step) - j0 + kNr - 1) / kNr;
    const int64_t groups = o->w->num_groups();
    const PackedMatrix& w = *o->w;
    // Every row block over `n` tiles from jt and groups [g0, g1): the first reads the weights
    // from memory and asks for them ahead; the others find them in L2. The 4-bit types' sub-block
    // scales in f32 are made once for all of them.
    auto row_blocks_over = [&](int64_t jt, int64_t n, int64_t g0, int64_t g1) {
      const float* table = kInt4 ? ScaleTable(w, jt, n, g0, g1) : nullptr;
      for (int64_t p = 0; p < row_blocks; ++p) {
        const int rows = static_cast<int>(std::min<int64_t>(kGemmRows, m - p * kGemmRows));
        ManyRowTiles<kInt4>(rows, n, x, p * kGemmRows, w, jt, g0, g1,
                            o->y + p * kGemmRows * o->y_stride + jt, o->y_stride, g0 > 0,
                            g1 == groups && o->bias != nullptr ? o->bias + jt : nullptr, table,
                            /*stream=*/p == 0);
      }
    };
    // Up to kStreamRowBlocks row blocks (batched decode): panel after panel, each panel's weights
    // over all of k as one sequential stream (at most 32 x k bytes of values and scales, which
    // stay in L2). From memory at 3-8 rows int8 and int4k run well ahead of the k-blocked order,
    // and int6 ahead of the streaming order at 3-16 rows.
    if (row_blocks <= kStreamRowBlocks) {
      for (int64_t t = 0; t < tiles; t += kPanel / kNr) {
        row_blocks_over(j0 + t * kNr, std::min<int64_t>(kPanel / kNr, tiles - t), 0, groups);
      }
      return;
    }
    // More: the task's k-blocks one after another. The first row block's prefetch there runs
    // int8, int4k and int6 faster from memory at a few dozen rows, and level at hundreds.
    const int64_t kc_groups = KcGroups(w);
    for (int64_t g0 = 0; g0 < groups; g0 += kc_groups) {
      row_blocks_over(j0, tiles, g0, std::min(groups, g0 + kc_groups));
    }
  });
}

void PrepareManyRowRows(QuantizedRows& rows, int64_t padded_m, Quantization q,
                        [[maybe_unused]] ThreadPool& pool) {
  [[maybe_unused]] const int64_t padded_k = rows.padded_k;
  const int64_t blocks = rows.blocks;
  [[maybe_unused]] const int8_t* const x = rows.q;
  const float* const d = rows.d;
  const int32_t* const sum = rows.sum;
#if !defined(INFER_YMM_VNNI)
  // Int8PanelTile's |q|, f and neg (QuantizedRows), block by block, whatever the layout.
  if (q == Quantization::kInt8) {
    static_assert(kQuantBlock == 32);
    auto* abs_q = tls_abs_scratch.Array<uint8_t>(static_cast<size_t>(padded_m * padded_k));
    auto* flip = tls_flip_scratch.Array<uint8_t>(static_cast<size_t>(padded_m * padded_k));
    auto* neg = tls_neg_scratch.Array<int32_t>(static_cast<size_t>(padded_m * blocks));
    pool.ParallelFor(padded_m, kQuantizeRowsPerTask, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin * padded_k; i < end * padded_k; i += kQuantBlock) {
        const VI v = _mm256_loadu_si256(reinterpret_cast<const VI*>(x + i));
        const VI a = _mm256_abs_epi8(v);
        const VI negative = _mm256_cmpgt_epi8(_mm256_setzero_si256(), v);
        _mm256_storeu_si256(reinterpret_cast<VI*>(abs_q + i), a);
        _mm256_storeu_si256(reinterpret_cast<VI*>(flip + i),
                            _mm256_xor_si256(negative, _mm256_set1_epi8(static_cast<char>(0x80))));
        // The four 64-bit sums of 8 bytes each of |q| where q < 0.
        const VI sums = _mm256_sad_epu8(_mm256_and_si256(a, negative), _mm256_setzero_si256());
        const __m128i two =
            _mm_add_epi64(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
        neg[i / kQuantBlock] = static_cast<int32_t>(
            _mm_cvtsi128_si64(_mm_add_epi64(two, _mm_unpackhi_epi64(two, two))));
      }
    });
    rows.abs_q = abs_q;
    rows.flip = flip;
    rows.neg = neg;
  }
#endif
  // ManyRowTile's int4 factor d * sum, block by block (the rows of zeros give 0).
  if (IsInt4(q)) {
    const int64_t count = padded_m * blocks;
    auto* d_sum = tls_d_sum_scratch.Array<float>(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) d_sum[i] = d[i] * static_cast<float>(sum[i]);
    rows.d_sum = d_sum;
  }
}

template void ManyRowGemm<false>(const QuantizedRows&, int64_t, std::span<const Product>,
                                 ThreadPool&);
template void ManyRowGemm<true>(const QuantizedRows&, int64_t, std::span<const Product>,
                                ThreadPool&);

}  // namespace infer::kernels::cpu::INFER_ISA_NS
