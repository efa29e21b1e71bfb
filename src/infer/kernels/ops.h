// The kernel interface the model calls: CPU ops on f32 activations and bf16/f16/f32
// weights. Each op checks its arguments, then dispatches to the ISA chosen at start-up
// (ActiveIsa() in cpu/isa.h; the per-ISA kernels are declared in cpu/kernels.h). Kernels know
// nothing of models, configs or requests.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "infer/core/tensor.h"
#include "infer/core/thread_pool.h"

namespace infer::kernels {

// How MatMul rounds its activations when the weights are bf16 (f16 and f32 weights always
// take kF32).
// - kF32: f32 products of the activations and the exactly widened weights (the library's
//   default, and what every test against a float64 reference pins; the model then matches it to
//   ~1e-5). The command line defaults to AutoMatMulPrecision().
// - kBf16: the activations are rounded to bf16 (to nearest even) first; products of the two
//   bf16 values are exact in f32 and accumulate in f32. This is how Hugging Face's bf16
//   inference and llama.cpp multiply by bf16 weights, and on AVX512_BF16 CPUs it runs on
//   vdpbf16ps at about twice the f32 FMA rate, on AMX-BF16 CPUs on tdpbf16ps tiles (and in
//   their order of sums for every m). Elsewhere the same rounding is emulated.
// - kInt8: the activations are rounded to int8 per row and block of 32 channels exactly as a
//   quantized MatMul rounds them (QuantizeActivations), then multiplied in f32 with the float
//   weights. A simulation for accuracy studies (llama.cpp's scheme on float-rounded weights);
//   not a serving mode, and not offered on the command line.
enum class MatMulPrecision { kF32, kBf16, kInt8 };

std::string_view MatMulPrecisionName(MatMulPrecision precision);  // "f32", "bf16", "int8"
// What `--matmul-precision auto` (the command line's default) picks for the active ISA: kBf16
// where the CPU multiplies bf16 natively and faster than f32 (Isa::kAvx512Amx's tiles; the
// vdpbf16ps of Isa::kAvx512Bf16 on AMD's cores, cpu/isa.h Bf16DotOutrunsF32), kF32 elsewhere
// (AVX2 and plain AVX-512, where kBf16 would only emulate the rounding; Intel's vdpbf16ps, no
// faster than its f32 FMAs). Reads ActiveIsa(), so it throws as ActiveIsa() does.
MatMulPrecision AutoMatMulPrecision();
// "f32", "bf16" or "auto" (AutoMatMulPrecision()); anything else throws infer::Error naming the
// choices.
MatMulPrecision ParseMatMulPrecision(std::string_view name);

// Weight quantization (--quantization, vLLM's flag name): how PackedMatrix stores a matrix.
// - kNone: the checkpoint's bf16 / f16 / f32 values.
// - kInt8: symmetric, one f16 scale d per group of 32 input channels (llama.cpp's Q8_0):
//   d = f16(max|w| / 127), w = d * q, q in [-127, 127] chosen against the rounded d; 8.5 bits
//   per weight.
// - kInt4: asymmetric, an f16 scale d and an f16 minimum m per group (32, 64 or 128 input
//   channels; kDefaultInt4Group): w = d * q + m, q in [0, 15]; 4 + 32 / group bits per weight.
// - kInt4K: 4.5 bits per weight, as llama.cpp's Q4_K: super-blocks of 256 input channels, each
//   an f16 scale d and an f16 minimum step dm (<= 0), and per sub-block of 32 a 6-bit scale sc
//   and a 6-bit minimum mn: w = (d sc) q + (dm mn), q in [0, 15]. d sc and dm mn are exact in
//   f32 (11 significant bits times 6), so a sub-block multiplies as an int4 group of 32 does.
// - kInt6: symmetric, one f16 scale d per group of 32 input channels: of f16(max|w| / 31) and
//   a few smaller (as kInt4 searches), the least-squares one; w = d * q, q in [-31, 31] chosen
//   against the rounded d; 6.5 bits per weight (llama.cpp's
//   Q6_K, its 4-bit files' output head, takes 6.5625). infer's head under
//   --lm-head-quantization int6.
// - kInt6K: llama.cpp's Q6_K, taken as a GGUF file gives it (no quantizer makes it): super-blocks
//   of 256 input channels, each an f16 scale d and per 16 channels an int8 scale sc: w = (d sc)
//   q, q in [-32, 31] (stored as q + 32 in kInt6's layout). d sc is exact in f32 (11 significant
//   bits times 8); 6.5625 bits per weight.
// - kInt5K: llama.cpp's Q5_K, taken as a GGUF file gives it (no quantizer makes it): kInt4K's
//   super-blocks and scales (d, dm and the 6-bit sc and mn per 32) with 5-bit values, w = (d sc)
//   q + (dm mn), q in [0, 31], stored in kInt6's layout (its top bit 0): 6.5 bits per weight in
//   memory (the file's 5.5), multiplied as kInt4K's sub-blocks are.
// - kInt5: llama.cpp's Q5_1, taken as a GGUF file gives it (gemma-3-1b's Q5_K_M files hold it
//   where rows are not whole K blocks): per group of 32 an f16 scale d and an f16 minimum m,
//   w = d q + m, q in [0, 31], stored in kInt6's layout: 7 bits per weight in memory (the
//   file's 6), multiplied as kInt4's groups are.
// A quantized MatMul rounds its activations to int8 per row and block of 32 input channels
// (scale max|x| / 127, to nearest even, as llama.cpp's vec_dot does) and multiplies on the
// integer units (AVX-512 VNNI vpdpbusd where the CPU has it); MatMulPrecision is not used.
enum class Quantization { kNone, kInt8, kInt4, kInt4K, kInt6, kInt6K, kInt5K, kInt5 };

// How a quantized MatMul rounds its activations (--quantized-activations).
// - kInt8: per row and block of kQuantBlock channels, d = max|x| / 127, q = x / d to nearest
//   even (QuantizeActivations): llama.cpp's scheme, and the default.
// - kInt8x2: a second int8 plane for what the first leaves: r = x - d q, rounded the same way
//   (d2 = max|r| / 127 <= d / 254), so that x = d q + d2 q2 to within max|x| / 64516 per block,
//   finer than bf16 for all but a block's smallest values. Both planes go through the same
//   integer kernels as 2m rows, and row i of y is the sum of rows i and m + i (plus the bias):
//   twice the integer products; the weights are still read once where 2m rows fit one streaming
//   row block (cpu/tuning.h's quant_stream_rows: one sequence's decode), twice beyond. For
//   weight-only accuracy: a quantized file's logits as its dequantized weights give them in
//   float, as W4A16 schemes compute.
enum class QuantizedActivations { kInt8, kInt8x2 };
std::string_view QuantizedActivationsName(QuantizedActivations activations);  // "int8", "int8x2"
// "int8" or "int8x2"; anything else throws infer::Error naming the choices.
QuantizedActivations ParseQuantizedActivations(std::string_view name);

// "none", "int8", "int4", "int4k", "int6", "int6k", "int5k", "int5"
std::string_view QuantizationName(Quantization quantization);
// One of those names but int6k, int5k and int5 (made from GGUF files only); anything else throws
// infer::Error naming the choices.
Quantization ParseQuantization(std::string_view name);
// Whether the type stores 4-bit values (kInt4, kInt4K): two per byte, w = d q + m per sub-block.
constexpr bool IsInt4(Quantization quantization) {
  return quantization == Quantization::kInt4 || quantization == Quantization::kInt4K;
}
// Whether the type stores 6-bit values in kInt6's layout (kInt6, kInt6K).
constexpr bool IsInt6(Quantization quantization) {
  return quantization == Quantization::kInt6 || quantization == Quantization::kInt6K;
}
// Whether the type stores 5-bit values (kInt5, kInt5K), in kInt6's layout.
constexpr bool IsInt5(Quantization quantization) {
  return quantization == Quantization::kInt5 || quantization == Quantization::kInt5K;
}
// Whether the type keeps its values in kInt6's layout (a nibble plane, then a plane of top 2
// bits): the 6-bit and the 5-bit types.
constexpr bool HasTopPlane(Quantization quantization) {
  return IsInt6(quantization) || IsInt5(quantization);
}
// Whether the type is asymmetric, w = d q + m per sub-block (m 0 for the others): the 4-bit and
// the 5-bit types.
constexpr bool HasMinimum(Quantization quantization) {
  return IsInt4(quantization) || IsInt5(quantization);
}
// Whether the type scales its super-blocks as kInt4K does (d, dm, 6-bit sc and mn per 32).
constexpr bool HasInt4KScales(Quantization quantization) {
  return quantization == Quantization::kInt4K || quantization == Quantization::kInt5K;
}
// What a symmetric type stores for q: q + 128 (kInt8: a byte), q + 32 (the 6-bit types); 0 for
// the 4-bit types, which store q itself. w = d (stored - offset) + m.
constexpr int QuantStoredOffset(Quantization quantization) {
  return quantization == Quantization::kInt8 ? 128 : IsInt6(quantization) ? 32 : 0;
}
// Whether a sub-block's values start with a plane of 4-bit nibbles (the 4-bit types; those in
// kInt6's layout keep their low 4 bits there and their top bits in a plane after it).
constexpr bool HasNibblePlane(Quantization quantization) {
  return IsInt4(quantization) || HasTopPlane(quantization);
}
// The super-block of kInt4K, kInt5K and kInt6K (their only group size), and the bytes of
// kInt4K's (and kInt5K's) packed 6-bit scales per row.
constexpr int64_t kSuperBlock = 256;
// kInt6K's int8 scales per super-block: one per 16 channels.
constexpr int64_t kInt6KHalves = kSuperBlock / 16;
constexpr int64_t kInt4KScaleBytes = 12;
// Where kInt4K's 6-bit sc (or, `minimum`, mn) of sub-block b (0-7) sits in a row's three scale
// words: the word, and the shift of its bit 0. mn7 alone is split: its bits 0-1, 2-3 and 4-5
// are bits 30-31 of words 0, 1 and 2 (kInt4KSplitShift; the place given for it is word 0's).
struct Int4KScalePlace {
  int word;
  int shift;
};
constexpr int kInt4KSplitShift = 30;
constexpr Int4KScalePlace Int4KScaleAt(int64_t b, bool minimum) {
  if (b < 5) return {minimum ? 1 : 0, static_cast<int>(6 * b)};
  if (!minimum) return {2, static_cast<int>(6 * (b - 5))};
  if (b < 7) return {2, static_cast<int>(18 + 6 * (b - 5))};
  return {0, kInt4KSplitShift};
}
// The 6-bit sc (or mn) of sub-block b in a row's three scale words, and the words with it set
// (they start with those bits clear): the one scalar reading and writing of that layout.
constexpr int Int4KScaleBits(const uint32_t (&words)[3], int64_t b, bool minimum) {
  const Int4KScalePlace place = Int4KScaleAt(b, minimum);
  if (place.shift == kInt4KSplitShift) {
    return static_cast<int>((words[0] >> 30) | (words[1] >> 30) << 2 | (words[2] >> 30) << 4);
  }
  return static_cast<int>(words[place.word] >> place.shift & 63);
}
constexpr void SetInt4KScaleBits(uint32_t (&words)[3], int64_t b, bool minimum, int bits) {
  const Int4KScalePlace place = Int4KScaleAt(b, minimum);
  const auto value = static_cast<uint32_t>(bits);
  if (place.shift == kInt4KSplitShift) {
    for (int i = 0; i < 3; ++i) words[i] |= (value >> (2 * i) & 3) << kInt4KSplitShift;
  } else {
    words[place.word] |= value << place.shift;
  }
}

// Input channels per activation block of a quantized MatMul (and the unit of weight groups).
constexpr int64_t kQuantBlock = 32;
// int4 group: 32. Groups of 64 (4.5 bits per weight) raised the fixtures' worst logit error
// above the symmetric Q4_0's, where 32 keeps it at or below Q4_0's, and did not decode
// measurably faster (README "Quantized weights").
constexpr int64_t kDefaultInt4Group = 32;

// A weight matrix w [n, k] copied once (at load) into the layout MatMul's kernels read, so that
// no call re-packs it and every m runs the same microkernel.
// Layout: panels of kPanelRows rows of w (zero rows past n), one after another; a panel is
// steps() steps, each holding two consecutive k of its rows (zeros past k):
// - bf16: [kPanelRows][2]: one (k, k + 1) pair per 32-bit lane, as vdpbf16ps reads them;
// - f16, f32: [2][kPanelRows].
// A range of panels is therefore one sequential stream (what decode reads), and a panel's
// steps are what the GEMM's register tile consumes in order.
// Quantized (kInt8, kInt4, kInt4K, kInt6, kInt6K, kInt5K, kInt5): panels of kPanelRows rows, each
// num_groups() groups of group_size() input channels (k padded with zeros to whole groups), each
// group_bytes() bytes: the quantized values q (unsigned: int8 stores q + 128, the 6-bit types q
// + 32) of its sub-blocks of kQuantBlock channels, then d[kPanelRows] (f16), then for kInt4 and
// kInt5 m[kPanelRows] (f16); for kInt4K and kInt5K d[kPanelRows], dm[kPanelRows] (f16) and the
// sub-blocks' 6-bit sc and mn as three 32-bit words per row, word-major ([3][kPanelRows]): word 0
// holds sc0-sc4, word 1 mn0-mn4, word 2 sc5-sc7, mn5 and mn6 (6 bits each from bit 0), and bits
// 30-31 of words 0, 1, 2 hold mn7's bits 0-1, 2-3, 4-5 (SubBlockScaleBits); for kInt6K
// d[kPanelRows] (f16) and the int8 sc of each 16 channels, [16][kPanelRows] (Int6KScaleIndex).
// A sub-block is laid out for vpdpbusd, four consecutive channels of a row per 32-bit lane:
// - kInt8: [8 quads][kPanelRows][4] bytes (1024);
// - kInt4, kInt4K: [4][kPanelRows][4] bytes (512); a byte holds quad j (low nibble) and quad j + 4
//   (high nibble).
// - kInt6, kInt6K, kInt5K, kInt5 (kInt6's layout): the stored values' low 4 bits as kInt4's 512
// bytes,
//   then their top 2 bits as [2][kPanelRows][4] bytes (256): byte slot s (0, 1) holds quads s,
//   s + 2, s + 4, s + 6 in its bits 0-1, 2-3, 4-5, 6-7 (Int6HighIndex), so that nibble slot j's
//   quads j and j + 4 find theirs in slot j % 2 at bits 2 (j / 2) and 4 + 2 (j / 2).
// QuantIndex() (and Int6HighIndex()) below are the one definition of that layout.
class PackedMatrix {
 public:
  static constexpr int64_t kPanelRows = 32;

