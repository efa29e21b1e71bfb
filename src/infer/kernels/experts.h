// Mixture-of-experts ops, on the MatMul of ops.h: routing a step's rows to experts, and the
// experts' gated MLPs run for exactly the rows that chose them.
#pragma once

#include <cstdint>
#include <span>

#include "infer/core/thread_pool.h"
#include "infer/kernels/ops.h"

namespace infer::kernels {

// One expert: y = down(act(gate x) * (up x)), each matrix packed (any type MatMul takes).
struct Expert {
  PackedMatrix gate;  // [intermediate, hidden]
  PackedMatrix up;    // [intermediate, hidden]
  PackedMatrix down;  // [hidden, intermediate]
};

enum class GatedActivation { kSilu, kGeluTanh };

// Which experts each of m rows uses: row i's `per_row` experts are ids[i * per_row + j] with
// weights[i * per_row + j] (j < per_row), its ids distinct.
struct ExpertRouting {
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
  int64_t per_row = 0;
};

// Softmax routing (Qwen3-MoE, Qwen3.5-MoE): for each of m rows of router logits [m,
// num_experts], the f32 softmax over all experts, then the `top_k` largest probabilities (ties to
// the lower id), divided by their sum when `normalize`. Writes ids and weights [m, top_k], each
// row's experts in descending probability. A row depends on its own logits only.
void SoftmaxTopK(const float* logits, int64_t m, int64_t num_experts, int64_t top_k, bool normalize,
                 int32_t* ids, float* weights);

// y[i] = sum over row i's experts e, in ascending id, of weight_e * expert_e(x[i]) (y row stride
// y_stride; x [m, k] with row stride x_stride, k = every expert's hidden size). Each expert
// multiplies exactly the rows that chose it (gathered in ascending row order) with MatMuls (gate
// and up in one pass) and MatMul (down), at `precision` / `activations` as MatMul takes them, and
// its matrices are read once per call however many rows chose it. Since a MatMul row does not
// depend on the other rows, and the sum runs in a fixed order, row i of y is the same bits
// whatever the other rows are and whichever other rows share its experts. Experts run one per
// task across the pool when there are enough of them, else one after another with the pool
// inside each product; the bits are the same either way.
void MixtureOfExperts(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Expert> experts, const ExpertRouting& routing,
                      GatedActivation activation, float* y, int64_t y_stride, ThreadPool& pool,
                      MatMulPrecision precision = MatMulPrecision::kF32,
                      QuantizedActivations activations = QuantizedActivations::kInt8);

}  // namespace infer::kernels
