// GBNF parser: the syntax llama.cpp users write, the errors (where and what), hostile input.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "infer/grammar/gbnf.h"
#include "infer/grammar/grammar_error.h"

namespace infer::grammar {
namespace {

using testing::Flat;
using testing::Matches;

std::string ErrorOf(std::string_view gbnf) {
  try {
    ParseGbnf(gbnf);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(GbnfTest, ParsesTheJsonGrammar) {
  const Grammar g = ParseGbnf(testing::kJsonGbnf);
  EXPECT_EQ(g.rules[g.root].name, "root");
  EXPECT_NE(g.ToString().find("root ::="), std::string::npos);
  EXPECT_GT(g.NumElements(), 20u);
}

TEST(GbnfTest, LiteralEscapes) {
  auto g = Flat(R"(root ::= "a\n\r\t\\\"\x41\u00e9\U0001F600")");
  EXPECT_TRUE(Matches(g, "a\n\r\t\\\"A\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(Matches(g, "a\n\r\t\\\"A"));
}

TEST(GbnfTest, CharacterClasses) {
  auto g = Flat("root ::= [a-z0-9_]+");
  EXPECT_TRUE(Matches(g, "abc_09"));
  EXPECT_FALSE(Matches(g, "abC"));
  auto neg = Flat(R"(root ::= "\"" [^"\\]* "\"")");
  EXPECT_TRUE(Matches(neg, "\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\""));
  EXPECT_FALSE(Matches(neg, "\"a\\b\""));
  EXPECT_FALSE(Matches(neg, "\"a\"b\""));
  // Invalid UTF-8 is not a character: a lone continuation byte, an overlong, a surrogate.
  EXPECT_FALSE(Matches(neg, "\"\x80\""));
  EXPECT_FALSE(Matches(neg, "\"\xC0\xAF\""));
  EXPECT_FALSE(Matches(neg, "\"\xED\xA0\x80\""));
  auto escaped = Flat(R"(root ::= [\]\-\\\x41-\x43\u00e0-\u00e2]+)");
  EXPECT_TRUE(Matches(escaped, "]-\\ABC\xC3\xA0\xC3\xA2"));
  EXPECT_FALSE(Matches(escaped, "D"));
  auto unicode = Flat(R"(root ::= [α-ω]{2})");
  EXPECT_TRUE(Matches(unicode, "αω"));
  EXPECT_FALSE(Matches(unicode, "αA"));
}

TEST(GbnfTest, AnyCharIsOneUtf8Character) {
  auto g = Flat(R"(root ::= . . "!")");
  EXPECT_TRUE(Matches(g, "a\n!"));
  EXPECT_TRUE(Matches(g, "\xF0\x9F\x98\x80\xE2\x82\xAC!"));
  EXPECT_FALSE(Matches(g, "abc!"));
  EXPECT_FALSE(Matches(g, "\xE2\x82!!"));
}

TEST(GbnfTest, Repetitions) {
  auto g = Flat(R"(root ::= "a"{3} "b"{2,} "c"{1,2} "d"{,1} ("e" "f"){0,2} "g"? "h"+ "i"*)");
  EXPECT_TRUE(Matches(g, "aaabbch"));
  EXPECT_TRUE(Matches(g, "aaabbbbccdefefghhiii"));
  EXPECT_FALSE(Matches(g, "aabbch"));
  EXPECT_FALSE(Matches(g, "aaabch"));
  EXPECT_FALSE(Matches(g, "aaabbccch"));
  EXPECT_FALSE(Matches(g, "aaabbcdefefefh"));
  EXPECT_FALSE(Matches(g, "aaabbc"));
}

TEST(GbnfTest, CommentsDashesNewlinesInGroups) {
  auto g = Flat(R"(# a comment
root ::= my-rule   # trailing comment
  | other_rule
my-rule ::= (
    "x"   # inside a group
  | "y"
)
other_rule ::= "z"
)");
  EXPECT_TRUE(Matches(g, "x"));
  EXPECT_TRUE(Matches(g, "y"));
  EXPECT_TRUE(Matches(g, "z"));
  EXPECT_FALSE(Matches(g, "xy"));
}

TEST(GbnfTest, EmptyAlternativesAndNullableRules) {
  auto g = Flat(R"(root ::= a a "!"
a ::= "" | "a" | ()
)");
  EXPECT_TRUE(Matches(g, "!"));
  EXPECT_TRUE(Matches(g, "aa!"));
  EXPECT_FALSE(Matches(g, "aaa!"));
}

TEST(GbnfTest, ErrorsSayWhereAndWhat) {
  EXPECT_NE(ErrorOf("root ::= foo").find("undefined rule 'foo'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"\nx ::= y\n").find("line 2, column 7"), std::string::npos);
  EXPECT_NE(ErrorOf("start ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [abc").find("unterminated character class"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= (\"a\"").find("unclosed '('"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"{3,2}").find("max below min"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\" @").find("line 1, column 14: unexpected '@'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root \"a\"").find("expected '::='"), std::string::npos);
}

TEST(GbnfTest, LeftRecursionIsRefused) {
  EXPECT_NE(ErrorOf("root ::= root \"a\" | \"b\"").find("rule 'root' is left-recursive"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf("root ::= a \"x\"\na ::= b \"y\" | \"z\"\nb ::= root \"w\"").find("left-recursive"),
      std::string::npos);
  // Through a nullable prefix.
  EXPECT_NE(ErrorOf("root ::= e root \"x\" | \"y\"\ne ::= \"a\"?").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= (\"\" | \"a\") expr\nexpr ::= ws expr \"+\" | \"1\"\nws ::= \" \"*")
                .find("rule 'expr' is left-recursive"),
            std::string::npos);
  // Right recursion is fine, and so is a star over something nullable (a tail call).
  EXPECT_EQ(ErrorOf("root ::= \"a\" root | \"b\""), "");
  EXPECT_EQ(ErrorOf("root ::= (\"a\"?)* \"b\""), "");
}

TEST(GbnfTest, HostileInputIsBoundedAndFast) {
  const auto start = std::chrono::steady_clock::now();
  const std::string deep =
      "root ::= " + std::string(100'000, '(') + "\"a\"" + std::string(100'000, ')');
  EXPECT_NE(ErrorOf(deep).find("nested deeper"), std::string::npos);
  // Nested bounded repetitions stay small: each level references the one below.
  const Grammar nested = ParseGbnf("root ::= \"x\"{1000}{1000}");
  EXPECT_LT(nested.NumElements(), 10'000u);
  auto g = Flat("root ::= \"x\"{3}{2}");
  EXPECT_TRUE(Matches(g, "xxxxxx"));
  EXPECT_FALSE(Matches(g, "xxxxx"));
  // Whatever would really expand beyond the budget is refused.
  std::string wide = "root ::=";
  for (int i = 0; i < 12; ++i) wide += " [a-z]{90000}";
  EXPECT_NE(ErrorOf(wide).find("expands beyond"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"x\"{999999999}").find("above the limit"), std::string::npos);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace infer::grammar
