// generate() on mock models: lengths, EOS, determinism, timing, edge cases, batches.
#include "infer/engine/generate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "infer/core/error.h"
#include "mock_model.h"

namespace infer {
namespace {

using testing::ScriptedModel;
using testing::UniformModel;

SamplingParams Greedy(int64_t max_new_tokens) {
  SamplingParams params;
  params.temperature = 0.0;
  params.max_new_tokens = max_new_tokens;
  return params;
}

TEST(GenerateTest, GreedyRunsToLength) {
  for (const bool use_cache : {true, false}) {
    ScriptedModel model(10, {3});
    GenerateOptions options;
    options.use_kv_cache = use_cache;
    options.kv_cache_dtype = DType::kF32;  // the float64 references hold at 1e-4 in f32
    const std::vector<int32_t> prompt{1, 2};
    const GenerationOutput result = Generate(model, nullptr, prompt, Greedy(5), options);
    EXPECT_EQ(result.token_ids, (std::vector<int32_t>{3, 3, 3, 3, 3}));
    EXPECT_EQ(result.finish_reason, FinishReason::kLength);
    EXPECT_EQ(result.prompt_tokens(), 2);
    EXPECT_EQ(result.generated_tokens(), 5);
    EXPECT_EQ(result.text, "");
    EXPECT_EQ(model.used_cache(), use_cache);
    // Prefill passes the prompt, every decode step one new token.
    EXPECT_EQ(model.num_new_calls(), (std::vector<int64_t>{2, 1, 1, 1, 1}));
  }
}

TEST(GenerateTest, StopsAtEos) {
  ScriptedModel model(10, {4, 5, 6, 9, 4});
  GenerateOptions options;
  options.eos_token_ids = {6};
  const std::vector<int32_t> prompt{1};
  GenerationOutput result = Generate(model, nullptr, prompt, Greedy(10), options);
  EXPECT_EQ(result.token_ids, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(result.finish_reason, FinishReason::kEos);
  EXPECT_EQ(result.generated_tokens(), 3);
  options.eos_token_ids = {9, 5};  // any id of the set
  result = Generate(model, nullptr, prompt, Greedy(10), options);
  EXPECT_EQ(result.token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(result.finish_reason, FinishReason::kEos);
  // EOS on the last allowed token is still "eos".
  result = Generate(model, nullptr, prompt, Greedy(2), options);
  EXPECT_EQ(result.finish_reason, FinishReason::kEos);
}

TEST(GenerateTest, SeedDeterminesTokens) {
  UniformModel model(1000);
  SamplingParams params;
  params.max_new_tokens = 16;
  params.seed = 42;
  const std::vector<int32_t> prompt{1, 2, 3};
  const GenerationOutput first = Generate(model, nullptr, prompt, params);
  const GenerationOutput second = Generate(model, nullptr, prompt, params);
  EXPECT_EQ(first.token_ids, second.token_ids);
  params.seed = 43;
  EXPECT_NE(Generate(model, nullptr, prompt, params).token_ids, first.token_ids);
}

// Every forward takes at least 3 ms.
class SlowModel : public ScriptedModel {
 public:
  SlowModel() : ScriptedModel(10, {3}) {}
  void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    ScriptedModel::Forward(steps, logits);
  }
};

TEST(GenerateTest, TimingFieldsMeasureTheSteps) {
  SlowModel model;
  const std::vector<int32_t> prompt{1, 2, 3};
  const auto start = std::chrono::steady_clock::now();
  const GenerationOutput result = Generate(model, nullptr, prompt, Greedy(6));
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The prefill and each decode step include one forward of >= 3 ms, and all of them together
  // fit in the wall time of the call.
  EXPECT_GE(result.timing.prefill_time_s, 0.003);
  ASSERT_EQ(result.timing.decode_times_s.size(), 5U);
  for (const double step_s : result.timing.decode_times_s) EXPECT_GE(step_s, 0.003);
  EXPECT_LE(result.timing.prefill_time_s + result.timing.decode_time_s(), wall_s);
}

TEST(GenerateTest, EdgeCases) {
  ScriptedModel model(10, {7});
  const std::vector<int32_t> one{5};
  GenerationOutput result = Generate(model, nullptr, one, Greedy(1));
  EXPECT_EQ(result.token_ids, (std::vector<int32_t>{7}));
  EXPECT_TRUE(result.timing.decode_times_s.empty());
  EXPECT_EQ(result.finish_reason, FinishReason::kLength);
  SamplingParams params = Greedy(3);
  params.stop = {};
  result = Generate(model, nullptr, one, params);
  EXPECT_EQ(result.generated_tokens(), 3);
}

TEST(GenerateTest, RejectsBadRequests) {
  ScriptedModel model(10, {7}, /*context_length=*/16);
  const std::vector<int32_t> prompt(10, 1);
  EXPECT_THROW(Generate(model, nullptr, prompt, Greedy(7)), Error);  // 17 > 16
  EXPECT_NO_THROW(Generate(model, nullptr, prompt, Greedy(6)));
  std::string message;  // stays empty, and fails the check, unless Generate throws
  try {
    Generate(model, nullptr, prompt, Greedy(100));
  } catch (const Error& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("context length (16)"), std::string::npos) << message;
  EXPECT_THROW(Generate(model, nullptr, std::vector<int32_t>{}, Greedy(1)), Error);
  EXPECT_THROW(Generate(model, nullptr, std::vector<int32_t>{10}, Greedy(1)), Error);
  SamplingParams params = Greedy(2);
  params.stop = {"x"};  // needs a tokenizer
  EXPECT_THROW(Generate(model, nullptr, prompt, params), Error);
  params = Greedy(2);
  params.top_p = 2.0;
  EXPECT_THROW(Generate(model, nullptr, prompt, params), Error);
}

TEST(GenerateTest, BatchRowsStopIndependently) {
  ScriptedModel model(10, {4, 5, 6, 7, 8});
  GenerateOptions options;
  options.eos_token_ids = {6};
  const std::vector<std::vector<int32_t>> prompts{{1}, {2, 3}, {1, 1, 1}};
  std::vector<SamplingParams> params{Greedy(8), Greedy(2), Greedy(8)};
  const std::vector<GenerationOutput> results =
      GenerateBatch(model, nullptr, prompts, params, options);
  ASSERT_EQ(results.size(), 3U);
  EXPECT_EQ(results[0].token_ids, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(results[0].finish_reason, FinishReason::kEos);
  EXPECT_EQ(results[1].token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(results[1].finish_reason, FinishReason::kLength);
  EXPECT_EQ(results[2].prompt_tokens(), 3);
}

TEST(GenerateTest, BatchEqualsSingleWhenSampling) {
  UniformModel model(500);
  std::vector<SamplingParams> params(3);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].seed = 100 + i;
    params[i].max_new_tokens = 5 + static_cast<int64_t>(i);
  }
  const std::vector<std::vector<int32_t>> prompts{{1}, {2, 3}, {4, 5, 6}};
  const auto batch = GenerateBatch(model, nullptr, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(batch[i].token_ids, Generate(model, nullptr, prompts[i], params[i]).token_ids);
  }
}

TEST(GenerateTest, ResultJson) {
  ScriptedModel model(10, {3});
  const std::vector<int32_t> prompt{1};
  const auto json = GenerationOutputToJson(Generate(model, nullptr, prompt, Greedy(2)));
  EXPECT_EQ(json["token_ids"], nlohmann::ordered_json::array({3, 3}));
  EXPECT_EQ(json["finish_reason"], "length");
  EXPECT_EQ(json["prompt_tokens"], 1);
  EXPECT_EQ(json["generated_tokens"], 2);
  EXPECT_EQ(json["text"], "");
  EXPECT_EQ(json["timing"]["decode_times_s"].size(), 1U);
  EXPECT_TRUE(json["timing"]["prefill_time_s"].is_number());
}

}  // namespace
}  // namespace infer
