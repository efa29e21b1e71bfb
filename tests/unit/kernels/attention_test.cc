// PagedAttention: every SIMD path against the reference (GQA, sliding windows, prefill, decode,
// several sequences per call with shuffled block tables, f32 and bf16 KV, block sizes 16, 32
// and 64); cache slots no sequence wrote are NaN and must never reach an output. Then the
// batch invariance the engine relies on, bit for bit: a row is the same alone or in a batch,
// as one prefill or as chunks and decode steps, on 1, 2 or 3 threads, and when a long context
// is split across tasks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "infer/core/error.h"
#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/ops.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

struct Shape {
  int64_t num_heads, num_kv_heads, head_dim;
};

constexpr Shape kLlama{32, 8, 64};  // Llama 3.2 1B
constexpr Shape kGemma{4, 1, 256};  // Gemma 3 1B
constexpr Shape kQwen{16, 8, 128};  // Qwen3 1.7B

AttentionParams Params(const Shape& shape, int64_t window) {
  AttentionParams params;
  params.num_heads = shape.num_heads;
  params.num_kv_heads = shape.num_kv_heads;
  params.head_dim = shape.head_dim;
  params.scale = 1.0F / std::sqrt(static_cast<float>(shape.head_dim));
  params.sliding_window = window;
  return params;
}

// One layer of a paged cache. Blocks are handed out from a shuffled free list, so a sequence's
// blocks are neither contiguous nor ascending; the strides carry padding. Every slot starts NaN.
class TestCache {
 public:
  TestCache(DType dtype, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
            int64_t num_blocks, uint32_t seed)
      : dtype_(dtype),
        block_size_(block_size),
        num_kv_heads_(num_kv_heads),
        head_dim_(head_dim),
        head_stride_(block_size * head_dim + 8),
        block_stride_(num_kv_heads * (block_size * head_dim + 8) + 16),
        rng_(seed) {
    const size_t size = static_cast<size_t>(num_blocks * block_stride_);
    if (dtype == DType::kF32) {
      k32_.assign(size, std::numeric_limits<float>::quiet_NaN());
      v32_.assign(size, std::numeric_limits<float>::quiet_NaN());
    } else {
      k16_.assign(size, 0x7fc0);  // bf16 NaN
      v16_.assign(size, 0x7fc0);
    }
    for (int64_t b = 0; b < num_blocks; ++b) free_.push_back(static_cast<int32_t>(b));
    std::shuffle(free_.begin(), free_.end(), rng_);
  }

  // A new sequence with K/V written for positions [0, written); its table has `capacity`
  // positions' worth of blocks (slots past `written` stay NaN).
  std::vector<int32_t> AddSequence(int64_t written, int64_t capacity) {
    const int64_t blocks = (std::max(written, capacity) + block_size_ - 1) / block_size_;
    INFER_CHECK(static_cast<int64_t>(free_.size()) >= blocks, "test cache is full");
    std::vector<int32_t> table(free_.end() - blocks, free_.end());
    free_.resize(free_.size() - static_cast<size_t>(blocks));
    std::uniform_real_distribution<float> key(-2.0F, 2.0F);
    std::uniform_real_distribution<float> value(-3.0F, 3.0F);
    for (int64_t pos = 0; pos < written; ++pos) {
      for (int64_t h = 0; h < num_kv_heads_; ++h) {
        const int64_t at = table[pos / block_size_] * block_stride_ + h * head_stride_ +
                           (pos % block_size_) * head_dim_;
        for (int64_t d = 0; d < head_dim_; ++d) {
          const float kv = key(rng_);
          const float vv = value(rng_);
          if (dtype_ == DType::kF32) {
            k32_[at + d] = kv;
            v32_[at + d] = vv;
          } else {
            k16_[at + d] = F32ToBf16(kv);
            v16_[at + d] = F32ToBf16(vv);
          }
        }
      }
    }
    return table;
  }

  PagedKvLayer Layer() const {
    PagedKvLayer layer;
    layer.k = dtype_ == DType::kF32 ? static_cast<const void*>(k32_.data()) : k16_.data();
    layer.v = dtype_ == DType::kF32 ? static_cast<const void*>(v32_.data()) : v16_.data();
    layer.dtype = dtype_;
    layer.block_size = block_size_;
    layer.block_stride = block_stride_;
    layer.head_stride = head_stride_;
    return layer;
  }

