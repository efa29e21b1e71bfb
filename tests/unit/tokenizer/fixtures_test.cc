// Golden-file tests: every string of tests/fixtures/tokenizer/<model>.jsonl must encode to
// Hugging Face's ids (with and without special tokens) and decode to HF's text.
#include <gtest/gtest.h>

#include "infer/tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace infer {
namespace {

class TokenizerFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerFixtureTest, EncodeAndDecodeMatchHuggingFace) {
  const std::string model = GetParam();
  if (!testing::RequireRealTokenizer(model)) return;
  auto tokenizer = Tokenizer::FromModelDir(testing::RealTokenizerDir(model));
  const auto cases = testing::ReadJsonLines(testing::TokenizerFixture(model + ".jsonl"));
  ASSERT_GT(cases.size(), 200u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const std::string id = c["id"];
    const auto ids = tokenizer->Encode(text, false);
    const auto ids_special = tokenizer->Encode(text, true);
    const bool ok = ids == c["ids"].get<std::vector<int32_t>>() &&
                    ids_special == c["ids_with_special"].get<std::vector<int32_t>>() &&
                    tokenizer->Decode(c["ids"].get<std::vector<int32_t>>(), false) ==
                        c["decoded"].get<std::string>() &&
                    tokenizer->Decode(c["ids_with_special"].get<std::vector<int32_t>>(), true) ==
                        c["decoded_skip_special"].get<std::string>();
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << id << " " << c["cat"] << ": " << text;
    EXPECT_EQ(ids_special, c["ids_with_special"].get<std::vector<int32_t>>()) << id;
    EXPECT_EQ(tokenizer->Decode(c["ids"].get<std::vector<int32_t>>(), false),
              c["decoded"].get<std::string>())
        << id;
    EXPECT_EQ(tokenizer->Decode(c["ids_with_special"].get<std::vector<int32_t>>(), true),
              c["decoded_skip_special"].get<std::string>())
        << id;
    std::vector<std::string> tokens;
    for (int32_t token_id : c["ids"].get<std::vector<int32_t>>())
      tokens.push_back(tokenizer->IdToToken(token_id).value_or("<none>"));
    EXPECT_EQ(tokens, c["tokens"].get<std::vector<std::string>>()) << id;
    failures += !ok;
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " strings";
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerFixtureTest,
                         ::testing::Values("llama3", "qwen3", "gemma3"));

}  // namespace
}  // namespace infer
