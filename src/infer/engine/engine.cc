#include "infer/engine/engine.h"

#include <algorithm>
#include <exception>
#include <limits>

#include <spdlog/spdlog.h>

#include "infer/core/error.h"

namespace infer {

Engine::Engine(EngineConfig config, LanguageModel& model, const Tokenizer* tokenizer,
               std::vector<int32_t> eos_token_ids)
    : config_(std::move(config)),
      model_(model),
      tokenizer_(tokenizer),
      runner_(model, std::move(eos_token_ids), config_.max_num_batched_tokens),
      scheduler_(config_) {}

Engine::~Engine() { Stop(); }

double Engine::NowS() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
}

int64_t Engine::max_model_len() const {
  return std::min(config_.max_seq_len, model_.context_length());
}

std::vector<int32_t> Engine::PreparePrompt(
    const std::variant<std::string, std::vector<int32_t>>& prompt,
    const SamplingParams& params) const {
  params.Validate();
  std::vector<int32_t> ids;
  if (const auto* text = std::get_if<std::string>(&prompt)) {
    INFER_CHECK(tokenizer_ != nullptr,
                "string prompts need a tokenizer (the model folder has no tokenizer.json)");
    ids = tokenizer_->Encode(*text, /*add_special_tokens=*/true);
  } else {
    ids = std::get<std::vector<int32_t>>(prompt);
  }
  INFER_CHECK(!ids.empty(), "the prompt is empty");
  INFER_CHECK(tokenizer_ != nullptr || params.stop.empty(),
              "stop strings need a tokenizer (the model folder has no tokenizer.json)");
  for (const int32_t id : ids) {
    INFER_CHECK(id >= 0 && id < model_.vocab_size(),
                "prompt token id {} is outside the vocab [0, {})", id, model_.vocab_size());
  }
  const int64_t limit = max_model_len();
  const auto total = static_cast<int64_t>(ids.size()) + params.max_new_tokens;
  INFER_CHECK(total <= limit, "prompt ({} tokens) + max_tokens ({}) = {} exceeds max_seq_len ({})",
              ids.size(), params.max_new_tokens, total, limit);
  return ids;
}

std::shared_ptr<OutputChannel> Engine::AddRequest(const std::string& request_id,
                                                  std::vector<int32_t> prompt_ids,
                                                  SamplingParams params) {
  if (!params.seed && config_.seed) params.seed = config_.seed;
  auto request = std::make_shared<Request>(request_id, std::move(prompt_ids), std::move(params),
                                           NowS(), tokenizer_);
  request->output = std::make_shared<OutputChannel>();
  std::shared_ptr<OutputChannel> output = request->output;
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !scheduler_.Add(std::move(request))) return nullptr;
  }
  work_.notify_one();
  return output;
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
  return scheduler_.HasWork();
}

void Engine::Deliver(const Request& request, StepOutput output) {
  if (request.output) request.output->Push(std::move(output));
}

StepOutput Engine::ErrorOutput(const Request& request, const std::string& message) {
  StepOutput output;
  output.request_id = request.request_id;
  output.finished = true;
  output.error = message;
  output.prompt_tokens = request.num_prompt_tokens();
  output.completion_tokens = request.num_generated_tokens();
  return output;
}

bool Engine::Step() {
  std::vector<std::shared_ptr<Request>> batch;
  {
    std::lock_guard lock(mutex_);
    for (const std::string& id : pending_cancels_) {
      if (auto request = scheduler_.Abort(id))
        Deliver(*request, ErrorOutput(*request, "cancelled"));
    }
    pending_cancels_.clear();
    batch = scheduler_.Schedule(NowS());
  }
  if (batch.empty()) return false;
  try {
    for (StepOutput& output : runner_.Step(batch)) {
      const auto it = std::find_if(batch.begin(), batch.end(), [&](const auto& r) {
        return r->request_id == output.request_id;
      });
      Deliver(**it, std::move(output));
    }
  } catch (const std::exception& e) {
    spdlog::warn("engine step failed: {}", e.what());
    for (const auto& request : batch) {
      if (request->done()) continue;
      request->state = RequestState::kFailed;
      request->error = e.what();
      Deliver(*request, ErrorOutput(*request, e.what()));
    }
  }
  if (std::all_of(batch.begin(), batch.end(), [](const auto& r) { return r->done(); })) {
    try {
      runner_.ClearBatch();
    } catch (const std::exception& e) {
      spdlog::warn("engine: freeing the batch failed: {}", e.what());
    }
  }
  return true;
}

void Engine::Start() {
  std::lock_guard lock(mutex_);
  INFER_CHECK(!thread_.joinable() && !stopping_, "engine: already started or stopped");
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Loop() {
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (Step()) continue;
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    // Idle or a batch is forming: sleep until new work, a cancel, or the batch deadline.
    const auto deadline = scheduler_.batch_wait_deadline_s();
    const double wait_s = deadline ? std::max(0.0, *deadline - NowS()) : 0.5;
    work_.wait_for(lock, std::chrono::duration<double>(wait_s), [&] {
      return stopping_ || !pending_cancels_.empty() ||
             (!deadline && scheduler_.num_waiting() > 0) ||
             static_cast<int64_t>(scheduler_.num_waiting()) >= config_.max_batch_size;
    });
    if (stopping_) return;
  }
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
  const auto fail_active = [&] {
    for (const auto& request : scheduler_.active()) {
      if (request->done()) continue;
      request->state = RequestState::kFailed;
      request->error = reason;
      Deliver(*request, ErrorOutput(*request, reason));
    }
  };
  fail_active();
  // Each Schedule() now moves the next waiting requests into the (finished) active batch.
  while (scheduler_.HasWork()) {
    scheduler_.Schedule(std::numeric_limits<double>::infinity());
    fail_active();
  }
}

}  // namespace infer
