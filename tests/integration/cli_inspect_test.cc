// `infer inspect` on every fixture model and, with dummy weights, on the real dev configs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/loader/test_util.h"
#include "testing/paths.h"
#include "testing/sanitized.h"
#include "testing/subprocess.h"

namespace infer {
namespace {

nlohmann::json Inspect(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {::infer::testing::InferBinary(), "inspect", "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto result = testing::RunCommand(argv);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(result.out);
}

TEST(CliInspect, LoadsEveryFixtureModel) {
  for (const char* arch : {"llama", "qwen3", "gemma3"}) {
    for (const char* variant : {"model", "model_f32"}) {
      const auto path =
          testing::FixturePath(std::string("models/") + arch + "/" + variant).string();
      const auto info = Inspect({"--model", path});
      EXPECT_EQ(info["weight_dtype"], std::string(variant) == "model" ? "bf16" : "f32");
      EXPECT_GT(info["parameters"].get<int64_t>(), 100000);
    }
  }
  const auto gemma = Inspect({"--model", testing::FixturePath("models/gemma3/model").string()});
  EXPECT_EQ(gemma["layers"][5]["attention"], "full");
  EXPECT_EQ(gemma["layers"][0]["attention"], "sliding");
  EXPECT_EQ(gemma["layers"][0]["rope_theta"], 10000.0);
}

TEST(CliInspect, RealConfigsWithDummyWeights) {
  struct Expected {
    const char* name;
    int64_t parameters;
    int64_t kv_bytes_per_token_bf16;
  };
  // Parameters as published; KV bytes = 2 (K,V) x layers x kv_heads x head_dim x 2 bytes.
  // Under the sanitizers only Gemma (the fewest parameters): billions of instrumented stores
  // per model were five minutes of the ThreadSanitizer run; the release build checks all three.
  std::vector<Expected> models = {
      Expected{"gemma-3-1b-it", 999885952, 2 * 26 * 1 * 256 * 2},
      Expected{"Llama-3.2-1B-Instruct", 1235814400, 2 * 16 * 8 * 64 * 2},
      Expected{"Qwen3-1.7B", 1720574976, 2 * 28 * 8 * 128 * 2}};
  if (testing::kSanitized) models.resize(1);
  for (const Expected& expected : models) {
    const auto info =
        Inspect({"--model", testing::FixturePath(std::string("configs/") + expected.name).string(),
                 "--load-format", "dummy"});
    EXPECT_EQ(info["parameters"].get<int64_t>(), expected.parameters) << expected.name;
    EXPECT_EQ(info["kv_cache_bytes_per_token_bf16"].get<int64_t>(),
              expected.kv_bytes_per_token_bf16);
    EXPECT_EQ(info["weight_bytes"].get<int64_t>(), expected.parameters * 2);
  }
}

// --quantization: every matrix of the fixtures (all sizes multiples of 32) is int8 at exactly
// 8.5 bits per weight; int4 layers (5 bits) with an int8 head fall in between; the weight bytes
// shrink accordingly; an unknown type is a one-line error.
TEST(CliInspect, QuantizationShowsBitsPerWeightAndBytes) {
  for (const char* arch : {"llama", "qwen3", "gemma3"}) {
    const auto path = testing::FixturePath(std::string("models/") + arch + "/model").string();
    const auto none = Inspect({"--model", path});
    const auto int8 = Inspect({"--model", path, "--quantization", "int8"});
    const auto int4 = Inspect({"--model", path, "-q", "int4"});
    EXPECT_EQ(none["quantization"], "none");
    EXPECT_EQ(none["matrix_bits_per_weight"].get<double>(), 16.0) << arch;
    EXPECT_EQ(int8["quantization"], "int8");
    EXPECT_EQ(int8["matrix_bits_per_weight"].get<double>(), 8.5) << arch;
    EXPECT_EQ(int4["quantization"], "int4");
    EXPECT_GT(int4["matrix_bits_per_weight"].get<double>(), 5.0) << arch;
    EXPECT_LT(int4["matrix_bits_per_weight"].get<double>(), 8.5) << arch;
    EXPECT_LT(int8["weight_bytes"].get<int64_t>(), none["weight_bytes"].get<int64_t>());
    EXPECT_LT(int4["weight_bytes"].get<int64_t>(), int8["weight_bytes"].get<int64_t>());
    EXPECT_GT(int4["rss_after_load_bytes"].get<int64_t>(), 0);
  }
  const auto result = testing::RunCommand({::infer::testing::InferBinary(), "inspect", "--model",
                                           testing::FixturePath("models/llama/model").string(),
                                           "--quantization", "q4_0"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("q4_0"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("int4"), std::string::npos) << result.err;
}

// --lm-head-quantization none keeps the output head (all fixtures tie it to the embedding) at
// the checkpoint's bf16 under int8 and int4: exactly vocab x hidden x (2 - 34/32) bytes more
// than its int8 (an f16 scale per 32 int8 weights), the layers unchanged; int6 takes exactly
// vocab x hidden x 8/32 fewer; int8 is what auto takes.
TEST(CliInspect, LmHeadQuantizationNoneKeepsTheHeadAtTheCheckpointDtype) {
  for (const char* arch : {"llama", "qwen3", "gemma3"}) {
    const auto path = testing::FixturePath(std::string("models/") + arch + "/model").string();
    EXPECT_EQ(Inspect({"--model", path})["lm_head_quantization"], "none") << arch;
    for (const char* type : {"int8", "int4"}) {
      const auto head_int8 = Inspect({"--model", path, "-q", type});
      const auto head_wide =
          Inspect({"--model", path, "-q", type, "--lm-head-quantization", "none"});
      EXPECT_EQ(head_int8["lm_head_quantization"], "int8") << arch << " " << type;
      EXPECT_EQ(head_wide["lm_head_quantization"], "none") << arch << " " << type;
      EXPECT_EQ(head_wide["quantization"], type) << arch;
      const int64_t head_weights =
          head_wide["vocab_size"].get<int64_t>() * head_wide["hidden_size"].get<int64_t>();
      EXPECT_EQ(head_wide["weight_bytes"].get<int64_t>() - head_int8["weight_bytes"].get<int64_t>(),
                head_weights * 2 - head_weights / 32 * 34)
          << arch << " " << type;
      // int6: 26 bytes per 32 weights (6 bits each and an f16 scale) against int8's 34.
      const auto head_int6 =
          Inspect({"--model", path, "-q", type, "--lm-head-quantization", "int6"});
      EXPECT_EQ(head_int6["lm_head_quantization"], "int6") << arch << " " << type;
      EXPECT_EQ(head_int8["weight_bytes"].get<int64_t>() - head_int6["weight_bytes"].get<int64_t>(),
                head_weights / 32 * (34 - 26))
          << arch << " " << type;
      const auto head_int8_named =
          Inspect({"--model", path, "-q", type, "--lm-head-quantization", "int8"});
      EXPECT_EQ(head_int8_named["lm_head_quantization"], "int8") << arch << " " << type;
      EXPECT_EQ(head_int8_named["weight_bytes"], head_int8["weight_bytes"]) << arch << " " << type;
    }
  }
  const auto result = testing::RunCommand({::infer::testing::InferBinary(), "inspect", "--model",
                                           testing::FixturePath("models/llama/model").string(),
                                           "-q", "int8", "--lm-head-quantization", "int4"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("--lm-head-quantization"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace infer
