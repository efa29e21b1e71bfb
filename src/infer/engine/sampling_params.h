// Per-request sampling settings (temperature, top-k, top-p, repetition penalty, length, stop
// strings, seed) and their validation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "infer/loader/generation_config.h"

namespace infer {

struct SamplingParams {
  // 0 means greedy (argmax); below 1 sharpens the distribution, above 1 flattens it.
  double temperature = 1.0;
  // Nucleus: keep the smallest set of tokens whose probability reaches top_p. 1 disables.
  double top_p = 1.0;
  // Keep the top_k most likely tokens; nullopt disables.
  std::optional<int64_t> top_k;
  // CTRL-style penalty on every token already in the context. 1 disables.
  double repetition_penalty = 1.0;
  int64_t max_new_tokens = 128;
  // Generation stops when the decoded text contains one of these; the text ends before it.
  std::vector<std::string> stop;
  // Same seed, same tokens. nullopt: seeded from the OS (not reproducible).
  std::optional<uint64_t> seed;

  // Throws infer::Error naming the first invalid field and its allowed range.
  void Validate() const;
};

// The checkpoint's defaults (generation_config.json): do_sample=false means greedy; unset
// fields keep SamplingParams' defaults; top_k <= 0 disables top-k.
SamplingParams SamplingParamsFromGenerationConfig(const GenerationConfig& config);

}  // namespace infer
