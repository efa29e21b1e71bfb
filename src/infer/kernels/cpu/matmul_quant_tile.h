// The quantized MatMul's streaming tile (QuantTile: kRows rows x kTiles column tiles of kNr
// features, over a range of weight groups) and what every order of the quantized MatMul shares:
// the activations' layout (QuantizedRows), the weights' loads and block terms, the per-ISA row
// and order thresholds. Included by the quantized MatMul's files only, once per ISA
// (namespace cpu::INFER_ISA_NS); matmul_quant_simd.cc states the arithmetic.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/simd.h"
#include "infer/kernels/cpu/tuning.h"

// (GCC names the macro __AMX_INT8__, clang __AMXINT8__.)
#if defined(__AMX_INT8__) || defined(__AMXINT8__) || defined(INFER_AMX_EMULATE)
#define INFER_AMX_TILES 1
#include "infer/kernels/cpu/amx_tiles.h"
#endif

namespace infer::kernels::cpu::INFER_ISA_NS {

constexpr int64_t kPanel = PackedMatrix::kPanelRows;
// A tile: kNr features (AVX-512: one panel; AVX2: half of one) as two vectors.
constexpr int kNr = 2 * kLanes;
static_assert(kPanel % kNr == 0);

// kInt6: the stored values (q + 32, 0 to 63) of quads j and j + 4 of kLanes features, from `raw`
// (their nibble slot j) and `top` (their 2-bit slot j % 2, bits 2 (j / 2) and 4 + 2 (j / 2)).
inline void Int6Quads(VI raw, VI top, int64_t j, VI& lo, VI& hi) {
  const VI bits45 = Set1I(0x30303030);
  lo = OrI(LowNibbles(raw), AndI(j < 2 ? ShiftI16<4>(top) : ShiftI16<2>(top), bits45));
  hi = OrI(HighNibbles(raw), AndI(j < 2 ? top : ShiftI16<-2>(top), bits45));
}
// The many-row tile on vpdpbusd (AVX-VNNI, or its emulation) instead of vpmaddubsw.
#if defined(__AVXVNNI__) || defined(INFER_AVXVNNI_EMULATE)
#define INFER_YMM_VNNI 1
#endif
// Whether int4 sums run on vpmaddubsw (AVX2 without VNNI): a block's 8 int16 pair sums of
// nibble x activation stay within 8 * 2 * 15 * 127 = 30480, so they add in int16 exactly and
// are widened once per block (ManyRowTile says more).
#if !defined(__AVX512F__) && !defined(INFER_YMM_VNNI)
constexpr bool kInt4OnMaddubs = true;
#else
constexpr bool kInt4OnMaddubs = false;
#endif

// Rows per register tile, rows of a streaming row block, and the row blocks that take the
// streaming order (tuning.h).
constexpr int kMr = kTuning.quant_mr;
constexpr int kStreamRows = kTuning.quant_stream_rows;
constexpr int64_t kStreamMaxBlocks = kTuning.quant_stream_max_blocks;
// Whether m rows of weights of type q take the streaming order (QuantGemm); more take the
// many-row order. Type limits first where this ISA has them (tuning.h), then the row blocks.
// (int8 in one row block, up to kGemmRows rows, on AVX2: Int8PanelTile streams whole panels
// with a far prefetch, ahead of the k-blocked order from memory from 2 rows.)
inline bool StreamingOrder(int64_t m, Quantization q) {
  if (q == Quantization::kInt6K) return true;  // the vector tiles alone read its 16-channel scales
#if !defined(__AVX512F__)
  if (IsInt5(q)) return true;  // AVX2's many-row tiles do not read their values
#endif
  if (q == Quantization::kInt8 && kTuning.quant_stream_max_rows_int8 > 0) {
    return m <= kTuning.quant_stream_max_rows_int8;
  }
  if ((HasInt4KScales(q) || q == Quantization::kInt6) && kTuning.quant_stream_max_rows_k > 0) {
    return m <= kTuning.quant_stream_max_rows_k;
  }
  if (kTuning.quant_stream_max_rows_all > 0) return m <= kTuning.quant_stream_max_rows_all;
  return (m + kMr - 1) / kMr <= kStreamMaxBlocks;
}
// Output features per task in the many-row order, and input channels per k-block: a block of
// kNc x kKc int8 weights (256 KiB) stays in L2 while the row blocks pass.
constexpr int64_t kNc = 256;
constexpr int64_t kKc = 1024;
// w's groups per k-block: about kKc channels (kInt4K's groups of 256: 4), split evenly, with a
// remainder under a quarter of a k-block folded into the others. gemma-3-1b's k = 1152 is then
// one k-block, not 1024 channels and a second pass over every row block for 128 more.
// (A k-block's sums pass through y in f32, exactly, so the blocking never changes the bits.)
inline int64_t KcGroups(const PackedMatrix& w) {
  const int64_t per_block = std::max<int64_t>(1, kKc / w.group_size());
  const int64_t blocks =
      std::max<int64_t>(1, (w.num_groups() - per_block / 4 + per_block - 1) / per_block);
  return (w.num_groups() + blocks - 1) / blocks;
}
// Tiles per thread in the streaming order, claimed dynamically.
constexpr int64_t kStreamTasksPerThread = 4;
// Prefetch distance along a panel's stream, in bytes, for a tile of `rows` rows (tuning.h).
// kStreamAhead: also the many-row tiles' distance when ManyRowGemm streams panel after panel.
constexpr int64_t kStreamAhead = 8192;
constexpr int64_t PrefetchBytes(int rows, bool six) {
  if (rows != 1) return kTuning.quant_ahead_rows;
  return six ? kTuning.quant_ahead_one_row_int6 : kTuning.quant_ahead_one_row;
}

// An empty asm that takes v in a register and may change it: the compiler cannot move the
// work that makes v past this point (nor hoist the next step's products above it, to spill
// them).
[[maybe_unused]] inline void KeepInRegister(VI& v) { asm volatile("" : "+v"(v)); }

// A weight stream's line, to L2 or L1 as this ISA's row says (KernelTuning::quant_prefetch_l2).
inline void PrefetchLine(const void* p) {
  if constexpr (kTuning.quant_prefetch_l2) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
  } else {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  }
}

