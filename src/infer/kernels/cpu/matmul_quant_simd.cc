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
// the AVX-512 path's, a row alone or in a batch.
#include <algorithm>
#include <cstring>
#include <span>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

// (GCC names the macro __AMX_INT8__, clang __AMXINT8__.)
#if defined(__AMX_INT8__) || defined(__AMXINT8__) || defined(INFER_AMX_EMULATE)
#define INFER_AMX_TILES 1
#include "infer/kernels/cpu/amx_tiles.h"
#endif

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

constexpr int64_t kPanel = PackedMatrix::kPanelRows;
// A tile: kNr features (AVX-512: one panel; AVX2: half of one) as two vectors.
constexpr int kNr = 2 * kLanes;
static_assert(kPanel % kNr == 0);

#if defined(__AVX512F__)
using VI = __m512i;
inline VI LoadI(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline VI Set1I(int32_t v) { return _mm512_set1_epi32(v); }
inline VI ZeroI() { return _mm512_setzero_si512(); }
inline VI LowNibbles(VI v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
inline VI HighNibbles(VI v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
}
[[maybe_unused]] inline VI HighNibblesTimes16(VI v) {
  return _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(0xf0)));
}
[[maybe_unused]] inline VI AddI(VI a, VI b) { return _mm512_add_epi32(a, b); }
inline VI AndI(VI a, VI b) { return _mm512_and_si512(a, b); }
[[maybe_unused]] inline VI AddI16(VI a, VI b) { return _mm512_add_epi16(a, b); }
// u8 x s8 products, adjacent pairs summed to int16 (saturating: callers keep within range).
[[maybe_unused]] inline VI MulU8S8PairsI16(VI u, VI s) { return _mm512_maddubs_epi16(u, s); }
[[maybe_unused]] inline VI WidenI16Pairs(VI v) {
  return _mm512_madd_epi16(v, _mm512_set1_epi16(1));
}
// Exact on multiples of 16.
[[maybe_unused]] inline VI Shr4I32(VI v) { return _mm512_srai_epi32(v, 4); }
inline VI SubI(VI a, VI b) { return _mm512_sub_epi32(a, b); }
inline V ToFloat(VI v) { return _mm512_cvtepi32_ps(v); }
// The 6 bits of each lane from bit `shift` on; the top 2 bits of each lane, moved to `to`.
inline VI SixBits(VI v, int shift) {
  return _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(63));
}
inline VI TopTwoBits(VI v, int to) {
  return _mm512_sll_epi32(_mm512_srli_epi32(v, 30), _mm_cvtsi32_si128(to));
}
inline VI OrI(VI a, VI b) { return _mm512_or_si512(a, b); }
template <int kShift>
inline VI ShiftI16(VI v) {  // left by kShift, or right by -kShift
  return kShift >= 0 ? _mm512_slli_epi16(v, kShift) : _mm512_srli_epi16(v, -kShift);
}
#if defined(__AVX512VNNI__)
// acc[i] += u[4i] s[4i] + ... + u[4i+3] s[4i+3] (u unsigned, s signed bytes).
inline VI DotU8S8(VI acc, VI u, VI s) { return _mm512_dpbusd_epi32(acc, u, s); }
#else
inline VI DotU8S8(VI acc, VI u, VI s) {
  const VI u_even = _mm512_and_si512(u, _mm512_set1_epi16(0x00ff));
  const VI u_odd = _mm512_srli_epi16(u, 8);
  const VI s_even = _mm512_srai_epi16(_mm512_slli_epi16(s, 8), 8);
  const VI s_odd = _mm512_srai_epi16(s, 8);
  acc = _mm512_add_epi32(acc, _mm512_madd_epi16(u_even, s_even));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(u_odd, s_odd));
}
#endif
#else
using VI = __m256i;
inline VI LoadI(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const VI*>(p)); }
inline VI Set1I(int32_t v) { return _mm256_set1_epi32(v); }
inline VI ZeroI() { return _mm256_setzero_si256(); }
inline VI LowNibbles(VI v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline VI HighNibbles(VI v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
}
[[maybe_unused]] inline VI HighNibblesTimes16(VI v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(0xf0)));
}
[[maybe_unused]] inline VI AddI(VI a, VI b) { return _mm256_add_epi32(a, b); }
inline VI AndI(VI a, VI b) { return _mm256_and_si256(a, b); }
[[maybe_unused]] inline VI AddI16(VI a, VI b) { return _mm256_add_epi16(a, b); }
[[maybe_unused]] inline VI MulU8S8PairsI16(VI u, VI s) { return _mm256_maddubs_epi16(u, s); }
[[maybe_unused]] inline VI WidenI16Pairs(VI v) {
  return _mm256_madd_epi16(v, _mm256_set1_epi16(1));
}
// Exact on multiples of 16.
[[maybe_unused]] inline VI Shr4I32(VI v) { return _mm256_srai_epi32(v, 4); }
inline VI SubI(VI a, VI b) { return _mm256_sub_epi32(a, b); }
inline V ToFloat(VI v) { return _mm256_cvtepi32_ps(v); }
inline VI SixBits(VI v, int shift) {
  return _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(63));
}
inline VI TopTwoBits(VI v, int to) {
  return _mm256_sll_epi32(_mm256_srli_epi32(v, 30), _mm_cvtsi32_si128(to));
}
inline VI OrI(VI a, VI b) { return _mm256_or_si256(a, b); }
template <int kShift>
inline VI ShiftI16(VI v) {  // left by kShift, or right by -kShift
  return kShift >= 0 ? _mm256_slli_epi16(v, kShift) : _mm256_srli_epi16(v, -kShift);
}
#if defined(__AVXVNNI__)
inline VI DotU8S8(VI acc, VI u, VI s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#else
// vpdpbusd as Intel's manual defines it: each 32-bit lane adds the four products of its
// unsigned bytes of u and signed bytes of s (each within 16 bits, exact here in vpmaddwd's
// 32-bit pair sums) to acc, wrapping. Integer adds in any order give the same bits, so this is
// the instruction exactly (Isa::kAvxVnni's kernels run on it in the avxvnni_emulated build).
inline VI DotU8S8(VI acc, VI u, VI s) {
  const VI u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00ff));
  const VI u_odd = _mm256_srli_epi16(u, 8);
  const VI s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8);
  const VI s_odd = _mm256_srai_epi16(s, 8);
  acc = _mm256_add_epi32(acc, _mm256_madd_epi16(u_even, s_even));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(u_odd, s_odd));
}
#endif
#endif
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

