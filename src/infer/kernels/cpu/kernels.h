// The per-ISA kernel entry points behind ops.h. ops.cc checks arguments, then calls the set
// for ActiveIsa(): `reference` (plain loops, also the test oracle), `avx2`, `avx512` or
// `avx512bf16` (and `avx512amx` for quantized MatMul).
// MatMul weights arrive packed (ops.h PackedMatrix); other weights as (dtype, pointer) to
// contiguous data. Activations are f32.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "infer/core/dtype.h"
#include "infer/core/thread_pool.h"
#include "infer/kernels/ops.h"

namespace infer::kernels::cpu {

// One product of MatMuls / QuantizedMatMuls: y [m, w->rows()] (row stride y_stride) =
// x . w^T + bias (f32 or null).
struct Product {
  const PackedMatrix* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t y_stride = 0;
};

// The tasks of a multi-output MatMul: each output's features cut into `step`-feature ranges,
// output after output. ProductTasks counts them; ProductTask gives task `task` as (output,
// first feature).
inline int64_t ProductTasks(std::span<const Product> outputs, int64_t step) {
  int64_t tasks = 0;
  for (const Product& o : outputs) tasks += (o.w->rows() + step - 1) / step;
  return tasks;
}
inline std::pair<const Product*, int64_t> ProductTask(std::span<const Product> outputs,
                                                      int64_t task, int64_t step) {
  for (const Product& o : outputs) {
    const int64_t tasks = (o.w->rows() + step - 1) / step;
    if (task < tasks) return {&o, task * step};
    task -= tasks;
  }
  return {nullptr, 0};
}

// y = bias (or 0) for every output: the products of an empty k.
inline void FillWithBias(int64_t m, std::span<const Product> outputs) {
  for (const Product& o : outputs) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < o.w->rows(); ++j) {
        o.y[i * o.y_stride + j] = o.bias != nullptr ? o.bias[j] : 0.0F;
      }
    }
  }
}

// The same declarations in each ISA namespace. bias is f32 or null. MatMul's bf16_activations
// (MatMulPrecision::kBf16, only passed with bf16 weights) rounds x to bf16 first.
#define INFER_DECLARE_KERNELS(ns)                                                                  \
  namespace ns {                                                                                   \
  void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const PackedMatrix& w,       \
              const float* bias, float* y, int64_t y_stride, ThreadPool& pool,                     \
              bool bf16_activations);                                                              \
  /* Weights of one float dtype, each [*, k]: x packed once, every product in one region. */       \
  void MatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,                             \
               std::span<const Product> outputs, ThreadPool& pool, bool bf16_activations);         \
  /* Weights quantized alike (kInt8 / kInt4), each [*, k]: x rounded to int8 per block of 32 */    \
  /* once (ops.h), then every product in one parallel region. */                                   \
  void QuantizedMatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,                    \
                        std::span<const Product> outputs, ThreadPool& pool);                       \
  void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t x_stride,                 \
                           int64_t padded_k, int8_t* q, float* d, int32_t* sum);                   \
  /* LoRA (ops.h LoraAdd): t[i t_stride + j] = scale (a_j . x_i) for j in [j0, j1) of a [*, k] */  \
  /* and each row i of `rows`; y[i, o] += sum_j t[i, j] B[o, j], o in [o0, o1) (o0 a multiple */   \
  /* of kLoraPanel), j ascending, B in LoraMatrices' panels. */                                    \
  void LoraShrink(const float* x, int64_t x_stride, std::span<const int32_t> rows, int64_t k,      \
                  DType dtype, const void* a, int64_t j0, int64_t j1, float scale, float* t,       \
                  int64_t t_stride);                                                               \
  void LoraExpand(const float* t, int64_t t_stride, std::span<const int32_t> rows, int64_t rank,   \
                  DType dtype, const void* b, int64_t o0, int64_t o1, float* y, int64_t y_stride); \
  void RmsNorm(const float* x, int64_t rows, int64_t dim, DType w_dtype, const void* w, float eps, \
               float weight_offset, float* y);                                                     \
  void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,                     \
            int64_t token_stride, const float* cos, const float* sin);                             \
  void PagedAttention(const float* q, std::span<const AttentionSequence> seqs,                     \
                      const PagedKvLayer& kv, const AttentionParams& params, float* out,           \
                      ThreadPool& pool);                                                           \
  /* One value head of Gated DeltaNet over n tokens (linear_attention.h GatedDeltaRule): for */    \
  /* token t, q and k at t qk_stride ([dk], normalised, q scaled), v at t v_stride ([dv]), */      \
  /* decay and beta at t gb_stride; S [dk, dv]: S = decay S; delta = beta (v - S^T k); */          \
  /* S += k delta^T; o (at t o_stride) = S^T q. */                                                 \
  void GatedDeltaHead(const float* q, const float* k, int64_t qk_stride, const float* v,           \
                      int64_t v_stride, const float* decay, const float* beta, int64_t gb_stride,  \
                      int64_t n, int64_t dk, int64_t dv, float* s, float* o, int64_t o_stride);    \
  void SiluMul(const float* gate, const float* up, float* out, int64_t n);                         \
  void GeluTanhMul(const float* gate, const float* up, float* out, int64_t n);                     \
  void Add(float* x, const float* y, int64_t n);                                                   \
  /* out[i] = widen(src[i]) * scale. */                                                            \
  void WidenScale(DType dtype, const void* src, int64_t n, float scale, float* out);               \
  void SoftCap(float* x, int64_t n, float cap);                                                    \
  /* Elementwise exp and tanh, exposed for accuracy tests. */                                      \
  void ExpArray(const float* x, float* y, int64_t n);                                              \
  void TanhArray(const float* x, float* y, int64_t n);                                             \
  double ExpShifted(const float* x, int64_t n, float shift, double* out);                          \
  RowExtremes Extremes(const float* x, int64_t n);                                                 \
  }

