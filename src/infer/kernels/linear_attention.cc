#include "infer/kernels/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "infer/kernels/cpu/dispatch.h"

namespace infer::kernels {

namespace {

float Silu(float x) { return x / (1.0F + std::exp(-x)); }

// x / sqrt(sum x^2 + 1e-6), as the reference's l2norm (eps added to the sum), times `scale`.
void L2Normalize(const float* x, int64_t dim, float scale, float* y) {
  float sum = 0.0F;
  for (int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
  const float factor = scale / std::sqrt(sum + 1e-6F);
  for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * factor;
}

// One value head's tokens, on the active ISA's kernel.
void HeadStep(const float* q, const float* k, int64_t qk_stride, const float* v, int64_t v_stride,
              const float* decay, const float* beta, int64_t gb_stride, int64_t n, int64_t dk,
              int64_t dv, float* s, float* o, int64_t o_stride) {
  INFER_DISPATCH(GatedDeltaHead, q, k, qk_stride, v, v_stride, decay, beta, gb_stride, n, dk, dv, s,
                 o, o_stride);
}

}  // namespace

void CausalConv1dSilu(float* x, int64_t n, int64_t channels, int64_t x_stride, const float* w,
                      int64_t kernel, float* state, ThreadPool& pool) {
  const int64_t history = kernel - 1;
  constexpr int64_t kChannelBlock = 256;
  pool.ParallelFor(
      (channels + kChannelBlock - 1) / kChannelBlock, 1, [&](int64_t begin, int64_t end) {
        // A block of channels: the inputs extended by the state ([history + n][width], oldest
        // first) and the taps transposed ([kernel][width]), so that every product runs along the
        // channels. (Per thread, reused from call to call: decode calls this per layer and step.)
        thread_local std::vector<float> inputs, taps;
        for (int64_t block = begin; block < end; ++block) {
          const int64_t c0 = block * kChannelBlock;
          const int64_t width = std::min(kChannelBlock, channels - c0);
          inputs.resize(static_cast<size_t>((history + n) * width));
          taps.resize(static_cast<size_t>(kernel * width));
          for (int64_t j = 0; j < kernel; ++j) {
            for (int64_t c = 0; c < width; ++c) {
              taps[static_cast<size_t>(j * width + c)] = w[(c0 + c) * kernel + j];
            }
          }
          for (int64_t j = 0; j < history; ++j) {
            std::copy_n(state + j * channels + c0, width, inputs.data() + j * width);
          }
          for (int64_t t = 0; t < n; ++t) {
            std::copy_n(x + t * x_stride + c0, width, inputs.data() + (history + t) * width);
          }
          for (int64_t t = 0; t < n; ++t) {
            float* out = x + t * x_stride + c0;
            std::fill(out, out + width, 0.0F);
            for (int64_t j = 0; j < kernel; ++j) {
              const float* in = inputs.data() + (t + j) * width;
              const float* tap = taps.data() + j * width;
              for (int64_t c = 0; c < width; ++c) out[c] += tap[c] * in[c];
            }
            for (int64_t c = 0; c < width; ++c) out[c] = Silu(out[c]);
          }
          for (int64_t j = 0; j < history; ++j) {
            std::copy_n(inputs.data() + (n + j) * width, width, state + j * channels + c0);
          }
        }
      });
}

void GatedDeltaRule(float* qkv, int64_t n, int64_t qkv_stride, const float* g, const float* beta,
                    const GatedDeltaDims& dims, float* state, float* out, int64_t out_stride,
                    ThreadPool& pool) {
  const int64_t dk = dims.key_head_dim;
  const int64_t dv = dims.value_head_dim;
  const int64_t group = dims.value_heads / dims.key_heads;
  const int64_t key_dim = dims.key_heads * dk;
  const float q_scale = 1.0F / std::sqrt(static_cast<float>(dk));
  // q and k normalised in place, once per key head; the decays exp(g).
  pool.ParallelFor(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = qkv + t * qkv_stride;
      for (int64_t h = 0; h < dims.key_heads; ++h) {
        L2Normalize(row + h * dk, dk, q_scale, row + h * dk);
        L2Normalize(row + key_dim + h * dk, dk, 1.0F, row + key_dim + h * dk);
      }
    }
  });
  // Reused from call to call; the workers read it through `decays` (a thread_local named in
  // the lambda would be each worker's own).
  thread_local std::vector<float> decay;
  decay.resize(static_cast<size_t>(n * dims.value_heads));
  for (size_t i = 0; i < decay.size(); ++i) decay[i] = std::exp(g[i]);
  const float* decays = decay.data();
  pool.ParallelFor(dims.value_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      const int64_t key_head = dims.value_heads_tiled ? h % dims.key_heads : h / group;
      HeadStep(qkv + key_head * dk, qkv + key_dim + key_head * dk, qkv_stride,
               qkv + 2 * key_dim + h * dv, qkv_stride, decays + h, beta + h, dims.value_heads, n,
               dk, dv, state + h * dk * dv, out + h * dv, out_stride);
    }
  });
}

void GatedRmsNorm(float* x, const float* z, int64_t n, int64_t heads, int64_t dim, const float* w,
                  float eps, ThreadPool& pool) {
  pool.ParallelFor(n * heads, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = x + r * dim;
      const float* gate = z + r * dim;
      float sum = 0.0F;
      for (int64_t i = 0; i < dim; ++i) sum += row[i] * row[i];
      const float inverse = 1.0F / std::sqrt(sum / static_cast<float>(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) row[i] = w[i] * (row[i] * inverse) * Silu(gate[i]);
    }
  });
}

}  // namespace infer::kernels