// Rows per register tile (accumulators: 2 f32 + 2 int32 vectors per row and tile).
constexpr int kMr = kLanes == 16 ? 4 : 2;
// The streaming order runs up to this many rows as one row block (one pass over the weights):
// on AVX-512 (32 registers) 6, so that 5 and 6 rows (a speculative draft's check, a few
// sequences decoding) do not pass over each k-block a second time at the one-row rate.
constexpr int kStreamRows = kLanes == 16 ? 6 : kMr;
// Up to this many row blocks take the streaming order, panel after panel when more than one (the
// passes over a panel ask for the next one: NextPanel). AVX-512: 64 rows, up to which the panel
// passes measured as fast as the many-row order or faster; from 128 rows the two are level.
// AMX keeps 16 rows: its tile path has not been measured against the panel passes. AVX2 (int4
// alone gets here with more than a row block, StreamingOrder): 24 rows, where the panel passes
// still led ManyRowGemm; at 32-64 rows the two are level.
#if defined(INFER_AMX_TILES)
constexpr int64_t kStreamMaxBlocks = 4;
#elif defined(__AVX512F__)
constexpr int64_t kStreamMaxBlocks = 16;
#else
constexpr int64_t kStreamMaxBlocks = 12;
#endif
// Whether m rows of weights of type q take the streaming order (QuantGemm); more take the
// many-row order. On AVX2 without VNNI, int8 and int4k leave the streaming order after one row
// block: their streaming tiles (vpmaddwd on 16-bit halves; int4k's scale work) are bound by
// compute from 3 rows on, where the many-row tiles read the weights once at the same cost
// (both measured faster from 4 rows; int4 was mixed, so it stays). int6 too, since ManyRowGemm
// streams it panel after panel (faster from memory on every shape, at one and two threads).
// int8 leaves it at 2 rows: in one row block (up to kGemmRows rows) Int8PanelTile streams
// whole panels with a far prefetch, well ahead of the k-blocked order from memory from 2 rows.
inline bool StreamingOrder(int64_t m, [[maybe_unused]] Quantization q) {
#if !defined(__AVX512F__) && !defined(INFER_YMM_VNNI)
  if (q == Quantization::kInt8) return m <= 1;
  if (q == Quantization::kInt4K || q == Quantization::kInt6) return m <= kMr;
#elif defined(INFER_YMM_VNNI)
  // AVX-VNNI: from 3 rows ManyRowGemm's panel-after-panel stream, not 2 to 4 k-blocked row
  // blocks: from memory faster on the output head for every type, on the down projection
  // mostly, and for int6 on every shape.
  return m <= kMr;
#endif
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
// Prefetch distance along a panel's stream, in bytes, for a tile of `rows` rows.
// - AVX-512 (4 panel streams per thread at one row): 1 KiB. Alternated with 4 KiB in a model's
//   decode it led more often and came nearer the read-bandwidth probe; 512 bytes measured the
//   same as 1 KiB, and 2 and 4 KiB stayed behind it for int8 and int4k.
// - AVX2 at one row (one panel stream per thread): 8 KiB. From 1 to 8 KiB every doubling ran
//   faster, int8 reaching the probe's rate at 8 KiB; 16 KiB was no better overall. With more
//   rows 1 KiB: 8 KiB was slower at m = 4 and 8 (several row blocks over each k-block) and
//   level at m = 2.
// - AVX-512 int6 at one row (its top bits are a second set of lines per sub-block): 2 KiB,
//   ahead of 1 KiB.
// kStreamAhead: also the many-row tiles' distance when ManyRowGemm streams panel after panel.
constexpr int64_t kStreamAhead = 8192;
constexpr int64_t PrefetchBytes(int rows, bool six) {
  if (rows != 1) return 1024;
  return kLanes == 8 ? kStreamAhead : six ? 2048 : 1024;
}

// An empty asm that takes v in a register and may change it: the compiler cannot move the
// work that makes v past this point (nor hoist the next step's products above it, to spill
// them).
[[maybe_unused]] inline void KeepInRegister(VI& v) { asm volatile("" : "+v"(v)); }

inline void PrefetchLine(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

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
// (with int6's work in the same loop, AVX-512 int8 decode measured slower).
// kFar: one of the passes over the panel (NextPanel; kTiles 1), which asks for the next panel
// instead of its own lines.
template <bool kInt4, int kRows, int kTiles, bool kSix = false, bool kFar = false>
inline void QuantTile(const QuantizedRows& x, int64_t row0, const PackedMatrix& w, int64_t j0,
                      int64_t g0, int64_t g1, float* y, int64_t y_stride, bool accumulate,
                      const float* bias, const NextPanel& far = {}) {
  static_assert(!kFar || kTiles == 1);
  const auto* data = static_cast<const uint8_t*>(w.data());
  const int64_t subs = w.group_size() / kQuantBlock;
  const int64_t sub_bytes = w.sub_block_bytes();
  const int64_t group_bytes = w.group_bytes();
  const int64_t values_bytes = subs * sub_bytes;
  [[maybe_unused]] const bool super = w.quantization() == Quantization::kInt4K;
  static_assert(!(kInt4 && kSix));
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
  for (int64_t g = g0; g < g1; ++g) {
    if constexpr (kFar) far.Ask(g - g0, g1 - g0, (g1 - g0) * group_bytes);
    for (int64_t b = 0; b < subs; ++b) {
      const int64_t block = g * subs + b;
      VI dot[kTiles][kRows][2];
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) dot[t][r][0] = dot[t][r][1] = ZeroI();
      }
      const int8_t* xq = x.q + row0 * x.padded_k + block * kQuantBlock;
      if constexpr (kInt4 && kInt4OnMaddubs) {
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
      } else if constexpr (kInt4 && kRows <= 2) {
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
        // The 4-bit types on vpdpbusd, and kInt6: nibble slot j's quads j and j + 4, for kInt6
        // with their top bits (slot j % 2, loaded and prefetched at j = 0 and 1, read again at
        // 2 and 3). kInt6 without VNNI takes vpmaddubsw: a quad's products u x, u <= 63,
        // |x| <= 127, stay within 4 * 63 * 127 = 32004 in int16.
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
#pragma GCC unroll 8
          for (int t = 0; t < kTiles; ++t) {
            VI lo0, hi0, lo1, hi1;
            QuadPair<!kFar>(base[t] + b * sub_bytes, j, /*six=*/!kInt4, kAhead, lo0, hi0, lo1, hi1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const VI xlo = Set1I(Quad(xq + r * x.padded_k + 4 * j));
              const VI xhi = Set1I(Quad(xq + r * x.padded_k + 4 * (j + 4)));
              if constexpr (!kInt4 && kInt4OnMaddubs) {
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
  if constexpr (kLanes == 16) {
    return rows <= 1 ? 4 : rows <= 2 ? 2 : 1;
  } else {
    return rows <= 1 ? 2 : 1;
  }
}

// kRows rows against `tiles` column tiles from j0, TilesPerCall(kRows) at a time.
template <bool kInt4, int kRows, bool kSix, bool kFar>
inline void QuantTileRun(int64_t tiles, const QuantizedRows& x, int64_t row0, const PackedMatrix& w,
                         int64_t j0, int64_t g0, int64_t g1, float* y, int64_t y_stride,
                         bool accumulate, const float* bias, const NextPanel& far) {
  constexpr int kGroup = kFar ? 1 : TilesPerCall(kRows);
  int64_t t = 0;
  if constexpr (kGroup > 1) {
    for (; t + kGroup <= tiles; t += kGroup) {
      QuantTile<kInt4, kRows, kGroup, kSix>(x, row0, w, j0 + t * kNr, g0, g1, y + t * kNr, y_stride,
                                            accumulate, bias != nullptr ? bias + t * kNr : nullptr);
    }
  }
  for (; t < tiles; ++t) {
    QuantTile<kInt4, kRows, 1, kSix, kFar>(x, row0, w, j0 + t * kNr, g0, g1, y + t * kNr, y_stride,
                                           accumulate, bias != nullptr ? bias + t * kNr : nullptr,
                                           far);
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
    if constexpr (!kInt4) {
      if (w.quantization() == Quantization::kInt6) {
        QuantTileRun<false, kRows, true, kFar>(tiles, x, row0, w, j0, g0, g1, y, y_stride,
                                               accumulate, bias, far);
        return;
      }
    }
    QuantTileRun<kInt4, kRows, false, kFar>(tiles, x, row0, w, j0, g0, g1, y, y_stride, accumulate,
                                            bias, far);
  }
}

#if !defined(__AVX512F__)

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
constexpr int kGemmRows = 4;

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

#endif  // !__AVX512F__

thread_local Scratch tls_q_scratch;
thread_local Scratch tls_d_scratch;
thread_local Scratch tls_sum_scratch;
thread_local Scratch tls_abs_scratch;
thread_local Scratch tls_flip_scratch;
thread_local Scratch tls_neg_scratch;
thread_local Scratch tls_d_sum_scratch;

#if defined(INFER_AMX_TILES)

// The tile path: rows and features per tile (16 x 16 int32 sums over one block of 32 channels).
constexpr int64_t kTileRows = 16;
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

#endif  // INFER_AMX_TILES

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
  // (kInt6, the output head's type, takes the vector tiles below.)
  if (outputs.front().w->quantization() != Quantization::kInt6) {
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

// One row's blocks: the scalar reference's arithmetic (the same f32 operations), with the max
// and the rounding in vectors. Block b goes to q + b * step * kQuantBlock, d[b * step] and
// sum[b * step] (QuantizedRows: step is its group_rows).
void QuantizeRow(const float* x, int64_t k, int64_t padded_k, int64_t step, int8_t* q, float* d,
                 int32_t* sum) {
  alignas(64) float values[kQuantBlock];
  for (int64_t begin = 0; begin < padded_k; begin += kQuantBlock) {
    const int64_t count = std::clamp<int64_t>(k - begin, 0, kQuantBlock);
    V amax = Zero();
    for (int64_t c = 0; c < kQuantBlock; c += kLanes) {
      const V v = count > c ? LoadN(x + begin + c, count - c) : Zero();
      Store(values + c, v);
      amax = Max(amax, Abs(v));
    }
    const float scale = ReduceMax(amax) / 127.0F;
    const float inverse = scale > 0.0F ? 1.0F / scale : 0.0F;
    const V vinv = Set1(inverse);
    int32_t total = 0;
    const int64_t block = begin / kQuantBlock;
    int8_t* out = q + block * step * kQuantBlock;
#if defined(__AVX512F__)
    for (int64_t c = 0; c < kQuantBlock; c += kLanes) {
      const V r = Round(Mul(Load(values + c), vinv));
      alignas(64) float rounded[kLanes];
      Store(rounded, r);
      for (int l = 0; l < kLanes; ++l) {
        const auto v = static_cast<int32_t>(rounded[l]);
        out[c + l] = static_cast<int8_t>(v);
        total += v;
      }
    }
#else
    // The rounded values are whole numbers within [-127, 127]: exact as int32, and the packs
    // to 16 and 8 bits never saturate.
    VI sums = ZeroI();
    for (int64_t c = 0; c < kQuantBlock; c += kLanes) {
      const VI v = _mm256_cvtps_epi32(Round(Mul(Load(values + c), vinv)));
      sums = AddI(sums, v);
      const __m128i halves =
          _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), _mm_packs_epi16(halves, halves));
    }
    alignas(32) int32_t lanes[kLanes];
    _mm256_store_si256(reinterpret_cast<VI*>(lanes), sums);
    for (const int32_t v : lanes) total += v;
#endif
    d[block * step] = scale;
    sum[block * step] = total;
  }
}

// Rows [begin, end) of x, placed as `layout` says (its own pointers are not used).
void QuantizeRows(const float* x, int64_t begin, int64_t end, int64_t k, int64_t x_stride,
                  const QuantizedRows& layout, int8_t* q, float* d, int32_t* sum) {
  for (int64_t i = begin; i < end; ++i) {
    const int64_t at = layout.Index(i, 0);
    QuantizeRow(x + i * x_stride, k, layout.padded_k, layout.group_rows, q + at * kQuantBlock,
                d + at, sum + at);
  }
}

}  // namespace

void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t padded_k,
                         int8_t* q, float* d, int32_t* sum) {
  const QuantizedRows row_after_row{.padded_k = padded_k, .blocks = padded_k / kQuantBlock};
  QuantizeRows(x, 0, m, k, x_stride, row_after_row, q, d, sum);
}

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
  constexpr int64_t kRowsPerTask = 16;
  if (m <= kRowsPerTask) {
    QuantizeRows(x, 0, m, k, x_stride, rows, q, d, sum);
  } else {
    pool.ParallelFor(m, kRowsPerTask, [&](int64_t begin, int64_t end) {
      QuantizeRows(x, begin, end, k, x_stride, rows, q, d, sum);
    });
  }
  rows.q = q;
  rows.d = d;
  rows.sum = sum;
#if !defined(__AVX512F__) && !defined(INFER_YMM_VNNI)
  // Int8PanelTile's |q|, f and neg (QuantizedRows), block by block, whatever the layout.
  if (!streaming && first.quantization() == Quantization::kInt8) {
    static_assert(kQuantBlock == 32);
    auto* abs_q = tls_abs_scratch.Array<uint8_t>(static_cast<size_t>(padded_m * padded_k));
    auto* flip = tls_flip_scratch.Array<uint8_t>(static_cast<size_t>(padded_m * padded_k));
    auto* neg = tls_neg_scratch.Array<int32_t>(static_cast<size_t>(padded_m * blocks));
    pool.ParallelFor(padded_m, kRowsPerTask, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin * padded_k; i < end * padded_k; i += kQuantBlock) {
        const VI v = _mm256_loadu_si256(reinterpret_cast<const VI*>(q + i));
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
#if !defined(__AVX512F__)
  // ManyRowTile's int4 factor d * sum, block by block (the rows of zeros give 0).
  if (!streaming && IsInt4(first.quantization())) {
    const int64_t count = padded_m * blocks;
    auto* d_sum = tls_d_sum_scratch.Array<float>(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) d_sum[i] = d[i] * static_cast<float>(sum[i]);
    rows.d_sum = d_sum;
  }
#endif
  if (IsInt4(first.quantization())) {
    QuantGemm<true>(rows, m, outputs, pool);
  } else {
    QuantGemm<false>(rows, m, outputs, pool);
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
