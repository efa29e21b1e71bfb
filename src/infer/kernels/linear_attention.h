// Gated DeltaNet (linear attention) ops: the causal depthwise conv1d that feeds q, k and v, and
// the gated delta rule that folds each token into a fixed-size state per value head. Both run
// one sequence at a time, token after token, from the state its previous tokens left: a
// sequence's bits do not depend on how its tokens are split into steps or on the other
// sequences of a step.
#pragma once

#include <cstdint>

#include "infer/core/thread_pool.h"

namespace infer::kernels {

// x [n, channels] (row stride x_stride) in place: x[t, c] = silu(sum_j w[c, j] x[t - K + 1 + j,
// c]) over j < K = `kernel` taps (PyTorch's cross-correlation: the last tap multiplies the
// current token), inputs before the sequence's first token taken from `state` [K - 1, channels]
// (the sequence's K - 1 latest inputs, oldest first; zeros before position 0), which is updated
// to the latest inputs. w [channels, K] in f32. Channels split across the pool.
void CausalConv1dSilu(float* x, int64_t n, int64_t channels, int64_t x_stride, const float* w,
                      int64_t kernel, float* state, ThreadPool& pool);

struct GatedDeltaDims {
  int64_t key_heads = 0;
  int64_t value_heads = 0;  // a multiple of key_heads
  int64_t key_head_dim = 0;
  int64_t value_head_dim = 0;
  bool value_heads_tiled = false;  // value head h reads key head h % key_heads
};

// The gated delta rule over one sequence's n tokens. qkv [n, ...] (row stride qkv_stride) holds
// per token q [key_heads, key_head_dim], k (the same) and v [value_heads, value_head_dim]; q and
// k are L2-normalised in place (x / sqrt(sum x^2 + 1e-6)) and q scaled by key_head_dim^-0.5. g and
// beta [n, value_heads]: the log decay (<= 0) and the write strength. For value head h, reading
// key head h / (value_heads / key_heads) (h % key_heads when value_heads_tiled), with S = `state` +
// h dk dv ([dk, dv], f32) per token:
//   S = exp(g) S;  delta = beta (v - S^T k);  S = S + k delta^T;  o = S^T q
// o into out [n, value_heads * value_head_dim] (row stride out_stride). Heads split across the
// pool; each head's tokens run in order, on the active ISA (cpu/kernels.h GatedDeltaHead).
void GatedDeltaRule(float* qkv, int64_t n, int64_t qkv_stride, const float* g, const float* beta,
                    const GatedDeltaDims& dims, float* state, float* out, int64_t out_stride,
                    ThreadPool& pool);

// Per value head of x [n, value_heads * dim] in place: rms-normalise over dim (eps), times w
// [dim], times silu(z) (z the same shape as x). Rows split across the pool.
void GatedRmsNorm(float* x, const float* z, int64_t n, int64_t heads, int64_t dim, const float* w,
                  float eps, ThreadPool& pool);

}  // namespace infer::kernels
