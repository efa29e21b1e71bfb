#include "infer/engine/engine_config.h"

#include <cmath>

#include "infer/core/error.h"

namespace infer {

BatchingMode ParseBatchingMode(std::string_view name) {
  if (name == "continuous") return BatchingMode::kContinuous;
  if (name == "static") return BatchingMode::kStatic;
  Fail("batching_mode '{}' is not supported (supported: continuous, static)", name);
}

SchedulerPolicy ParseSchedulerPolicy(std::string_view name) {
  if (name == "fcfs") return SchedulerPolicy::kFcfs;
  if (name == "priority") return SchedulerPolicy::kPriority;
  Fail("scheduler_policy '{}' is not supported (supported: fcfs, priority)", name);
}

KvCacheBackend ParseKvCacheBackend(std::string_view name) {
  if (name == "paged") return KvCacheBackend::kPaged;
  Fail("kv_cache_backend '{}' is not supported (supported: paged)", name);
}

std::string_view BatchingModeName(BatchingMode mode) {
  return mode == BatchingMode::kStatic ? "static" : "continuous";
}

std::string_view SchedulerPolicyName(SchedulerPolicy policy) {
  return policy == SchedulerPolicy::kPriority ? "priority" : "fcfs";
}

std::string_view KvCacheBackendName(KvCacheBackend /*backend*/) { return "paged"; }

void EngineConfig::Validate() const {
  INFER_CHECK(max_model_len >= 2, "max_model_len must be at least 2, got {}", max_model_len);
  INFER_CHECK(max_num_seqs >= 1, "max_num_seqs must be at least 1, got {}", max_num_seqs);
  INFER_CHECK(max_loras >= 1, "max_loras must be at least 1, got {}", max_loras);
  INFER_CHECK(max_num_batched_tokens >= 1, "max_num_batched_tokens must be at least 1, got {}",
              max_num_batched_tokens);
  INFER_CHECK(max_waiting_requests >= 1, "max_waiting_requests must be at least 1, got {}",
              max_waiting_requests);
  INFER_CHECK(std::isfinite(batch_wait_timeout_s) && batch_wait_timeout_s >= 0,
              "batch_wait_timeout_s must be finite and >= 0, got {}", batch_wait_timeout_s);
  INFER_CHECK(block_size >= 16 && block_size <= 1024 && block_size % 16 == 0,
              "block_size must be a multiple of 16 in [16, 1024] (the attention kernel reads 16 "
              "positions of one block at a time), got {}",
              block_size);
  INFER_CHECK(num_blocks >= 0, "num_blocks must be >= 0 (0: from the memory budget), got {}",
              num_blocks);
  INFER_CHECK(kv_cache_memory_bytes >= 0, "kv_cache_memory must be >= 0, got {}",
              kv_cache_memory_bytes);
  INFER_CHECK(kv_cache_dtype == DType::kF32 || kv_cache_dtype == DType::kBF16,
              "kv_cache_dtype must be f32 or bf16, got {}", DTypeName(kv_cache_dtype));
  speculative.Validate();
  INFER_CHECK(!speculative.enabled() || use_kv_cache,
              "speculative decoding needs the KV cache (drop --no-kv-cache)");
  INFER_CHECK(recurrent_state_slots >= 0, "recurrent_state_slots must be >= 0, got {}",
              recurrent_state_slots);
  INFER_CHECK(state_snapshot_slots >= -1, "--state-snapshots must be >= 0, got {}",
              state_snapshot_slots);
}

}  // namespace infer
