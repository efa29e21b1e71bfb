// Stop strings with a real tokenizer and a model that emits chosen ids: matches spanning
// several tokens, multi-byte characters split across tokens, truncation and streaming.
#include <gtest/gtest.h>

#include <string>

#include "../tokenizer/tokenizer_test_util.h"
#include "infer/engine/generate.h"
#include "mock_model.h"

namespace infer {
namespace {

struct Case {
  std::vector<int32_t> script;
  GenerationOutput result;
  std::string streamed;
};

Case RunScript(const Tokenizer& tokenizer, std::vector<int32_t> script,
               std::vector<std::string> stop) {
  testing::ScriptedModel model(tokenizer.VocabSize(), script);
  SamplingParams params;
  params.temperature = 0.0;
  params.max_new_tokens = static_cast<int64_t>(script.size());
  params.stop = std::move(stop);
  Case out{std::move(script), {}, {}};
  GenerateOptions options;
  options.on_text = [&](size_t, std::string_view text) { out.streamed += text; };
  const std::vector<int32_t> prompt{1};
  out.result = Generate(model, &tokenizer, prompt, params, options);
  return out;
}

std::vector<int32_t> Concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

class StopStringsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!testing::RequireRealTokenizer(GetParam())) GTEST_SKIP();
    tokenizer_ = Tokenizer::FromModelDir(testing::RealTokenizerDir(GetParam()));
  }
  std::vector<int32_t> Encode(const std::string& text) const {
    return tokenizer_->Encode(text, /*add_special_tokens=*/false);
  }
  std::vector<int32_t> ByteTokens(const std::string& text) const {
    return testing::ByteTokens(*tokenizer_, text);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(StopStringsTest, StopSpanningTokensTruncates) {
  const std::vector<int32_t> before = Encode("The answer is yes");
  const std::vector<int32_t> stop_part = Encode("\n\nQuestion");
  const std::vector<int32_t> after = Encode(" more text");
  ASSERT_GE(stop_part.size(), 2U);
  const Case run = RunScript(*tokenizer_, Concat({before, stop_part, after}), {"\n\nQuest", "zzz"});
  EXPECT_EQ(run.result.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.result.text, "The answer is yes");
  EXPECT_EQ(run.streamed, run.result.text);
  // Tokens run up to and including the one that completed the match, and no further.
  EXPECT_LE(run.result.token_ids.size(), before.size() + stop_part.size());
  EXPECT_GT(run.result.token_ids.size(), before.size() + 1);
  const std::string decoded = tokenizer_->Decode(run.result.token_ids, true);
  EXPECT_NE(decoded.find("\n\nQuest"), std::string::npos);
  const std::vector<int32_t> shorter(run.result.token_ids.begin(), run.result.token_ids.end() - 1);
  EXPECT_EQ(tokenizer_->Decode(shorter, true).find("\n\nQuest"), std::string::npos);
}

TEST_P(StopStringsTest, MultiByteCharacterSplitAcrossTokens) {
  // "é" (C3 A9) and "€" (E2 82 AC) as one token per byte.
  const std::vector<int32_t> script =
      Concat({Encode("caf"), ByteTokens("\xC3\xA9"), Encode(" costs 5"), ByteTokens("\xE2\x82\xAC"),
              Encode(" today")});
  Case run = RunScript(*tokenizer_, script, {"5\xE2\x82\xAC"});
  EXPECT_EQ(run.result.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.result.text, "caf\xC3\xA9 costs ");
  EXPECT_EQ(run.streamed, run.result.text);
  // The match completes on the last byte of the euro sign, not before; a byte-fallback
  // detokenizer (Gemma) may only release that byte with the next token.
  const size_t completing = script.size() - Encode(" today").size();
  EXPECT_GE(run.result.token_ids.size(), completing);
  EXPECT_LE(run.result.token_ids.size(), completing + 1);

  run = RunScript(*tokenizer_, script, {"f\xC3\xA9 c"});  // stop ending after the split character
  EXPECT_EQ(run.result.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.result.text, "ca");
  EXPECT_EQ(run.streamed, "ca");

  run = RunScript(*tokenizer_, script, {"\xC3\xA9"});  // stop that is only the split character
  EXPECT_EQ(run.result.text, "caf");
}

TEST_P(StopStringsTest, NoStopGivesFullTextAndEarliestMatchWins) {
  const std::vector<int32_t> script = Encode("one, two; three");
  Case run = RunScript(*tokenizer_, script, {"four"});
  EXPECT_EQ(run.result.finish_reason, FinishReason::kLength);
  EXPECT_EQ(run.result.text, "one, two; three");
  EXPECT_EQ(run.streamed, run.result.text);
  EXPECT_FALSE(run.result.stop_string.has_value());
  run = RunScript(*tokenizer_, script, {"; three", ","});
  EXPECT_EQ(run.result.text, "one");
  EXPECT_EQ(run.result.stop_string, ",");
}

TEST_P(StopStringsTest, TheStopStringReportedIsTheOneTheTextIsCutBefore) {
  // Several stops appear; the text ends before the one that starts first.
  const std::vector<int32_t> script = Encode("Hello you. Stop here, then more");
  Case run = RunScript(*tokenizer_, script, {"xyz", "here", "Stop"});
  EXPECT_EQ(run.result.finish_reason, FinishReason::kStop);
  EXPECT_EQ(run.result.text, "Hello you. ");
  EXPECT_EQ(run.result.stop_string, "Stop");
  // Not the one given first: "here" is listed before "Stop" but comes later in the text.
  run = RunScript(*tokenizer_, script, {"here", "you"});
  EXPECT_EQ(run.result.text, "Hello ");
  EXPECT_EQ(run.result.stop_string, "you");
}

TEST_P(StopStringsTest, EosBeatsStopString) {
  const std::vector<int32_t> script = Encode("hello world");
  testing::ScriptedModel model(tokenizer_->VocabSize(), script);
  SamplingParams params;
  params.temperature = 0.0;
  params.stop = {"world"};
  GenerateOptions options;
  options.eos_token_ids = {script.back()};  // the token completing the stop is also EOS
  const std::vector<int32_t> prompt{1};
  const GenerationOutput result = Generate(model, tokenizer_.get(), prompt, params, options);
  EXPECT_EQ(result.finish_reason, FinishReason::kEos);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, StopStringsTest,
                         ::testing::Values("llama3", "qwen3", "gemma3"));

}  // namespace
}  // namespace infer