  PackedMatrix() = default;
  // w: contiguous [n, k], bf16, f16 or f32. Throws infer::Error otherwise. The copy runs on
  // `pool` when given, into memory from `arena` when given (2 MiB pages shared with the
  // matrices packed before and after it: a model's weights), else into a buffer of its own.
  static PackedMatrix Pack(const Tensor& w, ThreadPool* pool = nullptr,
                           TensorArena* arena = nullptr);
  // w quantized as `quantization` says (kNone: Pack). group_size 0 takes the type's default
  // (32 for kInt8, kDefaultInt4Group for kInt4, kSuperBlock for kInt4K); otherwise 32, 64 or
  // 128 (kInt4 only).
  // Throws infer::Error for a weight that is not finite or whose scale an f16 cannot hold.
  // (kInt6 takes groups of 32 only; kInt6K is made by FromQuantizedRows only.)
  static PackedMatrix Quantize(const Tensor& w, Quantization quantization, int64_t group_size = 0,
                               ThreadPool* pool = nullptr, TensorArena* arena = nullptr);
  // One row of w already quantized in a type's own terms, to be kept exactly (a GGUF file's
  // Q8_0, Q4_0, Q4_1, Q5_1, Q4_K, Q5_K and Q6_K blocks): q[cols] as the type stores them, q plus
  // QuantStoredOffset (kInt8: q in [-128, 127] stored as q + 128; kInt4 and kInt4K: [0, 15];
  // kInt5 and kInt5K: [0, 31]; kInt6K: [-32, 31] stored as q + 32); per group the f16 bits of d
  // and of m (kInt4, kInt5: the minimum; kInt4K, kInt5K: dm, the minimum step); kInt4K and kInt5K
  // also the 6-bit sc and mn of each sub-block of 32; kInt6K the int8 sc16 of each 16 channels.
  // kInt4 and kInt4K may take their values as `nibbles` instead of q (fill sets `as_nibbles`):
  // 16 bytes per sub-block of 32, byte c holding q[c] (low nibble) and q[c + 16] (high), the
  // packed layout's own bytes, copied as they are (a 4-bit value cannot be out of range).
  struct QuantizedRow {
    std::vector<uint8_t> q;
    std::vector<uint16_t> d, m;
    std::vector<uint8_t> sc, mn;
    std::vector<int8_t> sc16;
    std::vector<uint8_t> nibbles;
    bool as_nibbles = false;
  };
  // w [rows, cols] from `fill(row, out)`, which sets out's values for each row (its vectors
  // come sized: cols, groups, groups, cols / 32, cols / 32, cols / 16 and, for the 4-bit types,
  // cols / 2). Groups of 32 (kInt8, kInt4, kInt5) or kSuperBlock (kInt4K, kInt5K, kInt6K); cols a
  // multiple of the group. Throws infer::Error for another type, a stored q out of range or a
  // 6-bit value over 63. Runs on `pool` (fill from several threads) when given.
  static PackedMatrix FromQuantizedRows(Quantization quantization, int64_t rows, int64_t cols,
                                        const std::function<void(int64_t, QuantizedRow&)>& fill,
                                        ThreadPool* pool = nullptr, TensorArena* arena = nullptr);

