#include "infer/engine/engine.h"

#include <algorithm>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/core/memory.h"

namespace infer {

namespace {

template <typename... Args>
[[noreturn]] void Reject(bool about_prompt, fmt::format_string<Args...> format, Args&&... args) {
  throw RequestRejected(fmt::format(format, std::forward<Args>(args)...), about_prompt);
}

void ValidateParams(const SamplingParams& params) {
  try {
    params.Validate();
  } catch (const Error& e) {
    throw RequestRejected(e.what(), /*about_prompt=*/false);
  }
}

// The pool's sizing inputs: the config's, the model's bytes per token, the machine's memory.
KvCacheSizing KvSizingOf(const EngineConfig& config, const LanguageModel& model) {
  KvCacheSizing sizing;
  sizing.block_size = config.block_size;
  sizing.dtype = config.kv_cache_dtype;
  sizing.bytes_per_token =
      config.use_kv_cache ? model.kv_bytes_per_token(config.kv_cache_dtype) : 0;
  sizing.max_len = std::min(config.max_model_len, model.context_length());
  sizing.max_num_seqs = config.max_num_seqs;
  sizing.num_blocks = config.num_blocks;
  sizing.memory_bytes = config.kv_cache_memory_bytes;
  // Read only when the budget is derived from it or checked against it.
  if (config.num_blocks == 0 && sizing.bytes_per_token > 0) {
    sizing.available_bytes = AvailableMemoryBytes();
  }
  return sizing;
}

}  // namespace

Engine::Engine(EngineConfig config, LanguageModel& model, const Tokenizer* tokenizer,
               std::vector<int32_t> eos_token_ids, const ChatTemplate* chat_template)
    : config_(std::move(config)),
      model_(model),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      runner_(model),
      pipeline_(eos_token_ids, config_.enable_jump_forward, config_.speculative) {
  config_.Validate();
  if (tokenizer_ != nullptr) {
    structured_ = std::make_unique<StructuredOutputCompiler>(*tokenizer_, std::move(eos_token_ids));
    constraint_factory_ = [this](const StructuredOutput& spec) { return structured_->Make(spec); };
    thinking_tokens_ = ThinkingTokensOf(*tokenizer_);
  }
  kv_cache_ = SizeKvCache(KvSizingOf(config_, model_));
  model_.AllocateKvCache(kv_cache_.num_blocks, kv_cache_.block_size, kv_cache_.dtype,
                         config_.use_kv_cache);
  scheduler_ = std::make_unique<Scheduler>(config_, kv_cache_.num_blocks);
  if (config_.num_blocks == 0 &&
      kv_cache_.capacity_tokens() < std::min(config_.max_model_len, model_.context_length())) {
    spdlog::warn(
        "the KV cache holds {} tokens, fewer than max_model_len {}: longer requests are rejected",
        kv_cache_.capacity_tokens(), config_.max_model_len);
  }
}

Engine::~Engine() { Stop(); }

double Engine::NowS() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
}

int64_t Engine::max_model_len() const {
  return std::min({config_.max_model_len, model_.context_length(), kv_cache_.capacity_tokens()});
}

double Engine::max_concurrency() const {
  const int64_t len = std::min(config_.max_model_len, model_.context_length());
  const int64_t blocks_per_seq = (len + kv_cache_.block_size - 1) / kv_cache_.block_size;
  return static_cast<double>(kv_cache_.num_blocks) / static_cast<double>(blocks_per_seq);
}

void Engine::ObserveToken(const Request& request) {
  const auto& times = request.token_times_s;
  std::lock_guard lock(metrics_mutex_);
  ++metrics_.generation_tokens;
  if (times.size() == 1) {
    metrics_.time_to_first_token_s.Observe(times.front() - request.arrival_time_s);
  } else if (times.size() >= 2) {
    metrics_.inter_token_latency_s.Observe(times.back() - times[times.size() - 2]);
  }
}

void Engine::ObserveEnd(const Request& request, double now) {
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

EngineMetrics Engine::metrics() const {
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
  snapshot.prompt_tokens = stats.prompt_tokens;
  snapshot.prefix_cache_queries = stats.prompt_tokens;
  snapshot.prefix_cache_hits = stats.cached_prompt_tokens;
  snapshot.num_preemptions = stats.preemptions;
  return snapshot;
}

SchedulerStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  return scheduler_->stats();
}

