// The sampling pipeline: repetition penalty -> temperature -> top-k -> top-p -> multinomial
// draw (argmax when temperature is 0), on one row of f32 logits, with a per-request RNG.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "infer/engine/sampling_params.h"

namespace infer {

// Each transform rewrites `logits` in place; masked tokens become -inf.

// CTRL penalty over the unique ids of `context_ids` (ids outside the vocab are ignored):
// positive logits are divided by `penalty`, negative ones multiplied. No-op at 1.
void ApplyRepetitionPenalty(std::span<float> logits, std::span<const int32_t> context_ids,
                            double penalty);
// Divides by `temperature` (> 0). No-op at 1.
void ApplyTemperature(std::span<float> logits, double temperature);
// Keeps the logits >= the k-th largest (ties at the threshold survive). No-op for k >= size.
void ApplyTopK(std::span<float> logits, int64_t k);
// Keeps the most likely tokens, in descending order, up to and including the one at which
// their cumulative probability reaches `p`. No-op at 1.
void ApplyTopP(std::span<float> logits, double p);
// Index of the largest logit; the lowest index wins ties.
int32_t Argmax(std::span<const float> logits);
// Draws from softmax(logits) by inverse CDF with one 53-bit uniform from `rng`.
int32_t SampleFromLogits(std::span<const float> logits, std::mt19937_64& rng);

// One request's sampler. The RNG is std::mt19937_64 (fully specified by the C++ standard, so a
// seed gives the same stream on every platform); without a seed it is seeded from the OS.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Runs the pipeline on `logits` (modified) given every id of the context so far.
  int32_t Sample(std::span<float> logits, std::span<const int32_t> context_ids);

 private:
  double temperature_;
  double top_p_;
  std::optional<int64_t> top_k_;
  double repetition_penalty_;
  std::mt19937_64 rng_;
};

}  // namespace infer
