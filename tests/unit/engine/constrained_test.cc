// The engine's handling of structured output, with a stand-in constraint (no grammar, no
// model), as vLLM tests its scheduler: the mask is applied to every constrained request of a
// step while free requests beside it sample as before; the end of generation comes only where
// the constraint allows it; a constraint that is complete ends the request with `stop`; a
// request whose constraint allows nothing fails alone; the outputs of a seeded constrained
// request are the same alone and batched; and jump-forward takes the tokens the constraint
// forces without a sampling step each, computing them in the next forward as one chunk.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "infer/engine/engine.h"
#include "infer/grammar/grammar_error.h"
#include "mock_model.h"

namespace infer {
namespace {

constexpr int32_t kEos = 1;

// Accepts exactly one of a set of token sequences, then only the end: a choice list over ids.
class SequencesConstraint : public TokenConstraint {
 public:
  explicit SequencesConstraint(std::vector<std::vector<int32_t>> sequences)
      : sequences_(std::move(sequences)) {}

  void FillMask(std::span<uint32_t> mask) override {
    for (const auto& sequence : sequences_) {
      if (!Prefix(sequence)) continue;
      const int32_t next = taken_.size() < sequence.size() ? sequence[taken_.size()] : kEos;
      mask[static_cast<size_t>(next) / 32] |= 1U << (next % 32);
    }
  }
  bool Accept(int32_t token) override {
    taken_.push_back(token);
    for (const auto& sequence : sequences_) {
      if (Prefix(sequence)) return true;
    }
    taken_.pop_back();
    return false;
  }
  // The tokens every live sequence has next, up to where one could end or they part.
  std::vector<int32_t> ForcedTokens() override {
    std::vector<int32_t> forced;
    for (size_t at = taken_.size();; ++at) {
      std::optional<int32_t> next;
      for (const auto& sequence : sequences_) {
        if (!Prefix(sequence)) continue;
        if (at >= sequence.size() || (next && *next != sequence[at])) return forced;
        next = sequence[at];
      }
      if (!next) return forced;
      forced.push_back(*next);
    }
  }
  bool Finished() const override {
    bool complete = false;
    for (const auto& sequence : sequences_) {
      if (!Prefix(sequence)) continue;
      if (sequence.size() > taken_.size()) return false;  // it can still continue
      complete = true;
    }
    return complete;
  }

 private:
  bool Prefix(const std::vector<int32_t>& sequence) const {
    return sequence.size() >= taken_.size() &&
           std::equal(taken_.begin(), taken_.end(), sequence.begin());
  }
  std::vector<std::vector<int32_t>> sequences_;
  std::vector<int32_t> taken_;
};

// The stand-in compiler: a choice list whose entries are comma-separated ids; "bad" is refused.
Engine::ConstraintFactory Factory() {
  return [](const StructuredOutput& spec) -> std::unique_ptr<TokenConstraint> {
    std::vector<std::vector<int32_t>> sequences;
    for (const std::string& choice : spec.choices) {
      if (choice == "bad") throw GrammarError("choice 0: bad");
      std::vector<int32_t> ids;
      for (size_t at = 0; at < choice.size();) {
        const size_t comma = std::min(choice.find(',', at), choice.size());
        ids.push_back(std::stoi(choice.substr(at, comma - at)));
        at = comma + 1;
      }
      sequences.push_back(std::move(ids));
    }
    return std::make_unique<SequencesConstraint>(std::move(sequences));
  };
}

SamplingParams Choices(std::vector<std::string> choices, int64_t max_new_tokens = 10) {
  SamplingParams params;
  params.temperature = 1.0;
  params.max_new_tokens = max_new_tokens;
  params.structured_output = StructuredOutput{StructuredOutput::Kind::kChoice, "", choices};
  return params;
}

std::vector<int32_t> RunOne(Engine& engine, const std::string& id, const SamplingParams& params,
                            std::optional<FinishReason>* reason = nullptr) {
  auto channel =
      engine.AddRequest(id, engine.PreparePrompt(std::vector<int32_t>{2, 3}, params), params);
  std::vector<int32_t> ids;
  while (engine.HasWork()) engine.Step();
  while (auto output = channel->Pop(std::chrono::milliseconds(0))) {
    if (output->token_id) ids.push_back(*output->token_id);
    if (output->finished && reason) *reason = output->finish_reason;
  }
  return ids;
}

TEST(ConstrainedTest, EveryDrawFollowsTheConstraintAndEndsWithStop) {
  testing::UniformModel model(64);  // at T = 1 every token is as likely: only the mask decides
  Engine engine(EngineConfig{}, model, nullptr, {kEos});
  engine.SetConstraintFactory(Factory());
  std::set<std::vector<int32_t>> seen;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    SamplingParams params = Choices({"5,6,7", "5,9", "40,41,42,43"});
    params.seed = seed;
    std::optional<FinishReason> reason;
    const std::vector<int32_t> ids = RunOne(engine, std::to_string(seed), params, &reason);
    EXPECT_TRUE(ids == std::vector<int32_t>({5, 6, 7}) || ids == std::vector<int32_t>({5, 9}) ||
                ids == std::vector<int32_t>({40, 41, 42, 43}))
        << "seed " << seed;
    EXPECT_EQ(reason, FinishReason::kStop);  // complete: ended without a step for EOS
    seen.insert(ids);
  }
  EXPECT_EQ(seen.size(), 3U);  // every choice is reachable
}

TEST(ConstrainedTest, EosComesOnlyWhereTheOutputMayEnd) {
  testing::UniformModel model(64);
  Engine engine(EngineConfig{}, model, nullptr, {kEos});
  engine.SetConstraintFactory(Factory());
  // "5" is complete but may go on to "5,6": the end is allowed there, so both endings occur.
  std::set<std::vector<int32_t>> seen;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    SamplingParams params = Choices({"5", "5,6"});
    params.seed = seed;
    std::optional<FinishReason> reason;
    const std::vector<int32_t> ids = RunOne(engine, std::to_string(seed), params, &reason);
    if (ids == std::vector<int32_t>{5, kEos}) {
      EXPECT_EQ(reason, FinishReason::kEos);
    } else {
      EXPECT_EQ(ids, (std::vector<int32_t>{5, 6}));
      EXPECT_EQ(reason, FinishReason::kStop);
    }
    seen.insert(ids);
  }
  EXPECT_EQ(seen.size(), 2U);
}