// One step of a tile: the two vectors at `p` (features [0, kLanes) and [kLanes, kNr) of the
// tile, four bytes each), with the same two lines `ahead` bytes on asked for (kPrefetch).
template <bool kPrefetch = true>
inline void LoadStep(const uint8_t* p, int64_t ahead, VI& v0, VI& v1) {
  if constexpr (kPrefetch) {
    PrefetchLine(p + ahead);
    PrefetchLine(p + ahead + 64);
  }
  v0 = LoadI(p);
  v1 = LoadI(p + kLanes * 4);
}

// The streaming order's passes over one panel, one per row block (AVX-512's QuantGemm): with
// several, the first would read the panel from memory with the compute idle, and the others
// from L2 with the memory idle. Instead pass `pass` of `passes` asks for its share of the next
// panel (`next`, at the same group; null: none), spread evenly over the pass's groups, so the
// memory streams the next panel while every pass computes on this one from L2. (One pass asks
// for the whole next panel.)
struct NextPanel {
  const uint8_t* next = nullptr;
  int64_t pass = 0;
  int64_t passes = 1;
  // Share i of `count` (the pass's i-th group of count) of the next panel's `bytes`.
  void Ask(int64_t i, int64_t count, int64_t bytes) const {
    if (next == nullptr) return;
    const int64_t shares = count * passes;
    const int64_t share = pass * count + i;
    const int64_t from = share * bytes / shares / 64 * 64;
    const int64_t to = (share + 1) * bytes / shares;
    for (int64_t at = from; at < to; at += 64) PrefetchLine(next + at);
  }
};

// The stored values of quads j and j + 4 (the two halves of a kNr-feature tile) from a 4-bit
// type's nibble slot j or, `six`, kInt6's (with their top bits, PackedMatrix::Int6TopDelta on);
// `wb` is the tile's first byte in the sub-block (ops.h). kPrefetch: the streaming order's
// loads, which ask for the lines `ahead` bytes on (the top bits' at j = 0 and 1; j = 2 and 3
// read the same slots again).
template <bool kPrefetch>
inline void QuadPair(const uint8_t* wb, int64_t j, bool six, int64_t ahead, VI& lo0, VI& hi0,
                     VI& lo1, VI& hi1) {
  const uint8_t* nibbles = wb + j * kPanel * 4;
  VI raw0, raw1;
  if constexpr (kPrefetch) {
    LoadStep(nibbles, ahead, raw0, raw1);
  } else {
    raw0 = LoadI(nibbles);
    raw1 = LoadI(nibbles + kLanes * 4);
  }
  if (six) {
    const uint8_t* top = nibbles + PackedMatrix::Int6TopDelta(j);
    if (kPrefetch && j < 2) PrefetchLine(top + ahead);
    Int6Quads(raw0, LoadI(top), j, lo0, hi0);
    Int6Quads(raw1, LoadI(top + kLanes * 4), j, lo1, hi1);
  } else {
    lo0 = LowNibbles(raw0), lo1 = LowNibbles(raw1);
    hi0 = HighNibbles(raw0), hi1 = HighNibbles(raw1);
  }
}

