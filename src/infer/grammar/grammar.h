// The grammar IR that every constrained-decoding front end (GBNF, JSON Schema, regex, choice)
// compiles to, and the matcher runs: rules of alternatives of sequences of elements, where an
// element is a set of BYTES or a reference to a rule. Unicode character classes are already
// compiled to byte-level alternatives (UTF-8 range splitting), so everything downstream is a
// byte machine and a multi-byte character split across tokens needs no special case.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace infer::grammar {

// A set of byte values, 256 bits.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  int Count() const;
  bool operator==(const ByteSet&) const = default;
};

struct Element {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  int32_t index = 0;  // into Grammar::byte_sets or Grammar::rules
  bool operator==(const Element&) const = default;
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;  // helper rules (repetitions, classes) get names like "value_rep_3"
  std::vector<Sequence> alternatives;
};

struct Grammar {
  std::vector<Rule> rules;
  std::vector<ByteSet> byte_sets;  // deduplicated
  int32_t root = -1;

  size_t NumElements() const;
  // A GBNF-like listing, one rule a line, byte sets as [\xHH-\xHH...]; for debugging and tests.
  std::string ToString() const;
};

// Checks a grammar built by any front end: every referenced rule exists, no left recursion
// (a rule reaching itself through a nullable prefix, other than by a tail call). Throws
// GrammarError naming the rule. ParseGbnf calls it.
void ValidateGrammar(const Grammar& grammar);

}  // namespace infer::grammar