std::string Engine::KvCacheSummaryJson() const {
  std::lock_guard lock(mutex_);
  const SchedulerStats& stats = scheduler_->stats();
  const BlockManager& blocks = scheduler_->block_manager();
  nlohmann::ordered_json json;
  json["num_blocks"] = kv_cache_.num_blocks;
  json["free_blocks"] = blocks.num_free_blocks();
  json["cached_blocks"] = blocks.num_cached_blocks();
  json["block_size"] = kv_cache_.block_size;
  json["capacity_tokens"] = kv_cache_.capacity_tokens();
  json["dtype"] = DTypeName(kv_cache_.dtype);
  json["bytes"] = kv_cache_.bytes;
  json["max_concurrency"] = max_concurrency();
  json["running"] = scheduler_->num_running();
  json["waiting"] = scheduler_->num_waiting();
  json["prefix_cache_hit_rate"] = stats.prompt_tokens > 0
                                      ? static_cast<double>(stats.cached_prompt_tokens) /
                                            static_cast<double>(stats.prompt_tokens)
                                      : 0.0;
  json["preemptions"] = stats.preemptions;
  return json.dump();
}

std::vector<int32_t> Engine::PreparePrompt(const Prompt& prompt,
                                           const SamplingParams& params) const {
  SamplingParams checked = params;
  return PreparePrompt(prompt, checked, /*fill_context=*/false);
}

std::vector<int32_t> Engine::Tokenize(const Prompt& prompt) const {
  return EncodePrompt(prompt, tokenizer_, chat_template_, &template_mutex_);
}

std::vector<int32_t> Engine::PreparePrompt(const Prompt& prompt, SamplingParams& params,
                                           bool fill_context) const {
  if (!fill_context) ValidateParams(params);
  std::vector<int32_t> ids = EncodePrompt(prompt, tokenizer_, chat_template_, &template_mutex_);
  const auto size = static_cast<int64_t>(ids.size());
  if (ids.empty()) Reject(true, "the prompt is empty");
  if (tokenizer_ == nullptr && !params.stop.empty()) {
    Reject(false, "stop strings need a tokenizer (the model folder has no tokenizer.json)");
  }
  for (const int32_t id : ids) {
    if (id < 0 || id >= model_.vocab_size()) {
      Reject(true, "prompt token id {} is outside the vocab [0, {})", id, model_.vocab_size());
    }
  }
  if (params.structured_output) {
    if (!constraint_factory_) {
      Reject(false, "structured output needs a tokenizer (the model folder has no tokenizer.json)");
    }
    try {
      constraint_factory_(*params.structured_output);  // compiled once: later ones hit the cache
    } catch (const Error& e) {
      Reject(false, "{}", e.what());
    }
  }
  if (fill_context) {
    if (max_model_len() - size < 1) {
      Reject(true, "the prompt ({} tokens) leaves no room to generate within max_model_len ({})",
             size, max_model_len());
    }
    params.max_new_tokens = max_model_len() - size;
    ValidateParams(params);
  }
  const int64_t model_limit = std::min(config_.max_model_len, model_.context_length());
  const int64_t total = size + params.max_new_tokens;
  if (total > model_limit) {
    Reject(true,
           "prompt ({} tokens) + max_tokens ({}) = {} exceeds max_model_len, the context "
           "length ({})",
           size, params.max_new_tokens, total, model_limit);
  }
  if (total > kv_cache_.capacity_tokens()) {
    Reject(true,
           "prompt ({} tokens) + max_tokens ({}) = {} can never fit the KV cache ({} tokens: {} "
           "blocks of {}; see --kv-cache-memory / --num-kv-blocks)",
           size, params.max_new_tokens, total, kv_cache_.capacity_tokens(), kv_cache_.num_blocks,
           kv_cache_.block_size);
  }
  return ids;
}

