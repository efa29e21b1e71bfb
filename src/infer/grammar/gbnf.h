// Parser of llama.cpp's GBNF grammar syntax into the byte-level grammar IR (grammar.h).
// GBNF text with root rule `root` is the contract between the converters (JSON Schema, regex,
// choice) and the matcher. Every bad grammar is an infer::GrammarError whose one-line message
// says where (line, column) or which rule, and what: syntax errors, undefined rules, a missing
// root, left recursion (direct or indirect, also through nullable prefixes), and grammars that
// would expand beyond the size limit (bounded repetitions are expanded into helper rules).
#pragma once

#include <cstddef>
#include <string_view>

#include "infer/grammar/grammar.h"

namespace infer::grammar {

struct GbnfLimits {
  size_t max_elements = 1'000'000;    // total elements after expanding repetitions and classes
  int max_nesting = 256;              // parenthesis depth (the parser is recursive)
  uint32_t max_repetition = 100'000;  // largest m or n of {m,n}
};

// Throws GrammarError. The result's root is the rule named `root`.
Grammar ParseGbnf(std::string_view text, const GbnfLimits& limits = {});

}  // namespace infer::grammar