  // Random weights of w [rows, cols] made in place, for --load-format dummy: every stored value
  // uniform over its type's levels (element i of the storage a function of `seed` and i alone,
  // whatever the pool), every group's scales chosen so that the weights have mean ~0 and
  // standard deviation `stddev` (kInt8, kInt4 and kInt6 one d per group of 32, kInt4 and kInt4K
  // a minimum -7.5 d, kInt4K sc = mn = 32); padding rows are zero. No float copy is made: a
  // real-size model's matrices cost one pass over their packed bytes. kInt8, kInt4, kInt4K and
  // kInt6 (the --quantization choices); throws infer::Error for another type.
  static PackedMatrix Random(Quantization quantization, int64_t rows, int64_t cols, uint64_t seed,
                             float stddev, ThreadPool* pool = nullptr,
                             TensorArena* arena = nullptr);

  // A copy with storage of its own (from `arena` when given): benchmarks that stream several
  // copies of one matrix make them without quantizing each.
  PackedMatrix Copy(TensorArena* arena = nullptr) const;

  bool defined() const { return storage_.raw() != nullptr; }
  // The element type of the stored values (kNone only; a quantized matrix stores bytes).
  DType dtype() const { return storage_.dtype(); }
  Quantization quantization() const { return quantization_; }
  bool quantized() const { return quantization_ != Quantization::kNone; }
  int64_t group_size() const { return group_size_; }  // quantized only
  int64_t num_groups() const { return (cols_ + group_size_ - 1) / group_size_; }
  // Bytes of one sub-block's values, of one group (values and scales), of one panel.
  int64_t sub_block_bytes() const {
    return quantization_ == Quantization::kInt8 ? 1024 : HasTopPlane(quantization_) ? 768 : 512;
  }
  int64_t group_bytes() const {
    const int64_t scale_bytes = HasInt4KScales(quantization_)           ? 4 + kInt4KScaleBytes
                                : HasMinimum(quantization_)             ? 4
                                : quantization_ == Quantization::kInt6K ? 2 + kInt6KHalves
                                                                        : 2;
    return group_size_ / kQuantBlock * sub_block_bytes() + scale_bytes * kPanelRows;
  }
  int64_t panel_bytes() const { return num_groups() * group_bytes(); }
  // Byte of q(row, col) in data() and whether it is the high nibble (4-bit types).
  int64_t QuantIndex(int64_t row, int64_t col, bool* high_nibble) const {
    const int64_t lane = row % kPanelRows;
    const int64_t in_group = col % group_size_;
    const int64_t quad = in_group % kQuantBlock / 4;
    const int64_t quad_slot = HasNibblePlane(quantization_) ? quad % 4 : quad;
    *high_nibble = HasNibblePlane(quantization_) && quad >= 4;
    return (row / kPanelRows) * panel_bytes() + (col / group_size_) * group_bytes() +
           in_group / kQuantBlock * sub_block_bytes() + (quad_slot * kPanelRows + lane) * 4 +
           col % 4;
  }
  // kInt6's layout: bytes from the byte holding quad `quad`'s low 4 bits (QuantIndex) to the byte
  // holding its top 2 bits (slot quad % 2 of the plane after the nibbles), at bit
  // Int6TopShift(quad).
  static constexpr int64_t Int6TopDelta(int64_t quad) {
    return (4 + quad % 2 - quad % 4) * kPanelRows * 4;
  }
  static constexpr int Int6TopShift(int64_t quad) { return static_cast<int>(2 * (quad / 2)); }
  // kInt6's layout: byte of q(row, col)'s top 2 bits, and their shift in it.
  int64_t Int6HighIndex(int64_t row, int64_t col, int* shift) const {
    const int64_t quad = col % kQuantBlock / 4;
    *shift = Int6TopShift(quad);
    bool high = false;
    return QuantIndex(row, col, &high) + Int6TopDelta(quad);
  }
  // Byte of the f16 scale d (and for kInt4, kInt5, 2 * kPanelRows bytes on, the minimum m; for
  // kInt4K and kInt5K the minimum step dm, then 2 * kPanelRows bytes on their scale words) of row's
  // group g.
  int64_t ScaleIndex(int64_t row, int64_t group) const {
    return (row / kPanelRows) * panel_bytes() + group * group_bytes() +
           group_size_ / kQuantBlock * sub_block_bytes() + (row % kPanelRows) * 2;
  }
  // kInt4K, kInt5K: byte of row's scale word `word` (0-2) in group g, after d and dm.
  int64_t ScaleWordIndex(int64_t row, int64_t group, int word) const {
    return ScaleIndex(row, group) + 4 * kPanelRows + (row % kPanelRows) * 2 + word * 4 * kPanelRows;
  }
  // kInt6K: byte of row's int8 sc of channels [16 half, 16 half + 16) of group g, after d.
  int64_t Int6KScaleIndex(int64_t row, int64_t group, int64_t half) const {
    return ScaleIndex(row, group) + (kPanelRows - row % kPanelRows) * 2 + half * kPanelRows +
           row % kPanelRows;
  }
  int64_t rows() const { return rows_; }  // n
  int64_t cols() const { return cols_; }  // k
  int64_t steps() const { return (cols_ + 1) / 2; }
  int64_t num_panels() const { return (rows_ + kPanelRows - 1) / kPanelRows; }
  const void* data() const { return storage_.raw(); }
  size_t size_bytes() const { return storage_.size_bytes(); }
  // Position (in elements) of w[row, col] in data(): the one definition of the layout, used
  // by Pack, At and the kernels.
  int64_t Index(int64_t row, int64_t col) const {
    const int64_t lane = row % kPanelRows;
    const int64_t step_begin = ((row / kPanelRows) * steps() + col / 2) * 2 * kPanelRows;
    return step_begin +
           (dtype() == DType::kBF16 ? lane * 2 + col % 2 : (col % 2) * kPanelRows + lane);
  }
  // A quantized matrix's stored values: q of w[row, col] as stored (int8: q + 128, int4: the
  // nibble, the 6-bit types: q + 32, int5k: q), and its group's f16 scale d and minimum m (int4;
  // 0 for int8; kInt4K, kInt5K: d and dm), widened.
  int QuantAt(int64_t row, int64_t col) const;
  float ScaleAt(int64_t row, int64_t group) const;
  float MinimumAt(int64_t row, int64_t group) const;
  // The scale and minimum that multiply sub-block `block` (input channels [32 block, 32 block +
  // 32)) of row: w = scale q + minimum (int8: minimum 0, q less 128). The group's for kInt8 and
  // kInt4; d sc and dm mn, exact in f32, for kInt4K and kInt5K. (kInt6K scales each 16 channels:
  // not one per sub-block; ChannelScale.)
  float SubBlockScale(int64_t row, int64_t block) const;
  float SubBlockMinimum(int64_t row, int64_t block) const;
  // The scale that multiplies w[row, col]'s q: SubBlockScale, or kInt6K's d sc (exact in f32).
  float ChannelScale(int64_t row, int64_t col) const;
  // kInt6K: the int8 sc of channels [16 half, 16 half + 16) of row (half counts over all of k).
  int Int6KHalfScale(int64_t row, int64_t half) const;
  // kInt4K, kInt5K: sub-block `block`'s 6-bit sc and mn of row.
  int SubBlockScaleBits(int64_t row, int64_t block, bool minimum) const;
  // w[row, col] widened to f32 (dequantized: d * q (+ m), in f32).
  float At(int64_t row, int64_t col) const;

