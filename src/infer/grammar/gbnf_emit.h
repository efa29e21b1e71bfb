// Helpers shared by the converters that write GBNF text (json_schema*.cc, decimal_range.cc,
// regex_to_gbnf.cc, choice.cc): sets of code points and their GBNF character classes, escaped
// literals, and a rule table that names rules, shares identical bodies and caps the size of the
// grammar it emits. GBNF text is the contract with the grammar parser (llama.cpp's syntax, root
// rule `root`), so nothing here knows about matching.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infer::grammar {

// A closed range of Unicode code points.
struct CodeRange {
  char32_t lo;
  char32_t hi;
};

// A set of code points: sorted, disjoint, non-adjacent ranges (Normalize makes it so).
using CodeSet = std::vector<CodeRange>;

constexpr char32_t kMaxCodePoint = 0x10FFFF;

CodeSet Normalize(CodeSet set);
// Everything in [0, kMaxCodePoint] not in `set`.
CodeSet Complement(const CodeSet& set);
CodeSet Union(const CodeSet& a, const CodeSet& b);
CodeSet Subtract(const CodeSet& a, const CodeSet& b);
bool Contains(const CodeSet& set, char32_t cp);
// The number of code points in the set.
size_t CountOf(const CodeSet& set);

// UTF-8 encoding of one code point.
std::string Utf8(char32_t cp);

// A GBNF string literal matching exactly `text` (UTF-8), with `"`, `\` and control characters
// escaped.
std::string GbnfLiteral(std::string_view text);

// A GBNF character class matching exactly the code points of `set` (which must not be empty).
// Surrogates (U+D800..U+DFFF) never occur in UTF-8 text and are dropped; a set that reaches
// U+10FFFF is written negated ([^...]), so classes stay short and need no \U escapes.
std::string GbnfClass(const CodeSet& set);

// GBNF text by appending, not by operator+ chains (GCC 12's -Wrestrict misfires on those).
// Seq joins the non-empty parts with spaces; Group wraps in parentheses with a suffix.
std::string Seq(std::initializer_list<std::string_view> parts);
std::string Group(std::string_view inner, std::string_view suffix);
// The digits lo to hi as a literal or a character class.
std::string DigitClass(char lo, char hi);
// atom repeated min to max times (max: none for unbounded), in GBNF's shortest form.
std::string Repeat(const std::string& atom, size_t min, std::optional<size_t> max);
// The parts as alternatives, parenthesized when there are several.
std::string Alternatives(const std::vector<std::string>& parts);

// The rules of a grammar being written. Names are made unique from a hint; Add shares one rule
// between identical bodies (the JSON converters ask for the same sub-rules often). Every byte
// added counts toward `max_bytes`; past it Add throws GrammarError, so a hostile schema cannot
// make the grammar (or the time to write it) grow without bound.
class GbnfRules {
 public:
  explicit GbnfRules(size_t max_bytes) : max_bytes_(max_bytes) {}

  // A rule named after `hint` with this body; an existing rule when the body was added before.
  std::string Add(std::string_view hint, const std::string& body);
  // Reserves a unique name for a rule defined later with Define (for recursive rules).
  std::string Reserve(std::string_view hint);
  void Define(const std::string& name, const std::string& body);
  // Charges `bytes` toward the size limit without adding a rule (for text kept inline).
  void Charge(size_t bytes);

  // The grammar text: `root ::= root_body` first, then every rule in the order added.
  // `start` names the first rule ("root" unless the grammar is embedded in a larger one).
  std::string Render(const std::string& root_body, std::string_view start = "root") const;

 private:
  std::string UniqueName(std::string_view hint);

  size_t max_bytes_;
  size_t bytes_ = 0;
  std::vector<std::pair<std::string, std::string>> rules_;  // name, body; empty body: reserved
  std::map<std::string, size_t> index_;                     // name -> position in rules_
  std::map<std::string, std::string> by_body_;              // body -> name
  std::map<std::string, int> next_suffix_;                  // base name -> next suffix to try
};

}  // namespace infer::grammar
