// The regex subset of regex_to_gbnf.h parsed into a small tree: sets of code points, sequences,
// alternatives, counted repetitions. Private to the grammar library (regex_parser.cc builds the
// tree, regex_to_gbnf.cc writes GBNF from it).
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "infer/grammar/gbnf_emit.h"

namespace infer::grammar {

inline constexpr size_t kUnbounded = static_cast<size_t>(-1);

struct Node {
  enum class Kind { kSet, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  CodeSet set;                              // kSet
  std::vector<std::unique_ptr<Node>> kids;  // kSeq, kAlt; kRepeat: one
  size_t min = 0;                           // kRepeat
  size_t max = 0;                           // kRepeat; kUnbounded for * and +
};

using NodePtr = std::unique_ptr<Node>;

// One top-level alternative with its anchors.
struct RegexBranch {
  NodePtr node;
  bool caret = false;
  bool dollar = false;
};

// The pattern's top-level alternatives. Throws GrammarError with the byte offset of what it
// refuses.
std::vector<RegexBranch> ParseRegex(std::string_view pattern);

}  // namespace infer::grammar
