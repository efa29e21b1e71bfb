// The model runner of the engine: turns the scheduler's step (decode tokens, prefill chunks and
// speculative drafts of many requests) into batched model calls of at most max_forward_tokens
// tokens each (one call unless a static batch's prompts exceed it) and returns the logits rows.
// What is drawn from them is the token pipeline's (token_pipeline.h).
#pragma once

#include <deque>
#include <span>
#include <vector>

#include "infer/engine/language_model.h"
#include "infer/engine/scheduler.h"

namespace infer {

class ModelRunner {
 public:
  // `model` must outlive the runner; max_forward_tokens >= 1.
  ModelRunner(LanguageModel& model, int64_t max_forward_tokens)
      : model_(model), max_forward_tokens_(max_forward_tokens) {}

  // Runs the step. Returns the logits (vocab_size() wide; valid until the next Run): for each
  // scheduled request that wants logits, in the step's order, its last token's row, then one
  // per draft token. Empty when nothing was scheduled. A step over max_forward_tokens runs as
  // consecutive calls, each sequence split in position order, so what a call reads of the cache
  // was written by an earlier one.
  std::span<float> Run(const SchedulerOutput& step);
  size_t vocab_size() const { return static_cast<size_t>(model_.vocab_size()); }

 private:
  // Runs steps_ in calls of at most max_forward_tokens_ tokens, appending their rows to logits_.
  void ForwardInCalls();

  LanguageModel& model_;
  const int64_t max_forward_tokens_;
  std::vector<SequenceStep> steps_;
  std::vector<SequenceStep> call_;  // one call's share of steps_
  std::vector<float> call_logits_;
  // Drafted requests' tokens followed by their drafts (SequenceStep::tokens points into them); a
  // deque, so that growing it leaves the earlier ones in place.
  std::deque<std::vector<int32_t>> with_draft_;
  std::vector<float> logits_;
};

}  // namespace infer
