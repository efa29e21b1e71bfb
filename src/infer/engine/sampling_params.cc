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