 private:
  DType dtype_;
  int64_t block_size_, num_kv_heads_, head_dim_, head_stride_, block_stride_;
  std::mt19937 rng_;
  std::vector<float> k32_, v32_;
  std::vector<uint16_t> k16_, v16_;
  std::vector<int32_t> free_;
};

// A query block: num_tokens rows at positions first_pos ..
struct Query {
  int64_t first_pos, num_tokens;
};

// Sequences of one call over a cache: seqs[i] reads tables[i]; rows are laid out in `order`.
struct Call {
  std::vector<AttentionSequence> seqs;
  int64_t rows = 0;
};

Call MakeCall(const std::vector<Query>& queries, const std::vector<std::vector<int32_t>>& tables,
              const std::vector<size_t>& row_order) {
  Call call;
  call.seqs.resize(queries.size());
  for (size_t i : row_order) {
    AttentionSequence& seq = call.seqs[i];
    seq.row = call.rows;
    seq.num_tokens = queries[i].num_tokens;
    seq.first_pos = queries[i].first_pos;
    seq.block_table = tables[i].data();
    seq.num_blocks = static_cast<int64_t>(tables[i].size());
    call.rows += seq.num_tokens;
  }
  return call;
}

std::string Label(Isa isa, DType dtype, int64_t block_size, const Shape& shape, int64_t window) {
  return Describe(isa, dtype) + " block=" + std::to_string(block_size) +
         " H=" + std::to_string(shape.num_heads) + " KV=" + std::to_string(shape.num_kv_heads) +
         " D=" + std::to_string(shape.head_dim) + " window=" + std::to_string(window);
}

// Runs `queries` (sequence i has K/V written for first_pos + num_tokens positions, and a table
// with some room past them) in one call on every SIMD ISA and compares with the reference.
void CheckAgainstReference(ThreadPool& pool, DType dtype, int64_t block_size, const Shape& shape,
                           int64_t window, const std::vector<Query>& queries, uint32_t seed) {
  int64_t blocks = 0;
  for (const Query& query : queries) {
    blocks += (query.first_pos + query.num_tokens + 20) / block_size + 1;
  }
  TestCache cache(dtype, block_size, shape.num_kv_heads, shape.head_dim, blocks + 3, seed);
  std::vector<std::vector<int32_t>> tables;
  for (const Query& query : queries) {
    const int64_t len = query.first_pos + query.num_tokens;
    tables.push_back(cache.AddSequence(len, len + 20));
  }
  std::vector<size_t> order(queries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;  // reversed rows
  const Call call = MakeCall(queries, tables, order);
  const int64_t width = shape.num_heads * shape.head_dim;
  const std::vector<float> q =
      RandomFloats(static_cast<size_t>(call.rows * width), -2, 2, seed + 1);
  const AttentionParams params = Params(shape, window);
  std::vector<float> expected(q.size());
  cpu::reference::PagedAttention(q.data(), call.seqs, cache.Layer(), params, expected.data(), pool);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());
    PagedAttention(q.data(), call.seqs, cache.Layer(), params, out.data(), pool);
    int failures = 0;
    for (size_t i = 0; i < out.size() && failures < 5; ++i) {
      if (!(std::fabs(out[i] - expected[i]) <= 6e-5F)) {
        ++failures;
        ADD_FAILURE() << Label(isa, dtype, block_size, shape, window) << " row "
                      << static_cast<int64_t>(i) / width << " out[" << i << "] = " << out[i]
                      << ", want " << expected[i];
      }
    }
  }
}

TEST(PagedAttentionTest, MatchesReferenceWithGqaWindowsAndManySequences) {
  INFER_SKIP_WITHOUT_SIMD();
  ThreadPool& pool = TestPool();
  // Prefill from 0, decode, and chunks and decodes after a prefix, in one call.
  const std::vector<Query> queries = {{0, 1}, {0, 5}, {0, 37}, {70, 1}, {90, 3}, {45, 20}};
  uint32_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t block_size : {16, 32, 64}) {
      // Groups of 2, 1, 8 (two runs of 4), 2, 3 (2 + 1) and 5 (4 + 1) query heads.
      for (auto [heads, kv_heads] :
           {std::pair<int64_t, int64_t>{4, 2}, {2, 2}, {8, 1}, {6, 3}, {6, 2}, {5, 1}}) {
        for (int64_t head_dim : {8, 24, 64}) {
          for (int64_t window : {0, 1, 4, 33}) {
            CheckAgainstReference(pool, dtype, block_size, {heads, kv_heads, head_dim}, window,
                                  queries, ++seed);
          }
        }
      }
    }
  }
}

