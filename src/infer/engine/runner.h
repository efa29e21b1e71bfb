// The model runner of the serving engine: turns a batch of requests into one batched model call
// per step (prefill of every prompt together, then one token per running request), samples
// each request with its own RNG and applies its stop conditions.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_set>
#include <vector>

#include "infer/engine/language_model.h"
#include "infer/engine/request.h"

namespace infer {

class ModelRunner {
 public:
  // `model` must outlive the runner. `eos_token_ids` end a request (finish_reason eos).
  // max_prefill_tokens caps the tokens of one prefill call (EngineConfig::max_num_batched_tokens).
  ModelRunner(LanguageModel& model, std::vector<int32_t> eos_token_ids, int64_t max_prefill_tokens);

  // One step for `batch` (the scheduler's active batch). A batch whose requests are all new
  // (kWaiting or already failed) is prefilled: cache rows are allocated for it and the prompts
  // run in as few calls of at most max_prefill_tokens tokens as they fill. Otherwise each kDecode
  // request advances by one token in one call. Done requests are skipped. Returns one StepOutput
  // per request that ran.
  std::vector<StepOutput> Step(std::span<const std::shared_ptr<Request>> batch);

  // Frees the batch's KV cache rows.
  void ClearBatch();

 private:
  std::vector<StepOutput> Prefill(std::span<const std::shared_ptr<Request>> batch);
  std::vector<StepOutput> Decode(std::span<const std::shared_ptr<Request>> batch);
  // One model call for `steps`, then a sampled token per stepped request.
  std::vector<StepOutput> RunSteps(std::span<const std::shared_ptr<Request>> batch,
                                   const std::vector<SequenceStep>& steps);
  // Samples from logits row `row`, records the token and applies EOS, stop strings and length.
  StepOutput TakeToken(Request& request, size_t batch_idx, std::span<float> logits);

  LanguageModel& model_;
  std::unordered_set<int32_t> eos_token_ids_;
  int64_t max_prefill_tokens_;
  // Prompt + generated ids of each batch row (the model's view of the sequence).
  std::vector<std::vector<int32_t>> contexts_;
  std::vector<float> logits_;
};

}  // namespace infer
