// Per-request sampling settings (temperature, top-k, top-p, repetition / presence / frequency
// penalties, logit bias, length, stop strings, seed, logprobs, structured output, thinking
// budget) and their validation.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "infer/grammar/structured_output.h"
#include "infer/loader/generation_config.h"

namespace infer {

// The most alternatives a token's logprobs can list (OpenAI's top_logprobs limit).
inline constexpr int64_t kMaxLogprobs = 20;

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
  // OpenAI's penalties, on the generated tokens only (as vLLM): each token already generated
  // loses presence_penalty once and frequency_penalty per occurrence. In [-2, 2]; 0 disables.
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  // Added to a token's logit before the penalties (OpenAI's logit_bias), each in [-100, 100].
  std::map<int32_t, double> logit_bias;
  // The EOS ids cannot be sampled before this many tokens are generated (vLLM's min_tokens).
  int64_t min_tokens = 0;
  // EOS ids do not end generation (vLLM's ignore_eos): only max tokens and stop strings do.
  bool ignore_eos = false;
  // Report the sampled token's log-probability and this many most likely alternatives (0-20),
  // from the model's raw distribution (before penalties and temperature, as vLLM reports).
  // nullopt: no logprobs.
  std::optional<int64_t> logprobs;
  // The output must match this (JSON schema, JSON object, regex, choice or GBNF grammar): each
  // draw is masked to the tokens the grammar allows, and the end of generation is allowed
  // exactly where the grammar is complete. Compiled by the engine's front door.
  std::optional<StructuredOutput> structured_output;
  // At most this many tokens inside the model's reasoning blocks (<think> ... </think>), then
  // the block's end is forced (vLLM's thinking_token_budget; engine/thinking_budget.h). nullopt:
  // unbounded. Without reasoning tags in the vocabulary there is nothing to bound.
  std::optional<int64_t> thinking_token_budget;

  // Throws infer::Error naming the first invalid field and its allowed range.
  void Validate() const;
};

// The checkpoint's defaults (generation_config.json): do_sample=false means greedy; unset
// fields keep SamplingParams' defaults; top_k <= 0 disables top-k.
SamplingParams SamplingParamsFromGenerationConfig(const GenerationConfig& config);

}  // namespace infer