// The activations rounded to int8, block by block: a block's kQuantBlock values at
// q + Index(row, block) * kQuantBlock, its scale and sum of q at d / sum + Index(row, block).
// With group_rows 1 that is row after row (row i's values at q + i * padded_k). AVX2's many-row
// order keeps kGemmRows rows together, their blocks b one after another: a tile's rows then read
// one run of bytes per block, where rows padded_k apart (a multiple of 4 KiB at k = 2048 and
// 8192) would meet in the same few L1 sets and evict one another.
struct QuantizedRows {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* sum = nullptr;
  // kInt6K's MatMuls only (the streaming order, row after row): per block the sum of q over its
  // first 16 channels.
  const int32_t* sum_lo = nullptr;
  int64_t padded_k = 0;
  int64_t blocks = 0;
  // AVX2's many-row int8 tile only (Int8PanelTile), laid out as q and sum: |q|, the byte f
  // (0x80 where q >= 0, 0x7f where q < 0), and per block the sum of |q| over q < 0.
  const uint8_t* abs_q = nullptr;
  const uint8_t* flip = nullptr;
  const int32_t* neg = nullptr;
  // AVX2's many-row int4 tiles only (ManyRowTile), laid out as d: per block d * sum, the
  // factor of the minimum's term (AddInt4Term), made once instead of per tile.
  const float* d_sum = nullptr;
  int64_t group_rows = 1;
  int64_t Index(int64_t row, int64_t block) const {
    return (row / group_rows * blocks + block) * group_rows + row % group_rows;
  }
};

inline int32_t Quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// acc plus one block's term for one row and kLanes features (the formulas at the top): dot is
// the block's integer sums, d and m the features' scale and minimum (int4), dx and sx the row's
// block scale and sum of q. The one definition both the vector tiles and the AMX tiles add, so
// that their results are the same bits.
// int8's term from the signed sum r = sum of q x (the stored q + 128 less 128 s).
inline V AddInt8Term(V acc, VI signed_dot, V d, float dx) {
  return Fma(ToFloat(signed_dot), Mul(d, Set1(dx)), acc);
}
// int4's term, with dx_sx = dx * sx (in f32, as AddBlockTerm rounds it).
inline V AddInt4Term(V acc, VI dot, V d, V m, float dx, float dx_sx) {
  return Fma(m, Set1(dx_sx), Fma(ToFloat(dot), Mul(d, Set1(dx)), acc));
}
// kInt6K's block term: the block's two 16-channel halves, dot_lo and dot_hi the integer sums of
// their stored q + 32, sx_lo and sx_hi the row's sums of q over them, sc_lo and sc_hi the
// features' int8 scales: r = sc_lo (dot_lo - 32 sx_lo) + sc_hi (dot_hi - 32 sx_hi), exact in
// int32 (each half's sum of q x is at most 16 * 32 * 127 in size, so |r| < 2^24), then int8's
// term with the group's d.
inline V AddInt6KTerm(V acc, VI dot_lo, VI dot_hi, VI sc_lo, VI sc_hi, V d, float dx, int32_t sx_lo,
                      int32_t sx_hi) {
  const VI r = AddI(MulLoI(sc_lo, SubI(dot_lo, Set1I(32 * sx_lo))),
                    MulLoI(sc_hi, SubI(dot_hi, Set1I(32 * sx_hi))));
  return AddInt8Term(acc, r, d, dx);
}
// The symmetric types' dot is of the stored q + offset (QuantStoredOffset): r = dot - offset s.
template <bool kInt4>
inline V AddBlockTerm(V acc, VI dot, V d, V m, float dx, int32_t sx, int32_t offset) {
  if constexpr (kInt4) {
    return AddInt4Term(acc, dot, d, m, dx, dx * static_cast<float>(sx));
  } else {
    return AddInt8Term(acc, SubI(dot, Set1I(offset * sx)), d, dx);
  }
}

