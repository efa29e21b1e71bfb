// What the engine counts for monitoring (vLLM's metrics): request outcomes, tokens, prefix-cache
// queries and hits, preemptions, and latency histograms (time to first token, inter-token
// latency, end-to-end latency, queue time), plus the Prometheus text exposition of a snapshot
// under vLLM's metric names, so that existing vLLM dashboards read infer unchanged.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace infer {

// Cumulative buckets as Prometheus keeps them: counts[i] observations <= bounds[i], then +Inf.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // Observations <= bounds[i] (not cumulative); the last entry counts those above every bound.
  const std::vector<int64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  double sum_ = 0.0;
  int64_t count_ = 0;
};

struct EngineMetrics {
  EngineMetrics();

  // Gauges, filled when a snapshot is taken.
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  double kv_cache_usage = 0.0;  // fraction of KV blocks in use, 0-1
  // A model with recurrent state (state_slots > 0): running sequences' slots in use, and the
  // prefix cache's state snapshots held, of state_snapshot_slots.
  int64_t state_slots = 0, state_slots_used = 0;
  int64_t state_snapshot_slots = 0, state_snapshots = 0;
  // LoRA (EngineConfig::enable_lora; max_loras 0 when off): the adapters of the running and of
  // the waiting requests, by name, each once, and when the snapshot was taken (Unix seconds).
  int64_t max_loras = 0;
  std::vector<std::string> running_lora_adapters, waiting_lora_adapters;
  double lora_info_time_s = 0.0;

  // Counters.
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  std::map<std::string, int64_t> request_success;  // by finished_reason: stop, length, abort
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     // of those, found
  // Speculative decoding (vLLM's spec_decode counters): drafts checked, their tokens, and
  // the tokens the model confirmed.
  int64_t spec_decode_num_drafts = 0;
  int64_t spec_decode_num_draft_tokens = 0;
  int64_t spec_decode_num_accepted_tokens = 0;

  Histogram time_to_first_token_s;
  Histogram inter_token_latency_s;
  Histogram e2e_request_latency_s;
  Histogram request_queue_time_s;
  Histogram request_prompt_tokens;
  Histogram request_generation_tokens;
};

// What the model's matrix products run on: the kernels' ISA level (kernels::IsaName) and the
// MatMul precision (kernels::MatMulPrecisionName), as `infer serve` resolved them.
struct ComputeInfo {
  std::string isa;
  std::string matmul_precision;
};

// What build serves: the project version and the git commit it was built from.
struct BuildInfo {
  std::string version;
  std::string commit;
};

// The Prometheus text format (version 0.0.4) of `metrics`, every series labelled
// model_name="<model_name>"; with `compute` (its fields non-empty), also the gauge
// infer_compute_info{isa=..., matmul_precision=...} 1; with `build` (a version), the gauge
// infer_build_info{version=..., commit=...} 1, as Prometheus exporters name theirs.
std::string PrometheusText(const EngineMetrics& metrics, std::string_view model_name,
                           const ComputeInfo& compute = {}, const BuildInfo& build = {});

}  // namespace infer