 private:
  Tensor storage_;  // rank 1, zero-initialised
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  Quantization quantization_ = Quantization::kNone;
  int64_t group_size_ = 0;
};

// x [m, k] rounded as a quantized MatMul rounds its activations: per row and block of
// kQuantBlock channels, d = max|x| / 127 (f32), q = x * (1 / d) rounded to nearest even (0 when
// d is 0). q: [m, padded_k] (zeros past k), d and sum (of the block's q): [m, padded_k / 32].
// padded_k: k rounded up to a multiple of kQuantBlock. Exposed for tests and references.
void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t padded_k,
                         int8_t* q, float* d, int32_t* sum);

// y[m, n] = x[m, k] . w[n, k]^T (+ bias[n]).
// x and y are f32, row-major, with row strides x_stride / y_stride (elements). bias (may be
// null) is [n], any float dtype. Products accumulate in f32, in an order that depends on k,
// `precision` (float weights) and `activations` (quantized weights) only: row i of y is
// bit-for-bit the same whatever the other rows of x are (batched and single-request outputs
// agree exactly).
void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const PackedMatrix& w,
            const Tensor* bias, float* y, int64_t y_stride, ThreadPool& pool,
            MatMulPrecision precision = MatMulPrecision::kF32,
            QuantizedActivations activations = QuantizedActivations::kInt8);