TEST(ConstrainedTest, ConstrainedAndFreeRequestsShareAStep) {
  testing::ScriptedModel model(64, {30, 31, 32, 33});  // what a free request generates
  Engine engine(EngineConfig{}, model, nullptr, {kEos});
  engine.SetConstraintFactory(Factory());
  SamplingParams free;
  free.temperature = 0.0;
  free.max_new_tokens = 4;
  SamplingParams constrained = Choices({"7,8"});
  constrained.temperature = 0.0;
  auto a = engine.AddRequest("free", {2, 3}, free);
  auto b = engine.AddRequest("constrained", {2, 3}, constrained);
  while (engine.HasWork()) engine.Step();
  std::vector<int32_t> free_ids, constrained_ids;
  while (auto output = a->Pop(std::chrono::milliseconds(0))) free_ids.push_back(*output->token_id);
  while (auto output = b->Pop(std::chrono::milliseconds(0))) {
    constrained_ids.push_back(*output->token_id);
  }
  EXPECT_EQ(free_ids, (std::vector<int32_t>{30, 31, 32, 33}));
  EXPECT_EQ(constrained_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(model.calls().front().size(), 2U);  // prefilled together
}

TEST(ConstrainedTest, ABadSpecIsRejectedAtTheFrontDoor) {
  testing::UniformModel model(64);
  Engine engine(EngineConfig{}, model, nullptr, {kEos});
  SamplingParams params = Choices({"5"});
  // No factory (no tokenizer): refused, not ignored.
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{2}, params), RequestRejected);
  engine.SetConstraintFactory(Factory());
  params = Choices({"bad"});
  try {
    engine.PreparePrompt(std::vector<int32_t>{2}, params);
    FAIL() << "a bad choice list was accepted";
  } catch (const RequestRejected& e) {
    EXPECT_NE(std::string(e.what()).find("choice 0: bad"), std::string::npos) << e.what();
  }
}

TEST(ConstrainedTest, ARequestWhoseConstraintAllowsNothingFailsAlone) {
  testing::UniformModel model(64);
  Engine engine(EngineConfig{}, model, nullptr, {kEos});
  engine.SetConstraintFactory(Factory());
  SamplingParams stuck = Choices({""});  // only the empty output...
  stuck.min_tokens = 1;                  // ...which min_tokens forbids
  stuck.seed = 3;
  SamplingParams fine = Choices({"9,10"});
  fine.seed = 3;
  auto a = engine.AddRequest("stuck", {2, 3}, stuck);
  auto b = engine.AddRequest("fine", {2, 3}, fine);
  while (engine.HasWork()) engine.Step();
  std::optional<std::string> error;
  while (auto output = a->Pop(std::chrono::milliseconds(0))) {
    EXPECT_FALSE(output->token_id);
    if (output->error) error = output->error;
  }
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("min_tokens"), std::string::npos) << *error;
  std::vector<int32_t> ids;
  while (auto output = b->Pop(std::chrono::milliseconds(0))) {
    EXPECT_FALSE(output->error);
    if (output->token_id) ids.push_back(*output->token_id);
  }
  EXPECT_EQ(ids, (std::vector<int32_t>{9, 10}));
}