TEST(PagedAttentionTest, MatchesReferenceAtModelShapesAndLongContexts) {
  INFER_SKIP_WITHOUT_SIMD();
  ThreadPool& pool = TestPool();
  uint32_t seed = 7;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t block_size : {16, 64}) {
      // Gemma 3 1B: prefill, then decode past its 512-key sliding window and a long global one.
      CheckAgainstReference(pool, dtype, block_size, kGemma, 0, {{0, 70}, {4099, 1}}, ++seed);
      CheckAgainstReference(pool, dtype, block_size, kGemma, 512, {{600, 1}, {700, 40}}, ++seed);
      // Llama 3.2 1B: decodes at 300 and 4100 keys, a chunk at 2000.
      CheckAgainstReference(pool, dtype, block_size, kLlama, 0, {{299, 1}, {4099, 1}, {2000, 20}},
                            ++seed);
      // Qwen3 1.7B prefill.
      CheckAgainstReference(pool, dtype, block_size, kQwen, 0, {{0, 130}, {1000, 1}}, ++seed);
    }
  }
}

// ---- Bit-for-bit invariance -------------------------------------------------------------

// q rows of every position of a sequence, so that any call can take the rows it needs.
struct Sequence {
  std::vector<int32_t> table;
  std::vector<float> q;  // [length, width]
};

// Output rows [row, row + count) of `out` equal `want` byte for byte.
void ExpectSameBits(const std::vector<float>& want, const float* got, int64_t count, int64_t width,
                    const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(want.size()), count * width);
  for (int64_t r = 0; r < count; ++r) {
    if (std::memcmp(want.data() + r * width, got + r * width,
                    static_cast<size_t>(width) * sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": row " << r << " differs";
      return;
    }
  }
}

// Runs one call of `queries` over `seqs` (query i on seqs[which[i]]) and returns each query's
// output rows.
std::vector<std::vector<float>> RunCall(ThreadPool& pool, const TestCache& cache,
                                        const AttentionParams& params,
                                        const std::vector<Sequence>& seqs,
                                        const std::vector<size_t>& which,
                                        const std::vector<Query>& queries) {
  const int64_t width = params.num_heads * params.head_dim;
  std::vector<AttentionSequence> call(queries.size());
  int64_t rows = 0;
  for (size_t i = 0; i < queries.size(); ++i) {
    const Sequence& seq = seqs[which[i]];
    call[i].row = rows;
    call[i].num_tokens = queries[i].num_tokens;
    call[i].first_pos = queries[i].first_pos;
    call[i].block_table = seq.table.data();
    call[i].num_blocks = static_cast<int64_t>(seq.table.size());
    rows += queries[i].num_tokens;
  }
  std::vector<float> q(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < queries.size(); ++i) {
    const Sequence& seq = seqs[which[i]];
    std::memcpy(q.data() + call[i].row * width, seq.q.data() + queries[i].first_pos * width,
                static_cast<size_t>(queries[i].num_tokens * width) * sizeof(float));
  }
  std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());
  PagedAttention(q.data(), call, cache.Layer(), params, out.data(), pool);
  std::vector<std::vector<float>> result;
  for (size_t i = 0; i < queries.size(); ++i) {
    result.emplace_back(out.begin() + call[i].row * width,
                        out.begin() + (call[i].row + call[i].num_tokens) * width);
  }
  return result;
}

// A cache holding sequences of the given lengths (all positions written), with their q rows.
struct Fixture {
  Fixture(DType dtype, int64_t block_size, const Shape& shape, const std::vector<int64_t>& lengths,
          uint32_t seed)
      : cache(dtype, block_size, shape.num_kv_heads, shape.head_dim, Blocks(lengths, block_size),
              seed) {
    const int64_t width = shape.num_heads * shape.head_dim;
    for (int64_t len : lengths) {
      Sequence seq;
      seq.table = cache.AddSequence(len, len);
      seq.q = RandomFloats(static_cast<size_t>(len * width), -2, 2, ++seed);
      seqs.push_back(std::move(seq));
    }
  }
  static int64_t Blocks(const std::vector<int64_t>& lengths, int64_t block_size) {
    int64_t blocks = 0;
    for (int64_t len : lengths) blocks += (len + block_size - 1) / block_size;
    return blocks + 2;
  }
  TestCache cache;
  std::vector<Sequence> seqs;
};