INFER_DECLARE_KERNELS(reference)
INFER_DECLARE_KERNELS(avx2)
INFER_DECLARE_KERNELS(avx512)
INFER_DECLARE_KERNELS(avx512bf16)

#undef INFER_DECLARE_KERNELS

// matmul_quant_simd.cc once more with AMX-INT8 tiles for many rows (Isa::kAvx512Amx), and again
// with the same tile operations emulated in plain code (INFER_AMX_EMULATE), so that the tile
// path's layout, loops and arithmetic are tested on CPUs without AMX.
#define INFER_DECLARE_QUANTIZED_KERNELS(ns)                                        \
  namespace ns {                                                                   \
  void QuantizedMatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,    \
                        std::span<const Product> outputs, ThreadPool& pool);       \
  void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t x_stride, \
                           int64_t padded_k, int8_t* q, float* d, int32_t* sum);   \
  }

INFER_DECLARE_QUANTIZED_KERNELS(avx512amx)
INFER_DECLARE_QUANTIZED_KERNELS(avx512amx_emulated)
// MatMulPrecision::kBf16 with AMX-BF16 tiles (matmul_bf16_tiles.cc), for the same two: bf16
// weights, each [*, k], and x rounded to bf16, summed in TDPBF16PS's order for every m.
namespace avx512amx {
void MatMulsBf16Tiles(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Product> outputs, ThreadPool& pool);
}
namespace avx512amx_emulated {
void MatMulsBf16Tiles(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Product> outputs, ThreadPool& pool);
}
// And for AVX-VNNI (Isa::kAvxVnni: vpdpbusd on ymm), and again with that instruction emulated
// from Intel's definition (INFER_AVXVNNI_EMULATE) on plain AVX2, for the tests.
INFER_DECLARE_QUANTIZED_KERNELS(avxvnni)
INFER_DECLARE_QUANTIZED_KERNELS(avxvnni_emulated)

#undef INFER_DECLARE_QUANTIZED_KERNELS

// x [m, k] (row stride x_stride) rounded to bf16 (nearest even) and widened back, into out
// [m, k]: MatMulPrecision::kBf16 where there is no vdpbf16ps (the reference and the
// avx2 / avx512 kernels).
void RoundActivationsToBf16(const float* x, int64_t m, int64_t k, int64_t x_stride, float* out);

}  // namespace infer::kernels::cpu
