#include "infer/engine/engine_config.h"

#include <cmath>

#include "infer/core/error.h"

namespace infer {

void EngineConfig::Validate() const {
  INFER_CHECK(max_seq_len >= 2, "max_seq_len must be at least 2, got {}", max_seq_len);
  INFER_CHECK(max_batch_size >= 1, "max_batch_size must be at least 1, got {}", max_batch_size);
  INFER_CHECK(max_num_batched_tokens >= 1, "max_num_batched_tokens must be at least 1, got {}",
              max_num_batched_tokens);
  INFER_CHECK(max_waiting_requests >= 1, "max_waiting_requests must be at least 1, got {}",
              max_waiting_requests);
  INFER_CHECK(std::isfinite(batch_wait_timeout_s) && batch_wait_timeout_s >= 0,
              "batch_wait_timeout_s must be finite and >= 0, got {}", batch_wait_timeout_s);
  INFER_CHECK(batching_mode == "static", "batching_mode '{}' is not supported (supported: static)",
              batching_mode);
  INFER_CHECK(scheduler_policy == "fcfs",
              "scheduler_policy '{}' is not supported (supported: fcfs)", scheduler_policy);
  INFER_CHECK(kv_cache_backend == "contiguous",
              "kv_cache_backend '{}' is not supported (supported: contiguous)", kv_cache_backend);
}

}  // namespace infer
