// The KV pool's size from the config, the model's bytes per token and the machine's memory,
// without a model: the figures are worked by hand from the rules in kv_cache_sizing.h.
#include "infer/cache/kv_cache_sizing.h"

#include <gtest/gtest.h>

#include "infer/core/error.h"

namespace infer {
namespace {

KvCacheSizing Sizing() {
  KvCacheSizing sizing;
  sizing.block_size = 16;
  sizing.bytes_per_token = 1024;  // 16 KiB a block
  sizing.max_len = 100;           // 7 blocks a sequence
  sizing.max_num_seqs = 4;        // 28 blocks are useful
  return sizing;
}

TEST(KvCacheSizing, GivenBlocksAreTakenAsGiven) {
  KvCacheSizing sizing = Sizing();
  sizing.num_blocks = 3;
  const KvCacheInfo info = SizeKvCache(sizing);
  EXPECT_EQ(info.num_blocks, 3);
  EXPECT_EQ(info.bytes, 3 * 16 * 1024);
  EXPECT_EQ(info.capacity_tokens(), 48);
}

TEST(KvCacheSizing, HalfTheMemoryAtMostWhatIsUseful) {
  KvCacheSizing sizing = Sizing();
  sizing.available_bytes = 20 * 16 * 1024;  // half: 10 blocks
  EXPECT_EQ(SizeKvCache(sizing).num_blocks, 10);
  sizing.available_bytes = int64_t{1} << 40;  // plenty: the 28 useful blocks
  EXPECT_EQ(SizeKvCache(sizing).num_blocks, 28);
}

TEST(KvCacheSizing, ABudgetIsSpentInWholeBlocks) {
  KvCacheSizing sizing = Sizing();
  sizing.memory_bytes = 5 * 16 * 1024 + 100;
  sizing.available_bytes = int64_t{1} << 30;
  EXPECT_EQ(SizeKvCache(sizing).num_blocks, 5);
  sizing.memory_bytes = 100;  // under one block
  EXPECT_THROW(SizeKvCache(sizing), Error);
  sizing.memory_bytes = int64_t{2} << 30;  // over the available memory
  EXPECT_THROW(SizeKvCache(sizing), Error);
}

TEST(KvCacheSizing, AModelWithoutACacheKeepsBookkeepingBlocks) {
  KvCacheSizing sizing = Sizing();
  sizing.bytes_per_token = 0;
  const KvCacheInfo info = SizeKvCache(sizing);
  EXPECT_EQ(info.num_blocks, 28);
  EXPECT_EQ(info.bytes, 0);
}

}  // namespace
}  // namespace infer