TEST(ConstrainedTest, ASeededConstrainedRequestIsTheSameAloneAndBatched) {
  testing::UniformModel model(64);
  const auto alone = [&](uint64_t seed) {
    Engine engine(EngineConfig{}, model, nullptr, {kEos});
    engine.SetConstraintFactory(Factory());
    SamplingParams params = Choices({"5,6,7", "5,9", "40,41"});
    params.seed = seed;
    return RunOne(engine, "a", params);
  };
  Engine engine(EngineConfig{}, model, nullptr, {kEos});
  engine.SetConstraintFactory(Factory());
  std::vector<std::shared_ptr<OutputChannel>> channels;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SamplingParams params = Choices({"5,6,7", "5,9", "40,41"});
    params.seed = seed;
    channels.push_back(engine.AddRequest(std::to_string(seed), {2, 3}, params));
    SamplingParams free;
    free.seed = seed;
    free.max_new_tokens = 3;
    engine.AddRequest("free" + std::to_string(seed), {2, 3}, free);
  }
  while (engine.HasWork()) engine.Step();
  for (uint64_t seed = 0; seed < 8; ++seed) {
    std::vector<int32_t> ids;
    while (auto output = channels[seed]->Pop(std::chrono::milliseconds(0))) {
      ids.push_back(*output->token_id);
    }
    EXPECT_EQ(ids, alone(seed)) << "seed " << seed;
  }
}

// A request of choices {"5,6,7,20", "5,6,7,21"} on a model that favours 5 then 21.
struct JumpForwardRun {
  std::vector<int32_t> ids;
  std::optional<FinishReason> reason;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> calls;
};
JumpForwardRun RunJumpForward(bool jump_forward, int64_t max_new_tokens = 10,
                              bool logprobs = false) {
  testing::ScriptedModel model(64, {5, 5, 5, 21});
  EngineConfig config;
  config.enable_jump_forward = jump_forward;
  Engine engine(config, model, nullptr, {kEos});
  engine.SetConstraintFactory(Factory());
  SamplingParams params = Choices({"5,6,7,20", "5,6,7,21"}, max_new_tokens);
  params.temperature = 0.0;
  if (logprobs) params.logprobs = 1;
  JumpForwardRun run;
  const auto channel = engine.AddRequest("a", {2, 3}, params);
  while (engine.HasWork()) engine.Step();
  while (auto output = channel->Pop(std::chrono::milliseconds(0))) {
    if (output->token_id) run.ids.push_back(*output->token_id);
    if (output->finished) run.reason = output->finish_reason;
  }
  run.calls = model.calls();
  return run;
}

TEST(ConstrainedTest, JumpForwardTakesForcedTokensInOneForward) {
  const JumpForwardRun on = RunJumpForward(true);
  const JumpForwardRun off = RunJumpForward(false);
  EXPECT_EQ(on.ids, (std::vector<int32_t>{5, 6, 7, 21}));
  EXPECT_EQ(off.ids, on.ids);  // one way to go after 5: the same output either way
  EXPECT_EQ(on.reason, FinishReason::kStop);
  EXPECT_EQ(off.reason, FinishReason::kStop);
  // On: the prompt, then 5, 6, 7 together (6 and 7 came without a draw); off: one per token.
  using Call = std::vector<std::pair<int64_t, int64_t>>;
  ASSERT_EQ(on.calls.size(), 2U);
  EXPECT_EQ(on.calls[0], (Call{{on.calls[0][0].first, 2}}));
  EXPECT_EQ(on.calls[1], (Call{{on.calls[0][0].first, 3}}));
  EXPECT_EQ(off.calls.size(), 4U);
}

TEST(ConstrainedTest, JumpForwardStopsAtMaxTokensAndSkipsLogprobRequests) {
  const JumpForwardRun cut = RunJumpForward(true, /*max_new_tokens=*/2);
  EXPECT_EQ(cut.ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(cut.reason, FinishReason::kLength);
  // A forced token was never drawn, so a request with logprobs samples each one.
  const JumpForwardRun logprobs = RunJumpForward(true, 10, /*logprobs=*/true);
  EXPECT_EQ(logprobs.ids, (std::vector<int32_t>{5, 6, 7, 21}));
  EXPECT_EQ(logprobs.calls.size(), 4U);
}

}  // namespace
}  // namespace infer