template <class Fn>
void ForEachIsaAndDtype(Fn fn) {
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    for (DType dtype : {DType::kF32, DType::kBF16}) fn(isa, dtype);
  }
}

TEST(PagedAttentionTest, RowIsTheSameAloneAndInABatch) {
  INFER_SKIP_WITHOUT_SIMD();
  ThreadPool& pool = TestPool();
  for (auto [shape, window] : {std::pair<Shape, int64_t>{kLlama, 0}, {kGemma, 512}, {kQwen, 0}}) {
    ForEachIsaAndDtype([&, shape = shape, window = window](Isa isa, DType dtype) {
      const Fixture f(dtype, 32, shape, {400, 1100, 60, 2600}, 11);
      const AttentionParams params = Params(shape, window);
      const std::string label = Label(isa, dtype, 32, shape, window);
      // Sequence 0: a 37-token chunk at 300; sequence 1: a decode at 1099.
      const auto alone_chunk = RunCall(pool, f.cache, params, f.seqs, {0}, {{300, 37}});
      const auto alone_decode = RunCall(pool, f.cache, params, f.seqs, {1}, {{1099, 1}});
      const auto batch = RunCall(pool, f.cache, params, f.seqs, {2, 1, 3, 0},
                                 {{0, 60}, {1099, 1}, {2599, 1}, {300, 37}});
      const int64_t width = shape.num_heads * shape.head_dim;
      ExpectSameBits(alone_chunk[0], batch[3].data(), 37, width, label + " chunk in a batch");
      ExpectSameBits(alone_decode[0], batch[1].data(), 1, width, label + " decode in a batch");
    });
  }
}

TEST(PagedAttentionTest, PrefillEqualsChunksAndDecodeSteps) {
  INFER_SKIP_WITHOUT_SIMD();
  ThreadPool& pool = TestPool();
  constexpr int64_t kLength = 200;
  for (auto [shape, window] :
       {std::pair<Shape, int64_t>{{8, 2, 64}, 0}, {kGemma, 33}, {{6, 3, 24}, 0}}) {
    for (int64_t block_size : {16, 64}) {
      ForEachIsaAndDtype([&, shape = shape, window = window](Isa isa, DType dtype) {
        const Fixture f(dtype, block_size, shape, {kLength}, 21);
        const AttentionParams params = Params(shape, window);
        const std::string label = Label(isa, dtype, block_size, shape, window);
        const int64_t width = shape.num_heads * shape.head_dim;
        const auto prefill = RunCall(pool, f.cache, params, f.seqs, {0}, {{0, kLength}})[0];
        // Chunks of 5 and 64, then one token at a time.
        std::vector<Query> steps = {{0, 5}, {5, 64}};
        for (int64_t pos = 69; pos < kLength; ++pos) steps.push_back({pos, 1});
        for (const Query& step : steps) {
          const auto got = RunCall(pool, f.cache, params, f.seqs, {0}, {step})[0];
          const std::vector<float> want(
              prefill.begin() + step.first_pos * width,
              prefill.begin() + (step.first_pos + step.num_tokens) * width);
          ExpectSameBits(want, got.data(), step.num_tokens, width,
                         label + " step at " + std::to_string(step.first_pos));
        }
      });
    }
  }
}

