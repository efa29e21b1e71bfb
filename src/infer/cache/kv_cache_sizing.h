// How many KV blocks an engine's pool gets: as many as asked (--num-kv-blocks), or as many as
// the memory budget holds (--kv-cache-memory; unset: half the available memory), and never more
// than max_num_seqs sequences of max_model_len use at once. Pure: the caller reads the model and
// the machine.
#pragma once

#include <cstdint>

#include "infer/core/dtype.h"

namespace infer {

// The KV pool an engine made, for logs and /health.
struct KvCacheInfo {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  DType dtype = DType::kBF16;
  int64_t bytes = 0;
  int64_t capacity_tokens() const { return num_blocks * block_size; }
};

struct KvCacheSizing {
  int64_t block_size = 16;
  DType dtype = DType::kBF16;
  int64_t bytes_per_token = 0;  // of every layer's K and V; 0: a model without a cache
  int64_t max_len = 0;          // max_model_len, capped by the model's context
  int64_t max_num_seqs = 1;
  int64_t num_blocks = 0;       // > 0: taken as given
  int64_t memory_bytes = 0;     // the budget; 0: half of available_bytes, at most what is useful
  int64_t available_bytes = 0;  // the machine's available memory; 0: unknown
};

// Throws infer::Error for a budget over the available memory or under one block.
KvCacheInfo SizeKvCache(const KvCacheSizing& sizing);

}  // namespace infer