std::shared_ptr<Request> Engine::MakeRequest(std::string id, std::vector<int32_t> prompt_ids,
                                             SamplingParams params, int64_t priority) const {
  if (!params.seed && config_.seed) params.seed = config_.seed;
  auto request = std::make_shared<Request>(std::move(id), std::move(prompt_ids), std::move(params),
                                           NowS(), tokenizer_, priority);
  if (request->sampling_params.structured_output) {
    INFER_CHECK(constraint_factory_, "structured output needs a tokenizer");
    request->constraint = constraint_factory_(*request->sampling_params.structured_output);
  }
  if (request->sampling_params.thinking_token_budget && thinking_tokens_) {
    request->thinking.emplace(*thinking_tokens_, *request->sampling_params.thinking_token_budget,
                              request->prompt_token_ids);
  }
  request->logits_processors =
      MakeLogitsProcessors(request->sampling_params, pipeline_.eos_ids(), request->constraint.get(),
                           request->thinking ? &*request->thinking : nullptr, &request->text);
  return request;
}

std::shared_ptr<OutputChannel> Engine::AddRequest(const std::string& request_id,
                                                  std::vector<int32_t> prompt_ids,
                                                  SamplingParams params, int64_t priority,
                                                  std::shared_ptr<OutputChannel> output) {
  auto request = MakeRequest(request_id, std::move(prompt_ids), std::move(params), priority);
  if (!output) output = std::make_shared<OutputChannel>();
  request->output = output;
  {
    std::lock_guard lock(mutex_);
    request->seq_id = next_seq_id_++;
    if (stopping_ || !scheduler_->Add(std::move(request))) return nullptr;
    ++num_added_;
  }
  work_.notify_one();
  return output;
}

std::string Engine::AddRequest(const GenerationRequest& request) {
  std::vector<int32_t> ids = PreparePrompt(
      std::visit([](const auto& p) { return Prompt(p); }, request.prompt()), request.params());
  std::string id = std::to_string(next_request_number_++);
  auto entry = MakeRequest(id, std::move(ids), request.params(), request.priority_value());
  if (const auto* text = std::get_if<std::string>(&request.prompt())) entry->prompt_text = *text;
  {
    std::lock_guard lock(mutex_);
    entry->seq_id = next_seq_id_++;
    INFER_CHECK(!stopping_, "the engine is stopped");
    INFER_CHECK(scheduler_->Add(std::move(entry)),
                "the waiting queue is full ({} requests; max_waiting_requests)",
                config_.max_waiting_requests);
    ++num_added_;
  }
  work_.notify_one();
  return id;
}

void Engine::Cancel(const std::string& request_id) {
  {
    std::lock_guard lock(mutex_);
    pending_cancels_.push_back(request_id);
  }
  work_.notify_one();
}

bool Engine::HasWork() const {
  std::lock_guard lock(mutex_);
  return scheduler_->HasWork() || !pending_cancels_.empty();
}

void Engine::Deliver(const Request& request, StepOutput output, const StepCallbacks& callbacks) {
  if (callbacks.on_output) callbacks.on_output(output);
  if (request.output) request.output->Push(std::move(output));
}

StepOutput Engine::ErrorOutput(const Request& request, const std::string& message) {
  StepOutput output;
  output.request_id = request.request_id;
  output.finished = true;
  output.error = message;
  output.prompt_tokens = request.num_prompt_tokens();
  output.completion_tokens = request.num_generated_tokens();
  output.cached_tokens = request.num_cached_prompt_tokens;
  return output;
}