TEST(PagedAttentionTest, RowIsTheSameOnOneTwoAndThreeThreads) {
  INFER_SKIP_WITHOUT_SIMD();
  ThreadPool one(1);
  ThreadPool two(2);
  ThreadPool three(3);
  for (const Shape& shape : {kLlama, kGemma}) {
    ForEachIsaAndDtype([&](Isa isa, DType dtype) {
      const Fixture f(dtype, 16, shape, {4100, 300, 900}, 31);
      const AttentionParams params = Params(shape, 0);
      const std::vector<size_t> which = {0, 1, 2};
      const std::vector<Query> queries = {{4099, 1}, {0, 300}, {880, 20}};
      const auto want = RunCall(one, f.cache, params, f.seqs, which, queries);
      const int64_t width = shape.num_heads * shape.head_dim;
      for (ThreadPool* pool : {&two, &three}) {
        const auto got = RunCall(*pool, f.cache, params, f.seqs, which, queries);
        const std::string label =
            Label(isa, dtype, 16, shape, 0) + " threads=" + std::to_string(pool->num_threads());
        for (size_t i = 0; i < queries.size(); ++i) {
          ExpectSameBits(want[i], got[i].data(), queries[i].num_tokens, width,
                         label + " query " + std::to_string(i));
        }
      }
    });
  }
}

TEST(PagedAttentionTest, LongDecodeSplitAcrossTasksEqualsPrefill) {
  INFER_SKIP_WITHOUT_SIMD();
  // A lone decode over thousands of keys is split into partition ranges across threads; a
  // prefill chunk on one thread folds the same partitions inside one task.
  ThreadPool one(1);
  ThreadPool& two = TestPool();
  ThreadPool three(3);
  for (const Shape& shape : {kGemma, kLlama}) {
    for (int64_t length : {2000, 4100}) {
      ForEachIsaAndDtype([&](Isa isa, DType dtype) {
        const Fixture f(dtype, 32, shape, {length}, 41);
        const AttentionParams params = Params(shape, 0);
        const std::string label =
            Label(isa, dtype, 32, shape, 0) + " length=" + std::to_string(length);
        const int64_t width = shape.num_heads * shape.head_dim;
        constexpr int64_t kChunk = 20;
        const auto prefill =
            RunCall(one, f.cache, params, f.seqs, {0}, {{length - kChunk, kChunk}})[0];
        for (int64_t pos : {length - kChunk, length - 7, length - 1}) {
          const std::vector<float> want(prefill.begin() + (pos - length + kChunk) * width,
                                        prefill.begin() + (pos - length + kChunk + 1) * width);
          for (ThreadPool* pool : {&two, &three}) {
            const auto got = RunCall(*pool, f.cache, params, f.seqs, {0}, {{pos, 1}})[0];
            ExpectSameBits(want, got.data(), 1, width,
                           label + " decode at " + std::to_string(pos) + " on " +
                               std::to_string(pool->num_threads()) + " threads");
          }
        }
      });
    }
  }
}

TEST(PagedAttentionTest, RejectsBadArguments) {
  ThreadPool& pool = TestPool();
  std::vector<float> buf(4096);
  std::vector<int32_t> table = {0, 1};
  PagedKvLayer kv{.k = buf.data(),
                  .v = buf.data(),
                  .dtype = DType::kF32,
                  .block_size = 16,
                  .block_stride = 64,
                  .head_stride = 64};
  AttentionSequence seq{
      .row = 0, .num_tokens = 4, .first_pos = 0, .block_table = table.data(), .num_blocks = 2};
  const std::vector<AttentionSequence> seqs = {seq};
  AttentionParams params{.num_heads = 3, .num_kv_heads = 2, .head_dim = 4};
  EXPECT_THROW(PagedAttention(buf.data(), seqs, kv, params, buf.data(), pool), Error);
  params.num_heads = 4;
  params.num_kv_heads = 1;
  PagedAttention(buf.data(), seqs, kv, params, buf.data() + 2048, pool);  // valid
  PagedKvLayer bad = kv;
  bad.block_size = 24;  // not a multiple of 16
  EXPECT_THROW(PagedAttention(buf.data(), seqs, bad, params, buf.data(), pool), Error);
  bad = kv;
  bad.dtype = DType::kF16;
  EXPECT_THROW(PagedAttention(buf.data(), seqs, bad, params, buf.data(), pool), Error);
  bad = kv;
  bad.head_stride = 32;  // cannot hold 16 positions x 4
  EXPECT_THROW(PagedAttention(buf.data(), seqs, bad, params, buf.data(), pool), Error);
  std::vector<AttentionSequence> long_seq = {seq};
  long_seq[0].first_pos = 30;  // 34 positions in 2 blocks of 16
  EXPECT_THROW(PagedAttention(buf.data(), long_seq, kv, params, buf.data(), pool), Error);
}

}  // namespace
}  // namespace infer::kernels
