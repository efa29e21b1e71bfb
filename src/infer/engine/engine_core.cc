#include "infer/engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/engine/output_channel.h"

namespace infer {

EngineCore::EngineCore(const EngineConfig& config, LanguageModel& model, const Tokenizer* tokenizer,
                       int64_t num_blocks, std::vector<int32_t> eos_token_ids)
    : config_(config),
      tokenizer_(tokenizer),
      runner_(model, config.max_num_batched_tokens),
      pipeline_(std::move(eos_token_ids), config.enable_jump_forward, config.speculative),
      scheduler_(std::make_unique<Scheduler>(config, num_blocks)) {}

double EngineCore::NowS() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
}

EngineCore::Added EngineCore::Add(std::shared_ptr<Request> request) {
  {
    std::lock_guard lock(mutex_);
    request->seq_id = next_seq_id_++;
    if (stopping_) return Added::kStopped;
    if (!scheduler_->Add(std::move(request))) return Added::kFull;
    ++num_added_;
  }
  work_.notify_one();
  return Added::kQueued;
}

bool EngineCore::WaitForWork() {
  std::unique_lock lock(mutex_);
  if (stopping_) return false;
  // Idle, or a batch is forming: sleep until new work, a cancel, or its deadline.
  const auto deadline = scheduler_->batch_wait_deadline_s();
  const double wait_s = deadline ? std::max(0.0, *deadline - NowS()) : 0.5;
  const int64_t added = num_added_;
  work_.wait_for(lock, std::chrono::duration<double>(wait_s),
                 [&] { return stopping_ || !pending_cancels_.empty() || num_added_ != added; });
  return true;
}

bool EngineCore::RequestStop() {
  bool was_stopping = false;
  {
    std::lock_guard lock(mutex_);
    was_stopping = stopping_;
    stopping_ = true;
  }
  work_.notify_all();
  return was_stopping;
}

bool EngineCore::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

void EngineCore::FailAll(const std::string& reason) {
  std::lock_guard lock(mutex_);
  for (const auto& request : scheduler_->TakeAll()) {
    if (request->done()) continue;
    request->state = RequestState::kFailed;
    request->error = reason;
    Deliver(*request, ErrorOutputOf(*request, reason), {});
  }
}

void EngineCore::ObserveToken(const Request& request) {
  const auto& times = request.token_times_s;
  std::lock_guard lock(metrics_mutex_);
  ++metrics_.generation_tokens;
  if (times.size() == 1) {
    metrics_.time_to_first_token_s.Observe(times.front() - request.arrival_time_s);
  } else if (times.size() >= 2) {
    metrics_.inter_token_latency_s.Observe(times.back() - times[times.size() - 2]);
  }
}

void EngineCore::ObserveEnd(const Request& request, double now) {
  std::string reason = "abort";
  if (request.state == RequestState::kFinished && request.finish_reason) {
    reason = *request.finish_reason == FinishReason::kLength ? "length" : "stop";
  }
  std::lock_guard lock(metrics_mutex_);
  ++metrics_.request_success[reason];
  metrics_.e2e_request_latency_s.Observe(now - request.arrival_time_s);
  if (request.first_scheduled_s >= 0) {
    metrics_.request_queue_time_s.Observe(request.first_scheduled_s - request.arrival_time_s);
  }
  metrics_.request_prompt_tokens.Observe(static_cast<double>(request.num_prompt_tokens()));
  metrics_.request_generation_tokens.Observe(static_cast<double>(request.num_generated_tokens()));
}

