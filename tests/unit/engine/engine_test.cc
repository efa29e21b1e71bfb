// The serving engine: the runner with scripted models (EOS, stop strings, length, partial batch
// completion, errors, cancel), the engine thread, and on the fixture models batched output equal
// to single-request output (greedy and seeded) with mixed prompt lengths in one batch.
#include "infer/engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "infer/core/error.h"
#include "infer/engine/decoder_model.h"
#include "mock_model.h"

namespace infer {
namespace {

using std::chrono::milliseconds;

EngineConfig TestConfig(int64_t max_batch_size = 8) {
  EngineConfig config;
  config.max_batch_size = max_batch_size;
  config.batch_wait_timeout_s = 0.0;
  return config;
}

SamplingParams Params(int64_t max_new_tokens, double temperature = 0.0) {
  SamplingParams params;
  params.max_new_tokens = max_new_tokens;
  params.temperature = temperature;
  return params;
}

// Every output of a request until it finishes (bounded wait).
std::vector<StepOutput> Drain(OutputChannel& channel) {
  std::vector<StepOutput> outputs;
  while (outputs.empty() || !outputs.back().finished) {
    auto output = channel.Pop(milliseconds(20000));
    if (!output) {
      ADD_FAILURE() << "timed out waiting for an output";
      break;
    }
    outputs.push_back(std::move(*output));
  }
  return outputs;
}

std::vector<int32_t> TokenIds(const std::vector<StepOutput>& outputs) {
  std::vector<int32_t> ids;
  for (const StepOutput& output : outputs) {
    if (output.token_id) ids.push_back(*output.token_id);
  }
  return ids;
}

// A model whose batched call fails on demand.
class FailingModel : public testing::ScriptedModel {
 public:
  FailingModel() : ScriptedModel(32, {5, 6, 7, 8}) {}
  void BatchNextTokenLogits(std::span<const SequenceStep> steps,
                            std::vector<float>& logits) override {
    if (fail_next) {
      fail_next = false;
      throw Error("out of memory allocating the KV cache");
    }
    ScriptedModel::BatchNextTokenLogits(steps, logits);
  }
  bool fail_next = false;
};

TEST(EngineTest, StepsABatchToCompletionWithEosAndLength) {
  testing::ScriptedModel model(32, {5, 6, 9, 7});
  Engine engine(TestConfig(), model, nullptr, {9});
  auto eos = engine.AddRequest("eos", {1, 2, 3}, Params(10));
  auto length = engine.AddRequest("length", {1, 2, 3, 4, 5}, Params(2));
  ASSERT_TRUE(eos && length);
  int steps = 0;
  while (engine.HasWork() && steps < 100) steps += engine.Step() ? 1 : 0;
  EXPECT_EQ(steps, 3);  // prefill + 2 decodes: the batch runs until its last request ends
  const auto eos_out = Drain(*eos);
  EXPECT_EQ(TokenIds(eos_out), (std::vector<int32_t>{5, 6, 9}));
  EXPECT_EQ(eos_out.back().finish_reason, FinishReason::kEos);
  EXPECT_EQ(eos_out.back().prompt_tokens, 3);
  EXPECT_EQ(eos_out.back().completion_tokens, 3);
  const auto length_out = Drain(*length);
  EXPECT_EQ(TokenIds(length_out), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(length_out.back().finish_reason, FinishReason::kLength);
  EXPECT_EQ(model.kv_cache_bytes(), 0);
}

TEST(EngineTest, RejectsPastTheQueueBoundAndInvalidPrompts) {
  testing::ScriptedModel model(32, {5});
  EngineConfig config = TestConfig();
  config.max_waiting_requests = 1;
  config.max_seq_len = 8;
  Engine engine(config, model, nullptr, {});
  EXPECT_NE(engine.AddRequest("a", {1}, Params(1)), nullptr);
  EXPECT_EQ(engine.AddRequest("b", {1}, Params(1)), nullptr);
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{1, 2, 3}, Params(6)), Error);
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{}, Params(1)), Error);
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{99}, Params(1)), Error);
  EXPECT_THROW(engine.PreparePrompt(std::string("hi"), Params(1)), Error);  // no tokenizer
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{1}, Params(1, -1.0)), Error);
  EXPECT_EQ(engine.PreparePrompt(std::vector<int32_t>{1, 2}, Params(6)),
            (std::vector<int32_t>{1, 2}));
}

TEST(EngineTest, AFailedStepFailsItsRequestsAndTheEngineGoesOn) {
  FailingModel model;
  Engine engine(TestConfig(), model, nullptr, {});
  auto first = engine.AddRequest("a", {1, 2}, Params(3));
  model.fail_next = true;
  while (engine.HasWork()) engine.Step();
  const auto failed = Drain(*first);
  ASSERT_TRUE(failed.back().error.has_value());
  EXPECT_NE(failed.back().error->find("out of memory"), std::string::npos);
  auto second = engine.AddRequest("b", {1, 2}, Params(3));
  while (engine.HasWork()) engine.Step();
  EXPECT_EQ(TokenIds(Drain(*second)), (std::vector<int32_t>{5, 6, 7}));
}

