// The last stage of a draw, on one row of f32 logits the request's logits processors
// (logits_processor.h) have already rewritten, with a per-request RNG: temperature -> top-k ->
// top-p -> multinomial draw (argmax when temperature is 0). Also the transforms the processors
// are made of, and logprobs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <utility>
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
// Keeps the tokens whose bit (i % 32) of mask[i / 32] is set (a TokenConstraint's mask).
void ApplyTokenMask(std::span<float> logits, std::span<const uint32_t> mask);
// Adds bias[id] to logits[id] (ids outside the vocab are ignored).
void ApplyLogitBias(std::span<float> logits, const std::map<int32_t, double>& bias);
// OpenAI's penalties over `generated_ids`: a token that occurs c > 0 times loses
// presence + c * frequency. No-op when both are 0.
void ApplyPresenceFrequencyPenalty(std::span<float> logits, std::span<const int32_t> generated_ids,
                                   double presence, double frequency);

// A sampled token's log-probability and the `k` most likely tokens of the same distribution
// (descending; the lowest id first among equals).
struct TokenLogprobs {
  int32_t token_id = 0;
  float logprob = 0.0F;
  std::vector<std::pair<int32_t, float>> top;
};
// log_softmax(logits)[token] and the top `k`, in double precision.
TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int64_t k);

// Index of the largest logit; the lowest index wins ties.
int32_t Argmax(std::span<const float> logits);
// Draws from softmax(logits) by inverse CDF with one 53-bit uniform from `rng`.
int32_t SampleFromLogits(std::span<const float> logits, std::mt19937_64& rng);

// The tokens a draw can take: their ids in ascending order (the unmasked ones), their logits,
// the draw's weight of each (exp(logit - max_logit) in double, within kernels::ExpShifted's
// bound of std::exp's: the draw and top-p confirm each choice against that bound and decide
// close calls with std::exp), the lowest id of the largest logit, and the smallest logit; then
// which of them top-p keeps.
struct SamplingCandidates {
  std::vector<int32_t> ids;
  // The candidates' logits: the row itself where nothing was masked (valid during one draw),
  // else `compacted`.
  std::span<const float> values;
  std::vector<float> compacted;
  std::vector<double> weights;
  // Top-p's verdict: candidate j stays in the draw iff rank[j] <= last_kept_rank (every one
  // while `rank` is empty), and `kept_total` is the kept weights' sum (in an order of its own).
  std::vector<uint16_t> rank;
  uint16_t last_kept_rank = 0;
  double kept_total = 0.0;
  // ids[0, identity_ids) hold 0, 1, ... (left by an unmasked row): the next unmasked row of that
  // size need not write them again.
  size_t identity_ids = 0;
  int32_t best = -1;
  float max_logit = 0.0F;
  float min_logit = 0.0F;
};

// One request's sampler. The RNG is std::mt19937_64 (fully specified by the C++ standard, so a
// seed gives the same stream on every platform); without a seed it is seeded from the OS.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Draws from `logits`, which it uses as scratch (temperature and top-k rewrite it in place).
  int32_t Sample(std::span<float> logits);

 private:
  double temperature_;
  double top_p_;
  std::optional<int64_t> top_k_;
  std::mt19937_64 rng_;
  SamplingCandidates candidates_;  // kept to reuse its memory from draw to draw
};

}  // namespace infer