// One product of MatMuls: y [m, w->rows()] (row stride y_stride) = x . w^T (+ bias).
struct MatMulOutput {
  const PackedMatrix* w = nullptr;
  const Tensor* bias = nullptr;
  float* y = nullptr;
  int64_t y_stride = 0;
};
// Several products of the same x (q/k/v, gate/up): bit for bit one MatMul per output. Weights
// quantized alike, or of one float dtype, share one rounding or packing of x and one parallel
// region, so a decode step pays one region's start and end for them instead of one per matrix.
void MatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,
             std::span<const MatMulOutput> outputs, ThreadPool& pool,
             MatMulPrecision precision = MatMulPrecision::kF32,
             QuantizedActivations activations = QuantizedActivations::kInt8);
// The same for a plain contiguous [n, k] tensor, packed for this one call (tests, one-off
// products; a model packs its weights once).
void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const Tensor& w,
            const Tensor* bias, float* y, int64_t y_stride, ThreadPool& pool,
            MatMulPrecision precision = MatMulPrecision::kF32,
            QuantizedActivations activations = QuantizedActivations::kInt8);

// LoRA: one adapter's low-rank update of one projection, y += scale * B (A x), applied beside the
// projection's own MatMul (never merged into its weights). a [rank, k] is PEFT's lora_A; b holds
// lora_B [n, rank] in panels of kLoraPanel output columns, [ceil(n / kLoraPanel), rank,
// kLoraPanel]: B[o, j] at ((o / kLoraPanel) rank + j) kLoraPanel + o % kLoraPanel (zeros past n),
// so that the expand streams each panel in order. Both in the adapter file's own dtype (f32,
// bf16 or f16), widened exactly as they are read.
constexpr int64_t kLoraPanel = 64;
struct LoraMatrices {
  Tensor a;
  Tensor b;
  int64_t n = 0;
  float scale = 0.0F;
  bool defined() const { return a.raw() != nullptr; }
  int64_t rank() const { return a.rank() == 2 ? a.dim(0) : 0; }
  // a [rank, k] kept as given; b [n, rank] (contiguous, a float dtype) copied into panels.
  // Throws infer::Error for shapes that do not match or a non-float dtype.
  static LoraMatrices Make(Tensor a, const Tensor& b, float scale);
};
// The rows of a step (ascending, each once) that one adapter updates.
struct LoraRows {
  const LoraMatrices* delta = nullptr;
  std::span<const int32_t> rows;
};
// One projection's output y (row stride y_stride, n = each delta's n columns) and the
// adapters that update its rows (each row in at most one group).
struct LoraOutput {
  std::span<const LoraRows> groups;
  float* y = nullptr;
  int64_t y_stride = 0;
};
// For every output and group: y[i] += B (scale (A x[i])) for each of the group's rows i of x [m,
// k] (row stride x_stride). The shrink t = scale (A x[i]) is rounded to f32, then added to y in
// ascending rank order, so a row's result depends on its own x, adapter and y only: the same bits
// whatever the other rows and their adapters are (Punica's gathered shrink and expand: an adapter's
// rows run together, so each adapter is read once per call). Throws infer::Error for a row out of
// [0, m), a rank or shape that does not match, or a non-float dtype.
void LoraAdd(const float* x, int64_t m, int64_t k, int64_t x_stride,
             std::span<const LoraOutput> outputs, ThreadPool& pool);

