// The engine: the one generation loop of the project, in three parts. Its front door
// (front_door.h: PreparePrompt, every request encoded and checked once), its core
// (engine_core.h: the queue, the scheduler with continuous or static batching, paged KV blocks,
// prefix caching and preemption, the model runner, the token pipeline, the one step) and its
// loop (Drive: the one run-until-done driver that the server's engine thread (Start),
// `infer generate` / `chat` / `bench` and the Generate API all run). AddRequest / Cancel from any
// thread. Each request's StepOutputs arrive on its OutputChannel (and at the driver's callbacks).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "infer/cache/kv_cache_sizing.h"
#include "infer/engine/engine_config.h"
#include "infer/engine/engine_core.h"
#include "infer/engine/front_door.h"
#include "infer/engine/language_model.h"
#include "infer/engine/metrics.h"
#include "infer/engine/output.h"
#include "infer/engine/output_channel.h"
#include "infer/engine/prompt.h"
#include "infer/engine/request.h"
#include "infer/engine/scheduler.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer {

// A request built in steps, for AddRequest: GenerationRequest("Hello").max_tokens(100)
// .temperature(0.7).top_k(50).top_p(0.9).priority(5). Unset sampling fields keep
// SamplingParams' defaults (or `base`'s).
class GenerationRequest {
 public:
  explicit GenerationRequest(std::string prompt, SamplingParams base = {})
      : prompt_(std::move(prompt)), params_(std::move(base)) {}
  explicit GenerationRequest(std::vector<int32_t> prompt_ids, SamplingParams base = {})
      : prompt_(std::move(prompt_ids)), params_(std::move(base)) {}

  GenerationRequest& max_tokens(int64_t n) { return params_.max_new_tokens = n, *this; }
  GenerationRequest& temperature(double t) { return params_.temperature = t, *this; }
  GenerationRequest& top_k(int64_t k) {
    return params_.top_k = k > 0 ? std::optional(k) : std::nullopt, *this;
  }
  GenerationRequest& top_p(double p) { return params_.top_p = p, *this; }
  GenerationRequest& repetition_penalty(double r) { return params_.repetition_penalty = r, *this; }
  GenerationRequest& stop(std::string s) { return params_.stop.push_back(std::move(s)), *this; }
  GenerationRequest& seed(uint64_t s) { return params_.seed = s, *this; }
  GenerationRequest& priority(int64_t p) { return priority_ = p, *this; }
  GenerationRequest& lora(std::shared_ptr<const LoraAdapter> adapter) {
    return lora_ = std::move(adapter), *this;
  }

  const std::variant<std::string, std::vector<int32_t>>& prompt() const { return prompt_; }
  const SamplingParams& params() const { return params_; }
  int64_t priority_value() const { return priority_; }
  const std::shared_ptr<const LoraAdapter>& lora_value() const { return lora_; }

 private:
  std::variant<std::string, std::vector<int32_t>> prompt_;
  SamplingParams params_;
  int64_t priority_ = 0;
  std::shared_ptr<const LoraAdapter> lora_;
};

