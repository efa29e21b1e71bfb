// The n-gram proposer (speculative decoding by prompt lookup) on token lists, and vLLM's
// --speculative-config JSON: its defaults and its errors.
#include "infer/engine/ngram_proposer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infer/core/error.h"

namespace infer {
namespace {

using Ids = std::vector<int32_t>;

SpeculativeConfig Config(int64_t k, int64_t min, int64_t max) {
  SpeculativeConfig config;
  config.num_speculative_tokens = k;
  config.prompt_lookup_min = min;
  config.prompt_lookup_max = max;
  return config;
}

TEST(NgramProposerTest, ProposesWhatFollowedTheLastTokensEarlier) {
  // "7 8" occurred at the start, followed by 9 10 11 12.
  const Ids tokens = {7, 8, 9, 10, 11, 12, 3, 7, 8};
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(3, 2, 2), 100), (Ids{9, 10, 11}));
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(10, 2, 2), 100), (Ids{9, 10, 11, 12, 3, 7, 8}));
  // The draft is cut to max_tokens; none when no room is left.
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(3, 2, 2), 2), (Ids{9, 10}));
  EXPECT_TRUE(ProposeNgramDraft(tokens, Config(3, 2, 2), 0).empty());
  EXPECT_TRUE(ProposeNgramDraft(tokens, Config(3, 2, 2), -1).empty());
  // "3 7 8" never occurred before: a lookup of exactly 3 finds nothing.
  EXPECT_TRUE(ProposeNgramDraft(tokens, Config(3, 3, 3), 100).empty());
  // Nothing repeats.
  EXPECT_TRUE(ProposeNgramDraft(Ids{1, 2, 3, 4}, Config(3, 1, 3), 100).empty());
  // Shorter than the n-gram, or a single token.
  EXPECT_TRUE(ProposeNgramDraft(Ids{5}, Config(3, 1, 3), 100).empty());
  EXPECT_TRUE(ProposeNgramDraft(Ids{}, Config(3, 1, 3), 100).empty());
}

TEST(NgramProposerTest, TheLongestMatchingNgramWins) {
  // The last token 5 occurred after 4 (then 20) and after 9 (then 30); the last two, "9 5",
  // only once, so the 2-gram's continuation wins over the later 1-gram one.
  const Ids tokens = {9, 5, 30, 31, 4, 5, 20, 21, 9, 5};
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(2, 1, 2), 100), (Ids{30, 31}));
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(2, 1, 1), 100), (Ids{20, 21}));
}

TEST(NgramProposerTest, TheLatestOccurrenceWithAWholeDraftWins) {
  // "1 2" occurs at 0 (then 10 11 12), at 5 (then 13 14 15) and at 10, whose continuation is
  // only three tokens long: 16 and the suffix itself.
  const Ids tokens = {1, 2, 10, 11, 12, 1, 2, 13, 14, 15, 1, 2, 16, 1, 2};
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(4, 2, 2), 100), (Ids{13, 14, 15, 1}));
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(3, 2, 2), 100), (Ids{16, 1, 2}));
  // A loop: none is followed by a whole draft of 8, so the earliest (the longest) is taken.
  const Ids loop = {4, 6, 4, 6, 4, 6};
  EXPECT_EQ(ProposeNgramDraft(loop, Config(8, 2, 2), 100), (Ids{4, 6, 4, 6}));
}

TEST(NgramProposerTest, ParsesVllmSpeculativeConfig) {
  SpeculativeConfig config =
      ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 4})");
  EXPECT_EQ(config.num_speculative_tokens, 4);
  EXPECT_EQ(config.prompt_lookup_min, 5);  // vLLM's defaults when neither bound is given
  EXPECT_EQ(config.prompt_lookup_max, 5);
  config = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  EXPECT_EQ(config.prompt_lookup_min, 4);
  EXPECT_EQ(config.prompt_lookup_max, 4);
  config = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2})");
  EXPECT_EQ(config.prompt_lookup_min, 2);
  EXPECT_EQ(config.prompt_lookup_max, 2);
  config = ParseSpeculativeConfig(
      R"({"prompt_lookup_min": 1, "prompt_lookup_max": 3, "num_speculative_tokens": 2,
          "method": "ngram"})");
  EXPECT_EQ(config.num_speculative_tokens, 2);
  EXPECT_EQ(config.prompt_lookup_min, 1);
  EXPECT_EQ(config.prompt_lookup_max, 3);
  EXPECT_TRUE(config.enabled());
  EXPECT_FALSE(SpeculativeConfig{}.enabled());
}

TEST(NgramProposerTest, RefusesBadSpeculativeConfigNamingTheField) {
  const auto error = [](const std::string& json) {
    try {
      ParseSpeculativeConfig(json);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("{").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error("[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error(R"({"method": "eagle", "num_speculative_tokens": 2})").find("\"eagle\""),
            std::string::npos);
  EXPECT_NE(error(R"({"num_speculative_tokens": 2})").find("method is required"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram"})").find("num_speculative_tokens is required"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 0})")
                .find("num_speculative_tokens must be in [1, 32], got 0"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 33})")
                .find("num_speculative_tokens must be in [1, 32], got 33"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": "4"})")
                .find("num_speculative_tokens must be an integer"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4,
                      "prompt_lookup_max": 3})")
                .find("prompt_lookup_max must be in [prompt_lookup_min (4), 64], got 3"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0})")
                .find("prompt_lookup_min must be in [1, 64], got 0"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 2, "model": "x"})")
                .find("unknown key 'model'"),
            std::string::npos);
}

}  // namespace
}  // namespace infer