// RMSNorm over the last axis of x [rows, dim] (row stride = dim), into y (may alias x):
// y = x * rsqrt(mean(x^2) + eps) * (weight_offset + w). weight_offset is 0 (Llama, Qwen3)
// or 1 (Gemma's (1 + w)). w is [dim], any float dtype.
void RmsNorm(const float* x, int64_t rows, int64_t dim, const Tensor& w, float eps,
             float weight_offset, float* y);

// Rotary embedding in Hugging Face's rotate_half layout, in place, on x viewed as
// [num_tokens, num_heads, head_dim] with row stride `token_stride` between tokens.
// Dimension i pairs with i + head_dim/2. cos/sin are [num_tokens, head_dim/2].
void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t token_stride,
          const float* cos, const float* sin);

struct AttentionParams {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0F;          // scores = q . k * scale
  int64_t sliding_window = 0;  // 0: full causal; else a query sees this many keys, itself included
};

// One layer of the paged KV cache, as attention reads it. Positions live in blocks of
// block_size; the row of position p of kv head h is at
//   base + table[p / block_size] * block_stride + h * head_stride + (p % block_size) * head_dim
// (elements of `dtype`), with base = k or v.
struct PagedKvLayer {
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::kF32;  // kF32 or kBF16
  int64_t block_size = 0;     // a multiple of kPagedBlockMultiple
  int64_t block_stride = 0;   // elements from one block to the next
  int64_t head_stride = 0;    // elements from one kv head to the next inside a block
};

