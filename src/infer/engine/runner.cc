#include "infer/engine/runner.h"

#include <algorithm>

#include "infer/core/error.h"

namespace infer {

ModelRunner::ModelRunner(LanguageModel& model, std::vector<int32_t> eos_token_ids,
                         int64_t max_prefill_tokens)
    : model_(model),
      eos_token_ids_(eos_token_ids.begin(), eos_token_ids.end()),
      max_prefill_tokens_(max_prefill_tokens) {
  INFER_CHECK(max_prefill_tokens_ >= 1, "runner: max_prefill_tokens must be at least 1, got {}",
              max_prefill_tokens_);
}

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
  std::vector<size_t> rows;  // batch rows with a prompt to run
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& request = *batch[i];
    if (request.done()) continue;
    INFER_CHECK(!request.prompt_token_ids.empty(), "request {}: empty prompt", request.request_id);
    request.state = RequestState::kPrefill;
    contexts_[i] = request.prompt_token_ids;
    rows.push_back(i);
  }
  if (rows.empty()) return {};
  model_.StartSequences(static_cast<int64_t>(batch.size()), max_seq_len, /*use_kv_cache=*/true);

  // The prompts run in model calls of at most max_prefill_tokens_ tokens: consecutive prompts
  // share a call, a long one is split across calls (the cache carries it over). A request
  // samples its first token from the call that ends its prompt.
  std::vector<StepOutput> outputs;
  size_t next = 0;        // index into rows of the first prompt not yet fully run
  int64_t next_done = 0;  // tokens of that prompt already run
  std::vector<SequenceStep> steps;
  std::vector<bool> completes;
  while (next < rows.size()) {
    steps.clear();
    completes.clear();
    for (int64_t budget = max_prefill_tokens_; budget > 0 && next < rows.size();) {
      const size_t i = rows[next];
      const auto prompt_len = static_cast<int64_t>(contexts_[i].size());
      const int64_t take = std::min(budget, prompt_len - next_done);
      const int64_t end = next_done + take;
      steps.push_back({static_cast<int64_t>(i),
                       std::span<const int32_t>(contexts_[i]).first(static_cast<size_t>(end)),
                       take});
      completes.push_back(end == prompt_len);
      budget -= take;
      next_done = end == prompt_len ? 0 : end;
      if (end == prompt_len) ++next;
    }
    model_.BatchNextTokenLogits(steps, logits_);
    const auto vocab = static_cast<size_t>(model_.vocab_size());
    for (size_t k = 0; k < steps.size(); ++k) {
      if (!completes[k]) continue;
      const auto i = static_cast<size_t>(steps[k].seq_idx);
      outputs.push_back(TakeToken(*batch[i], i, std::span(logits_).subspan(k * vocab, vocab)));
    }
  }
  return outputs;
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