// The scale and minimum of sub-block b (of its group) for kLanes features from lane `lane`;
// `scales` is the group's first byte after its values (ops.h): the f16 d (and int4's m), or
// for kInt4K (`super`) the products d sc and dm mn, the same exact f32 values as
// PackedMatrix::SubBlockScale / SubBlockMinimum (kInt4K's 6-bit sc and mn read as
// Int4KScaleBits reads them). With b a constant (the unrolled loops over a group's sub-blocks)
// the places fold and the shifts are immediates.
template <bool kInt4>
inline void SubBlockScales(const uint8_t* scales, int64_t lane, int64_t b, bool super, V& d, V& m) {
  const auto* d_ptr = reinterpret_cast<const uint16_t*>(scales) + lane;
  d = LoadF16(d_ptr);
  m = Zero();
  if constexpr (kInt4) {
    m = LoadF16(d_ptr + kPanel);
    if (!super) return;
    const uint8_t* words = scales + 4 * kPanel + lane * 4;
    auto bits = [&](bool minimum) {
      const Int4KScalePlace place = Int4KScaleAt(b, minimum);
      if (place.shift == kInt4KSplitShift) {
        return OrI(OrI(TopTwoBits(LoadI(words), 0), TopTwoBits(LoadI(words + 4 * kPanel), 2)),
                   TopTwoBits(LoadI(words + 8 * kPanel), 4));
      }
      return SixBits(LoadI(words + place.word * 4 * kPanel), place.shift);
    };
    d = Mul(d, ToFloat(bits(false)));
    m = Mul(m, ToFloat(bits(true)));
  }
}

// kRows rows (from row0) against kTiles column tiles from feature j0, over weight groups
// [g0, g1); x row after row (group_rows 1). y holds the sum of the earlier groups when
// `accumulate`; bias (features from j0, or null) is added after the last group. kSix: kInt6
// (kInt4 false), a template argument so that int8's decode loop is compiled without int6's
// (with int6's work in the same loop, AVX-512 int8 decode measured slower); with kInt4, the 5-bit
// types (kInt6's layout of values; kInt5K's scales and arithmetic are kInt4K's, kInt5's kInt4's).
// kFar: one of the passes over the panel (NextPanel; kTiles 1), which asks for the next panel
// instead of its own lines. kHalves (with kSix): kInt6K, whose blocks' two 16-channel halves
// (quads 0-3 and 4-7) sum apart (dot and dot_hi), each to be multiplied by its own scale.
template <bool kInt4, int kRows, int kTiles, bool kSix = false, bool kFar = false,
          bool kHalves = false>
