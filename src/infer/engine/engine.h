// The serving engine: a thread-safe front (AddRequest / Cancel from any thread) over the
// static-batching scheduler and the model runner, with Step() run in a loop on the engine's own
// thread. Each request's StepOutputs arrive on its OutputChannel.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "infer/engine/engine_config.h"
#include "infer/engine/language_model.h"
#include "infer/engine/output_channel.h"
#include "infer/engine/request.h"
#include "infer/engine/runner.h"
#include "infer/engine/scheduler.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer {

class Engine {
 public:
  // `model` and `tokenizer` (may be null: token-id prompts only) must outlive the engine.
  // Throws infer::Error for an invalid config.
  Engine(EngineConfig config, LanguageModel& model, const Tokenizer* tokenizer,
         std::vector<int32_t> eos_token_ids);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const { return config_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  // The longest prompt + max_tokens a request may ask for: max_seq_len, capped by the model.
  int64_t max_model_len() const;

  // Tokenizes (a string prompt, special tokens added) and checks a request without queuing it:
  // throws infer::Error for invalid sampling params, ids outside the vocab, a prompt that
  // tokenizes to nothing, or prompt + max_new_tokens beyond max_seq_len.
  std::vector<int32_t> PreparePrompt(const std::variant<std::string, std::vector<int32_t>>& prompt,
                                     const SamplingParams& params) const;

  // Queues a prepared request; null when the waiting queue is full (HTTP 503).
  std::shared_ptr<OutputChannel> AddRequest(const std::string& request_id,
                                            std::vector<int32_t> prompt_ids, SamplingParams params);

  // Cancels a request (its client went away): from the next step it takes no batch slot.
  void Cancel(const std::string& request_id);

  // One scheduler iteration on the calling thread: picks the batch, runs one batched model
  // call, delivers the outputs. False when there was nothing to run. An exception in the step
  // fails the batch's running requests (error outputs) and the engine goes on.
  bool Step();
  bool HasWork() const;

  // Runs Step() on the engine thread until Stop(). Stop() ends the thread and fails every
  // request still queued or running with `reason` (its client gets an error output).
  void Start();
  void Stop(const std::string& reason = "server shutting down");

 private:
  double NowS() const;
  void Loop();
  static void Deliver(const Request& request, StepOutput output);
  static StepOutput ErrorOutput(const Request& request, const std::string& message);

  const EngineConfig config_;
  LanguageModel& model_;
  const Tokenizer* tokenizer_;
  ModelRunner runner_;
  const std::chrono::steady_clock::time_point start_time_ = std::chrono::steady_clock::now();

  mutable std::mutex mutex_;  // guards scheduler_, pending_cancels_, stopping_
  std::condition_variable work_;
  StaticScheduler scheduler_;
  std::vector<std::string> pending_cancels_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace infer
