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

void ApplyTokenMask(std::span<float> logits, std::span<const uint32_t> mask) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (size_t word = 0; word * 32 < logits.size(); ++word) {
    const uint32_t bits = word < mask.size() ? mask[word] : 0;
    if (bits == 0xFFFFFFFFU) continue;  // the common case away from the grammar's edges
    const size_t end = std::min(logits.size(), word * 32 + 32);
    for (size_t i = word * 32; i < end; ++i) {
      if (((bits >> (i - word * 32)) & 1U) == 0) logits[i] = minus_inf;
    }
  }
}

void ApplyLogitBias(std::span<float> logits, const std::map<int32_t, double>& bias) {
  for (const auto& [id, value] : bias) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    logits[static_cast<size_t>(id)] += static_cast<float>(value);
  }
}

void ApplyPresenceFrequencyPenalty(std::span<float> logits, std::span<const int32_t> generated_ids,
                                   double presence, double frequency) {
  if ((presence == 0.0 && frequency == 0.0) || generated_ids.empty()) return;
  std::vector<int32_t> ids(generated_ids.begin(), generated_ids.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    const int32_t id = ids[i];
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) {
      logits[static_cast<size_t>(id)] -=
          static_cast<float>(presence + static_cast<double>(j - i) * frequency);
    }
    i = j;
  }
}

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int64_t k) {
  INFER_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(),
              "ComputeLogprobs: token {} outside the {} logits", token, logits.size());
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (const float logit : logits) total += std::exp(static_cast<double>(logit - max_logit));
  const double log_total = static_cast<double>(max_logit) + std::log(total);
  const auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_total);
  };
  TokenLogprobs result;
  result.token_id = token;
  result.logprob = logprob(token);
  const auto count = static_cast<size_t>(std::clamp<int64_t>(k, 0, std::ssize(logits)));
  if (count > 0) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(
        order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count), order.end(),
        [&](int32_t a, int32_t b) {
          return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
                 (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
        });
    for (size_t i = 0; i < count; ++i) result.top.emplace_back(order[i], logprob(order[i]));
  }
  return result;
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
      presence_penalty_(params.presence_penalty),
      frequency_penalty_(params.frequency_penalty),
      logit_bias_(params.logit_bias),
      logprobs_(params.logprobs),
      rng_(params.seed ? *params.seed : std::random_device{}()) {
  params.Validate();
}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> context_ids,
                        int64_t num_prompt_tokens, std::span<const int32_t> suppressed_ids,
                        TokenLogprobs* logprobs) {
  const bool want_logprobs = logprobs != nullptr && logprobs_.has_value();
  if (want_logprobs) raw_.assign(logits.begin(), logits.end());
  for (const int32_t id : suppressed_ids) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size())
      logits[static_cast<size_t>(id)] = kMasked;
  }
  ApplyLogitBias(logits, logit_bias_);
  ApplyRepetitionPenalty(logits, context_ids, repetition_penalty_);
  const auto prompt = static_cast<size_t>(
      std::clamp<int64_t>(num_prompt_tokens, 0, static_cast<int64_t>(context_ids.size())));
  ApplyPresenceFrequencyPenalty(logits, context_ids.subspan(prompt), presence_penalty_,
                                frequency_penalty_);
  int32_t token = 0;
  if (temperature_ == 0.0) {
    token = Argmax(logits);
  } else {
    ApplyTemperature(logits, temperature_);
    if (top_k_) ApplyTopK(logits, *top_k_);
    ApplyTopP(logits, top_p_);
    token = SampleFromLogits(logits, rng_);
  }
  if (want_logprobs) *logprobs = ComputeLogprobs(raw_, token, *logprobs_);
  return token;
}

}  // namespace infer