// Block sizes must be multiples of this: the kernels read keys in groups of up to 16
// consecutive positions, which must lie in one block.
constexpr int64_t kPagedBlockMultiple = 16;

// One sequence's share of a PagedAttention call.
struct AttentionSequence {
  int64_t row = 0;         // first row of q / out
  int64_t num_tokens = 0;  // query rows, at positions first_pos .. first_pos + num_tokens - 1
  int64_t first_pos = 0;
  // Block ids covering positions 0 .. first_pos + num_tokens - 1 (their K/V already written).
  const int32_t* block_table = nullptr;
  int64_t num_blocks = 0;  // entries of block_table
};

// Keys per attention partition: a query row's keys are cut into partitions of this many keys at
// absolute positions (multiples of it), the unit of the fixed-order softmax merge below and of
// the split of long contexts across threads.
constexpr int64_t kAttentionPartition = 256;

// Causal (optionally sliding-window) GQA attention of every sequence of a step in one call,
// reading K/V through block tables. q and out: [rows, num_heads * head_dim], row-major; query
// head h reads kv head h / (num_heads / num_kv_heads). Softmax in f32.
// Each query row's result is bit-for-bit the same whatever the other rows and sequences of the
// call are, and however its sequence was split into calls: keys are folded in blocks at fixed
// positions and in partitions of kAttentionPartition keys at fixed positions, each partition
// from an empty state, merged in ascending order; long contexts split partitions across threads.
void PagedAttention(const float* q, std::span<const AttentionSequence> seqs, const PagedKvLayer& kv,
                    const AttentionParams& params, float* out, ThreadPool& pool);

