// `infer tokenize | detokenize | chat-template` (DESIGN.md contracts) against the fixtures, from
// the real tokenizer files and from GGUF files holding them as llama.cpp's converter writes
// them (tests/gguf/write_gguf.py --vocab-only), and the one-line error for a model folder
// without tokenizer files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include "infer/cli/model_tokenizer.h"
#include "infer/loader/gguf.h"
#include "infer/tokenizer/gguf_vocab.h"
#include "testing/paths.h"
#include "tokenizer_test_util.h"

namespace infer {
namespace {

struct CommandResult {
  int exit_code;
  std::vector<nlohmann::ordered_json> lines;
  std::string stderr_text;
};

std::filesystem::path TempDir() {
  auto dir = std::filesystem::temp_directory_path() /
             ("infer_tokenizer_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

CommandResult RunInfer(const std::string& arguments,
                       const std::vector<nlohmann::ordered_json>& input) {
  const auto dir = TempDir();
  const auto in_path = dir / "in.jsonl", out_path = dir / "out.jsonl", err_path = dir / "err.txt";
  {
    std::ofstream in(in_path);
    for (const auto& line : input) in << line.dump() << "\n";
  }
  const std::string command = std::string(::infer::testing::InferBinary()) + " " + arguments +
                              " --input-jsonl " + in_path.string() + " > " + out_path.string() +
                              " 2> " + err_path.string();
  const int status = std::system(command.c_str());
  CommandResult result{WEXITSTATUS(status), {}, {}};
  std::ifstream out(out_path);
  std::string line;
  while (std::getline(out, line)) result.lines.push_back(nlohmann::ordered_json::parse(line));
  std::stringstream err;
  err << std::ifstream(err_path).rdbuf();
  result.stderr_text = err.str();
  return result;
}

// A vocab-only GGUF file of `model`'s real tokenizer files, written as llama.cpp's converter
// writes the tokenizer.* metadata (tests/gguf/write_gguf.py; Qwen3's padded to its model's
// 151936 ids, as its checkpoints are).
std::filesystem::path VocabOnlyGguf(const std::string& model) {
  const auto path = TempDir() / (model + ".gguf");
  if (!std::filesystem::exists(path)) {
    const std::string command = ::infer::testing::GgufTool("write_gguf.py") + " --vocab-only " +
                                testing::RealTokenizerDir(model).string() + " " + path.string() +
                                (model == "qwen3" ? " --vocab-size 151936" : "");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  return path;
}

// The added tokens Hugging Face calls plain and the converter writes as CONTROL (they look
// special: <|...|>, <unused...>, <mask>, <pad>).
std::vector<std::string> ConverterControlTokens(const std::string& model) {
  std::ifstream file(testing::RealTokenizerDir(model) / "tokenizer.json");
  const auto tokenizer = nlohmann::json::parse(file);
  std::vector<std::string> tokens;
  for (const auto& added : tokenizer["added_tokens"]) {
    const std::string content = added["content"];
    const bool looks_special = content == "<mask>" || content == "<pad>" ||
                               (content.starts_with("<|") && content.ends_with("|>")) ||
                               (content.starts_with("<unused") && content.ends_with(">"));
    if (!added["special"].get<bool>() && looks_special) tokens.push_back(content);
  }
  return tokens;
}

// The model's tokenizer files (a folder), or the same written into a GGUF file's metadata.
enum class Source { kFolder, kGguf };
using ModelSource = std::tuple<std::string, Source>;

std::string ModelArg(const ModelSource& source) {
  const auto& [model, kind] = source;
  return "--model " + (kind == Source::kFolder ? testing::RealTokenizerDir(model).string()
                                               : VocabOnlyGguf(model).string());
}

class TokenizerCliTest : public ::testing::TestWithParam<ModelSource> {};

TEST_P(TokenizerCliTest, TokenizeAndDetokenizeMatchFixtures) {
  const std::string model = std::get<0>(GetParam());
  if (!testing::RequireRealTokenizer(model)) return;
  const auto cases = testing::ReadJsonLines(testing::TokenizerFixture(model + ".jsonl"));
  std::vector<nlohmann::ordered_json> texts, ids, ids_special;
  for (const auto& c : cases) {
    texts.push_back({{"text", c["text"]}});
    ids.push_back({{"ids", c["ids"]}});
    ids_special.push_back({{"ids", c["ids_with_special"]}});
  }
  const std::string model_arg = ModelArg(GetParam());
  const auto plain = RunInfer("tokenize " + model_arg, texts);
  const auto special = RunInfer("tokenize " + model_arg + " --add-special-tokens", texts);
  const auto decoded = RunInfer("detokenize " + model_arg, ids);
  const auto skipped = RunInfer("detokenize " + model_arg + " --skip-special-tokens", ids_special);
  for (const auto* result : {&plain, &special, &decoded, &skipped}) {
    ASSERT_EQ(result->exit_code, 0) << result->stderr_text;
    ASSERT_EQ(result->lines.size(), cases.size());
  }
  // A GGUF file keeps one bit for "special": the converter marks as CONTROL the added tokens
  // Hugging Face calls plain but that look special (<mask>, <unusedN>, <|fim_...|>), so decoding
  // with skip_special_tokens drops them too.
  const std::vector<std::string> dropped = std::get<1>(GetParam()) == Source::kGguf
                                               ? ConverterControlTokens(model)
                                               : std::vector<std::string>{};
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(plain.lines[i]["ids"], cases[i]["ids"]) << cases[i]["id"];
    EXPECT_EQ(special.lines[i]["ids"], cases[i]["ids_with_special"]) << cases[i]["id"];
    EXPECT_EQ(decoded.lines[i]["text"], cases[i]["decoded"]) << cases[i]["id"];
    std::string skipped_text = cases[i]["decoded_skip_special"];
    for (const std::string& token : dropped) {
      for (size_t at; (at = skipped_text.find(token)) != std::string::npos;) {
        skipped_text.erase(at, token.size());
      }
    }
    EXPECT_EQ(skipped.lines[i]["text"], skipped_text) << cases[i]["id"];
  }
}

// The SentencePiece route: the merges a GGUF file's scores give (gguf_vocab.h) are Hugging
// Face's merges of the same tokenizer, in the same order.
TEST(GgufTokenizerTest, ScoreMergesAreHuggingFacesMerges) {
  if (!testing::RequireRealTokenizer("gemma3")) return;
  const GgufFile file = GgufFile::Open(VocabOnlyGguf("gemma3").string());
  const TokenizerJson from_gguf = GgufTokenizerJson(cli::ReadGgufVocab(file), "gemma3.gguf");
  const TokenizerJson real =
      ReadTokenizerJson((testing::RealTokenizerDir("gemma3") / "tokenizer.json").string());
  ASSERT_EQ(from_gguf.merges.size(), real.merges.size());
  size_t differ = 0;
  for (size_t i = 0; i < real.merges.size(); ++i) {
    if (from_gguf.merges[i] == real.merges[i]) continue;
    ++differ;
    ADD_FAILURE() << "merge " << i << ": " << from_gguf.merges[i].first << " + "
                  << from_gguf.merges[i].second << " vs Hugging Face's " << real.merges[i].first
                  << " + " << real.merges[i].second;
  }
  EXPECT_EQ(differ, 0U) << "of " << real.merges.size() << " merges";
}

TEST_P(TokenizerCliTest, ChatTemplateMatchesFixturesAndReportsRaises) {
  const std::string model = std::get<0>(GetParam());
  if (!testing::RequireRealTokenizer(model)) return;
  std::vector<nlohmann::ordered_json> expected;
  for (const char* file : {"chat_", "extra/chat_extra_"})
    for (auto& c : testing::ReadJsonLines(testing::TokenizerFixture(file + model + ".jsonl")))
      expected.push_back(std::move(c));
  std::vector<nlohmann::ordered_json> input;
  for (const auto& c : expected)
    input.push_back({{"messages", c["messages"]}, {"options", c["options"]}});
  const auto result = RunInfer("chat-template " + ModelArg(GetParam()), input);
  ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
  ASSERT_EQ(result.lines.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i].contains("error")) {
      EXPECT_TRUE(result.lines[i].contains("error")) << expected[i]["name"];
    } else {
      EXPECT_EQ(result.lines[i]["text"], expected[i]["rendered"]) << expected[i]["name"];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerCliTest,
                         ::testing::Combine(::testing::Values("llama3", "qwen3", "gemma3"),
                                            ::testing::Values(Source::kFolder, Source::kGguf)),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) == Source::kGguf ? "_gguf" : "");
                         });

TEST(TokenizerCliErrorTest, FolderWithoutTokenizerFailsWithOneLine) {
  const auto dir = TempDir() / "no_tokenizer";
  std::filesystem::create_directories(dir);
  for (const char* command : {"tokenize", "detokenize", "chat-template"}) {
    const auto result =
        RunInfer(std::string(command) + " --model " + dir.string(),
                 {{{"text", "x"}, {"ids", {1}}, {"messages", nlohmann::json::array()}}});
    EXPECT_NE(result.exit_code, 0) << command;
    EXPECT_TRUE(result.lines.empty()) << command;
    EXPECT_NE(result.stderr_text.find("error:"), std::string::npos) << result.stderr_text;
    EXPECT_EQ(std::count(result.stderr_text.begin(), result.stderr_text.end(), '\n'), 1)
        << result.stderr_text;
  }
}

TEST(TokenizerCliErrorTest, BadInputLinesFailWithOneLine) {
  if (!testing::RequireRealTokenizer("llama3")) return;
  const std::string model_arg = " --model " + testing::RealTokenizerDir("llama3").string();
  for (const auto& [command, line] : std::vector<std::pair<std::string, nlohmann::ordered_json>>{
           {"tokenize", {{"txt", "x"}}},
           {"detokenize", {{"ids", {-1}}}},
           {"detokenize", {{"ids", "1,2"}}},
           {"chat-template", {{"messages", "hi"}}}}) {
    const auto result = RunInfer(command + model_arg, {line});
    EXPECT_NE(result.exit_code, 0) << command << " " << line.dump();
    EXPECT_EQ(std::count(result.stderr_text.begin(), result.stderr_text.end(), '\n'), 1)
        << result.stderr_text;
  }
}

}  // namespace
}  // namespace infer