inline void QuantTile(const QuantizedRows& x, int64_t row0, const PackedMatrix& w, int64_t j0,
                      int64_t g0, int64_t g1, float* y, int64_t y_stride, bool accumulate,
                      const float* bias, const NextPanel& far = {}) {
  static_assert(!kFar || kTiles == 1);
  const auto* data = static_cast<const uint8_t*>(w.data());
  const int64_t subs = w.group_size() / kQuantBlock;
  const int64_t sub_bytes = w.sub_block_bytes();
  const int64_t group_bytes = w.group_bytes();
  const int64_t values_bytes = subs * sub_bytes;
  [[maybe_unused]] const bool super = HasInt4KScales(w.quantization());
  static_assert((kSix || !kHalves) && !(kInt4 && kHalves));
  constexpr int64_t kAhead = PrefetchBytes(kRows, kSix);
  constexpr int32_t kOffset =
      kInt4 ? 0 : QuantStoredOffset(kSix ? Quantization::kInt6 : Quantization::kInt8);
  const uint8_t* base[kTiles];
  int64_t cols[kTiles];
  int64_t lanes[kTiles];  // the tile's first lane in its panel
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const int64_t jt = j0 + t * kNr;
    lanes[t] = jt % kPanel;
    base[t] = data + (jt / kPanel) * w.panel_bytes() + g0 * group_bytes + (jt % kPanel) * 4;
    cols[t] = std::min<int64_t>(kNr, w.rows() - jt);
  }
  V acc[kTiles][kRows][2];
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const float* yr = y + r * y_stride + t * kNr;
      const int64_t c0 = std::min<int64_t>(cols[t], kLanes);
      acc[t][r][0] = accumulate ? LoadN(yr, c0) : Zero();
      acc[t][r][1] = accumulate && cols[t] > kLanes ? LoadN(yr + kLanes, cols[t] - kLanes) : Zero();
    }
  }
  // kInt4K: a group's integer sums, kept until its sub-block scales are read after its values
  // (the group's terms below).
  constexpr int kSubs = kSuperBlock / kQuantBlock;
  VI group_dots[kInt4 ? kTiles : 1][kInt4 ? kRows : 1][kInt4 ? kSubs : 1][2];
  // kInt6K (kHalves): the same, for each half of each block; its scales follow the group's
  // values too.
  [[maybe_unused]] VI half_dots[kHalves ? kTiles : 1][kHalves ? kRows : 1][kHalves ? kSubs : 1][2]
                               [2];
  for (int64_t g = g0; g < g1; ++g) {
    if constexpr (kFar) far.Ask(g - g0, g1 - g0, (g1 - g0) * group_bytes);
    for (int64_t b = 0; b < subs; ++b) {
      const int64_t block = g * subs + b;
      VI dot[kTiles][kRows][2];
      [[maybe_unused]] VI dot_hi[kTiles][kRows][2];  // kInt6K: the second halves' sums
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          dot[t][r][0] = dot[t][r][1] = ZeroI();
          if constexpr (kHalves) dot_hi[t][r][0] = dot_hi[t][r][1] = ZeroI();
        }
      }
      const int8_t* xq = x.q + row0 * x.padded_k + block * kQuantBlock;
      if constexpr (kInt4 && !kSix && kInt4OnMaddubs) {
        VI sum16[kTiles][kRows][2];
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) sum16[t][r][0] = sum16[t][r][1] = ZeroI();
        }
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
#pragma GCC unroll 8
          for (int t = 0; t < kTiles; ++t) {
            VI raw0, raw1;
            LoadStep<!kFar>(base[t] + b * sub_bytes + j * kPanel * 4, kAhead, raw0, raw1);
            const VI lo0 = LowNibbles(raw0), hi0 = HighNibbles(raw0);
            const VI lo1 = LowNibbles(raw1), hi1 = HighNibbles(raw1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const VI xlo = Set1I(Quad(xq + r * x.padded_k + 4 * j));
              const VI xhi = Set1I(Quad(xq + r * x.padded_k + 4 * (j + 4)));
              sum16[t][r][0] = AddI16(AddI16(sum16[t][r][0], MulU8S8PairsI16(lo0, xlo)),
                                      MulU8S8PairsI16(hi0, xhi));
              sum16[t][r][1] = AddI16(AddI16(sum16[t][r][1], MulU8S8PairsI16(lo1, xlo)),
                                      MulU8S8PairsI16(hi1, xhi));
              KeepInRegister(sum16[t][r][0]);
              KeepInRegister(sum16[t][r][1]);
            }
          }
        }
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            dot[t][r][0] = WidenI16Pairs(sum16[t][r][0]);
            dot[t][r][1] = WidenI16Pairs(sum16[t][r][1]);
          }
        }
      } else if constexpr (kInt4 && !kSix && kRows <= 2) {
        // Few rows (decode): the high nibbles stay in place (16 q) in their own accumulators,
        // shifted down once per block (the sums are exact multiples of 16): one AND and no
        // shift per load, and two independent chains.
        VI dot_hi[kTiles][kRows][2];
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) dot_hi[t][r][0] = dot_hi[t][r][1] = ZeroI();
        }
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
#pragma GCC unroll 8
          for (int t = 0; t < kTiles; ++t) {
            VI raw0, raw1;
            LoadStep<!kFar>(base[t] + b * sub_bytes + j * kPanel * 4, kAhead, raw0, raw1);
            const VI lo0 = LowNibbles(raw0), hi0 = HighNibblesTimes16(raw0);
            const VI lo1 = LowNibbles(raw1), hi1 = HighNibblesTimes16(raw1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const VI xlo = Set1I(Quad(xq + r * x.padded_k + 4 * j));
              const VI xhi = Set1I(Quad(xq + r * x.padded_k + 4 * (j + 4)));
              dot[t][r][0] = DotU8S8(dot[t][r][0], lo0, xlo);
              dot[t][r][1] = DotU8S8(dot[t][r][1], lo1, xlo);
              dot_hi[t][r][0] = DotU8S8(dot_hi[t][r][0], hi0, xhi);
              dot_hi[t][r][1] = DotU8S8(dot_hi[t][r][1], hi1, xhi);
            }
          }
        }
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            dot[t][r][0] = AddI(dot[t][r][0], Shr4I32(dot_hi[t][r][0]));
            dot[t][r][1] = AddI(dot[t][r][1], Shr4I32(dot_hi[t][r][1]));
          }
        }
      } else if constexpr (kInt4 || kSix) {
        // The 4-bit types on vpdpbusd, and those in kInt6's layout: nibble slot j's quads j and
        // j + 4, for the latter with their top bits (slot j % 2, loaded and prefetched at j = 0
        // and 1, read again at 2 and 3). kInt6's layout without VNNI takes vpmaddubsw: a quad's
        // products u x, u <= 63, |x| <= 127, stay within 4 * 63 * 127 = 32004 in int16.
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
#pragma GCC unroll 8
          for (int t = 0; t < kTiles; ++t) {
            VI lo0, hi0, lo1, hi1;
            QuadPair<!kFar>(base[t] + b * sub_bytes, j, kSix, kAhead, lo0, hi0, lo1, hi1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const VI xlo = Set1I(Quad(xq + r * x.padded_k + 4 * j));
              const VI xhi = Set1I(Quad(xq + r * x.padded_k + 4 * (j + 4)));
              if constexpr (kHalves) {
                if constexpr (kInt4OnMaddubs) {
                  dot[t][r][0] = AddI(dot[t][r][0], WidenI16Pairs(MulU8S8PairsI16(lo0, xlo)));
                  dot[t][r][1] = AddI(dot[t][r][1], WidenI16Pairs(MulU8S8PairsI16(lo1, xlo)));
                  dot_hi[t][r][0] = AddI(dot_hi[t][r][0], WidenI16Pairs(MulU8S8PairsI16(hi0, xhi)));
                  dot_hi[t][r][1] = AddI(dot_hi[t][r][1], WidenI16Pairs(MulU8S8PairsI16(hi1, xhi)));
                } else {
                  dot[t][r][0] = DotU8S8(dot[t][r][0], lo0, xlo);
                  dot[t][r][1] = DotU8S8(dot[t][r][1], lo1, xlo);
                  dot_hi[t][r][0] = DotU8S8(dot_hi[t][r][0], hi0, xhi);
                  dot_hi[t][r][1] = DotU8S8(dot_hi[t][r][1], hi1, xhi);
                }
              } else if constexpr (kSix && kInt4OnMaddubs) {
                dot[t][r][0] = AddI(dot[t][r][0], WidenI16Pairs(AddI16(MulU8S8PairsI16(lo0, xlo),
                                                                       MulU8S8PairsI16(hi0, xhi))));
                dot[t][r][1] = AddI(dot[t][r][1], WidenI16Pairs(AddI16(MulU8S8PairsI16(lo1, xlo),
                                                                       MulU8S8PairsI16(hi1, xhi))));
              } else {
                dot[t][r][0] = DotU8S8(DotU8S8(dot[t][r][0], lo0, xlo), hi0, xhi);
                dot[t][r][1] = DotU8S8(DotU8S8(dot[t][r][1], lo1, xlo), hi1, xhi);
              }
            }
          }
        }
      } else {
#pragma GCC unroll 8
        for (int64_t j = 0; j < 8; ++j) {
#pragma GCC unroll 8
          for (int t = 0; t < kTiles; ++t) {
            VI w0, w1;
            LoadStep<!kFar>(base[t] + b * sub_bytes + j * kPanel * 4, kAhead, w0, w1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const VI xb = Set1I(Quad(xq + r * x.padded_k + 4 * j));
              dot[t][r][0] = DotU8S8(dot[t][r][0], w0, xb);
              dot[t][r][1] = DotU8S8(dot[t][r][1], w1, xb);
            }
          }
        }
      }
      if (kInt4 && super) {
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            group_dots[t][r][b][0] = dot[t][r][0];
            group_dots[t][r][b][1] = dot[t][r][1];
          }
        }
        continue;
      }
      if constexpr (kHalves) {
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            half_dots[t][r][b][0][0] = dot[t][r][0];
            half_dots[t][r][b][0][1] = dot[t][r][1];
            half_dots[t][r][b][1][0] = dot_hi[t][r][0];
            half_dots[t][r][b][1][1] = dot_hi[t][r][1];
          }
        }
        continue;
      }
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
        // This group's scales, from the tile's first lane.
        const uint8_t* scales = base[t] - lanes[t] * 4 + values_bytes;
        // The loads above prefetch the values' lines; the scale lines (64 or 128 bytes per
        // group, 6-20% of the stream) need their own.
        if (!kFar && b == 0) {
          PrefetchLine(scales + kAhead);
          if constexpr (kInt4) PrefetchLine(scales + kAhead + 64);
        }
        V d0, m0, d1, m1;
        SubBlockScales<kInt4>(scales, lanes[t], b, false, d0, m0);
        SubBlockScales<kInt4>(scales, lanes[t] + kLanes, b, false, d1, m1);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          const float dx = x.d[(row0 + r) * x.blocks + block];
          const int32_t sx = x.sum[(row0 + r) * x.blocks + block];
          acc[t][r][0] = AddBlockTerm<kInt4>(acc[t][r][0], dot[t][r][0], d0, m0, dx, sx, kOffset);
          acc[t][r][1] = AddBlockTerm<kInt4>(acc[t][r][1], dot[t][r][1], d1, m1, dx, sx, kOffset);
        }
      }
    }
    if constexpr (kHalves) {
      // kInt6K: the group's terms in ascending block order (the bits of adding each after its
      // block), from the d and int8 scales that follow the values just read.
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
        const uint8_t* scales = base[t] - lanes[t] * 4 + values_bytes;
        const V d0 = LoadF16(reinterpret_cast<const uint16_t*>(scales) + lanes[t]);
        const V d1 = LoadF16(reinterpret_cast<const uint16_t*>(scales) + lanes[t] + kLanes);
#pragma GCC unroll 8
        for (int b = 0; b < kSubs; ++b) {
          const int64_t block = g * kSubs + b;
          const uint8_t* sc = scales + 2 * kPanel + 2 * b * kPanel + lanes[t];
          const VI lo0 = LoadS8AsI32(sc), hi0 = LoadS8AsI32(sc + kPanel);
          const VI lo1 = LoadS8AsI32(sc + kLanes), hi1 = LoadS8AsI32(sc + kPanel + kLanes);
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            const float dx = x.d[(row0 + r) * x.blocks + block];
            const int32_t sx = x.sum[(row0 + r) * x.blocks + block];
            const int32_t sx_lo = x.sum_lo[(row0 + r) * x.blocks + block];
            acc[t][r][0] =
                AddInt6KTerm(acc[t][r][0], half_dots[t][r][b][0][0], half_dots[t][r][b][1][0], lo0,
                             hi0, d0, dx, sx_lo, sx - sx_lo);
            acc[t][r][1] =
                AddInt6KTerm(acc[t][r][1], half_dots[t][r][b][0][1], half_dots[t][r][b][1][1], lo1,
                             hi1, d1, dx, sx_lo, sx - sx_lo);
          }
        }
      }
    }
    if constexpr (kInt4) {
      if (super) {
        // kInt4K: the group's terms in ascending sub-block order, as the other types add theirs
        // per sub-block (the same bits), from the scales that follow the values just read: the
        // stream stays in order, so the values' prefetch brings them, and with b a constant the
        // 6-bit places are immediate shifts.
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
          const uint8_t* scales = base[t] - lanes[t] * 4 + values_bytes;
#pragma GCC unroll 8
          for (int b = 0; b < kSubs; ++b) {
            const int64_t block = g * kSubs + b;
            V d0, m0, d1, m1;
            SubBlockScales<true>(scales, lanes[t], b, true, d0, m0);
            SubBlockScales<true>(scales, lanes[t] + kLanes, b, true, d1, m1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const float dx = x.d[(row0 + r) * x.blocks + block];
              const int32_t sx = x.sum[(row0 + r) * x.blocks + block];
              acc[t][r][0] =
                  AddBlockTerm<true>(acc[t][r][0], group_dots[t][r][b][0], d0, m0, dx, sx, 0);
              acc[t][r][1] =
                  AddBlockTerm<true>(acc[t][r][1], group_dots[t][r][b][1], d1, m1, dx, sx, 0);
            }
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) base[t] += group_bytes;
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const int64_t c0 = std::min<int64_t>(cols[t], kLanes);
    const int64_t c1 = cols[t] - c0;
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      float* yr = y + r * y_stride + t * kNr;
      V v0 = acc[t][r][0];
      V v1 = acc[t][r][1];
      if (bias != nullptr) {
        v0 = Add(v0, LoadN(bias + t * kNr, c0));
        if (c1 > 0) v1 = Add(v1, LoadN(bias + t * kNr + kLanes, c1));
      }
      StoreN(yr, v0, c0);
      if (c1 > 0) StoreN(yr + kLanes, v1, c1);
    }
  }
}