// out[i] = act(gate[i]) * up[i] for i < n (out may alias gate or up).
void SiluMul(const float* gate, const float* up, float* out, int64_t n);
void GeluTanhMul(const float* gate, const float* up, float* out, int64_t n);

// x[i] += y[i].
void Add(float* x, const float* y, int64_t n);

// out[t, :] = table[ids[t], :] * scale, widened to f32. ids are checked against the table
// (packed, as it doubles as the tied output head).
void Embed(const PackedMatrix& table, const int32_t* ids, int64_t num_tokens, float scale,
           float* out);

// x[i] = tanh(x[i] / cap) * cap.
void SoftCap(float* x, int64_t n, float cap);

// out[i] = exp(d) for d = x[i] - shift rounded to f32 and widened to double, where every d <= 0
// or is NaN (the sampler's softmax weights, exp(logit - max)); returns the sum of out (in an
// order of its own). Each out[i] lies within kExpShiftedRelativeError * e +
// kExpShiftedAbsoluteError of std::exp's value e, its sum within the same per term plus n rounding
// errors; exp(0) is exactly 1, d = -inf gives 0 and a NaN stays NaN. The scalar level calls
// std::exp.
inline constexpr double kExpShiftedRelativeError = 1e-14;
inline constexpr double kExpShiftedAbsoluteError = 1e-303;
double ExpShifted(const float* x, int64_t n, float shift, double* out);

// One pass over a row of logits: the largest value and the lowest index holding it (0 when every
// entry is -inf), the smallest value above -inf (+inf when none), how many entries are -inf, and
// whether any is NaN (the other fields then ignore the NaNs).
struct RowExtremes {
  float max = 0.0F;
  int64_t argmax = 0;
  float min_above_neg_inf = 0.0F;
  int64_t num_neg_inf = 0;
  bool has_nan = false;
};
RowExtremes Extremes(const float* x, int64_t n);

}  // namespace infer::kernels
