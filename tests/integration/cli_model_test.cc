// `infer logits` and `infer bench` end to end on the fixture models.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/loader/test_util.h"
#include "testing/paths.h"
#include "testing/subprocess.h"

namespace infer {
namespace {

std::vector<float> ReadF32(const std::filesystem::path& path) {
  const std::string bytes = testing::ReadFile(path);
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

TEST(CliLogits, MatchesTheReferenceWithAndWithoutCache) {
  for (const char* arch : {"llama", "qwen3", "gemma3"}) {
    const auto dir = testing::FixturePath(std::string("models/") + arch);
    std::ifstream in(dir / "reference.json");
    const auto ids = nlohmann::json::parse(in)["logits_input_ids"].get<std::vector<int>>();
    std::string id_list;
    for (int id : ids) {
      if (!id_list.empty()) id_list += ',';
      id_list += std::to_string(id);
    }
    const auto expected = ReadF32(dir / "logits.f32.bin");
    for (const bool cached : {true, false}) {
      testing::TempDir out;
      std::vector<std::string> argv = {::infer::testing::InferBinary(),
                                       "logits",
                                       "--model",
                                       (dir / "model").string(),
                                       "--prompt-ids",
                                       id_list,
                                       "--out",
                                       (out.path() / "l.bin").string(),
                                       "--matmul-precision",
                                       "f32"};  // the reference's tolerance
      if (!cached) argv.push_back("--no-kv-cache");
      const auto result = testing::RunCommand(argv);
      ASSERT_EQ(result.exit_code, 0) << result.err;
      const auto actual = ReadF32(out.path() / "l.bin");
      ASSERT_EQ(actual.size(), expected.size()) << arch;
      const size_t vocab = 512;
      for (size_t row = 0; row < ids.size(); ++row) {
        double max_diff = 0, max_ref = 0;
        for (size_t v = 0; v < vocab; ++v) {
          max_diff = std::max(
              max_diff, std::abs(double(actual[row * vocab + v]) - expected[row * vocab + v]));
          max_ref = std::max(max_ref, std::abs(double(expected[row * vocab + v])));
        }
        EXPECT_LE(max_diff, 1e-4 * max_ref) << arch << " row " << row;
      }
    }
  }
}

TEST(CliLogits, BadIdsAreOneLineErrors) {
  const auto model = testing::FixturePath("models/llama/model").string();
  for (const char* ids : {"1,x,3", "", "1,,2", "-4", "99999"}) {
    const auto result = testing::RunCommand({::infer::testing::InferBinary(), "logits", "--model",
                                             model, "--prompt-ids", ids, "--out", "/dev/null"});
    EXPECT_EQ(result.exit_code, 1) << ids << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
}

TEST(CliBench, JsonReportHasTheContractFields) {
  const auto result = testing::RunCommand({::infer::testing::InferBinary(), "bench", "--model",
                                           testing::FixturePath("models/gemma3/model").string(),
                                           "--prompt-tokens", "16", "--gen-tokens", "8",
                                           "--repetitions", "2", "--threads", "1", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto report = nlohmann::json::parse(result.out);
  for (const char* key : {"prefill_tok_s", "prefill_tok_s_sd", "decode_tok_s", "decode_tok_s_sd"}) {
    ASSERT_TRUE(report.contains(key)) << key;
    EXPECT_GT(report[key].get<double>(), key[std::strlen(key) - 1] == 'd' ? -1.0 : 0.0) << key;
  }
  EXPECT_EQ(report["results"].size(), 1U);
}

// --parallel B: B sequences decode together, one result per batch size, and the table names
// the batch ("tg8 x3"); every row generates its tokens (decode of a batch measured at all).
TEST(CliBench, ParallelRunsBatchesOfSequences) {
  const std::string model = testing::FixturePath("models/llama/model").string();
  const auto result = testing::RunCommand(
      {::infer::testing::InferBinary(), "bench", "--model", model, "--prompt-tokens", "8",
       "--gen-tokens", "6", "--parallel", "1,3", "--repetitions", "1", "--threads", "1", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto report = nlohmann::json::parse(result.out);
  ASSERT_EQ(report["results"].size(), 2U);
  EXPECT_EQ(report["results"][0]["parallel"], 1);
  EXPECT_EQ(report["results"][1]["parallel"], 3);
  for (const auto& row : report["results"]) {
    EXPECT_GT(row["decode_tok_s"].get<double>(), 0.0);
    EXPECT_GT(row["prefill_tok_s"].get<double>(), 0.0);
  }
  const auto table = testing::RunCommand(
      {::infer::testing::InferBinary(), "bench", "--model", model, "--prompt-tokens", "8",
       "--gen-tokens", "6", "--parallel", "3", "--repetitions", "1", "--threads", "1"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("tg6 x3"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("pp8 x3"), std::string::npos) << table.out;
  const auto zero = testing::RunCommand({::infer::testing::InferBinary(), "bench", "--model", model,
                                         "--parallel", "0", "--threads", "1"});
  EXPECT_NE(zero.exit_code, 0);
}

}  // namespace
}  // namespace infer
