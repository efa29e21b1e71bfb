// Thinking budgets: the pure counter (ThinkingBudget) token by token; the engine forcing the
// end of the reasoning block once a request's budget is spent, beside requests without one and
// under a grammar, with stand-in tags and a scripted model; and the tags and forced end taken
// from Qwen3's real vocabulary, checked against Hugging Face's rendering of Qwen3's chat
// template (the shared chat fixtures), where Llama's vocabulary has no tags.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../tokenizer/tokenizer_test_util.h"
#include "infer/engine/engine.h"
#include "infer/engine/generate.h"
#include "infer/engine/thinking_budget.h"
#include "infer/tokenizer/tokenizer.h"
#include "mock_model.h"

namespace infer {
namespace {

constexpr int32_t kEos = 1;
constexpr int32_t kStart = 5;  // stand-in <think>
constexpr int32_t kEnd = 6;    // stand-in </think>
constexpr int32_t kWord = 9;   // what the scripted model thinks in
const ThinkingTokens kTags{.start = kStart, .end = kEnd, .forced = {7, kEnd, 8}};

// Feeds `tokens`, returning what Forced() said before each and after the last.
std::vector<std::optional<int32_t>> Follow(ThinkingBudget& budget,
                                           const std::vector<int32_t>& tokens) {
  std::vector<std::optional<int32_t>> forced{budget.Forced()};
  for (const int32_t token : tokens) {
    budget.Accept(token);
    forced.push_back(budget.Forced());
  }
  return forced;
}

TEST(ThinkingBudgetTest, CountsInsideTheBlockThenForcesItsEnd) {
  ThinkingBudget budget(kTags, 3, std::vector<int32_t>{2, 3});
  const auto none = std::nullopt;
  // Outside, the start, three tokens inside, then the forced end taken token by token.
  EXPECT_EQ(
      Follow(budget, {kWord, kStart, kWord, kWord, kWord, 7, kEnd, 8, kWord}),
      (std::vector<std::optional<int32_t>>{none, none, none, none, none, 7, kEnd, 8, none, none}));
  EXPECT_EQ(budget.spent(), 3);
  // The budget is for all blocks together: a second one is closed at once.
  EXPECT_EQ(Follow(budget, {kStart}).back(), std::optional<int32_t>(7));
}

TEST(ThinkingBudgetTest, AModelThatEndsItsBlockItselfIsLeftAlone) {
  ThinkingBudget budget(kTags, 3, std::vector<int32_t>{2});
  for (const auto& forced : Follow(budget, {kStart, kWord, kWord, kEnd, kWord, kWord, kWord})) {
    EXPECT_EQ(forced, std::nullopt);
  }
  EXPECT_EQ(budget.spent(), 2);
}

TEST(ThinkingBudgetTest, APromptThatOpensTheBlockStartsTheCount) {
  ThinkingBudget open(kTags, 2, std::vector<int32_t>{2, kStart, kWord});
  EXPECT_EQ(Follow(open, {kWord, kWord}).back(), std::optional<int32_t>(7));
  // A block the prompt closes again (a template's empty block) is not open.
  ThinkingBudget closed(kTags, 2, std::vector<int32_t>{kStart, kEnd, 3});
  EXPECT_EQ(Follow(closed, {kWord, kWord, kWord}).back(), std::nullopt);
  // Budget 0: the end is forced before any thinking.
  ThinkingBudget zero(kTags, 0, std::vector<int32_t>{2, kStart});
  EXPECT_EQ(zero.Forced(), std::optional<int32_t>(7));
}

TEST(ThinkingBudgetTest, AnOverruledForceWaitsAndTheModelsOwnEndCloses) {
  ThinkingBudget budget(kTags, 1, std::vector<int32_t>{kStart});
  budget.Accept(kWord);
  ASSERT_EQ(budget.Forced(), std::optional<int32_t>(7));
  budget.Accept(kWord);  // a grammar did not allow the forced token
  EXPECT_EQ(budget.Forced(), std::optional<int32_t>(7));
  budget.Accept(kEnd);
  EXPECT_EQ(budget.Forced(), std::nullopt);
}

TEST(ThinkingBudgetTest, TheForcedEndMayWaitThreeDrawsBeforeItBegins) {
  ThinkingBudget budget(kTags, 1, std::vector<int32_t>{kStart});
  EXPECT_FALSE(budget.MayWait());  // nothing to force yet
  budget.Accept(kWord);
  for (int waited = 0; waited < 3; ++waited) {
    EXPECT_TRUE(budget.MayWait()) << waited;
    budget.Accept(kWord);
  }
  EXPECT_FALSE(budget.MayWait());
  EXPECT_EQ(budget.Forced(), std::optional<int32_t>(7));
  budget.Accept(7);
  EXPECT_FALSE(budget.MayWait());  // once begun, the end is taken whole
}

std::vector<int32_t> Drain(const std::shared_ptr<OutputChannel>& channel) {
  std::vector<int32_t> ids;
  while (auto output = channel->Pop(std::chrono::milliseconds(0))) {
    if (output->token_id) ids.push_back(*output->token_id);
  }
  return ids;
}

SamplingParams Sampling(std::optional<int64_t> budget, int64_t max_new_tokens = 10) {
  SamplingParams params;
  params.temperature = 1.0;  // the scripted logits are certain; the mask decides the rest
  params.max_new_tokens = max_new_tokens;
  params.thinking_token_budget = budget;
  return params;
}

TEST(ThinkingBudgetEngineTest, ARequestsBudgetForcesTheEndBesideOneWithout) {
  // Also with n-gram speculative decoding: the model's repeated words are drafted, and the
  // forced end refuses the draft where it begins; the outputs are the same.
  for (const bool speculative : {false, true}) {
    testing::ScriptedModel model(32, {kStart, kWord});  // opens a block and thinks on
    EngineConfig config;
    if (speculative) config.speculative = {4, 1, 2};
    Engine engine(config, model, nullptr, {kEos});
    engine.SetThinkingTokens(kTags);
    auto bounded = engine.AddRequest("bounded", {2, 3}, Sampling(3));
    auto free = engine.AddRequest("free", {2, 3}, Sampling(std::nullopt));
    auto zero = engine.AddRequest("zero", {2, 3}, Sampling(0, 5));
    while (engine.HasWork()) engine.Step();
    EXPECT_EQ(Drain(bounded),
              (std::vector<int32_t>{kStart, kWord, kWord, kWord, 7, kEnd, 8, kWord, kWord, kWord}))
        << speculative;
    EXPECT_EQ(Drain(free), (std::vector<int32_t>{kStart, kWord, kWord, kWord, kWord, kWord, kWord,
                                                 kWord, kWord, kWord}))
        << speculative;
    EXPECT_EQ(Drain(zero), (std::vector<int32_t>{kStart, 7, kEnd, 8, kWord})) << speculative;
    if (speculative) {
      const EngineMetrics metrics = engine.metrics();
      EXPECT_GT(metrics.spec_decode_num_accepted_tokens, 0);
      EXPECT_LT(metrics.spec_decode_num_accepted_tokens, metrics.spec_decode_num_draft_tokens);
    }
  }
}

TEST(ThinkingBudgetEngineTest, WithoutReasoningTagsABudgetHasNothingToBound) {
  testing::ScriptedModel model(32, {kStart, kWord});
  Engine engine(EngineConfig{}, model, nullptr, {kEos});  // no tokenizer: no tags
  auto channel = engine.AddRequest("a", {2, 3}, Sampling(1, 4));
  while (engine.HasWork()) engine.Step();
  EXPECT_EQ(Drain(channel), (std::vector<int32_t>{kStart, kWord, kWord, kWord}));
}

// Allows exactly one token sequence, then only the end.
class OneSequence : public TokenConstraint {
 public:
  explicit OneSequence(std::vector<int32_t> ids) : ids_(std::move(ids)) {}
  void FillMask(std::span<uint32_t> mask) override {
    const int32_t next = taken_ < ids_.size() ? ids_[taken_] : kEos;
    mask[static_cast<size_t>(next) / 32] |= 1U << (next % 32);
  }
  bool Accept(int32_t token) override {
    if (taken_ >= ids_.size() || ids_[taken_] != token) return false;
    ++taken_;
    return true;
  }
  bool Finished() const override { return taken_ == ids_.size(); }

