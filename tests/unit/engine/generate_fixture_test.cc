// generate() on the fixture models: the reference greedy continuation, identical tokens with
// and without the KV cache (greedy and seeded), and batches identical to single prompts.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "infer/engine/decoder_model.h"
#include "infer/engine/generate.h"
#include "testing/paths.h"

namespace infer {
namespace {

class GenerateFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr int kThreads = 2;

  void SetUp() override {
    const std::string dir = std::string(::infer::testing::FixturesDir()) + "/models/" + GetParam();
    std::ifstream in(dir + "/reference.json");
    ASSERT_TRUE(in.good()) << dir;
    reference_ = nlohmann::json::parse(in);
    loaded_ = std::make_unique<LoadedModel>(LoadModel(dir + "/model", LoadOptions{}));
    model_ = MakeDecoderModel(*loaded_, pool_);
  }

  std::vector<int32_t> Ids(const char* key, const char* field) const {
    return reference_[key][field].get<std::vector<int32_t>>();
  }

  GenerationOutput Run(const std::vector<int32_t>& prompt, const SamplingParams& params,
                       bool use_cache) {
    GenerateOptions options;
    options.use_kv_cache = use_cache;
    options.kv_cache_dtype = DType::kF32;  // the float64 references hold at 1e-4 in f32
    return Generate(*model_, nullptr, prompt, params, options);
  }

  ThreadPool pool_{kThreads};
  nlohmann::json reference_;
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<LanguageModel> model_;
};

TEST_P(GenerateFixtureTest, GreedyMatchesReferenceWithAndWithoutCache) {
  const std::vector<int32_t> prompt = Ids("greedy_short", "prompt_ids");
  const std::vector<int32_t> expected = Ids("greedy_short", "generated_ids");
  SamplingParams params;
  params.temperature = 0.0;
  params.max_new_tokens = static_cast<int64_t>(expected.size());
  const GenerationOutput cached = Run(prompt, params, true);
  const GenerationOutput uncached = Run(prompt, params, false);
  EXPECT_EQ(cached.token_ids, expected);
  EXPECT_EQ(uncached.token_ids, cached.token_ids);
  EXPECT_EQ(cached.finish_reason, FinishReason::kLength);
  EXPECT_EQ(model_->kv_cache_bytes(), 0);  // the last run was uncached
}

TEST_P(GenerateFixtureTest, SeededSamplingSameWithAndWithoutCache) {
  const std::vector<int32_t> prompt = Ids("greedy_long", "prompt_ids");
  SamplingParams params;
  params.temperature = 0.8;
  params.top_k = 50;
  params.top_p = 0.95;
  params.repetition_penalty = 1.1;
  params.seed = 42;
  params.max_new_tokens = 24;
  const GenerationOutput cached = Run(prompt, params, true);
  EXPECT_EQ(Run(prompt, params, false).token_ids, cached.token_ids);
  EXPECT_EQ(Run(prompt, params, true).token_ids, cached.token_ids);
  params.seed = 43;
  EXPECT_NE(Run(prompt, params, true).token_ids, cached.token_ids);
}

TEST_P(GenerateFixtureTest, BatchEqualsSinglePrompts) {
  const std::vector<int32_t> short_prompt = Ids("greedy_short", "prompt_ids");
  const std::vector<int32_t> long_prompt = Ids("greedy_long", "prompt_ids");
  const std::vector<std::vector<int32_t>> prompts{
      long_prompt, short_prompt, {long_prompt.begin(), long_prompt.begin() + 5}};
  std::vector<SamplingParams> params(3);
  params[0].temperature = 0.0;
  params[0].max_new_tokens = 12;
  params[1].temperature = 0.7;
  params[1].seed = 7;
  params[1].max_new_tokens = 20;
  params[2].seed = 9;
  params[2].top_k = 20;
  params[2].max_new_tokens = 6;
  for (const bool use_cache : {true, false}) {
    GenerateOptions options;
    options.use_kv_cache = use_cache;
    options.kv_cache_dtype = DType::kF32;  // the float64 references hold at 1e-4 in f32
    options.eos_token_ids = {2};
    const auto batch = GenerateBatch(*model_, nullptr, prompts, params, options);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto single = Generate(*model_, nullptr, prompts[i], params[i], options);
      EXPECT_EQ(batch[i].token_ids, single.token_ids) << "row " << i;
      EXPECT_EQ(batch[i].finish_reason, single.finish_reason) << "row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FixtureModels, GenerateFixtureTest,
                         ::testing::Values("llama", "qwen3", "gemma3"));

}  // namespace
}  // namespace infer