// Tiles per call for kRows rows: with few rows, several adjacent tiles keep more weight
// streams and independent dot chains in flight.
constexpr int TilesPerCall(int rows) {
  return rows <= 1 ? kTuning.quant_tiles_one_row : rows <= 2 ? kTuning.quant_tiles_two_rows : 1;
}

// kRows rows against `tiles` column tiles from j0, TilesPerCall(kRows) at a time (kInt6K and the
// 5-bit types: at most 2 from two rows, their second set of sums or top bits taking the registers
// of the others; at one row all of them, which streamed 10-20% faster on one thread although
// their group sums spill, as kInt4K's do).
template <bool kInt4, int kRows, bool kSix, bool kFar, bool kHalves = false>
inline void QuantTileRun(int64_t tiles, const QuantizedRows& x, int64_t row0, const PackedMatrix& w,
                         int64_t j0, int64_t g0, int64_t g1, float* y, int64_t y_stride,
                         bool accumulate, const float* bias, const NextPanel& far) {
  constexpr int kGroup = kFar ? 1
                         : kHalves || (kInt4 && kSix)
                             ? std::min(kRows == 1 ? 4 : 2, TilesPerCall(kRows))
                             : TilesPerCall(kRows);
  int64_t t = 0;
  if constexpr (kGroup > 1) {
    for (; t + kGroup <= tiles; t += kGroup) {
      QuantTile<kInt4, kRows, kGroup, kSix, false, kHalves>(
          x, row0, w, j0 + t * kNr, g0, g1, y + t * kNr, y_stride, accumulate,
          bias != nullptr ? bias + t * kNr : nullptr);
    }
  }
  for (; t < tiles; ++t) {
    QuantTile<kInt4, kRows, 1, kSix, kFar, kHalves>(
        x, row0, w, j0 + t * kNr, g0, g1, y + t * kNr, y_stride, accumulate,
        bias != nullptr ? bias + t * kNr : nullptr, far);
  }
}

