// `--lora` on the commands that run the model, against the float64 reference of the adapter
// merged into its base (tests/gguf/reference_f64.py --lora, numpy): `infer logits` within the
// fixtures' tolerance, `infer generate` the reference's greedy ids, the speculative path too;
// `infer bench` runs a batch whose rows take the base and an adapter in turn; a bad adapter is a
// one-line error naming it.
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/loader/test_util.h"
#include "../unit/model/fixture_logits.h"
#include "testing/paths.h"
#include "testing/subprocess.h"

namespace infer {
namespace {

using nlohmann::json;

std::string Model(const std::string& arch) {
  return testing::FixturePath("models/" + arch + "/model").string();
}

void RunTool(const std::string& command) {
  ASSERT_EQ(std::system((command + " > /dev/null").c_str()), 0) << command;
}

std::string Ids(const std::vector<int32_t>& ids, const char* separator) {
  std::string text;
  for (const int32_t id : ids) text += (text.empty() ? "" : separator) + std::to_string(id);
  return text;
}

class CliLoraTest : public ::testing::Test {
 protected:
  std::string Adapter(const std::string& arch, const std::string& options) {
    const std::string dir = (dir_.path() / arch).string();
    RunTool(fmt::format("{} {} {} {}", testing::LoraTool("make_adapter.py"), Model(arch), dir,
                        options));
    return dir;
  }
  testing::TempDir dir_;
};

TEST_F(CliLoraTest, LogitsAndGreedyIdsAreTheMergedReferences) {
  for (const char* arch : {"llama", "gemma3"}) {
    SCOPED_TRACE(arch);
    const std::string adapter = Adapter(arch, "--rank 8 --dtype bf16 --seed 21");
    const auto ids = Reference(arch)["logits_input_ids"].get<std::vector<int32_t>>();
    const std::string reference = (dir_.path() / fmt::format("{}.ref", arch)).string();
    RunTool(fmt::format("{} {} {} --lora {} {}", testing::GgufTool("reference_f64.py"), Model(arch),
                        reference, adapter, Ids(ids, " ")));
    const std::string out = (dir_.path() / fmt::format("{}.bin", arch)).string();
    const auto logits = testing::RunCommand({testing::InferBinary(), "logits", "--model",
                                             Model(arch), "--prompt-ids", Ids(ids, ","), "--out",
                                             out, "--matmul-precision", "f32", "--lora", adapter});
    ASSERT_EQ(logits.exit_code, 0) << logits.err;
    const std::vector<float> got = ReadF32(out), want = ReadF32(reference);
    ASSERT_EQ(got.size(), want.size());
    const auto rows = static_cast<int64_t>(ids.size());
    EXPECT_LE(WorstRowError(got.data(), want.data(), rows, static_cast<int64_t>(got.size()) / rows),
              1e-4);
    // Greedy: the reference's ids, with and without n-gram drafts.
    const std::string greedy = (dir_.path() / fmt::format("{}.ids", arch)).string();
    RunTool(fmt::format("{} {} {} --lora {} --greedy 10 {}", testing::GgufTool("reference_f64.py"),
                        Model(arch), greedy, adapter, Ids(ids, " ")));
    std::ifstream in(greedy);
    std::vector<int> expected;
    for (int id = 0; in >> id;) expected.push_back(id);
    for (const bool speculative : {false, true}) {
      std::vector<std::string> argv = {testing::InferBinary(),
                                       "generate",
                                       "--model",
                                       Model(arch),
                                       "--prompt-ids",
                                       Ids(ids, ","),
                                       "--temperature",
                                       "0",
                                       "--max-new-tokens",
                                       "10",
                                       "--matmul-precision",
                                       "f32",
                                       "--kv-cache-dtype",
                                       "f32",
                                       "--lora",
                                       adapter,
                                       "--json"};
      if (speculative) {
        argv.insert(argv.end(), {"--speculative-config",
                                 R"({"method": "ngram", "num_speculative_tokens": 3,
                                     "prompt_lookup_min": 1, "prompt_lookup_max": 2})"});
      }
      const auto result = testing::RunCommand(argv);
      ASSERT_EQ(result.exit_code, 0) << result.err;
      // (An EOS id ends the run early; the reference ran on.)
      const auto generated = json::parse(result.out)["token_ids"].get<std::vector<int>>();
      ASSERT_FALSE(generated.empty());
      EXPECT_EQ(generated,
                std::vector<int>(expected.begin(),
                                 expected.begin() + static_cast<std::ptrdiff_t>(generated.size())))
          << "speculative " << speculative;
    }
  }
}

TEST_F(CliLoraTest, BenchRowsTakeTheBaseAndTheAdaptersInTurn) {
  const std::string adapter = Adapter("qwen3", "--rank 4 --seed 22");
  const auto result = testing::RunCommand(
      {testing::InferBinary(), "bench", "--model", Model("qwen3"), "--prompt-tokens", "8",
       "--gen-tokens", "4", "--threads", "1", "--parallel", "3", "--repetitions", "1", "--lora",
       "none", "--lora", adapter, "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(result.out);
  EXPECT_EQ(report["lora"], json::array({"none", adapter}));
  EXPECT_GT(report["results"][0]["decode_tok_s"].get<double>(), 0.0);
}

TEST_F(CliLoraTest, ABadAdapterIsOneLineNamingIt) {
  const std::string adapter = Adapter("qwen3", "--rank 4 --seed 23");
  // The qwen3 fixture's adapter on the llama fixture: other shapes.
  const auto result =
      testing::RunCommand({testing::InferBinary(), "generate", "--model", Model("llama"),
                           "--prompt-ids", "1,2,3", "--lora", adapter});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err.find("error: LoRA adapter '" + adapter + "'"), 0U) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

}  // namespace
}  // namespace infer
