#include "infer/cache/kv_cache_sizing.h"

#include <algorithm>

#include "infer/core/error.h"

namespace infer {

KvCacheInfo SizeKvCache(const KvCacheSizing& sizing) {
  KvCacheInfo info;
  info.block_size = sizing.block_size;
  info.dtype = sizing.dtype;
  const int64_t per_block = sizing.bytes_per_token * sizing.block_size;
  // Enough for max_num_seqs sequences of max_len: more is never used at once.
  const int64_t useful_blocks = std::min<int64_t>(
      sizing.max_num_seqs * ((sizing.max_len + sizing.block_size - 1) / sizing.block_size),
      int64_t{1} << 24);
  if (sizing.num_blocks > 0) {
    info.num_blocks = sizing.num_blocks;
  } else if (per_block == 0) {
    info.num_blocks = useful_blocks;  // a model without a cache: the blocks are bookkeeping
  } else {
    int64_t bytes = sizing.memory_bytes;
    const int64_t available = sizing.available_bytes;
    INFER_CHECK(bytes == 0 || available == 0 || bytes <= available,
                "the KV cache budget ({:.2f} GiB, --kv-cache-memory) is more than the {:.2f} GiB "
                "of memory available",
                static_cast<double>(bytes) / 0x1p30, static_cast<double>(available) / 0x1p30);
    if (bytes == 0) bytes = std::min(available / 2, useful_blocks * per_block);
    info.num_blocks = bytes / per_block;
    INFER_CHECK(info.num_blocks >= 1,
                "the KV cache budget ({} bytes) is smaller than one block ({} bytes)", bytes,
                per_block);
  }
  info.bytes = info.num_blocks * per_block;
  return info;
}

}  // namespace infer