// `rows` rows against `tiles` column tiles from j0. kFar: one tile over all of k, as one of the
// passes over its panel, which ask for the next panel (NextPanel).
template <bool kInt4, int kRows = kMr, bool kFar = false>
inline void QuantTiles(int rows, int64_t tiles, const QuantizedRows& x, int64_t row0,
                       const PackedMatrix& w, int64_t j0, int64_t g0, int64_t g1, float* y,
                       int64_t y_stride, bool accumulate, const float* bias,
                       const NextPanel& far = {}) {
  if constexpr (kRows > 0) {
    if (rows != kRows) {
      QuantTiles<kInt4, kRows - 1, kFar>(rows, tiles, x, row0, w, j0, g0, g1, y, y_stride,
                                         accumulate, bias, far);
      return;
    }
    if constexpr (kInt4) {
      if (IsInt5(w.quantization())) {
        QuantTileRun<true, kRows, true, kFar>(tiles, x, row0, w, j0, g0, g1, y, y_stride,
                                              accumulate, bias, far);
        return;
      }
    } else {
      if (w.quantization() == Quantization::kInt6) {
        QuantTileRun<false, kRows, true, kFar>(tiles, x, row0, w, j0, g0, g1, y, y_stride,
                                               accumulate, bias, far);
        return;
      }
      if (w.quantization() == Quantization::kInt6K) {
        QuantTileRun<false, kRows, true, kFar, true>(tiles, x, row0, w, j0, g0, g1, y, y_stride,
                                                     accumulate, bias, far);
        return;
      }
    }
    QuantTileRun<kInt4, kRows, false, kFar>(tiles, x, row0, w, j0, g0, g1, y, y_stride, accumulate,
                                            bias, far);
  }
}

