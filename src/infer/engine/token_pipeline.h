// What the engine step does with the model's logits, per request that reached its last token (in
// the step's order): its logits processors and sampler draw a token (logits_processor.h), the
// draft verifier keeps the draft tokens the draws confirm, the grammar's forced tokens follow
// (jump-forward), and an n-gram draft is proposed for its next step. It only draws: it advances
// what follows the draws (the request's sampler, constraint and thinking budget) and returns the
// tokens (SampledTokens); the scheduler's Update appends them, checks each for a stop, counts
// their KV and frees the blocks of requests that ended.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_set>
#include <vector>

#include "infer/engine/ngram_proposer.h"
#include "infer/engine/request.h"
#include "infer/engine/sampled_tokens.h"
#include "infer/engine/scheduler.h"

namespace infer {

class TokenPipeline {
 public:
  // `eos_token_ids` end a request (finish_reason eos) unless it asked ignore_eos. `jump_forward`:
  // a constrained request also takes the tokens its grammar forces (TokenConstraint::
  // ForcedTokens) after each drawn one. `speculative` (enabled): after each draw a request gets
  // an n-gram draft (ngram_proposer.h), checked by its next step.
  TokenPipeline(std::vector<int32_t> eos_token_ids, bool jump_forward,
                SpeculativeConfig speculative);

  // `logits`: `vocab` wide, rows for each scheduled request that samples, in the step's order:
  // its last token's, then one per draft token. Returns one SampledTokens per scheduled request,
  // in the step's order (empty for those that do not sample).
  std::vector<SampledTokens> Process(const SchedulerOutput& step, std::span<float> logits,
                                     size_t vocab);

  // The ids min_tokens holds back (a request's MinTokensEos and grammar mask).
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

 private:
  // A request's draws from `rows` (its last token's logits, then each draft token's), in order
  // while each draw equals the draft's next token (those are kept); the rest of the draft is
  // rejected.
  void Sample(Request& request, std::span<float> rows, size_t vocab, SampledTokens& out);
  // One draw after the request's tokens and out's, into `out`; false (out.error set) when the
  // grammar refused the token.
  bool Draw(Request& request, std::span<float> logits, SampledTokens& out);
  // The tokens the grammar forces next, each without a draw (jump-forward); how many were taken.
  size_t JumpForward(Request& request, SampledTokens& out);
  // Takes `token` into `out` (with whether the grammar is complete after it), and into what
  // follows the tokens (the thinking budget).
  static void Take(Request& request, SampledToken token, SampledTokens& out);
  // The request ends with out's last token by a rule the pipeline sees: EOS (unless ignore_eos),
  // a complete grammar, max_tokens. (A stop string is found in the text by Update.)
  static bool Ends(const Request& request, const SampledTokens& out);
  // The request's tokens followed by out's: what the next draw reads.
  std::span<const int32_t> Context(const Request& request, const SampledTokens& out);
  // The next step's n-gram draft, for a request that goes on.
  void ProposeDraft(const Request& request, SampledTokens& out);

  std::unordered_set<int32_t> eos_token_ids_;
  std::vector<int32_t> eos_ids_;  // the same ids, as a list
  bool jump_forward_;
  SpeculativeConfig speculative_;
  std::vector<int32_t> context_;  // a request's tokens and the step's, once it drew one
  std::vector<float> raw_;        // a draw's masked row, for logprobs
};

}  // namespace infer
