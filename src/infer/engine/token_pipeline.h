// What the engine step does with the model's logits, per request that reached its last token (in
// the step's order): its logits processors and sampler draw a token (logits_processor.h), the
// draft verifier keeps the draft tokens the draws confirm, the grammar's forced tokens follow
// (jump-forward), the stop checker ends it (stop_checker.h), and an n-gram draft is proposed for
// its next step. The tokens go onto the request here; the scheduler's Update then counts their
// KV and frees the blocks of requests that ended.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_set>
#include <vector>

#include "infer/engine/ngram_proposer.h"
#include "infer/engine/output.h"
#include "infer/engine/request.h"
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

  // `logits`: `vocab` wide, rows for each scheduled request that wants logits, in the step's
  // order: its last token's, then one per draft token. Returns, per such request, its
  // StepOutputs (time_s unset): the drawn token's, then one per forced token; with a draft,
  // those of every draft token the draws confirmed, then the next drawn one's.
  std::vector<std::vector<StepOutput>> Process(const SchedulerOutput& step, std::span<float> logits,
                                               size_t vocab);

  // The drafts the last Process checked (vLLM's spec_decode counters).
  struct DraftCounts {
    int64_t drafts = 0;           // requests that had a draft
    int64_t draft_tokens = 0;     // tokens proposed
    int64_t accepted_tokens = 0;  // of those, confirmed
  };
  const DraftCounts& last_draft_counts() const { return draft_counts_; }
  // The ids min_tokens holds back (a request's MinTokensEos and grammar mask).
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

 private:
  // Draws from `logits` and records the token (and the forced ones after it) into `outputs`.
  void TakeToken(Request& request, std::span<float> logits, std::vector<StepOutput>& outputs);
  // Appends the tokens the grammar forces next (jump-forward), without a draw each.
  void JumpForward(Request& request, std::vector<StepOutput>& outputs);
  // A request with a draft: `rows` holds the logits of its last token before the draft and of
  // each draft token. Draws from them in order while each draw equals the draft's next token
  // (those are kept), and records what the draws gave; the rest of the draft is rejected.
  void VerifyDraft(Request& request, std::span<float> rows, std::vector<StepOutput>& outputs);
  // Appends an n-gram draft to a request that goes on.
  void ProposeDraft(Request& request) const;
  // Appends `token` to the request and ends it where the stop checker says.
  StepOutput AppendToken(Request& request, int32_t token, bool is_eos);
  static StepOutput NewOutput(const Request& request);

  std::unordered_set<int32_t> eos_token_ids_;
  std::vector<int32_t> eos_ids_;  // the same ids, as a list
  bool jump_forward_;
  SpeculativeConfig speculative_;
  DraftCounts draft_counts_;
  std::vector<int32_t> draft_;
  std::vector<float> raw_;  // a draw's masked row, for logprobs
};

}  // namespace infer
