// The model runner of the engine: turns the scheduler's step (decode tokens, prefill chunks and
// speculative drafts of many requests) into one batched model call and returns its logits rows.
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
  // `model` must outlive the runner.
  explicit ModelRunner(LanguageModel& model) : model_(model) {}

  // Runs the step. Returns the logits (vocab_size() wide; valid until the next Run): for each
  // scheduled request that wants logits, in the step's order, its last token's row, then one
  // per draft token. Empty when nothing was scheduled.
  std::span<float> Run(const SchedulerOutput& step);
  size_t vocab_size() const { return static_cast<size_t>(model_.vocab_size()); }

 private:
  LanguageModel& model_;
  std::vector<SequenceStep> steps_;
  // Drafted requests' tokens followed by their drafts (SequenceStep::tokens points into them); a
  // deque, so that growing it leaves the earlier ones in place.
  std::deque<std::vector<int32_t>> with_draft_;
  std::vector<float> logits_;
};

}  // namespace infer
