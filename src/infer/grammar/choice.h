// A list of choices (vLLM's guided_choice / structured_outputs.choice, `infer generate --choice`)
// compiled to GBNF: the output is exactly one of the strings, byte for byte.
#pragma once

#include <string>
#include <vector>

namespace infer {

// Throws GrammarError for an empty list, a choice that is not valid UTF-8, or a list past the
// size limits (kMaxChoices entries, kMaxChoiceBytes in all).
std::string ChoiceToGbnf(const std::vector<std::string>& choices);

inline constexpr size_t kMaxChoices = 10000;
inline constexpr size_t kMaxChoiceBytes = size_t{1} << 20;

}  // namespace infer
