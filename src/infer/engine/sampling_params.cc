#include "infer/engine/sampling_params.h"

#include <cmath>

#include "infer/core/error.h"

namespace infer {

void SamplingParams::Validate() const {
  INFER_CHECK(std::isfinite(temperature) && temperature >= 0.0,
              "temperature must be >= 0 (0 = greedy), got {}", temperature);
  INFER_CHECK(top_p > 0.0 && top_p <= 1.0, "top_p must be in (0, 1], got {}", top_p);
  INFER_CHECK(!top_k.has_value() || *top_k >= 1, "top_k must be >= 1 (or unset), got {}",
              top_k.value_or(0));
  INFER_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0.0,
              "repetition_penalty must be > 0 (1 = off), got {}", repetition_penalty);
  INFER_CHECK(max_new_tokens >= 1, "max_new_tokens must be >= 1, got {}", max_new_tokens);
  for (const std::string& text : stop) {
    INFER_CHECK(!text.empty(), "stop strings must be non-empty");
  }
  INFER_CHECK(std::isfinite(presence_penalty) && std::abs(presence_penalty) <= 2.0,
              "presence_penalty must be in [-2, 2], got {}", presence_penalty);
  INFER_CHECK(std::isfinite(frequency_penalty) && std::abs(frequency_penalty) <= 2.0,
              "frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  for (const auto& [id, bias] : logit_bias) {
    INFER_CHECK(id >= 0, "logit_bias: token id {} is negative", id);
    INFER_CHECK(std::isfinite(bias) && std::abs(bias) <= 100.0,
                "logit_bias of token {} must be in [-100, 100], got {}", id, bias);
  }
  INFER_CHECK(min_tokens >= 0 && min_tokens <= max_new_tokens,
              "min_tokens must be in [0, max_tokens={}], got {}", max_new_tokens, min_tokens);
  INFER_CHECK(!logprobs.has_value() || (*logprobs >= 0 && *logprobs <= kMaxLogprobs),
              "logprobs must be in [0, {}], got {}", kMaxLogprobs, logprobs.value_or(0));
  INFER_CHECK(!thinking_token_budget.has_value() || *thinking_token_budget >= 0,
              "thinking_token_budget must be >= 0 (or unset), got {}",
              thinking_token_budget.value_or(0));
}

SamplingParams SamplingParamsFromGenerationConfig(const GenerationConfig& config) {
  SamplingParams params;
  if (config.temperature) params.temperature = *config.temperature;
  if (config.top_p) params.top_p = *config.top_p;
  if (config.top_k && *config.top_k > 0) params.top_k = *config.top_k;
  if (config.repetition_penalty) params.repetition_penalty = *config.repetition_penalty;
  if (config.do_sample.has_value() && !*config.do_sample) params.temperature = 0.0;
  return params;
}

}  // namespace infer