TEST(EngineTest, CancelFreesTheSlotAtTheNextStep) {
  testing::ScriptedModel model(32, {5});
  Engine engine(TestConfig(), model, nullptr, {});
  auto kept = engine.AddRequest("kept", {1}, Params(3));
  auto gone = engine.AddRequest("gone", {1}, Params(1000));
  ASSERT_TRUE(engine.Step());  // prefill
  engine.Cancel("gone");
  while (engine.HasWork()) engine.Step();
  EXPECT_EQ(TokenIds(Drain(*kept)).size(), 3U);
  const auto cancelled = Drain(*gone);
  EXPECT_EQ(TokenIds(cancelled).size(), 1U);  // only the prefill token was generated
  EXPECT_TRUE(cancelled.back().error.has_value());
}

TEST(EngineTest, EngineThreadServesAndStopFailsInFlightRequests) {
  testing::ScriptedModel model(32, {5});
  Engine engine(TestConfig(2), model, nullptr, {});
  engine.Start();
  auto quick = engine.AddRequest("quick", {1}, Params(4));
  EXPECT_EQ(TokenIds(Drain(*quick)).size(), 4U);
  auto endless = engine.AddRequest("endless", {1}, Params(1'000'000));
  ASSERT_TRUE(endless->Pop(milliseconds(20000)).has_value());  // it is running
  engine.Stop();
  const auto rest = Drain(*endless);
  ASSERT_TRUE(rest.back().error.has_value());
  EXPECT_EQ(*rest.back().error, "server shutting down");
  EXPECT_EQ(engine.AddRequest("late", {1}, Params(1)), nullptr);
}

TEST(EngineTest, PrefillRunsInCallsOfAtMostMaxNumBatchedTokens) {
  testing::ScriptedModel model(32, {5});
  EngineConfig config = TestConfig();
  config.max_num_batched_tokens = 4;
  Engine engine(config, model, nullptr, {});
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1}, {1, 2, 3, 4, 5}};
  std::vector<std::shared_ptr<OutputChannel>> outputs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    outputs.push_back(engine.AddRequest(std::to_string(i), prompts[i], Params(2)));
  }
  while (engine.HasWork()) engine.Step();
  for (const auto& output : outputs) EXPECT_EQ(TokenIds(Drain(*output)).size(), 2U);
  // Calls of 4 tokens: [3 + 1], [4], [4] (the 9-token prompt ends), [1 + 3], [2]; then one
  // decode step of a token per request.
  const std::vector<int64_t> expected = {3, 1, 4, 4, 1, 3, 2, 1, 1, 1, 1};
  EXPECT_EQ(model.num_new_calls(), expected);
}

// The fixture models (bf16 weights) in both matmul precisions: in bf16 a last-bit difference
// between batched and single rows would flip roundings, so equality there shows the kernels
// are batch-invariant, not merely close.
class EngineFixtureTest
    : public ::testing::TestWithParam<std::tuple<std::string, kernels::MatMulPrecision>> {
 protected:
  void SetUp() override {
    const auto& [arch, precision] = GetParam();
    const std::string dir = std::string(INFER_TEST_FIXTURES) + "/models/" + arch;
    loaded_ = std::make_unique<LoadedModel>(LoadModel(dir + "/model", LoadOptions{}));
    model_ = MakeDecoderModel(*loaded_, pool_, precision);
  }

  // Runs the requests as one batch, or each alone, and returns every request's tokens.
  // max_num_batched_tokens > 0 caps the tokens of each prefill call.
  std::vector<std::vector<int32_t>> Run(const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<SamplingParams>& params, bool batched,
                                        int64_t max_num_batched_tokens = 0) {
    std::vector<std::vector<int32_t>> tokens;
    EngineConfig config = TestConfig(batched ? 8 : 1);
    if (max_num_batched_tokens > 0) config.max_num_batched_tokens = max_num_batched_tokens;
    Engine engine(config, *model_, nullptr, {});
    std::vector<std::shared_ptr<OutputChannel>> outputs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      outputs.push_back(engine.AddRequest(std::to_string(i), prompts[i], params[i]));
    }
    while (engine.HasWork()) engine.Step();
    tokens.reserve(outputs.size());
    for (const auto& output : outputs) tokens.push_back(TokenIds(Drain(*output)));
    return tokens;
  }

  ThreadPool pool_{2};
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<LanguageModel> model_;
};

TEST_P(EngineFixtureTest, BatchedOutputEqualsSingleRequestOutput) {
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 17, 42}, {3, 9, 100, 200, 7, 8, 11, 300, 12}, {5}, {250, 251, 252, 253, 254}};
  std::vector<SamplingParams> params = {Params(6), Params(9, 0.8), Params(4), Params(7, 1.0)};
  params[1].seed = 11;
  params[1].top_k = 20;
  params[3].seed = 12;
  params[3].top_p = 0.9;
  const auto batched = Run(prompts, params, true);
  const auto single = Run(prompts, params, false);
  EXPECT_EQ(batched, single);
  // Chunked prefill: 4 tokens per call packs short prompts together and splits the long ones.
  EXPECT_EQ(Run(prompts, params, true, 4), single);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(batched[i].size(), static_cast<size_t>(params[i].max_new_tokens));
    // And equal to generate() on its own.
    const GenerationResult alone = Generate(*model_, nullptr, prompts[i], params[i]);
    EXPECT_EQ(batched[i], alone.token_ids) << "request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EngineFixtureTest,
                         ::testing::Combine(::testing::Values("llama", "qwen3", "gemma3"),
                                            ::testing::Values(kernels::MatMulPrecision::kF32,
                                                              kernels::MatMulPrecision::kBf16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(
                                      kernels::MatMulPrecisionName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace infer