GenerationOutput Engine::MakeOutput(const Request& request) const {
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

void Engine::EndWithError(const std::shared_ptr<Request>& request, const std::string& why,
                          const StepCallbacks& callbacks, bool observe) {
  if (observe) ObserveEnd(*request, NowS());
  Deliver(*request, ErrorOutput(*request, why), callbacks);
  if (callbacks.on_end) callbacks.on_end(MakeOutput(*request));
}

void Engine::ApplyCancels(const StepCallbacks& callbacks) {
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

std::optional<SchedulerOutput> Engine::Schedule(const StepCallbacks& callbacks) {
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

bool Engine::Execute(const SchedulerOutput& step, Held& held) {
  const double start = NowS();
  for (const ScheduledRequest& s : step.scheduled) {
    if (s.request->first_scheduled_s < 0) s.request->first_scheduled_s = start;
  }
  try {
    std::vector<std::vector<StepOutput>> outputs =
        pipeline_.Process(step, runner_.Run(step), runner_.vocab_size());
    const double now = NowS();
    if (const TokenPipeline::DraftCounts& drafts = pipeline_.last_draft_counts();
        drafts.drafts > 0) {
      std::lock_guard lock(metrics_mutex_);
      metrics_.spec_decode_num_drafts += drafts.drafts;
      metrics_.spec_decode_num_draft_tokens += drafts.draft_tokens;
      metrics_.spec_decode_num_accepted_tokens += drafts.accepted_tokens;
    }
    size_t k = 0;
    for (const ScheduledRequest& s : step.scheduled) {
      if (s.num_new == 0 || !s.wants_logits) continue;
      // The sampled token's output, then those of the tokens jump-forward added.
      for (StepOutput& output : outputs.at(k++)) {
        output.time_s = now;
        if (output.token_id) {
          s.request->token_times_s.push_back(now);
          ObserveToken(*s.request);
        }
        held.emplace_back(s.request, std::move(output));
      }
    }
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("engine step failed: {}", e.what());
    for (const ScheduledRequest& s : step.scheduled) {
      Request& request = *s.request;
      if (request.done()) continue;
      request.state = RequestState::kFailed;
      request.error = e.what();
      held.emplace_back(s.request, ErrorOutput(request, e.what()));
    }
    return false;
  }
}

bool Engine::Update(const SchedulerOutput& step, bool ran, const StepCallbacks& callbacks) {
  bool hold = false;
  {
    std::lock_guard lock(mutex_);
    scheduler_->Update(step, ran);
    hold = ran && scheduler_->holds_outputs();
  }
  const double end = NowS();
  for (const ScheduledRequest& s : step.scheduled) {
    if (!s.request->done()) continue;
    ObserveEnd(*s.request, end);
    if (callbacks.on_end) callbacks.on_end(MakeOutput(*s.request));
  }
  return hold;
}

bool Engine::RunStep(const StepCallbacks& callbacks) {
  ApplyCancels(callbacks);
  Held held;
  bool ran_any = false;
  bool again = true;
  while (again) {
    const std::optional<SchedulerOutput> step = Schedule(callbacks);
    if (!step) break;
    // A failed request moved the queue: schedule again at once.
    ran_any = ran_any || !step->failed.empty() || !step->scheduled.empty();
    if (step->scheduled.empty()) break;
    const bool ran = Execute(*step, held);
    again = Update(*step, ran, callbacks);
  }
  for (auto& [request, output] : held) Deliver(*request, std::move(output), callbacks);
  return ran_any;
}

std::vector<GenerationOutput> Engine::Step() {
  std::vector<GenerationOutput> ended;
  RunStep({nullptr, [&](GenerationOutput output) { ended.push_back(std::move(output)); }});
  return ended;
}

void Engine::Drive(const std::function<bool()>& done, const StepCallbacks& callbacks) {
  while (!done()) {
    if (RunStep(callbacks)) continue;
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    // Idle, or a batch is forming: sleep until new work, a cancel, or its deadline.
    const auto deadline = scheduler_->batch_wait_deadline_s();
    const double wait_s = deadline ? std::max(0.0, *deadline - NowS()) : 0.5;
    const int64_t added = num_added_;
    work_.wait_for(lock, std::chrono::duration<double>(wait_s),
                   [&] { return stopping_ || !pending_cancels_.empty() || num_added_ != added; });
  }
}

std::vector<GenerationOutput> Engine::Generate() {
  std::vector<GenerationOutput> all;
  RunUntilDone({nullptr, [&](GenerationOutput output) { all.push_back(std::move(output)); }});
  return all;
}

std::string Engine::GenerateText(const std::string& prompt, int64_t max_tokens,
                                 double temperature) {
  const std::string id =
      AddRequest(GenerationRequest(prompt).max_tokens(max_tokens).temperature(temperature));
  for (GenerationOutput& output : Generate()) {
    if (output.request_id != id) continue;
    if (output.error) Fail("generation failed: {}", *output.error);
    return std::move(output.text);
  }
  Fail("generation of request {} produced no output", id);
}

void Engine::Start() {
  std::lock_guard lock(mutex_);
  INFER_CHECK(!thread_.joinable() && !stopping_, "engine: already started or stopped");
  thread_ = std::thread([this] {
    Drive([this] {
      std::lock_guard lock(mutex_);
      return stopping_;
    });
  });
}

void Engine::Stop(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  for (const auto& request : scheduler_->TakeAll()) {
    if (request->done()) continue;
    request->state = RequestState::kFailed;
    request->error = reason;
    Deliver(*request, ErrorOutput(*request, reason), {});
  }
}

}  // namespace infer
