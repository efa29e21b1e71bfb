#include "infer/engine/token_pipeline.h"

#include "infer/core/error.h"
#include "infer/engine/logits_processor.h"
#include "infer/engine/stop_checker.h"
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

TokenPipeline::TokenPipeline(std::vector<int32_t> eos_token_ids, bool jump_forward,
                             SpeculativeConfig speculative)
    : eos_token_ids_(eos_token_ids.begin(), eos_token_ids.end()),
      eos_ids_(std::move(eos_token_ids)),
      jump_forward_(jump_forward),
      speculative_(speculative) {}

std::vector<std::vector<StepOutput>> TokenPipeline::Process(const SchedulerOutput& step,
                                                            std::span<float> logits, size_t vocab) {
  draft_counts_ = {};
  std::vector<std::vector<StepOutput>> outputs;
  size_t row = 0;
  for (const ScheduledRequest& s : step.scheduled) {
    if (s.num_new == 0 || !s.wants_logits) continue;
    Request& request = *s.request;
    const auto rows = static_cast<size_t>(1 + request.num_draft_tokens());
    INFER_CHECK((row + rows) * vocab <= logits.size(), "runner: the model returned {} logits rows",
                logits.size() / vocab);
    std::vector<StepOutput>& request_outputs = outputs.emplace_back();
    const std::span<float> request_logits = logits.subspan(row * vocab, rows * vocab);
    try {
      if (request.num_draft_tokens() > 0) {
        VerifyDraft(request, request_logits, request_outputs);
      } else {
        TakeToken(request, request_logits, request_outputs);
      }
      ProposeDraft(request);
    } catch (const GrammarError& e) {
      // A grammar that leaves the draw no token, or too ambiguous to go on (its matcher's
      // bound): this request fails, the others of the step go on.
      request_outputs.push_back(
          FailConstrained(request, NewOutput(request), "structured output: {}", e.what()));
    }
    row += rows;
  }
  return outputs;
}

void TokenPipeline::VerifyDraft(Request& request, std::span<float> rows,
                                std::vector<StepOutput>& outputs) {
  const int64_t k = request.num_draft_tokens();
  draft_ = std::move(request.draft_token_ids);
  request.draft_token_ids.clear();
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

void TokenPipeline::ProposeDraft(Request& request) const {
  if (!speculative_.enabled() || request.done()) return;
  // The draft and the token drawn after it must fit in max_tokens.
  const int64_t room = request.sampling_params.max_new_tokens - request.num_generated_tokens() - 1;
  request.draft_token_ids = ProposeNgramDraft(request.token_ids, speculative_, room);
}

StepOutput TokenPipeline::NewOutput(const Request& request) {
  StepOutput output;
  output.request_id = request.request_id;
  output.prompt_tokens = request.num_prompt_tokens();
  output.cached_tokens = request.num_cached_prompt_tokens;
  return output;
}

void TokenPipeline::TakeToken(Request& request, std::span<float> logits,
                              std::vector<StepOutput>& outputs) {
  const SamplingParams& params = request.sampling_params;
  std::optional<TokenLogprobs> logprobs;
  if (params.logprobs) logprobs.emplace();
  const DrawContext context{request.token_ids, request.num_prompt_tokens()};
  const int32_t token = DrawToken(logits, context, request.logits_processors, request.sampler,
                                  params.logprobs, logprobs ? &*logprobs : nullptr, raw_);
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

void TokenPipeline::JumpForward(Request& request, std::vector<StepOutput>& outputs) {
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

StepOutput TokenPipeline::AppendToken(Request& request, int32_t token, bool is_eos) {
  request.token_ids.push_back(token);
  request.generated_token_ids.push_back(token);
  request.state = RequestState::kDecode;
  if (request.thinking) request.thinking->Accept(token);
  const std::optional<FinishReason> reason = CheckStop(request, token, is_eos);
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
