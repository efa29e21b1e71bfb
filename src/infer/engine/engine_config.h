// Settings of the engine (with vLLM's names where vLLM has them): sequence and token
// budgets, batching mode, scheduling policy, the paged KV cache (block size, dtype, memory
// budget), prefix caching and preemption, with validation naming the first bad field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "infer/core/dtype.h"
#include "infer/engine/ngram_proposer.h"

namespace infer {

// The modes are enums; their names (vLLM's where vLLM has the mode) are parsed once, at the
// edge (the command line, a test), by Parse*, which throw infer::Error naming what is supported.
enum class BatchingMode { kContinuous, kStatic };
enum class SchedulerPolicy { kFcfs, kPriority };
enum class KvCacheBackend { kPaged };
BatchingMode ParseBatchingMode(std::string_view name);
SchedulerPolicy ParseSchedulerPolicy(std::string_view name);
KvCacheBackend ParseKvCacheBackend(std::string_view name);
std::string_view BatchingModeName(BatchingMode mode);
std::string_view SchedulerPolicyName(SchedulerPolicy policy);
std::string_view KvCacheBackendName(KvCacheBackend backend);

struct EngineConfig {
  // The model id clients must name in requests (the folder name or Hugging Face id).
  std::string model;
  // Longest prompt + max_tokens of one request (vLLM's max_model_len; --max-seq-len is an
  // alias); also capped by the model's context.
  int64_t max_model_len = 4096;
  // Most requests running at once (vLLM's max_num_seqs; --max-batch-size is an alias).
  int64_t max_num_seqs = 256;
  // Most tokens one step runs: decode tokens plus prefill chunks (vLLM's name). Bounds the
  // activation memory of a step and keeps its working set cache-sized: a long prefill ran
  // fastest in calls of 512 tokens, slower in both smaller and larger ones and slowest unbounded.
  int64_t max_num_batched_tokens = 512;
  // LoRA adapters may be served (vLLM's enable_lora): /metrics then shows which run and wait.
  bool enable_lora = false;
  // Most distinct LoRA adapters among the running requests (vLLM's max_loras; base-model
  // requests do not count): a request of another adapter waits while this many run. vLLM's
  // default is 1; infer keeps every loaded adapter in memory, so a step mixes up to 4.
  int64_t max_loras = 4;
  // Requests waiting beyond this are rejected (HTTP 503).
  int64_t max_waiting_requests = 64;
  // Default seed for requests that give none; nullopt: OS-seeded.
  std::optional<uint64_t> seed;
  // continuous: every step admits and retires requests, decode tokens and prefill chunks in
  // one forward. static: a batch forms (full, or batch_wait_timeout_s after its
  // first request), prefills, and decodes to completion before the next one forms.
  BatchingMode batching_mode = BatchingMode::kContinuous;
  // fcfs, or priority: waiting requests by (priority, arrival), lower value first.
  SchedulerPolicy scheduler_policy = SchedulerPolicy::kFcfs;
  // How long a forming static batch waits to fill before it is dispatched anyway.
  double batch_wait_timeout_s = 0.05;
  // paged only: one pool of fixed-size blocks for every sequence and layer.
  KvCacheBackend kv_cache_backend = KvCacheBackend::kPaged;
  // Positions per KV block; a multiple of 16 (the attention kernel reads 16 consecutive positions
  // of one block at a time).
  int64_t block_size = 16;
  // Blocks in the pool; 0: from kv_cache_memory_bytes.
  int64_t num_blocks = 0;
  // Bytes for the pool; 0: half the memory available at start, capped at what max_num_seqs
  // sequences of max_model_len need.
  int64_t kv_cache_memory_bytes = 0;
  DType kv_cache_dtype = DType::kBF16;
  // Reuse the KV of full blocks whose token prefix was seen before.
  bool enable_prefix_caching = true;
  // true: KV blocks are taken as sequences grow; when none is left the lowest-priority,
  // latest-arrived running request is preempted (its blocks freed, recomputed later).
  // false (the default): a request is admitted only with blocks for its prompt plus
  // max_tokens, so a running request never runs out.
  bool enable_preemption = false;
  // Structured output: the tokens a grammar forces (an object's fixed keys, punctuation) join
  // the request without a sampling step each, computed in the next step's forward as one chunk
  // (jump-forward). The forced text is tokenized alone by the model's tokenizer, so the tokens
  // at its edges may differ from what token-by-token decoding would pick; the text is the same.
  bool enable_jump_forward = true;
  // false: no cache at all, every step recomputes each sequence from its first token (the
  // oracle, --no-kv-cache).
  bool use_kv_cache = true;
  // Speculative decoding by n-gram lookup (vLLM's --speculative-config): a decoding request
  // whose last tokens occurred earlier in its context runs, in one step, its sampled token and
  // the tokens that followed that occurrence; the model's own draws decide how many of them
  // stand (each kept token is the one it samples there, so outputs are the same as without).
  // Off by default. Needs the KV cache.
  SpeculativeConfig speculative;
  // Recurrent-state slots, one per sequence that may run at once, for a model that keeps a state
  // per sequence (LanguageModel::recurrent_state_bytes; set by the engine from the model, 0 for
  // the others). Its prefix cache resumes only where it holds a state snapshot, and a draft
  // check's rejected tokens are undone from a checkpoint of the state.
  int64_t recurrent_state_slots = 0;
  // State snapshots the prefix cache may hold for such a model (block_manager.h), beside the
  // slots of the running sequences (--state-snapshots; -1: the engine picks, 0: none).
  int64_t state_snapshot_slots = -1;

  bool priority_policy() const { return scheduler_policy == SchedulerPolicy::kPriority; }

  // Throws infer::Error naming the first unsupported or out-of-range field.
  void Validate() const;
};

}  // namespace infer
