// Attention: SIMD paths against the reference for GQA, sliding windows, prefill and decode
// after prefill; cache slots past the visible positions are NaN and must never be read.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "infer/core/error.h"
#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/ops.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

struct Case {
  int64_t num_heads, num_kv_heads, head_dim, num_tokens, first_pos, window;
};

void CheckAttention(ThreadPool& pool, const Case& c, uint32_t seed) {
  const int64_t total = c.first_pos + c.num_tokens;
  const int64_t max_seq = total + 5;
  const int64_t kv_head_stride = max_seq * c.head_dim;
  const int64_t row = c.num_heads * c.head_dim;
  std::vector<float> q = RandomFloats(static_cast<size_t>(c.num_tokens * row), -2, 2, seed);
  std::vector<float> k_cache =
      RandomFloats(static_cast<size_t>(c.num_kv_heads * kv_head_stride), -2, 2, seed + 1);
  std::vector<float> v_cache =
      RandomFloats(static_cast<size_t>(c.num_kv_heads * kv_head_stride), -3, 3, seed + 2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t h = 0; h < c.num_kv_heads; ++h) {
    for (int64_t i = total * c.head_dim; i < kv_head_stride; ++i) {
      k_cache[h * kv_head_stride + i] = nan;
      v_cache[h * kv_head_stride + i] = nan;
    }
  }
  AttentionParams params;
  params.num_heads = c.num_heads;
  params.num_kv_heads = c.num_kv_heads;
  params.head_dim = c.head_dim;
  params.scale = 1.0F / std::sqrt(static_cast<float>(c.head_dim));
  params.sliding_window = c.window;
  std::vector<float> expected(q.size());
  cpu::reference::Attention(q.data(), c.num_tokens, c.first_pos, k_cache.data(), v_cache.data(),
                            kv_head_stride, params, expected.data(), pool);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> out(q.size(), nan);
    Attention(q.data(), c.num_tokens, c.first_pos, k_cache.data(), v_cache.data(), kv_head_stride,
              params, out.data(), pool);
    int failures = 0;
    for (size_t i = 0; i < out.size() && failures < 5; ++i) {
      if (!(std::fabs(out[i] - expected[i]) <= 2e-5F * 3.0F)) {
        ++failures;
        ADD_FAILURE() << IsaName(isa) << " H=" << c.num_heads << " KV=" << c.num_kv_heads
                      << " D=" << c.head_dim << " T=" << c.num_tokens << " first=" << c.first_pos
                      << " window=" << c.window << " out[" << i << "] = " << out[i] << ", want "
                      << expected[i];
      }
    }
  }
}

TEST(AttentionTest, PrefillAndDecodeWithGqaAndWindows) {
  ThreadPool& pool = TestPool();
  uint32_t seed = 100;
  for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 2}, {2, 2}, {8, 1}, {6, 3}}) {
    for (int64_t head_dim : {8, 24, 64}) {
      for (auto [tokens, first] :
           {std::pair<int64_t, int64_t>{1, 0}, {5, 0}, {37, 0}, {1, 70}, {3, 90}, {20, 45}}) {
        for (int64_t window : {0, 1, 4, 33}) {
          CheckAttention(pool, {heads, kv_heads, head_dim, tokens, first, window}, ++seed);
        }
      }
    }
  }
}

TEST(AttentionTest, LargeHeadDimAndLongContext) {
  ThreadPool& pool = TestPool();
  CheckAttention(pool, {4, 1, 256, 70, 0, 0}, 7);     // Gemma 3 1B shape, prefill
  CheckAttention(pool, {4, 1, 256, 1, 600, 512}, 8);  // decode past the sliding window
  CheckAttention(pool, {32, 8, 64, 1, 300, 0}, 9);    // Llama 3.2 1B decode
  CheckAttention(pool, {16, 8, 128, 130, 0, 0}, 10);  // Qwen3 1.7B prefill
}

TEST(AttentionTest, RejectsBadArguments) {
  ThreadPool& pool = TestPool();
  std::vector<float> buf(1024);
  AttentionParams params{.num_heads = 3, .num_kv_heads = 2, .head_dim = 4};
  EXPECT_THROW(Attention(buf.data(), 1, 0, buf.data(), buf.data(), 64, params, buf.data(), pool),
               Error);
  params.num_heads = 4;
  EXPECT_THROW(Attention(buf.data(), 4, 0, buf.data(), buf.data(), 8, params, buf.data(), pool),
               Error);
}

}  // namespace
}  // namespace infer::kernels
