// RegexToGbnf against std::regex (ECMAScript), the reference: for each pattern, every string up
// to a length over a small alphabet is matched both ways (the grammar with the independent test
// recognizer of gbnf_recognizer.h), and the two languages must agree exactly. Patterns in the
// JSON-string mode (a schema's `pattern`) are checked against std::regex_search through the JSON
// encoding of each string. Refused constructs give a GrammarError with the offset.
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infer/grammar/grammar_error.h"
#include "infer/grammar/json_schema.h"
#include "infer/grammar/regex_to_gbnf.h"
#include "unit/grammar/gbnf_recognizer.h"

namespace infer {
namespace {

using testing_gbnf::Grammar;

// All strings over `alphabet` of length <= max_len.
std::vector<std::string> AllStrings(const std::vector<std::string>& alphabet, size_t max_len) {
  std::vector<std::string> out = {""};
  std::vector<std::string> layer = {""};
  for (size_t len = 1; len <= max_len; ++len) {
    std::vector<std::string> next;
    for (const std::string& prefix : layer) {
      for (const std::string& c : alphabet) next.push_back(prefix + c);
    }
    out.insert(out.end(), next.begin(), next.end());
    layer = std::move(next);
  }
  return out;
}

const std::vector<std::string> kPatterns = {
    "",
    "a",
    "ab",
    "a|b",
    "a*",
    "a+b",
    "a?b?",
    "(a|b)*",
    "(?:ab|ba)+",
    "[ab]{2,3}",
    "a{0}",
    "a{2}",
    "a{1,}",
    "[^a]",
    "[^ab]*",
    "a.b",
    ".*",
    "\\d+",
    "\\D",
    "\\w\\W",
    "\\s",
    "\\S+",
    "[a-c]+",
    "[\\d-]",
    "[-a]",
    "a|",
    "(a|)(b|)",
    "^ab$",
    "^a|b$",
    "(a(b(a)?)?)+",
    "a*?b",
    "(ab)+?",
    "[.]",
    "\\.",
    "a\\-b",
    "\\x61",
    "\\u0062",
    "[\\s\\S]",
    "(a|ab)(c|bcd)?",
    "a{1,2}b{0,1}",
    "\\n|a",
    "[^\\n]",
};

TEST(RegexToGbnf, LanguageEqualsStdRegexOnShortStrings) {
  const std::vector<std::string> alphabet = {"a", "b", "0", "-", "\n", " ", "{", "}", ",", "2"};
  const std::vector<std::string> strings = AllStrings(alphabet, 4);
  for (const std::string& pattern : kPatterns) {
    SCOPED_TRACE("pattern: " + pattern);
    const std::string gbnf = RegexToGbnf(pattern);
    const Grammar grammar(gbnf);
    const std::regex reference(pattern, std::regex::ECMAScript);
    size_t accepted = 0;
    for (const std::string& s : strings) {
      const bool expected = std::regex_match(s, reference);
      ASSERT_EQ(grammar.Accepts(s), expected) << "string '" << s << "'\n" << gbnf;
      accepted += expected;
    }
    (void)accepted;
  }
}

TEST(RegexToGbnf, JsonSchemaPatternsHaveSearchSemanticsOverTheJsonEncoding) {
  const std::vector<std::string> patterns = {"a",    "^a",      "a$",   "^a$",    "^(a|\")+$",
                                             "\\\\", "^[^a]*$", "b.\"", "^\\s*$", "^a|b$"};
  const std::vector<std::string> alphabet = {"a", "b", "\"", "\\", "\n"};
  const std::vector<std::string> strings = AllStrings(alphabet, 4);
  for (const std::string& pattern : patterns) {
    SCOPED_TRACE("pattern: " + pattern);
    const nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", pattern}};
    const std::string gbnf = JsonSchemaToGbnf(schema);
    const Grammar grammar(gbnf);
    const std::regex reference(pattern, std::regex::ECMAScript);
    for (const std::string& s : strings) {
      const bool expected = std::regex_search(s, reference);
      const std::string json = nlohmann::json(s).dump();
      ASSERT_EQ(grammar.Accepts(json), expected) << "string " << json << "\n" << gbnf;
    }
  }
}

TEST(RegexToGbnf, RefusesWhatItDoesNotSupportWithTheOffset) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a)\\1", "offset 3: backreferences"},
      {"a(?=b)", "offset 1: lookaround"},
      {"a(?<!b)", "offset 1: lookaround"},
      {"\\bword", "offset 0: word boundaries"},
      {"(?i)abc", "offset 0: this group syntax"},
      {"a++", "offset 2: possessive"},
      {"a**", "offset 2: a quantifier cannot follow"},
      {"*a", "offset 0: nothing to repeat"},
      {"(ab", "offset 0: unclosed '('"},
      {"ab)", "offset 2: unbalanced ')'"},
      {"[ab", "offset 0: unclosed '['"},
      {"a^b", "offset 1: '^'"},
      {"a$b", "offset 1: '$'"},
      {"\\p{L}", "offset 0: Unicode property"},
      {"[z-a]", "offset 1: a range out of order"},
      {"a{3,2}", "offset 1: repetition {m,n} with m > n"},
      {"[]a]", "offset 1:"},
      {"\\q", "offset 0: unknown escape"},
      // json_schema_fuzz: thousands of '(' overflowed the recursive parser's stack.
      {std::string(5000, '(') + "a" + std::string(5000, ')'), "offset 256: groups nested deeper"},
  };
  for (const auto& [pattern, expected] : cases) {
    try {
      RegexToGbnf(pattern);
      ADD_FAILURE() << "accepted: " << pattern;
    } catch (const GrammarError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << pattern << ": " << e.what();
    }
  }
}

TEST(RegexToGbnf, ExponentialPatternsCompileAndHugeExpansionsAreRefused) {
  // Catastrophic for a backtracking matcher, nothing special for a grammar.
  const Grammar grammar(RegexToGbnf("(a+)+b"));
  EXPECT_FALSE(grammar.Accepts(std::string(30, 'a')));
  EXPECT_TRUE(grammar.Accepts(std::string(30, 'a') + "b"));
  EXPECT_THROW(RegexToGbnf("((a{1000}){1000}){1000}"), GrammarError);
  EXPECT_THROW(RegexToGbnf("a{1000000}"), GrammarError);
  EXPECT_NO_THROW(RegexToGbnf("[0-9]{3}-[0-9]{4}"));
  const Grammar nested(RegexToGbnf(std::string(256, '(') + "ab" + std::string(256, ')') + "+"));
  EXPECT_TRUE(nested.Accepts("abab"));
  EXPECT_FALSE(nested.Accepts("aba"));
}

TEST(RegexToGbnf, NonAsciiAndEscapedCharactersRoundTrip) {
  const Grammar grammar(RegexToGbnf("caf\u00e9 \\u4e2d[\"\\\\]\\t"));
  EXPECT_TRUE(grammar.Accepts("caf\u00e9 \u4e2d\"\t"));
  EXPECT_TRUE(grammar.Accepts("caf\u00e9 \u4e2d\\\t"));
  EXPECT_FALSE(grammar.Accepts("cafe \u4e2d\"\t"));
  const Grammar dot(RegexToGbnf("."));
  EXPECT_TRUE(dot.Accepts("\U0001F600"));
  EXPECT_FALSE(dot.Accepts("\u2028"));
}

}  // namespace
}  // namespace infer
