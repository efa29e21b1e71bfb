// Settings of the serving engine (seed phase 4): batch and queue sizes, the batching mode,
// scheduling policy and KV-cache backend, with validation that rejects what is not built yet.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace infer {

struct EngineConfig {
  // The model id clients must name in requests (the folder name or Hugging Face id).
  std::string model;
  // Longest prompt + generation of one request; sizes the per-batch KV cache.
  int64_t max_seq_len = 4096;
  int64_t max_batch_size = 8;
  // Most prompt tokens in one prefill call (vLLM's name): a batch's prompts are run in calls
  // of at most this many tokens, a long prompt split across calls. Bounds the activation
  // memory of a prefill, and keeps its working set cache-sized: W2 of bench_serving (bf16,
  // 2 threads) prefilled its 9,633 prompt tokens in 40.2 / 34.2 / 36.3 / 39.5 / 45.6 s with
  // 256 / 512 / 1024 / 2048 / unbounded tokens per call.
  int64_t max_num_batched_tokens = 512;
  // Requests queued beyond this are rejected (HTTP 503).
  int64_t max_waiting_requests = 64;
  // Default seed for requests that give none; nullopt: OS-seeded.
  std::optional<uint64_t> seed;
  // "static" only (continuous batching comes later).
  std::string batching_mode = "static";
  // "fcfs" only.
  std::string scheduler_policy = "fcfs";
  // How long a forming batch waits to fill before it is dispatched anyway.
  double batch_wait_timeout_s = 0.05;
  // "contiguous" only (paged comes later).
  std::string kv_cache_backend = "contiguous";

  // Throws infer::Error naming the first unsupported or out-of-range field.
  void Validate() const;
};

}  // namespace infer
