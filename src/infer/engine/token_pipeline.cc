#include "infer/engine/token_pipeline.h"

#include <fmt/format.h>

#include "infer/core/error.h"
#include "infer/engine/logits_processor.h"
#include "infer/grammar/grammar_error.h"

namespace infer {

namespace {

// The next draw reads the output text: a spent thinking budget's forced end that may wait while
// the text ends inside a character (ThinkingBudgetForce). The text follows the appended tokens
// only, so such a draw cannot check a draft's later positions.
bool ReadsOutputText(const Request& request) {
  return request.thinking && request.thinking->Forced() && request.thinking->MayWait();
}

}  // namespace

TokenPipeline::TokenPipeline(std::vector<int32_t> eos_token_ids, bool jump_forward,
                             SpeculativeConfig speculative)
    : eos_token_ids_(eos_token_ids.begin(), eos_token_ids.end()),
      eos_ids_(std::move(eos_token_ids)),
      jump_forward_(jump_forward),
      speculative_(speculative) {}

std::vector<SampledTokens> TokenPipeline::Process(const SchedulerOutput& step,
                                                  std::span<float> logits, size_t vocab) {
  std::vector<SampledTokens> sampled(step.scheduled.size());
  size_t row = 0;
  for (size_t i = 0; i < step.scheduled.size(); ++i) {
    const ScheduledRequest& s = step.scheduled[i];
    if (!s.samples()) continue;
    Request& request = *s.request;
    const auto rows = static_cast<size_t>(1 + request.num_draft_tokens());
    INFER_CHECK((row + rows) * vocab <= logits.size(), "runner: the model returned {} logits rows",
                logits.size() / vocab);
    try {
      Sample(request, logits.subspan(row * vocab, rows * vocab), vocab, sampled[i]);
      ProposeDraft(request, sampled[i]);
    } catch (const GrammarError& e) {
      // A grammar that leaves the draw no token, or too ambiguous to go on (its matcher's
      // bound): this request fails, the others of the step go on.
      sampled[i].error = fmt::format("structured output: {}", e.what());
    }
    row += rows;
  }
  return sampled;
}

void TokenPipeline::Sample(Request& request, std::span<float> rows, size_t vocab,
                           SampledTokens& out) {
  const std::vector<int32_t>& draft = request.draft_token_ids;
  // Each draw is the one the request would make without a draft: the same logits (the kernels
  // are batch-invariant), the same tokens before it, its own RNG, one draw per token. A draft
  // token stands only where the draw equals it, so the output is what it would be without one.
  for (size_t i = 0; i <= draft.size(); ++i) {
    if (i > 0 && ReadsOutputText(request)) break;
    const size_t first = out.tokens.size();
    if (!Draw(request, rows.subspan(i * vocab, vocab), out)) break;
    const size_t forced = JumpForward(request, out);
    if (i == draft.size() || out.tokens[first].id != draft[i]) break;
    ++out.num_accepted_draft;  // its KV, computed in this step, is the drawn token's
    // Ended, or the grammar forced tokens after it: the rest of the draft is not checked.
    if (forced > 0 || Ends(request, out)) break;
  }
}

bool TokenPipeline::Draw(Request& request, std::span<float> logits, SampledTokens& out) {
  const SamplingParams& params = request.sampling_params;
  std::optional<TokenLogprobs> logprobs;
  if (params.logprobs) logprobs.emplace();
  const DrawContext context{Context(request, out), request.num_prompt_tokens()};
  const int32_t token = DrawToken(logits, context, request.logits_processors, request.sampler,
                                  params.logprobs, logprobs ? &*logprobs : nullptr, raw_);
  const bool is_eos = eos_token_ids_.contains(token);
  if (request.constraint && !is_eos && !request.constraint->Accept(token)) {
    out.error =
        fmt::format("structured output: the grammar refused token {} its mask allowed", token);
    return false;
  }
  Take(request, {.id = token, .is_eos = is_eos, .logprobs = std::move(logprobs)}, out);
  return true;
}

size_t TokenPipeline::JumpForward(Request& request, SampledTokens& out) {
  // Their KV is computed with the next step's forward (one chunk). Not for requests that asked
  // logprobs: a forced token was never drawn from a distribution.
  if (!jump_forward_ || !request.constraint || request.sampling_params.logprobs ||
      Ends(request, out)) {
    return 0;
  }
  size_t taken = 0;
  for (const int32_t forced : request.constraint->ForcedTokens()) {
    if (!request.constraint->Accept(forced)) break;
    Take(request, {.id = forced, .is_eos = eos_token_ids_.contains(forced)}, out);
    ++taken;
    if (Ends(request, out)) break;
  }
  return taken;
}

void TokenPipeline::Take(Request& request, SampledToken token, SampledTokens& out) {
  if (request.thinking) request.thinking->Accept(token.id);
  token.completes_grammar = request.constraint && request.constraint->Finished();
  out.tokens.push_back(std::move(token));
}

bool TokenPipeline::Ends(const Request& request, const SampledTokens& out) {
  const SamplingParams& params = request.sampling_params;
  const int64_t generated =
      request.num_generated_tokens() + static_cast<int64_t>(out.tokens.size());
  const SampledToken& last = out.tokens.back();
  return (last.is_eos && !params.ignore_eos) || last.completes_grammar ||
         generated >= params.max_new_tokens;
}

std::span<const int32_t> TokenPipeline::Context(const Request& request, const SampledTokens& out) {
  if (out.tokens.empty()) return request.token_ids;
  context_.assign(request.token_ids.begin(), request.token_ids.end());
  for (const SampledToken& token : out.tokens) context_.push_back(token.id);
  return context_;
}

void TokenPipeline::ProposeDraft(const Request& request, SampledTokens& out) {
  if (!speculative_.enabled() || out.error || out.tokens.empty() || Ends(request, out)) return;
  // The draft and the token drawn after it must fit in max_tokens.
  const int64_t generated =
      request.num_generated_tokens() + static_cast<int64_t>(out.tokens.size());
  const int64_t room = request.sampling_params.max_new_tokens - generated - 1;
  out.next_draft = ProposeNgramDraft(Context(request, out), speculative_, room);
}

}  // namespace infer
