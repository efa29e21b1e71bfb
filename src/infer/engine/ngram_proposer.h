// Speculative decoding by n-gram lookup (vLLM's speculative_config method "ngram", also known as
// prompt lookup decoding): the tokens that followed an earlier occurrence of the sequence's last
// n tokens are proposed as its next ones, and one forward over the sampled token plus the draft
// checks them all. Pure: no model, so it is tested on token lists alone.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace infer {

// vLLM's names. num_speculative_tokens 0: speculation off.
struct SpeculativeConfig {
  int64_t num_speculative_tokens = 0;  // the longest draft
  int64_t prompt_lookup_min = 0;       // the shortest suffix n-gram that may match
  int64_t prompt_lookup_max = 0;       // the longest one tried (longer matches are tried first)

  bool enabled() const { return num_speculative_tokens > 0; }
  // Throws infer::Error naming the first bad field, after `name` (the setting's name where it
  // was given: the engine's field, or a command-line flag).
  void Validate(std::string_view name = "speculative_config") const;
};

// vLLM's --speculative-config JSON, e.g. {"method": "ngram", "num_speculative_tokens": 4,
// "prompt_lookup_max": 4}. As vLLM does, a missing prompt_lookup_min or prompt_lookup_max takes
// the other's value, and both default to 5. Only the "ngram" method exists here (no draft
// models). Throws infer::Error for bad JSON, another method, an unknown key or a bad value,
// its message starting with `name`.
SpeculativeConfig ParseSpeculativeConfig(std::string_view json,
                                         std::string_view name = "speculative_config");

// The draft for `tokens` (prompt and accepted output): for n from prompt_lookup_max down to
// prompt_lookup_min, the last n tokens are looked up earlier in `tokens`; at the longest n that
// matches, the draft is what followed the latest occurrence with a whole draft after it (else
// the earliest, which has the longest continuation). At most min(num_speculative_tokens,
// max_tokens) ids; empty when nothing matches.
std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> tokens,
                                       const SpeculativeConfig& config, int64_t max_tokens);

}  // namespace infer
