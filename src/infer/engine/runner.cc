#include "infer/engine/runner.h"

#include <algorithm>

#include "infer/core/error.h"

namespace infer {

ModelRunner::ModelRunner(LanguageModel& model, std::vector<int32_t> eos_token_ids)
    : model_(model), eos_token_ids_(eos_token_ids.begin(), eos_token_ids.end()) {}

std::vector<StepOutput> ModelRunner::Step(std::span<const std::shared_ptr<Request>> batch) {
  const bool is_new = std::all_of(batch.begin(), batch.end(), [](const auto& r) {
    return r->state == RequestState::kWaiting || r->state == RequestState::kFailed;
  });
  return is_new ? Prefill(batch) : Decode(batch);
}

void ModelRunner::ClearBatch() {
  contexts_.clear();
  model_.StartSequences(0, 1, /*use_kv_cache=*/false);
}

std::vector<StepOutput> ModelRunner::Prefill(std::span<const std::shared_ptr<Request>> batch) {
  int64_t max_seq_len = 1;
  for (const auto& request : batch) {
    max_seq_len = std::max(max_seq_len,
                           request->num_prompt_tokens() + request->sampling_params.max_new_tokens);
  }
  contexts_.assign(batch.size(), {});
  std::vector<SequenceStep> steps;
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& request = *batch[i];
    if (request.done()) continue;
    request.state = RequestState::kPrefill;
    contexts_[i] = request.prompt_token_ids;
    steps.push_back(
        {static_cast<int64_t>(i), contexts_[i], static_cast<int64_t>(contexts_[i].size())});
  }
  if (steps.empty()) return {};
  model_.StartSequences(static_cast<int64_t>(batch.size()), max_seq_len, /*use_kv_cache=*/true);
  return RunSteps(batch, steps);
}

std::vector<StepOutput> ModelRunner::Decode(std::span<const std::shared_ptr<Request>> batch) {
  INFER_CHECK(contexts_.size() == batch.size(), "runner: decode of a batch that was not prefilled");
  std::vector<SequenceStep> steps;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i]->state != RequestState::kDecode) continue;
    steps.push_back({static_cast<int64_t>(i), contexts_[i], 1});
  }
  if (steps.empty()) return {};
  return RunSteps(batch, steps);
}

std::vector<StepOutput> ModelRunner::RunSteps(std::span<const std::shared_ptr<Request>> batch,
                                              const std::vector<SequenceStep>& steps) {
  model_.BatchNextTokenLogits(steps, logits_);
  std::vector<StepOutput> outputs;
  const auto vocab = static_cast<size_t>(model_.vocab_size());
  for (size_t k = 0; k < steps.size(); ++k) {
    const auto i = static_cast<size_t>(steps[k].seq_idx);
    outputs.push_back(TakeToken(*batch[i], i, std::span(logits_).subspan(k * vocab, vocab)));
  }
  return outputs;
}

StepOutput ModelRunner::TakeToken(Request& request, size_t batch_idx, std::span<float> logits) {
  std::vector<int32_t>& context = contexts_[batch_idx];
  const int32_t token = request.sampler.Sample(logits, context);
  context.push_back(token);
  request.generated_token_ids.push_back(token);
  request.state = RequestState::kDecode;
  std::optional<FinishReason> reason;
  if (eos_token_ids_.contains(token)) {
    reason = FinishReason::kEos;
  } else if (request.text.Add(token)) {
    reason = FinishReason::kStop;
  } else if (request.num_generated_tokens() >= request.sampling_params.max_new_tokens) {
    reason = FinishReason::kLength;
  }
  if (reason && request.text.Finish() && reason == FinishReason::kLength) {
    reason = FinishReason::kStop;
  }
  StepOutput output;
  output.request_id = request.request_id;
  output.token_id = token;
  output.text_delta = request.text.TakeStable();
  output.prompt_tokens = request.num_prompt_tokens();
  output.completion_tokens = request.num_generated_tokens();
  if (reason) {
    request.state = RequestState::kFinished;
    request.finish_reason = reason;
    output.finished = true;
    output.finish_reason = reason;
  }
  return output;
}

}  // namespace infer
