// TokenBytes against Tokenizer::Decode of single ids, on the three real vocabularies: equal
// where the bytes are valid UTF-8; where they are not (a piece of a multi-byte character),
// Decode shows U+FFFD and the bytes must complete to valid UTF-8 with their neighbours, so we
// check the byte-level and byte-fallback tokens by their token strings.
#include <string>

#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "infer/tokenizer/utf8.h"
#include "infer/tokenizer/vocabulary_bytes.h"

namespace infer {
namespace {

void CheckVocabulary(const std::string& model, int expected_fallback_bytes) {
  const auto path = grammar::testing::TokenizerPath(model);
  if (!std::filesystem::is_regular_file(path)) GTEST_SKIP() << path << " missing";
  auto tokenizer = Tokenizer::FromFile(path);
  const auto bytes = TokenBytes(*tokenizer);
  ASSERT_EQ(bytes.size(), static_cast<size_t>(tokenizer->VocabSize()));
  int invalid = 0, special = 0;
  for (int32_t id = 0; id < tokenizer->VocabSize(); ++id) {
    if (tokenizer->IsSpecial(id)) {
      EXPECT_TRUE(bytes[id].empty()) << id;
      ++special;
      continue;
    }
    if (!tokenizer->IdToToken(id)) continue;
    const int32_t one[1] = {id};
    const std::string decoded = tokenizer->Decode(one, false);
    if (IsValidUtf8(bytes[id])) {
      ASSERT_EQ(bytes[id], decoded) << model << " id " << id;
    } else {
      ++invalid;
      ASSERT_NE(decoded.find("\xEF\xBF\xBD"), std::string::npos) << model << " id " << id;
    }
    ASSERT_FALSE(bytes[id].empty()) << model << " id " << id;
  }
  EXPECT_GT(special, 0);
  EXPECT_GE(invalid, expected_fallback_bytes);
  // Concatenating the byte tokens of a multi-byte character gives the character.
  const auto e2 = tokenizer->TokenToId(model == "gemma3" ? "<0xE2>" : "\xC3\xA2");
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(bytes[*e2], "\xE2");
}

TEST(VocabularyBytesTest, Llama3) { CheckVocabulary("llama3", 100); }
TEST(VocabularyBytesTest, Qwen3) { CheckVocabulary("qwen3", 100); }
TEST(VocabularyBytesTest, Gemma3) { CheckVocabulary("gemma3", 128); }

}  // namespace
}  // namespace infer
