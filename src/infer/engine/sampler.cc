#include "infer/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "infer/core/error.h"

namespace infer {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// A uniform double in [0, 1) from the top 53 bits: defined here rather than through
// std::uniform_real_distribution, whose algorithm differs between standard libraries.
double UniformUnit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11U) * 0x1.0p-53; }

}  // namespace

void ApplyRepetitionPenalty(std::span<float> logits, std::span<const int32_t> context_ids,
                            double penalty) {
  if (penalty == 1.0 || context_ids.empty()) return;
  std::vector<int32_t> unique_ids(context_ids.begin(), context_ids.end());
  std::sort(unique_ids.begin(), unique_ids.end());
  unique_ids.erase(std::unique(unique_ids.begin(), unique_ids.end()), unique_ids.end());
  const auto vocab = static_cast<int64_t>(logits.size());
  const auto factor = static_cast<float>(penalty);
  for (const int32_t id : unique_ids) {
    if (id < 0 || id >= vocab) continue;
    float& logit = logits[static_cast<size_t>(id)];
    logit = logit > 0.0F ? logit / factor : logit * factor;
  }
}

void ApplyTemperature(std::span<float> logits, double temperature) {
  INFER_CHECK(temperature > 0.0, "ApplyTemperature: temperature must be > 0, got {}", temperature);
  if (temperature == 1.0) return;
  const auto scale = static_cast<float>(1.0 / temperature);
  for (float& logit : logits) logit *= scale;
}

void ApplyTopK(std::span<float> logits, int64_t k) {
  INFER_CHECK(k >= 1, "ApplyTopK: k must be >= 1, got {}", k);
  if (k >= static_cast<int64_t>(logits.size())) return;
  std::vector<float> values(logits.begin(), logits.end());
  const auto kth = values.begin() + (k - 1);
  std::nth_element(values.begin(), kth, values.end(), std::greater<>());
  const float threshold = *kth;
  for (float& logit : logits) {
    if (logit < threshold) logit = kMasked;
  }
}

void ApplyTopP(std::span<float> logits, double p) {
  if (p >= 1.0) return;
  std::vector<int32_t> order;
  order.reserve(logits.size());
  float max_logit = kMasked;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kMasked) continue;
    order.push_back(static_cast<int32_t>(i));
    max_logit = std::max(max_logit, logits[i]);
  }
  if (order.empty()) return;
  double total = 0.0;
  for (const int32_t id : order) total += std::exp(static_cast<double>(logits[id] - max_logit));
  const auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  // Sort only as far as needed: peaked distributions reach p within a few tokens.
  size_t sorted = 0;
  size_t keep = order.size();
  double cumulative = 0.0;
  for (size_t want = 64; sorted < order.size(); want *= 4) {
    const size_t end = std::min(want, order.size());
    std::partial_sort(order.begin() + static_cast<std::ptrdiff_t>(sorted),
                      order.begin() + static_cast<std::ptrdiff_t>(end), order.end(), by_logit);
    for (; sorted < end; ++sorted) {
      cumulative += std::exp(static_cast<double>(logits[order[sorted]] - max_logit)) / total;
      if (cumulative >= p) break;
    }
    if (sorted < end) {
      keep = sorted + 1;
      break;
    }
  }
  for (size_t i = keep; i < order.size(); ++i) logits[static_cast<size_t>(order[i])] = kMasked;
}

int32_t Argmax(std::span<const float> logits) {
  INFER_CHECK(!logits.empty(), "Argmax: empty logits");
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t SampleFromLogits(std::span<const float> logits, std::mt19937_64& rng) {
  const int32_t best = Argmax(logits);
  const float max_logit = logits[static_cast<size_t>(best)];
  INFER_CHECK(max_logit != kMasked, "sampling: every token is masked");
  double total = 0.0;
  for (const float logit : logits) total += std::exp(static_cast<double>(logit - max_logit));
  const double target = UniformUnit(rng) * total;
  double cumulative = 0.0;
  int32_t last_possible = best;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double weight = std::exp(static_cast<double>(logits[i] - max_logit));
    if (weight == 0.0) continue;
    cumulative += weight;
    last_possible = static_cast<int32_t>(i);
    if (target < cumulative) return last_possible;
  }
  return last_possible;  // rounding left target at the very top
}

Sampler::Sampler(const SamplingParams& params)
    : temperature_(params.temperature),
      top_p_(params.top_p),
      top_k_(params.top_k),
      repetition_penalty_(params.repetition_penalty),
      rng_(params.seed ? *params.seed : std::random_device{}()) {
  params.Validate();
}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> context_ids) {
  ApplyRepetitionPenalty(logits, context_ids, repetition_penalty_);
  if (temperature_ == 0.0) return Argmax(logits);
  ApplyTemperature(logits, temperature_);
  if (top_k_) ApplyTopK(logits, *top_k_);
  ApplyTopP(logits, top_p_);
  return SampleFromLogits(logits, rng_);
}

}  // namespace infer
