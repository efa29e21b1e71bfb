// The model runner of the engine: turns the scheduler's step (decode tokens and prefill chunks of
// many requests) into one batched model call, then samples each request that reached its last
// token with its own RNG and applies its stop conditions.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "infer/engine/language_model.h"
#include "infer/engine/request.h"
#include "infer/engine/scheduler.h"

namespace infer {

class ModelRunner {
 public:
  // `model` must outlive the runner. `eos_token_ids` end a request (finish_reason eos) unless
  // it asked ignore_eos, and cannot be sampled before its min_tokens. `jump_forward`: a
  // constrained request also takes the tokens its grammar forces (TokenConstraint::
  // ForcedTokens) after each sampled one.
  ModelRunner(LanguageModel& model, std::vector<int32_t> eos_token_ids, bool jump_forward = true);

  // Runs the step; returns, per request that sampled a token (in the step's order), its
  // StepOutputs (time_s unset): the sampled token's, then one per forced token.
  std::vector<std::vector<StepOutput>> Run(const SchedulerOutput& step);

 private:
  // Samples from `logits`, records the token (and the forced ones after it) into `outputs`.
  void TakeToken(Request& request, std::span<float> logits, std::vector<StepOutput>& outputs);
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
};

}  // namespace infer
