// Regular expressions as clients send them (vLLM's guided_regex / structured_outputs.regex, the
// `pattern` of a JSON schema) compiled to GBNF. The subset is what ECMAScript and Python agree
// on: literals; escapes \d \w \s \D \W \S, \n \t \r \f \v \0 \xHH \uHHHH and escaped
// punctuation; classes with ranges and negation; `.`; groups (capturing, named, `(?:`);
// alternation; quantifiers `* + ? {m} {m,} {m,n}`, with the lazy `?` suffix accepted (a lazy
// quantifier matches the same language). `^` and `$` are accepted only at the ends of the
// pattern or of its top-level alternatives. Everything else (backreferences, lookarounds, \b,
// inline flags, possessive quantifiers, \p{...}) is refused with a GrammarError that gives the
// byte offset in the pattern.
//
// Where the two dialects differ the grammar takes the intersection, so what it accepts matches
// under both: `.` excludes \n and \r (and U+2028/U+2029); \s is the whitespace both call space.
// \d and \w are ASCII ([0-9], [A-Za-z0-9_]) as in ECMAScript without the u flag; Python's
// Unicode \d also accepts other scripts' digits, which the grammar never produces.
//
// The output is a grammar, not a backtracking matcher, so a regex with "exponential" backtracking
// costs nothing at match time; what is bounded is the size of the grammar once its counted
// repetitions are expanded (RegexOptions::max_expansion).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "infer/grammar/gbnf_emit.h"

namespace infer {

// The whole output must match the pattern (as vLLM's guided_regex: a full match); a leading `^`
// and a trailing `$` are accepted and change nothing. Throws GrammarError.
std::string RegexToGbnf(std::string_view pattern);

namespace grammar {

struct RegexOptions {
  // Search semantics (a JSON schema `pattern`: the pattern may match anywhere in the string): a
  // top-level alternative without `^` may be preceded by any text, one without `$` followed by
  // any. Otherwise full-match semantics.
  bool search = false;
  // The grammar describes the pattern's string as the inside of a JSON string literal: `"`, `\`
  // and control characters are written as JSON escapes.
  bool json_string = false;
  // Cap on the number of character positions once every counted repetition is expanded.
  size_t max_expansion = 100000;
};

struct CompiledRegex {
  std::string expression;            // a GBNF expression (no rules of its own)
  size_t min_length = 0;             // in code points of the matched (decoded) string
  std::optional<size_t> max_length;  // none: unbounded
};

// Throws GrammarError with the byte offset of what it refuses. `rules` is charged for the size.
CompiledRegex CompileRegex(std::string_view pattern, const RegexOptions& options, GbnfRules& rules);

// The inside of a JSON string for one code point of `set`: a GBNF expression that writes `"`, `\`
// and control characters as JSON escapes and every other code point raw.
std::string JsonStringChar(const CodeSet& set);

}  // namespace grammar
}  // namespace infer
