#include "infer/engine/runner.h"

#include <algorithm>

#include "infer/core/error.h"
#include "infer/core/fault_injection.h"
#include "infer/grammar/grammar_error.h"

namespace infer {

namespace {

// Fails one constrained request of the step (the others go on).
template <typename... Args>
StepOutput FailConstrained(Request& request, StepOutput output, fmt::format_string<Args...> format,
                           Args&&... args) {
  request.state = RequestState::kFailed;
  request.error = fmt::format(format, std::forward<Args>(args)...);
  output.finished = true;
  output.error = request.error;
  output.completion_tokens = request.num_generated_tokens();
  return output;
}

}  // namespace

ModelRunner::ModelRunner(LanguageModel& model, std::vector<int32_t> eos_token_ids,
                         bool jump_forward, SpeculativeConfig speculative)
    : model_(model),
      eos_token_ids_(eos_token_ids.begin(), eos_token_ids.end()),
      eos_ids_(std::move(eos_token_ids)),
      jump_forward_(jump_forward),
      speculative_(speculative) {}

std::vector<std::vector<StepOutput>> ModelRunner::Run(const SchedulerOutput& step) {
  steps_.clear();
  draft_counts_ = {};
  for (const ScheduledRequest& s : step.scheduled) {
    if (s.num_new == 0) continue;
    const Request& request = *s.request;
    const int64_t end = request.num_computed_tokens + s.num_new;
    INFER_CHECK(s.num_new > 0 && end <= request.num_tokens(),
                "runner: request {} schedules {} tokens past its {}", request.request_id, end,
                request.num_tokens());
    steps_.push_back({request.seq_id,
                      std::span<const int32_t>(request.token_ids).first(static_cast<size_t>(end)),
                      s.num_new, request.block_table.blocks, s.wants_logits,
                      1 + request.num_draft_tokens});
  }
  if (steps_.empty()) return {};
  fault::MaybeThrow("forward");  // tests only (INFER_FAULTS)
  model_.Forward(steps_, logits_);
  std::vector<std::vector<StepOutput>> outputs;
  const auto vocab = static_cast<size_t>(model_.vocab_size());
  size_t row = 0;
  for (const ScheduledRequest& s : step.scheduled) {
    if (s.num_new == 0 || !s.wants_logits) continue;
    Request& request = *s.request;
    const auto rows = static_cast<size_t>(1 + request.num_draft_tokens);
    INFER_CHECK((row + rows) * vocab <= logits_.size(), "runner: the model returned {} logits rows",
                logits_.size() / vocab);
    std::vector<StepOutput>& request_outputs = outputs.emplace_back();
    const std::span<float> request_logits = std::span(logits_).subspan(row * vocab, rows * vocab);
    try {
      if (request.num_draft_tokens > 0) {
        CheckDraft(request, request_logits, request_outputs);
      } else {
        TakeToken(request, request_logits, request_outputs);
      }
      ProposeDraft(request);
    } catch (const GrammarError& e) {
      // A grammar too ambiguous to go on (its matcher's bound): this request fails, the
      // others of the step go on.
      request_outputs.push_back(
          FailConstrained(request, NewOutput(request), "structured output: {}", e.what()));
    }
    row += rows;
  }
  return outputs;
}

void ModelRunner::CheckDraft(Request& request, std::span<float> rows,
                             std::vector<StepOutput>& outputs) {
  const int64_t k = request.num_draft_tokens;
  draft_.assign(request.token_ids.end() - k, request.token_ids.end());
  request.DropDraft();
  request.num_rejected_tokens = k;
  ++draft_counts_.drafts;
  draft_counts_.draft_tokens += k;
  const size_t vocab = rows.size() / static_cast<size_t>(k + 1);
  // Each draw is the one the request would make without a draft: the same logits (the kernels
  // are batch-invariant), the same tokens before it, its own RNG, one draw per token. A draft
  // token stands only where the draw equals it, so the output is what it would be without one.
  for (int64_t i = 0; i <= k; ++i) {
    const size_t first = outputs.size();
    TakeToken(request, rows.subspan(static_cast<size_t>(i) * vocab, vocab), outputs);
    if (i == k || outputs.size() == first || outputs[first].token_id != draft_[i]) break;
    --request.num_rejected_tokens;  // its KV, computed in this step, is the drawn token's
    ++draft_counts_.accepted_tokens;
    // Finished, or the grammar forced tokens after it: the rest of the draft is not checked.
    if (request.done() || outputs.size() != first + 1) break;
  }
}

void ModelRunner::ProposeDraft(Request& request) const {
  if (!speculative_.enabled() || request.done()) return;
  // The draft and the token drawn after it must fit in max_tokens.
  const int64_t room = request.sampling_params.max_new_tokens - request.num_generated_tokens() - 1;
  const std::vector<int32_t> draft = ProposeNgramDraft(request.token_ids, speculative_, room);
  request.token_ids.insert(request.token_ids.end(), draft.begin(), draft.end());
  request.num_draft_tokens = static_cast<int64_t>(draft.size());
}

StepOutput ModelRunner::NewOutput(const Request& request) {
  StepOutput output;
  output.request_id = request.request_id;
  output.prompt_tokens = request.num_prompt_tokens();
  output.cached_tokens = request.num_cached_prompt_tokens;
  return output;
}

std::optional<bool> ModelRunner::FillDrawMask(Request& request, size_t vocab_size,
                                              bool suppress_eos, std::vector<StepOutput>& outputs) {
  const size_t words = (vocab_size + 31) / 32;
  bool masked = false;
  if (request.constraint) {
    // As vLLM: the grammar's mask comes first, so logprobs are of the constrained distribution.
    mask_.assign(words, 0);
    request.constraint->FillMask(mask_);
    if (suppress_eos) {
      for (const int32_t id : eos_ids_) {
        if (id >= 0 && static_cast<size_t>(id) < vocab_size) mask_[id / 32] &= ~(1U << (id % 32));
      }
    }
    if (std::all_of(mask_.begin(), mask_.end(), [](uint32_t word) { return word == 0; })) {
      // The grammar allows only the end, which min_tokens forbids: this request fails, the
      // others of the step go on.
      outputs.push_back(FailConstrained(request, NewOutput(request),
                                        "structured output: the output is complete after {} "
                                        "tokens but min_tokens is {}",
                                        request.num_generated_tokens(),
                                        request.sampling_params.min_tokens));
      return std::nullopt;
    }
    masked = true;
  }
  // A spent thinking budget forces the end of the reasoning block, one token a draw, where the
  // grammar (if any) allows it: the draw is masked to that token. It begins once the text does
  // not end inside a character (or after a few draws).
  std::optional<int32_t> forced = request.thinking ? request.thinking->Forced() : std::nullopt;
  if (forced && request.text.MidCharacter() && request.thinking->MayWait()) forced.reset();
  if (forced && *forced >= 0 && static_cast<size_t>(*forced) < vocab_size) {
    const auto word = static_cast<size_t>(*forced) / 32;
    const uint32_t bit = 1U << (*forced % 32);
    if (!masked || (mask_[word] & bit) != 0) {
      mask_.assign(words, 0);
      mask_[word] = bit;
      masked = true;
    }
  }
  return masked;
}

void ModelRunner::TakeToken(Request& request, std::span<float> logits,
                            std::vector<StepOutput>& outputs) {
  const SamplingParams& params = request.sampling_params;
  // EOS cannot come before min_tokens.
  const bool suppress_eos = request.num_generated_tokens() < params.min_tokens;
  std::optional<TokenLogprobs> logprobs;
  if (params.logprobs) logprobs.emplace();
  const std::optional<bool> masked = FillDrawMask(request, logits.size(), suppress_eos, outputs);
  if (!masked) return;
  if (*masked) ApplyTokenMask(logits, mask_);
  const int32_t token = request.sampler.Sample(
      logits, request.token_ids, request.num_prompt_tokens(),
      suppress_eos ? std::span<const int32_t>(eos_ids_) : std::span<const int32_t>(),
      logprobs ? &*logprobs : nullptr);
  const bool is_eos = eos_token_ids_.contains(token);
  if (request.constraint && !is_eos && !request.constraint->Accept(token)) {
    outputs.push_back(FailConstrained(request, NewOutput(request),
                                      "structured output: the grammar refused token {} its mask "
                                      "allowed",
                                      token));
    return;
  }
  outputs.push_back(AppendToken(request, token, is_eos));
  outputs.back().logprobs = std::move(logprobs);
  JumpForward(request, outputs);
}

void ModelRunner::JumpForward(Request& request, std::vector<StepOutput>& outputs) {
  // Their KV is computed with the next step's forward (one chunk). Not for requests that asked
  // logprobs: a forced token was never drawn from a distribution.
  if (!jump_forward_ || !request.constraint || request.done() || request.sampling_params.logprobs) {
    return;
  }
  for (const int32_t forced : request.constraint->ForcedTokens()) {
    if (!request.constraint->Accept(forced)) break;
    outputs.push_back(AppendToken(request, forced, eos_token_ids_.contains(forced)));
    if (request.done()) break;
  }
}

StepOutput ModelRunner::AppendToken(Request& request, int32_t token, bool is_eos) {
  const SamplingParams& params = request.sampling_params;
  request.token_ids.push_back(token);
  request.generated_token_ids.push_back(token);
  request.state = RequestState::kDecode;
  if (request.thinking) request.thinking->Accept(token);
  std::optional<FinishReason> reason;
  if (is_eos && !params.ignore_eos) {
    reason = FinishReason::kEos;
  } else if (request.text.Add(token)) {
    reason = FinishReason::kStop;
  } else if (request.constraint && request.constraint->Finished()) {
    // Only the end of generation may follow: end now instead of spending a step on EOS.
    reason = FinishReason::kStop;
  } else if (request.num_generated_tokens() >= params.max_new_tokens) {
    reason = FinishReason::kLength;
  }
  if (reason && request.text.Finish() && reason == FinishReason::kLength) {
    reason = FinishReason::kStop;
  }
  StepOutput output = NewOutput(request);
  output.token_id = token;
  output.text_delta = request.text.TakeStable();
  output.completion_tokens = request.num_generated_tokens();
  if (reason) {
    request.state = RequestState::kFinished;
    request.finish_reason = reason;
    output.finished = true;
    output.finish_reason = reason;
    if (request.text.stopped()) output.stop_string = request.text.stop_string();
  }
  return output;
}

}  // namespace infer
