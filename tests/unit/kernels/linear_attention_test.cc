// Gated DeltaNet's ops against the recurrence written out in double, as Hugging Face's
// torch_recurrent_gated_delta_rule and causal_conv1d_update state it (tests/fixtures/models/
// HF_SEMANTICS.md, "Gated DeltaNet layers"), and split invariance: a sequence's tokens run in one
// call or in several (its state carried between them) give the same bits.
#include "infer/kernels/linear_attention.h"

#include "infer/kernels/cpu/isa.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace infer::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float& v : values) v = dist(gen);
  return values;
}

TEST(LinearAttentionTest, CausalConvMatchesTheCrossCorrelationAndSplitsExactly) {
  constexpr int64_t kN = 9, kC = 300, kK = 4;  // channels past one block of 256
  ThreadPool pool(2);
  const auto x = Random(kN * kC, 1, -2, 2);
  const auto w = Random(kC * kK, 2, -1, 1);
  // out[t, c] = silu(sum_j w[c, j] x[t - K + 1 + j, c]), zeros before the first token.
  std::vector<double> expected(kN * kC);
  for (int64_t t = 0; t < kN; ++t) {
    for (int64_t c = 0; c < kC; ++c) {
      double sum = 0;
      for (int64_t j = 0; j < kK; ++j) {
        const int64_t src = t - kK + 1 + j;
        if (src >= 0) sum += static_cast<double>(w[c * kK + j]) * x[src * kC + c];
      }
      expected[t * kC + c] = sum / (1 + std::exp(-sum));
    }
  }
  std::vector<float> whole = x;
  std::vector<float> state((kK - 1) * kC, 0.0F);
  CausalConv1dSilu(whole.data(), kN, kC, kC, w.data(), kK, state.data(), pool);
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_NEAR(whole[i], expected[i], 1e-5) << i;
  // The state holds the last K - 1 inputs, oldest first.
  for (int64_t j = 0; j < kK - 1; ++j) {
    for (int64_t c = 0; c < kC; ++c) {
      ASSERT_EQ(state[j * kC + c], x[(kN - kK + 1 + j) * kC + c]);
    }
  }
  // 4 tokens, then 1, then 4: the same bits.
  std::vector<float> split = x;
  std::fill(state.begin(), state.end(), 0.0F);
  for (const auto& [first, count] : {std::pair{0, 4}, {4, 1}, {5, 4}}) {
    CausalConv1dSilu(split.data() + first * kC, count, kC, kC, w.data(), kK, state.data(), pool);
  }
  EXPECT_EQ(split, whole);
}

