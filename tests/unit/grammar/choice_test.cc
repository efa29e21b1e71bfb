// ChoiceToGbnf: exactly the listed strings, whatever characters they hold.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infer/grammar/choice.h"
#include "infer/grammar/grammar_error.h"
#include "unit/grammar/gbnf_recognizer.h"

namespace infer {
namespace {

TEST(ChoiceToGbnf, AcceptsExactlyTheChoices) {
  const std::vector<std::string> choices = {"yes",
                                            "no",
                                            "",
                                            "a \"quoted\" \\ word",
                                            "line\nbreak",
                                            "tab\there",
                                            "\u00e9t\u00e9 \U0001F600",
                                            "#not-a-comment",
                                            "[x]",
                                            "no"};
  const testing_gbnf::Grammar grammar(ChoiceToGbnf(choices));
  for (const std::string& choice : choices) EXPECT_TRUE(grammar.Accepts(choice)) << choice;
  for (const char* other : {"ye", "yess", "No", "a \"quoted\" word", "line", "x"}) {
    EXPECT_FALSE(grammar.Accepts(other)) << other;
  }
}

TEST(ChoiceToGbnf, RefusesEmptyListsInvalidUtf8AndHugeLists) {
  EXPECT_THROW(ChoiceToGbnf({}), GrammarError);
  EXPECT_THROW(ChoiceToGbnf({"ok", std::string("\xff", 1)}), GrammarError);
  EXPECT_THROW(ChoiceToGbnf(std::vector<std::string>(kMaxChoices + 1, "a")), GrammarError);
}

}  // namespace
}  // namespace infer
