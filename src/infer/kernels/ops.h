// The kernel interface the model calls: CPU ops on f32 activations and bf16/f16/f32
// weights. Each op checks its arguments, then dispatches to the ISA chosen at start-up
// (cpu/dispatch.h). Kernels know nothing of models, configs or requests.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "infer/core/tensor.h"
#include "infer/core/thread_pool.h"

namespace infer::kernels {

// How MatMul rounds its activations when the weights are bf16 (f16 and f32 weights always
// take kF32).
// - kF32: f32 products of the activations and the exactly widened weights (the default; the
//   model then matches a float64 reference to ~1e-5).
// - kBf16: the activations are rounded to bf16 (to nearest even) first; products of the two
//   bf16 values are exact in f32 and accumulate in f32. This is how Hugging Face's bf16
//   inference and llama.cpp multiply by bf16 weights, and on AVX512_BF16 CPUs it runs on
//   vdpbf16ps at about twice the f32 FMA rate. Elsewhere the same rounding is emulated.
enum class MatMulPrecision { kF32, kBf16 };

std::string_view MatMulPrecisionName(MatMulPrecision precision);  // "f32", "bf16"
// "f32" or "bf16"; anything else throws infer::Error naming the choices.
MatMulPrecision ParseMatMulPrecision(std::string_view name);

// A weight matrix w [n, k] copied once (at load) into the layout MatMul's kernels read, so that
// no call re-packs it and every m runs the same microkernel.
// Layout: panels of kPanelRows rows of w (zero rows past n), one after another; a panel is
// steps() steps, each holding two consecutive k of its rows (zeros past k):
// - bf16: [kPanelRows][2]: one (k, k + 1) pair per 32-bit lane, as vdpbf16ps reads them;
// - f16, f32: [2][kPanelRows].
// A range of panels is therefore one sequential stream (what decode reads), and a panel's
// steps are what the GEMM's register tile consumes in order.
class PackedMatrix {
 public:
  static constexpr int64_t kPanelRows = 32;

  PackedMatrix() = default;
  // w: contiguous [n, k], bf16, f16 or f32. Throws infer::Error otherwise. The copy runs on
  // `pool` when given, into 2 MiB pages when `huge_pages`.
  static PackedMatrix Pack(const Tensor& w, ThreadPool* pool = nullptr, bool huge_pages = false);

  bool defined() const { return storage_.raw() != nullptr; }
  DType dtype() const { return storage_.dtype(); }
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
  // w[row, col] widened to f32.
  float At(int64_t row, int64_t col) const;

 private:
  Tensor storage_;  // rank 1, zero-initialised
  int64_t rows_ = 0;
  int64_t cols_ = 0;
};

// y[m, n] = x[m, k] . w[n, k]^T (+ bias[n]).
// x and y are f32, row-major, with row strides x_stride / y_stride (elements). bias (may be
// null) is [n], any float dtype. Products accumulate in f32, in an order that depends on k
// and `precision` only: row i of y is bit-for-bit the same whatever the other rows of x are
// (batched and single-request outputs agree exactly).
void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const PackedMatrix& w,
            const Tensor* bias, float* y, int64_t y_stride, ThreadPool& pool,
            MatMulPrecision precision = MatMulPrecision::kF32);
// The same for a plain contiguous [n, k] tensor, packed for this one call (tests, one-off
// products; a model packs its weights once).
void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const Tensor& w,
            const Tensor* bias, float* y, int64_t y_stride, ThreadPool& pool,
            MatMulPrecision precision = MatMulPrecision::kF32);

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

}  // namespace infer::kernels
