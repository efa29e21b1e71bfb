// The streaming detokenizer's pieces must concatenate to Decode(all ids), for every fixture
// string of every model and for random id sequences.
#include "infer/tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer_test_util.h"

namespace infer {
namespace {

std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip,
                   std::vector<std::string>* pieces = nullptr) {
  IncrementalDetokenizer detokenizer(tokenizer, skip);
  std::string text;
  for (int32_t id : ids) {
    std::string piece = detokenizer.Add(id);
    if (pieces) pieces->push_back(piece);
    text += piece;
  }
  text += detokenizer.Finish();
  return text;
}

class TokenizerStreamTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerStreamTest, PiecesConcatenateToDecodeOnFixtures) {
  const std::string model = GetParam();
  if (!testing::RequireRealTokenizer(model)) return;
  auto tokenizer = Tokenizer::FromModelDir(testing::RealTokenizerDir(model));
  for (const auto& c : testing::ReadJsonLines(testing::TokenizerFixture(model + ".jsonl"))) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_special = c["ids_with_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(Stream(*tokenizer, ids, false), c["decoded"].get<std::string>()) << c["id"];
    EXPECT_EQ(Stream(*tokenizer, ids_special, true), c["decoded_skip_special"].get<std::string>())
        << c["id"];
  }
}

TEST_P(TokenizerStreamTest, PiecesNeverSplitCharacters) {
  const std::string model = GetParam();
  if (!testing::RequireRealTokenizer(model)) return;
  auto tokenizer = Tokenizer::FromModelDir(testing::RealTokenizerDir(model));
  const auto ids =
      tokenizer->Encode("naïve café 日本語 👩‍👩‍👧 ἀρχή ﷽ Ω", false);
  std::vector<std::string> pieces;
  Stream(*tokenizer, ids, false, &pieces);
  for (const std::string& piece : pieces)
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << piece;
}

TEST_P(TokenizerStreamTest, PiecesConcatenateToDecodeOnRandomIds) {
  const std::string model = GetParam();
  if (!testing::RequireRealTokenizer(model)) return;
  auto tokenizer = Tokenizer::FromModelDir(testing::RealTokenizerDir(model));
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_id(0, tokenizer->VocabSize() + 5);
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids(rng() % 40);
    for (int32_t& id : ids) id = any_id(rng);
    for (bool skip : {false, true})
      EXPECT_EQ(Stream(*tokenizer, ids, skip), tokenizer->Decode(ids, skip)) << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerStreamTest,
                         ::testing::Values("llama3", "qwen3", "gemma3"));

}  // namespace
}  // namespace infer