TEST(LinearAttentionTest, GatedDeltaRuleMatchesTheRecurrenceAndSplitsExactly) {
  const GatedDeltaDims dims{2, 4, 8, 6};  // two value heads per key head
  constexpr int64_t kN = 7;
  const int64_t key_dim = dims.key_heads * dims.key_head_dim;
  const int64_t width = 2 * key_dim + dims.value_heads * dims.value_head_dim;
  const int64_t out_width = dims.value_heads * dims.value_head_dim;
  ThreadPool pool(2);
  const auto qkv = Random(kN * width, 3, -1, 1);
  const auto g = Random(kN * dims.value_heads, 4, -2, 0);
  const auto beta = Random(kN * dims.value_heads, 5, 0, 1);
  // The recurrence in double, per value head h (key head h / 2), S starting at 0.
  std::vector<double> expected(kN * out_width);
  for (int64_t h = 0; h < dims.value_heads; ++h) {
    const int64_t kh = h / 2;
    std::vector<double> s(dims.key_head_dim * dims.value_head_dim, 0.0);
    for (int64_t t = 0; t < kN; ++t) {
      const float* row = qkv.data() + t * width;
      std::vector<double> q(dims.key_head_dim), k(dims.key_head_dim);
      double qq = 0, kk = 0;
      for (int64_t i = 0; i < dims.key_head_dim; ++i) {
        qq +=
            static_cast<double>(row[kh * dims.key_head_dim + i]) * row[kh * dims.key_head_dim + i];
        kk += static_cast<double>(row[key_dim + kh * dims.key_head_dim + i]) *
              row[key_dim + kh * dims.key_head_dim + i];
      }
      for (int64_t i = 0; i < dims.key_head_dim; ++i) {
        q[i] = row[kh * dims.key_head_dim + i] / std::sqrt(qq + 1e-6) /
               std::sqrt(static_cast<double>(dims.key_head_dim));
        k[i] = row[key_dim + kh * dims.key_head_dim + i] / std::sqrt(kk + 1e-6);
      }
      const double decay = std::exp(static_cast<double>(g[t * dims.value_heads + h]));
      for (double& v : s) v *= decay;
      for (int64_t j = 0; j < dims.value_head_dim; ++j) {
        double kv = 0;
        for (int64_t i = 0; i < dims.key_head_dim; ++i) kv += s[i * dims.value_head_dim + j] * k[i];
        const double v = row[2 * key_dim + h * dims.value_head_dim + j];
        const double delta = beta[t * dims.value_heads + h] * (v - kv);
        for (int64_t i = 0; i < dims.key_head_dim; ++i)
          s[i * dims.value_head_dim + j] += k[i] * delta;
      }
      for (int64_t j = 0; j < dims.value_head_dim; ++j) {
        double o = 0;
        for (int64_t i = 0; i < dims.key_head_dim; ++i) o += s[i * dims.value_head_dim + j] * q[i];
        expected[t * out_width + h * dims.value_head_dim + j] = o;
      }
    }
  }
  const size_t state_size =
      static_cast<size_t>(dims.value_heads * dims.key_head_dim * dims.value_head_dim);
  const Isa active = ActiveIsa();
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (!IsaSupported(isa)) continue;
    SetActiveIsa(isa);
    SCOPED_TRACE(IsaName(isa));
    std::vector<float> state(state_size, 0.0F), whole(kN * out_width);
    std::vector<float> normed = qkv;  // q and k normalised in place
    GatedDeltaRule(normed.data(), kN, width, g.data(), beta.data(), dims, state.data(),
                   whole.data(), out_width, pool);
    for (int64_t i = 0; i < kN * out_width; ++i) ASSERT_NEAR(whole[i], expected[i], 1e-5) << i;
    std::vector<float> split(kN * out_width);
    std::fill(state.begin(), state.end(), 0.0F);
    normed = qkv;
    for (const auto& [first, count] : {std::pair{0, 3}, {3, 1}, {4, 3}}) {
      GatedDeltaRule(normed.data() + first * width, count, width,
                     g.data() + first * dims.value_heads, beta.data() + first * dims.value_heads,
                     dims, state.data(), split.data() + first * out_width, out_width, pool);
    }
    EXPECT_EQ(split, whole);
    // Tiled value heads (llama.cpp's GGUF order, value head j key_heads + g = grouped head
    // g group + j): the same inputs in that order give the same outputs in that order.
    GatedDeltaDims tiled = dims;
    tiled.value_heads_tiled = true;
    const int64_t group = dims.value_heads / dims.key_heads;
    const auto grouped_head = [&](int64_t h) {
      return h % dims.key_heads * group + h / dims.key_heads;
    };
    std::vector<float> moved = qkv, moved_g = g, moved_beta = beta;
    for (int64_t t = 0; t < kN; ++t) {
      for (int64_t h = 0; h < dims.value_heads; ++h) {
        const int64_t from = grouped_head(h);
        std::copy_n(qkv.data() + t * width + 2 * key_dim + from * dims.value_head_dim,
                    dims.value_head_dim,
                    moved.data() + t * width + 2 * key_dim + h * dims.value_head_dim);
        moved_g[t * dims.value_heads + h] = g[t * dims.value_heads + from];
        moved_beta[t * dims.value_heads + h] = beta[t * dims.value_heads + from];
      }
    }
    std::vector<float> tiled_out(kN * out_width);
    std::fill(state.begin(), state.end(), 0.0F);
    GatedDeltaRule(moved.data(), kN, width, moved_g.data(), moved_beta.data(), tiled, state.data(),
                   tiled_out.data(), out_width, pool);
    for (int64_t t = 0; t < kN; ++t) {
      for (int64_t h = 0; h < dims.value_heads; ++h) {
        for (int64_t j = 0; j < dims.value_head_dim; ++j) {
          ASSERT_EQ(tiled_out[t * out_width + h * dims.value_head_dim + j],
                    whole[t * out_width + grouped_head(h) * dims.value_head_dim + j]);
        }
      }
    }
  }
  SetActiveIsa(active);
}

}  // namespace
}  // namespace infer::kernels