// AVX2's many-row order reads its rows kGemmRows together (QuantizedRows::group_rows;
// matmul_quant_avx2.cc).
constexpr int kGemmRows = 4;
// The AMX tile path reads whole tiles of 16 rows (matmul_int8_tiles.cc).
constexpr int64_t kTileRows = 16;
// Rows per task when the activations are rounded to int8 on several threads.
constexpr int64_t kQuantizeRowsPerTask = 16;

// Rows [begin, end) of x rounded to int8 block by block, placed as `layout` says (its own
// pointers are not used) (quantize_activations.cc).
void QuantizeRows(const float* x, int64_t begin, int64_t end, int64_t k, int64_t x_stride,
                  const QuantizedRows& layout, int8_t* q, float* d, int32_t* sum);

#if defined(INFER_AMX_TILES)
// The many-row order on AMX-INT8 tiles (matmul_int8_tiles.cc): x's rows padded with zeros to
// whole tiles of kTileRows.
template <bool kInt4>
void AmxGemm(const QuantizedRows& x, int64_t m, std::span<const Product> outputs, ThreadPool& pool);
#elif !defined(__AVX512F__)
// AVX2's many-row order (matmul_quant_avx2.cc): x in groups of kGemmRows rows, the last filled
// up with rows of zeros, prepared by PrepareManyRowRows.
template <bool kInt4>
void ManyRowGemm(const QuantizedRows& x, int64_t m, std::span<const Product> outputs,
                 ThreadPool& pool);
// What ManyRowGemm's tiles read besides q, d and sum (int8 without VNNI: |q|, f and neg; the
// 4-bit types: d * sum), made once for the `padded_m` rows of `rows` in this thread's scratch.
void PrepareManyRowRows(QuantizedRows& rows, int64_t padded_m, Quantization q, ThreadPool& pool);
#endif

}  // namespace infer::kernels::cpu::INFER_ISA_NS