EngineMetrics EngineCore::metrics() const {
  EngineMetrics snapshot;
  {
    std::lock_guard lock(metrics_mutex_);
    snapshot = metrics_;
  }
  std::lock_guard lock(mutex_);
  const SchedulerStats& stats = scheduler_->stats();
  snapshot.num_requests_running = scheduler_->num_running();
  snapshot.num_requests_waiting = scheduler_->num_waiting();
  const BlockManager& blocks = scheduler_->block_manager();
  snapshot.kv_cache_usage = blocks.num_blocks() > 0
                                ? 1.0 - static_cast<double>(blocks.num_free_blocks()) /
                                            static_cast<double>(blocks.num_blocks())
                                : 0.0;
  snapshot.state_slots = blocks.num_state_slots_total();
  snapshot.state_slots_used = blocks.num_state_slots_used();
  snapshot.state_snapshot_slots = blocks.num_snapshot_slots();
  snapshot.state_snapshots = blocks.num_snapshots();
  if (config_.enable_lora) {
    snapshot.max_loras = config_.max_loras;
    const auto names = [](const auto& requests) {
      std::vector<std::string> out;
      for (const auto& request : requests) {
        if (request->lora && std::find(out.begin(), out.end(), request->lora->name) == out.end()) {
          out.push_back(request->lora->name);
        }
      }
      return out;
    };
    snapshot.running_lora_adapters = names(scheduler_->running());
    snapshot.waiting_lora_adapters = names(scheduler_->waiting());
    snapshot.lora_info_time_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  snapshot.prompt_tokens = stats.prompt_tokens;
  snapshot.prefix_cache_queries = stats.prompt_tokens;
  snapshot.prefix_cache_hits = stats.cached_prompt_tokens;
  snapshot.num_preemptions = stats.preemptions;
  snapshot.spec_decode_num_drafts = stats.spec_decode_drafts;
  snapshot.spec_decode_num_draft_tokens = stats.spec_decode_draft_tokens;
  snapshot.spec_decode_num_accepted_tokens = stats.spec_decode_accepted_tokens;
  return snapshot;
}

SchedulerStats EngineCore::stats() const {
  std::lock_guard lock(mutex_);
  return scheduler_->stats();
}

std::string EngineCore::KvCacheSummaryJson(const KvCacheInfo& kv, double max_concurrency) const {
  std::lock_guard lock(mutex_);
  const SchedulerStats& stats = scheduler_->stats();
  const BlockManager& blocks = scheduler_->block_manager();
  nlohmann::ordered_json json;
  json["num_blocks"] = kv.num_blocks;
  json["free_blocks"] = blocks.num_free_blocks();
  json["cached_blocks"] = blocks.num_cached_blocks();
  json["block_size"] = kv.block_size;
  json["capacity_tokens"] = kv.capacity_tokens();
  json["dtype"] = DTypeName(kv.dtype);
  json["bytes"] = kv.bytes;
  json["max_concurrency"] = max_concurrency;
  json["running"] = scheduler_->num_running();
  json["waiting"] = scheduler_->num_waiting();
  json["prefix_cache_hit_rate"] = stats.prompt_tokens > 0
                                      ? static_cast<double>(stats.cached_prompt_tokens) /
                                            static_cast<double>(stats.prompt_tokens)
                                      : 0.0;
  json["preemptions"] = stats.preemptions;
  return json.dump();
}

void EngineCore::Cancel(const std::string& request_id) {
  {
    std::lock_guard lock(mutex_);
    pending_cancels_.push_back(request_id);
  }
  work_.notify_one();
}

bool EngineCore::HasWork() const {
  std::lock_guard lock(mutex_);
  return scheduler_->HasWork() || !pending_cancels_.empty();
}

void EngineCore::Deliver(const Request& request, StepOutput output,
                         const StepCallbacks& callbacks) {
  if (callbacks.on_output) callbacks.on_output(output);
  if (request.output) request.output->Push(std::move(output));
}

GenerationOutput EngineCore::MakeOutput(const Request& request) const {
  GenerationOutput output;
  output.request_id = request.request_id;
  output.prompt = request.prompt_text;
  if (output.prompt.empty() && tokenizer_ != nullptr) {
    output.prompt = tokenizer_->Decode(request.prompt_token_ids, /*skip_special_tokens=*/false);
  }
  output.prompt_token_ids = request.prompt_token_ids;
  output.text = request.text.text();
  output.token_ids = request.generated_token_ids;
  output.finish_reason = request.finish_reason;
  output.error = request.error;
  if (request.text.stopped()) output.stop_string = request.text.stop_string();
  output.total_tokens = request.num_tokens();
  output.cached_tokens = request.num_cached_prompt_tokens;
  output.num_preemptions = request.num_preemptions;
  const auto& times = request.token_times_s;
  if (!times.empty()) {
    output.timing.prefill_time_s = times.front() - request.first_scheduled_s;
    for (size_t i = 1; i < times.size(); ++i) {
      output.timing.decode_times_s.push_back(times[i] - times[i - 1]);
    }
  }
  return output;
}

void EngineCore::EndWithError(const std::shared_ptr<Request>& request, const std::string& why,
                              const StepCallbacks& callbacks, bool observe) {
  if (observe) ObserveEnd(*request, NowS());
  Deliver(*request, ErrorOutputOf(*request, why), callbacks);
  if (callbacks.on_end) callbacks.on_end(MakeOutput(*request));
}

void EngineCore::ApplyCancels(const StepCallbacks& callbacks) {
  std::vector<std::shared_ptr<Request>> cancelled;
  {
    std::lock_guard lock(mutex_);
    for (const std::string& id : pending_cancels_) {
      if (auto request = scheduler_->Abort(id)) cancelled.push_back(std::move(request));
    }
    pending_cancels_.clear();
  }
  for (const auto& request : cancelled) EndWithError(request, "cancelled", callbacks, true);
}

std::optional<SchedulerOutput> EngineCore::Schedule(const StepCallbacks& callbacks) {
  SchedulerOutput step;
  try {
    std::lock_guard lock(mutex_);
    step = scheduler_->Schedule(NowS());
  } catch (const std::exception& e) {
    // A scheduler invariant broke: fail everything rather than take the process down.
    spdlog::error("engine: scheduling failed, failing every request: {}", e.what());
    std::vector<std::shared_ptr<Request>> all;
    {
      std::lock_guard lock(mutex_);
      all = scheduler_->TakeAll();
    }
    for (const auto& request : all) {
      request->state = RequestState::kFailed;
      request->error = e.what();
      EndWithError(request, e.what(), callbacks, false);
    }
    return std::nullopt;
  }
  for (const auto& request : step.preempted) {
    spdlog::debug("{}: preempted (KV blocks ran out), will be recomputed", request->request_id);
  }
  for (const auto& request : step.failed) {
    const std::string why = request->error.value_or("KV block allocation failed");
    spdlog::warn("{}: failed while scheduling: {}", request->request_id, why);
    EndWithError(request, why, callbacks, true);
  }
  return step;
}

std::optional<std::vector<SampledTokens>> EngineCore::Execute(const SchedulerOutput& step,
                                                              Ready& ready) {
  const double start = NowS();
  for (const ScheduledRequest& s : step.scheduled) {
    if (s.request->first_scheduled_s < 0) s.request->first_scheduled_s = start;
  }
  try {
    return pipeline_.Process(step, runner_.Run(step), runner_.vocab_size());
  } catch (const std::exception& e) {
    spdlog::warn("engine step failed: {}", e.what());
    for (const ScheduledRequest& s : step.scheduled) {
      Request& request = *s.request;
      if (request.done()) continue;
      request.state = RequestState::kFailed;
      request.error = e.what();
      ready.emplace_back(s.request, ErrorOutputOf(request, e.what()));
    }
    return std::nullopt;
  }
}

void EngineCore::Update(const SchedulerOutput& step,
                        const std::optional<std::vector<SampledTokens>>& sampled, Ready& ready,
                        const StepCallbacks& callbacks) {
  std::vector<std::vector<StepOutput>> outputs;
  {
    std::lock_guard lock(mutex_);
    outputs = scheduler_->Update(
        step, sampled ? std::span<const SampledTokens>(*sampled) : std::span<const SampledTokens>(),
        sampled.has_value());
  }
  const double end = NowS();
  for (size_t i = 0; i < step.scheduled.size(); ++i) {
    const std::shared_ptr<Request>& request = step.scheduled[i].request;
    // The drawn tokens' outputs, with those of the tokens jump-forward added.
    for (StepOutput& output : outputs[i]) {
      output.time_s = end;
      if (output.token_id) {
        request->token_times_s.push_back(end);
        ObserveToken(*request);
      }
      ready.emplace_back(request, std::move(output));
    }
  }
  for (const ScheduledRequest& s : step.scheduled) {
    if (!s.request->done()) continue;
    ObserveEnd(*s.request, end);
    if (callbacks.on_end) callbacks.on_end(MakeOutput(*s.request));
  }
}

bool EngineCore::RunStep(const StepCallbacks& callbacks) {
  ApplyCancels(callbacks);
  const std::optional<SchedulerOutput> step = Schedule(callbacks);
  if (!step) return false;
  // A failed request moved the queue: the caller schedules again at once.
  if (step->scheduled.empty()) return !step->failed.empty();
  Ready ready;
  const std::optional<std::vector<SampledTokens>> sampled = Execute(*step, ready);
  Update(*step, sampled, ready, callbacks);
  for (auto& [request, output] : ready) Deliver(*request, std::move(output), callbacks);
  return true;
}

}  // namespace infer