 private:
  std::vector<int32_t> ids_;
  size_t taken_ = 0;
};

TEST(ThinkingBudgetEngineTest, AGrammarThatRefusesTheForcedEndWins) {
  testing::UniformModel model(32);
  Engine engine(EngineConfig{}, model, nullptr, {kEos});
  engine.SetThinkingTokens(kTags);
  engine.SetConstraintFactory([](const StructuredOutput&) -> std::unique_ptr<TokenConstraint> {
    return std::make_unique<OneSequence>(std::vector<int32_t>{kStart, kWord, kWord, kWord});
  });
  SamplingParams params = Sampling(1);
  params.structured_output = StructuredOutput{StructuredOutput::Kind::kChoice, "", {"x"}};
  auto channel = engine.AddRequest("a", {2, 3}, params);
  while (engine.HasWork()) engine.Step();
  EXPECT_EQ(Drain(channel), (std::vector<int32_t>{kStart, kWord, kWord, kWord}));
}

// With Qwen3's vocabulary: a budget spent in the middle of a character (one token per byte)
// waits for its last byte, so the reasoning text stays valid UTF-8; bytes that never make a
// character are waited for three draws at most.
TEST(ThinkingBudgetTest, TheCutWaitsForACharacterSplitAcrossTokens) {
  if (!testing::RequireRealTokenizer("qwen3")) return;
  const auto tokenizer = Tokenizer::FromModelDir(testing::RealTokenizerDir("qwen3"));
  const auto tags = ThinkingTokensOf(*tokenizer);
  ASSERT_TRUE(tags.has_value());
  const auto run = [&](const std::vector<int32_t>& thought) {
    std::vector<int32_t> script{tags->start};
    script.insert(script.end(), thought.begin(), thought.end());
    for (const int32_t id : tokenizer->Encode(" ok", false)) script.push_back(id);
    testing::ScriptedModel model(tokenizer->VocabSize(), script);
    SamplingParams params;
    params.temperature = 0.0;
    params.max_new_tokens = static_cast<int64_t>(thought.size()) + 5;
    params.thinking_token_budget = 1;
    return Generate(model, tokenizer.get(), std::vector<int32_t>{1}, params, {});
  };
  // "€" (E2 82 AC), one token per byte: the budget is spent on its first byte.
  const std::vector<int32_t> euro = testing::ByteTokens(*tokenizer, "\xE2\x82\xAC");
  GenerationOutput out = run(euro);
  EXPECT_TRUE(out.text.starts_with("<think>\xE2\x82\xAC\n</think>\n\n")) << out.text;
  // Lone lead bytes never complete: the end comes after three draws of waiting.
  const std::vector<int32_t> lead = testing::ByteTokens(*tokenizer, "\xF0");
  out = run({lead[0], lead[0], lead[0], lead[0], lead[0]});
  ASSERT_GE(out.token_ids.size(), 8U);
  EXPECT_EQ(std::vector<int32_t>(out.token_ids.begin() + 5, out.token_ids.begin() + 8),
            tags->forced);
}

TEST(ThinkingBudgetTest, TagsFromQwen3sVocabularyNoneFromLlamas) {
  if (!testing::RequireRealTokenizer("qwen3") || !testing::RequireRealTokenizer("llama3")) return;
  // Hugging Face's rendering of Qwen3's template with enable_thinking false ends with the empty
  // block "<think>\n\n</think>\n\n"; the turn before it ends "assistant\n".
  std::optional<nlohmann::ordered_json> no_think;
  for (const auto& line : testing::ReadJsonLines(testing::TokenizerFixture("chat_qwen3.jsonl"))) {
    if (line["name"] == "no_think_single_user_gen") no_think = line;
  }
  ASSERT_TRUE(no_think.has_value());
  const auto rendered = no_think->at("rendered").get<std::string>();
  ASSERT_TRUE(rendered.ends_with("assistant\n<think>\n\n</think>\n\n")) << rendered;
  const auto ids = no_think->at("ids").get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 5U);
  const int32_t newline = ids[ids.size() - 5];  // the "\n" after "assistant"
  const int32_t start = ids[ids.size() - 4];
  const int32_t blank = ids[ids.size() - 3];  // "\n\n"
  const int32_t end = ids[ids.size() - 2];

  const auto qwen3 = Tokenizer::FromModelDir(testing::RealTokenizerDir("qwen3"));
  const std::optional<ThinkingTokens> tags = ThinkingTokensOf(*qwen3);
  ASSERT_TRUE(tags.has_value());
  EXPECT_EQ(tags->start, start);
  EXPECT_EQ(tags->end, end);
  EXPECT_EQ(tags->forced, (std::vector<int32_t>{newline, end, blank}));
  // The template's own empty block is closed: a budget does not start counting after it.
  ThinkingBudget budget(*tags, 0, ids);
  EXPECT_EQ(budget.Forced(), std::nullopt);

  const auto llama3 = Tokenizer::FromModelDir(testing::RealTokenizerDir("llama3"));
  EXPECT_FALSE(ThinkingTokensOf(*llama3).has_value());
}

}  // namespace
}  // namespace infer