class Engine {
 public:
  // `model`, `tokenizer` (may be null: token-id prompts only) and `chat_template` (may be null:
  // no chat prompts) must outlive the engine. Sizes and allocates the KV pool. Throws
  // infer::Error for an invalid config.
  Engine(EngineConfig config, LanguageModel& model, const Tokenizer* tokenizer,
         std::vector<int32_t> eos_token_ids, const ChatTemplate* chat_template = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const { return config_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  const ChatTemplate* chat_template() const { return chat_template_; }
  const KvCacheInfo& kv_cache() const { return kv_cache_; }
  // The longest prompt + max_tokens a request may ask for: max_model_len, capped by the model
  // and by the KV pool.
  int64_t max_model_len() const;
  // How many requests of max_model_len tokens the pool holds at once.
  double max_concurrency() const;
  // {"num_blocks", "free_blocks", "block_size", "capacity_tokens", "dtype", "bytes", running,
  // waiting, prefix cache hit rate, preemptions}: for /health and logs.
  std::string KvCacheSummaryJson() const;

  // The front door: every request (the server's protocols, every CLI command, a GenerationRequest's
  // AddRequest) is tokenized (a chat through the chat template) and checked here, once, before
  // it is queued. Returns the prompt's ids; throws RequestRejected for invalid sampling params,
  // a prompt that cannot be encoded (no tokenizer, no chat template, the template fails) or
  // encodes to nothing, ids outside the vocab, prompt + max_new_tokens beyond max_model_len
  // or the KV pool, or a structured output that does not compile. With `fill_context`,
  // params.max_new_tokens is first set to the rest of the context (OpenAI's unset max_tokens).
  std::vector<int32_t> PreparePrompt(const Prompt& prompt, SamplingParams& params,
                                     bool fill_context) const;
  std::vector<int32_t> PreparePrompt(const Prompt& prompt, const SamplingParams& params) const;
  // The prompt's ids only, unchecked (vLLM's /tokenize: no length limit, an empty prompt is
  // empty). Throws RequestRejected when it cannot be encoded.
  std::vector<int32_t> Tokenize(const Prompt& prompt) const;

  // Queues a prepared request; null when the waiting queue is full (HTTP 503). Its outputs go
  // to `output` when given (several requests may share one channel: their StepOutputs carry
  // their ids), else to a new channel. `lora` (may be null): the adapter it runs with.
  std::shared_ptr<OutputChannel> AddRequest(const std::string& request_id,
                                            std::vector<int32_t> prompt_ids, SamplingParams params,
                                            int64_t priority = 0,
                                            std::shared_ptr<OutputChannel> output = nullptr,
                                            std::shared_ptr<const LoraAdapter> lora = nullptr);
  // Prepares and queues a GenerationRequest; returns its id. Throws infer::Error when it is
  // invalid or the queue is full.
  std::string AddRequest(const GenerationRequest& request);

  // Structured output: makes a request's constraint from its SamplingParams::structured_output
  // (throws GrammarError for a bad schema, regex, choice list or grammar). The engine compiles
  // with the grammar engine over the tokenizer's vocabulary; tests put a stand-in here. Set it
  // before requests arrive.
  using ConstraintFactory = FrontDoor::ConstraintFactory;
  void SetConstraintFactory(ConstraintFactory factory) {
    front_door_.SetConstraintFactory(std::move(factory));
  }
  // Thinking budgets (SamplingParams::thinking_token_budget): the reasoning tags of the
  // tokenizer's vocabulary (ThinkingTokensOf); tests put stand-in ids here. Set it before
  // requests arrive; none: budgets have nothing to bound.
  void SetThinkingTokens(std::optional<ThinkingTokens> tokens) {
    front_door_.SetThinkingTokens(std::move(tokens));
  }
  // Starts indexing the vocabulary for structured output on a thread of its own, so that the
  // first structured request does not wait for it (a server calls it at start; without it the
  // first such request indexes). Nothing without a tokenizer.
  void IndexVocabularyInBackground() { front_door_.IndexVocabularyInBackground(); }

  // Cancels a request (its client went away): at the next step it leaves and frees its blocks.
  void Cancel(const std::string& request_id);

  // One step on the calling thread: schedules, runs one batched forward (decode tokens and
  // prefill chunks together), delivers the outputs. Returns the requests that ended in it. An
  // exception in the forward fails the step's requests (error outputs) and the engine goes on.
  std::vector<GenerationOutput> Step();
  bool HasWork() const;
  // The one driver: runs steps on the calling thread until `done()` (asked before each step).
  // When nothing can run it sleeps until new work, a cancel, Stop() or a forming static batch's
  // deadline (at most half a second). Returns at once if the engine is stopped.
  void Drive(const std::function<bool()>& done, const StepCallbacks& callbacks = {});
  // Drives until every queued request has ended.
  void RunUntilDone(const StepCallbacks& callbacks) {
    Drive([this] { return !HasWork(); }, callbacks);
  }
  // Steps until every queued request has ended; their outputs in the order they ended.
  std::vector<GenerationOutput> Generate();
  // One request, run to the end: its text.
  std::string GenerateText(const std::string& prompt, int64_t max_tokens, double temperature);

  // Runs Step() on the engine thread until Stop(). Stop() ends the thread and fails every
  // request still queued or running with `reason` (its client gets an error output).
  void Start();
  void Stop(const std::string& reason = "server shutting down");

  SchedulerStats stats() const;
  // A snapshot of the counters and histograms, with the gauges (running, waiting, KV usage)
  // read now: what GET /metrics shows.
  EngineMetrics metrics() const;

 private:
  const EngineConfig config_;
  LanguageModel& model_;
  const Tokenizer* tokenizer_;
  const ChatTemplate* chat_template_;
  const KvCacheInfo kv_cache_;
  FrontDoor front_door_;
  EngineCore core_;
  std::atomic<int64_t> next_request_number_{0};
  std::mutex thread_mutex_;  // guards thread_
  std::thread thread_;
};

}  // namespace infer
