// The model runner of the engine: turns the scheduler's step (decode tokens and prefill chunks of
// many requests) into one batched model call, then samples each request that reached its last
// token with its own RNG and applies its stop conditions.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_set>
#include <vector>

#include "infer/engine/language_model.h"
#include "infer/engine/ngram_proposer.h"
#include "infer/engine/request.h"
#include "infer/engine/scheduler.h"

namespace infer {

class ModelRunner {
 public:
  // `model` must outlive the runner. `eos_token_ids` end a request (finish_reason eos) unless
  // it asked ignore_eos, and cannot be sampled before its min_tokens. `jump_forward`: a
  // constrained request also takes the tokens its grammar forces (TokenConstraint::
  // ForcedTokens) after each sampled one.
  // `speculative` (enabled): after each draw a request gets an n-gram draft
  // (ngram_proposer.h), checked by its next step.
  ModelRunner(LanguageModel& model, std::vector<int32_t> eos_token_ids, bool jump_forward = true,
              SpeculativeConfig speculative = {});

  // Runs the step; returns, per request that sampled a token (in the step's order), its
  // StepOutputs (time_s unset): the sampled token's, then one per forced token; with a draft,
  // those of every draft token the model's draws confirmed, then the next drawn one's.
  std::vector<std::vector<StepOutput>> Run(const SchedulerOutput& step);

  // The drafts the last Run checked (vLLM's spec_decode counters).
  struct DraftCounts {
    int64_t drafts = 0;           // requests that had a draft
    int64_t draft_tokens = 0;     // tokens proposed
    int64_t accepted_tokens = 0;  // of those, confirmed
  };
  const DraftCounts& last_draft_counts() const { return draft_counts_; }

 private:
  // Samples from `logits`, records the token (and the forced ones after it) into `outputs`.
  void TakeToken(Request& request, std::span<float> logits, std::vector<StepOutput>& outputs);
  // Fills mask_ for this draw: the grammar's allowed tokens (less EOS before min_tokens), or the
  // one token a spent thinking budget forces. Returns whether the draw is masked; nullopt when
  // the grammar allows nothing min_tokens permits (the request then failed, its output pushed).
  std::optional<bool> FillDrawMask(Request& request, size_t vocab_size, bool suppress_eos,
                                   std::vector<StepOutput>& outputs);
  // Appends the tokens the grammar forces next (jump-forward), without a draw each.
  void JumpForward(Request& request, std::vector<StepOutput>& outputs);
  // A request with a draft: `rows` holds the logits of its last token before the draft and of
  // each draft token. Draws from them in order while each draw equals the draft's next token
  // (those are kept), and records what the draws gave; the rest of the draft is rejected.
  void CheckDraft(Request& request, std::span<float> rows, std::vector<StepOutput>& outputs);
  // Appends an n-gram draft to a request that goes on.
  void ProposeDraft(Request& request) const;
  // Appends `token` to the request and applies EOS, stop strings, the grammar's end and length.
  StepOutput AppendToken(Request& request, int32_t token, bool is_eos);
  static StepOutput NewOutput(const Request& request);

  LanguageModel& model_;
  std::unordered_set<int32_t> eos_token_ids_;
  std::vector<int32_t> eos_ids_;  // the same ids, as a list to suppress (min_tokens)
  std::vector<SequenceStep> steps_;
  std::vector<float> logits_;
  std::vector<uint32_t> mask_;  // a constrained request's allowed tokens, one bit each
  bool jump_forward_;
  SpeculativeConfig speculative_;
  DraftCounts draft_counts_;
  std::vector<int32_t> draft_;
};

}  // namespace infer
