#include "infer/engine/engine.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "infer/core/error.h"
#include "infer/core/memory.h"

namespace infer {

namespace {

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
    // The recurrent-state slots (running, snapshots, and with drafts a checkpoint of each
    // running one) are allocated beside the blocks, out of the same memory.
    const int64_t slots = config.recurrent_state_slots * (config.speculative.enabled() ? 2 : 1) +
                          std::max<int64_t>(0, config.state_snapshot_slots);
    const int64_t state_bytes = slots * model.recurrent_state_bytes();
    if (sizing.available_bytes > 0) {
      sizing.available_bytes = std::max<int64_t>(1, sizing.available_bytes - state_bytes);
    }
  }
  return sizing;
}

// A model with recurrent state (linear-attention layers) gets a state slot per sequence it may
// run at once (and checkpoints of them for draft checks).
// Its prefix cache resumes from state snapshots: by default as many as the running sequences,
// at most 16.
EngineConfig ForModel(EngineConfig config, const LanguageModel& model) {
  if (model.recurrent_state_bytes() == 0) {
    config.state_snapshot_slots = 0;
    return config;
  }
  config.recurrent_state_slots = config.max_num_seqs;
  if (!config.enable_prefix_caching || !config.use_kv_cache) {
    config.state_snapshot_slots = 0;
  } else if (config.state_snapshot_slots < 0) {
    config.state_snapshot_slots = std::min<int64_t>(config.max_num_seqs, 16);
  }
  spdlog::info("recurrent state: {} slots of {:.3f} MiB, {} prefix-cache snapshots",
               config.recurrent_state_slots,
               static_cast<double>(model.recurrent_state_bytes()) / 0x1p20,
               config.state_snapshot_slots);
  return config;
}

EngineConfig Validated(EngineConfig config) {
  config.Validate();
  return config;
}

}  // namespace

Engine::Engine(EngineConfig config, LanguageModel& model, const Tokenizer* tokenizer,
               std::vector<int32_t> eos_token_ids, const ChatTemplate* chat_template)
    : config_(Validated(ForModel(std::move(config), model))),
      model_(model),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      kv_cache_(SizeKvCache(KvSizingOf(config_, model))),
      front_door_(config_, model, tokenizer, chat_template, eos_token_ids, kv_cache_),
      core_(config_, model, tokenizer, kv_cache_.num_blocks, std::move(eos_token_ids)) {
  model_.AllocateKvCache(kv_cache_.num_blocks, kv_cache_.block_size, kv_cache_.dtype,
                         config_.use_kv_cache,
                         config_.recurrent_state_slots + config_.state_snapshot_slots);
  if (config_.recurrent_state_slots > 0 && config_.speculative.enabled() && config_.use_kv_cache) {
    // A draft check is its last token and the draft.
    model_.EnableStateCheckpoints(config_.recurrent_state_slots,
                                  1 + config_.speculative.num_speculative_tokens);
  }
  if (config_.num_blocks == 0 &&
      kv_cache_.capacity_tokens() < std::min(config_.max_model_len, model_.context_length())) {
    spdlog::warn(
        "the KV cache holds {} tokens, fewer than max_model_len {}: longer requests are rejected",
        kv_cache_.capacity_tokens(), config_.max_model_len);
  }
}

Engine::~Engine() { Stop(); }

int64_t Engine::max_model_len() const { return front_door_.max_model_len(); }

double Engine::max_concurrency() const {
  const int64_t len = std::min(config_.max_model_len, model_.context_length());
  const int64_t blocks_per_seq = (len + kv_cache_.block_size - 1) / kv_cache_.block_size;
  return static_cast<double>(kv_cache_.num_blocks) / static_cast<double>(blocks_per_seq);
}

std::string Engine::KvCacheSummaryJson() const {
  return core_.KvCacheSummaryJson(kv_cache_, max_concurrency());
}

EngineMetrics Engine::metrics() const { return core_.metrics(); }

SchedulerStats Engine::stats() const { return core_.stats(); }

std::vector<int32_t> Engine::PreparePrompt(const Prompt& prompt, SamplingParams& params,
                                           bool fill_context) const {
  return front_door_.PreparePrompt(prompt, params, fill_context);
}

std::vector<int32_t> Engine::PreparePrompt(const Prompt& prompt,
                                           const SamplingParams& params) const {
  SamplingParams checked = params;
  return front_door_.PreparePrompt(prompt, checked, /*fill_context=*/false);
}

std::vector<int32_t> Engine::Tokenize(const Prompt& prompt) const {
  return front_door_.Tokenize(prompt);
}

std::shared_ptr<OutputChannel> Engine::AddRequest(const std::string& request_id,
                                                  std::vector<int32_t> prompt_ids,
                                                  SamplingParams params, int64_t priority,
                                                  std::shared_ptr<OutputChannel> output,
                                                  std::shared_ptr<const LoraAdapter> lora) {
  auto request = front_door_.MakeRequest(request_id, std::move(prompt_ids), std::move(params),
                                         priority, core_.NowS(), std::move(lora));
  if (!output) output = std::make_shared<OutputChannel>();
  request->output = output;
  if (core_.Add(std::move(request)) != EngineCore::Added::kQueued) return nullptr;
  return output;
}

std::string Engine::AddRequest(const GenerationRequest& request) {
  std::vector<int32_t> ids = PreparePrompt(
      std::visit([](const auto& p) { return Prompt(p); }, request.prompt()), request.params());
  std::string id = std::to_string(next_request_number_++);
  auto entry =
      front_door_.MakeRequest(id, std::move(ids), request.params(), request.priority_value(),
                              core_.NowS(), request.lora_value());
  if (const auto* text = std::get_if<std::string>(&request.prompt())) entry->prompt_text = *text;
  const EngineCore::Added added = core_.Add(std::move(entry));
  INFER_CHECK(added != EngineCore::Added::kStopped, "the engine is stopped");
  INFER_CHECK(added != EngineCore::Added::kFull,
              "the waiting queue is full ({} requests; max_waiting_requests)",
              config_.max_waiting_requests);
  return id;
}

void Engine::Cancel(const std::string& request_id) { core_.Cancel(request_id); }

bool Engine::HasWork() const { return core_.HasWork(); }

std::vector<GenerationOutput> Engine::Step() {
  std::vector<GenerationOutput> ended;
  core_.RunStep({nullptr, [&](GenerationOutput output) { ended.push_back(std::move(output)); }});
  return ended;
}

void Engine::Drive(const std::function<bool()>& done, const StepCallbacks& callbacks) {
  while (!done()) {
    if (core_.RunStep(callbacks)) continue;
    if (!core_.WaitForWork()) return;
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
  std::lock_guard lock(thread_mutex_);
  INFER_CHECK(!thread_.joinable() && !core_.stopping(), "engine: already started or stopped");
  thread_ = std::thread([this] { Drive([this] { return core_.stopping(); }); });
}

void Engine::Stop(const std::string& reason) {
  std::lock_guard lock(thread_mutex_);
  if (core_.RequestStop() && !thread_.joinable()) return;
  if (thread_.joinable()) thread_.join();
  core_.FailAll(reason);
}

}  // namespace infer
