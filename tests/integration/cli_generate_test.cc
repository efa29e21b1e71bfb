// `infer generate` and `infer chat` end to end: fixture models by token ids (cache on and off),
// JSON fields, errors, streaming = result text, and the chat REPL under a pseudo-terminal.
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "../unit/loader/test_util.h"
#include "../unit/tokenizer/tokenizer_test_util.h"
#include "testing/llama3_vocab_model.h"
#include "testing/paths.h"
#include "testing/subprocess.h"

namespace infer {
namespace {

using nlohmann::json;

std::string IdList(const std::vector<int>& ids) {
  std::string text;
  for (const int id : ids) {
    if (!text.empty()) text += ',';
    text += std::to_string(id);
  }
  return text;
}

json Reference(const std::string& arch) {
  std::ifstream in(testing::FixturePath("models/" + arch) / "reference.json");
  return json::parse(in);
}

testing::CommandResult Generate(const std::string& model, std::vector<std::string> args) {
  // f32 products: the tests hold outputs to Hugging Face's float64 greedy ids (auto is bf16 on
  // AVX512_BF16 and AMX CPUs).
  std::vector<std::string> argv = {::infer::testing::InferBinary(),
                                   "generate",
                                   "--model",
                                   model,
                                   "--threads",
                                   "2",
                                   "--matmul-precision",
                                   "f32"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunCommand(argv);
}

TEST(CliGenerate, GreedyJsonMatchesReferenceWithAndWithoutCache) {
  for (const char* arch : {"llama", "qwen3", "gemma3"}) {
    const json reference = Reference(arch);
    const auto expected = reference["greedy_short"]["generated_ids"].get<std::vector<int>>();
    const std::string prompt = IdList(reference["greedy_short"]["prompt_ids"]);
    const std::string model = (testing::FixturePath(std::string("models/") + arch) / "model");
    // Cached, uncached, and cached with n-gram drafts (kept only where they are the model's
    // own greedy choice, so the ids are Hugging Face's still).
    for (const int mode : {0, 1, 2}) {
      const bool cached = mode != 1;
      std::vector<std::string> args = {"--prompt-ids",
                                       prompt,
                                       "--temperature",
                                       "0",
                                       "--max-new-tokens",
                                       std::to_string(expected.size()),
                                       "--json"};
      if (!cached) args.push_back("--no-kv-cache");
      if (mode == 2) {
        args.push_back("--speculative-config");
        args.push_back(
            R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
                "prompt_lookup_max": 3})");
      }
      const auto result = Generate(model, args);
      ASSERT_EQ(result.exit_code, 0) << arch << ": " << result.err;
      const json out = json::parse(result.out);
      EXPECT_EQ(out["token_ids"].get<std::vector<int>>(), expected) << arch;
      EXPECT_EQ(out["text"], "");
      EXPECT_EQ(out["finish_reason"], "length");
      EXPECT_EQ(out["prompt_tokens"], reference["greedy_short"]["prompt_ids"].size());
      EXPECT_EQ(out["generated_tokens"], expected.size());
      EXPECT_GT(out["timing"]["prefill_time_s"].get<double>(), 0.0);
      EXPECT_EQ(out["timing"]["decode_times_s"].size(), expected.size() - 1);
    }
  }
}

TEST(CliGenerate, SeededSamplingIsReproducibleAndCacheIndependent) {
  const std::string model = testing::FixturePath("models/qwen3/model");
  const std::vector<std::string> args = {"--prompt-ids",     "1,2,3,4", "--temperature", "0.9",
                                         "--top-k",          "40",      "--seed",        "11",
                                         "--max-new-tokens", "16",      "--json"};
  const auto first = Generate(model, args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto again = Generate(model, args);
  std::vector<std::string> uncached = args;
  uncached.push_back("--no-kv-cache");
  const auto no_cache = Generate(model, uncached);
  ASSERT_EQ(no_cache.exit_code, 0) << no_cache.err;
  EXPECT_EQ(json::parse(first.out)["token_ids"], json::parse(again.out)["token_ids"]);
  EXPECT_EQ(json::parse(first.out)["token_ids"], json::parse(no_cache.out)["token_ids"]);
}

TEST(CliGenerate, ErrorsAreOneLine) {
  const std::string model = testing::FixturePath("models/llama/model");
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--prompt", "hello"}, "no tokenizer.json"},
      {{"--prompt-ids", "1,2", "--max-new-tokens", "5000"}, "context length (4096)"},
      {{"--prompt-ids", "1,2", "--top-p", "1.5"}, "top_p must be in (0, 1]"},
      {{"--prompt-ids", "1,99999"}, "outside the vocab"},
      {{"--prompt-ids", "1", "--stop", "x"}, "stop strings need a tokenizer"},
      {{}, "exactly one of --prompt and --prompt-ids"},
      {{"--prompt-ids", "1", "--speculative-config", "{\"method\": \"ngram\""},
       "--speculative-config must be a JSON object"},
      {{"--prompt-ids", "1", "--speculative-config",
        R"({"method": "eagle", "num_speculative_tokens": 2})"},
       "--speculative-config: method \"eagle\" is not supported"},
      {{"--prompt-ids", "1", "--no-kv-cache", "--speculative-config",
        R"({"method": "ngram", "num_speculative_tokens": 2})"},
       "speculative decoding needs the KV cache"},
  };
  for (const auto& test_case : cases) {
    const auto result = Generate(model, test_case.args);
    EXPECT_EQ(result.exit_code, 1) << test_case.message;
    EXPECT_NE(result.err.find("error: "), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(test_case.message), std::string::npos) << result.err;
  }
}

TEST(CliGenerate, StreamedTextEqualsResultText) {
  if (!testing::RequireRealTokenizer("llama3")) return;
  testing::Llama3VocabModelDir model;
  const std::vector<std::string> args = {"--load-format",    "dummy",  "--prompt",
                                         "Hello there",      "--seed", "3",
                                         "--max-new-tokens", "12",     "--chat"};
  const auto streamed = Generate(model.path(), args);
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const auto result = Generate(model.path(), json_args);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(streamed.out, json::parse(result.out)["text"].get<std::string>() + "\n");
  EXPECT_NE(streamed.err.find("generated tokens"), std::string::npos) << streamed.err;
}

// --reasoning-budget on a tiny model with Qwen3's vocabulary: from a prompt that opens the
// reasoning block, the first 2 tokens are the unbounded run's, then "\n</think>\n\n" (the
// text Qwen3's template closes an empty block with).
TEST(CliGenerate, ReasoningBudgetForcesTheEndOfThinking) {
  if (!testing::RequireRealTokenizer("qwen3")) return;
  testing::Qwen3VocabModelDir model;
  const auto run = [&](const std::string& budget) {
    const auto result =
        Generate(model.path(), {"--load-format", "dummy", "--prompt",
                                "<|im_start|>assistant\n<think>\n", "--temperature", "0",
                                "--max-new-tokens", "6", "--reasoning-budget", budget, "--json"});
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return json::parse(result.out);
  };
  const json free = run("-1");
  const json bounded = run("2");
  const auto free_ids = free["token_ids"].get<std::vector<int>>();
  const auto ids = bounded["token_ids"].get<std::vector<int>>();
  ASSERT_EQ(ids.size(), 6U);
  EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + 2),
            std::vector<int>(free_ids.begin(), free_ids.begin() + 2));
  const std::string text = bounded["text"].get<std::string>();
  ASSERT_NE(text.find("</think>"), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.find("</think>") - 1, 11), "\n</think>\n\n") << text;
}

// The child's side of a pseudo-terminal: what a user at a terminal would see and type.
class PtySession {
 public:
  explicit PtySession(const std::vector<std::string>& argv) {
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> args;
      args.reserve(argv.size() + 1);
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~PtySession() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  bool started() const { return pid_ > 0; }
  void Type(const std::string& text) {
    ASSERT_EQ(write(fd_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // Reads until `marker` appears after the current position; returns what was read.
  std::string ReadUntil(const std::string& marker, int timeout_s = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (output_.find(marker, position_) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) break;
      pollfd poll_fd{fd_, POLLIN, 0};
      if (poll(&poll_fd, 1, 200) <= 0) continue;
      char buffer[4096];
      const ssize_t count = read(fd_, buffer, sizeof(buffer));
      if (count <= 0) break;  // the child closed the terminal
      output_.append(buffer, static_cast<size_t>(count));
    }
    const size_t found = output_.find(marker, position_);
    const size_t end = found == std::string::npos ? output_.size() : found + marker.size();
    std::string read_text = output_.substr(position_, end - position_);
    position_ = end;
    return read_text;
  }
  int Wait(int timeout_s = 30) {
    for (int i = 0; i < timeout_s * 10; ++i) {
      int status = 0;
      ReadUntil("\x01never", 0);  // drain so the child never blocks on a full terminal
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(100000);
    }
    return -1;
  }
  const std::string& output() const { return output_; }

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string output_;
  size_t position_ = 0;
};

TEST(CliChat, TwoTurnsResetAndExitUnderAPty) {
  if (!testing::RequireRealTokenizer("llama3")) return;
  testing::Llama3VocabModelDir model;
  PtySession chat({::infer::testing::InferBinary(), "chat", "--model", model.path(),
                   "--load-format", "dummy", "--threads", "2", "--max-new-tokens", "6", "--seed",
                   "5", "--reasoning-budget", "32"});
  ASSERT_TRUE(chat.started());
  // Sampling defaults come from generation_config.json (temperature 0.6, top_p 0.9).
  const std::string banner = chat.ReadUntil("> ");
  EXPECT_NE(banner.find("temperature=0.6"), std::string::npos) << banner;
  EXPECT_NE(banner.find("top_p=0.9"), std::string::npos) << banner;
  chat.Type("What is 2+2?\n");
  const std::string first = chat.ReadUntil("\n> ");
  EXPECT_NE(first.find("[reply cut at max_new_tokens=6]"), std::string::npos) << first;
  chat.Type("And 3+3?\n");
  const std::string second = chat.ReadUntil("\n> ");
  EXPECT_NE(second.find("[reply cut"), std::string::npos) << second;
  // The conversation stays in the engine's prefix cache: turn 2 reuses at least every full
  // 16-token block of turn 1's prompt (a prefix of turn 2's) instead of computing it again.
  const auto prompt_stats = [](const std::string& text) {
    long long prompt = -1, cached = -1;
    const size_t at = text.find("prompt tokens, ");
    if (at != std::string::npos) {
      const size_t open = text.rfind('[', at);
      std::sscanf(text.c_str() + open, "[%lld prompt tokens, %lld from the prefix cache", &prompt,
                  &cached);
    }
    return std::make_pair(prompt, cached);
  };
  const auto [prompt1, cached1] = prompt_stats(first);
  const auto [prompt2, cached2] = prompt_stats(second);
  ASSERT_GT(prompt1, 0) << first;
  EXPECT_EQ(cached1, 0) << first;
  EXPECT_GT(prompt2, prompt1) << second;
  EXPECT_GE(cached2, prompt1 / 16 * 16) << second;
  chat.Type("/params\n");
  const std::string params = chat.ReadUntil("\n> ");
  EXPECT_NE(params.find("max_new_tokens=6"), std::string::npos) << params;
  EXPECT_NE(params.find("reasoning_budget=32"), std::string::npos) << params;
  chat.Type("/reset\n");
  EXPECT_NE(chat.ReadUntil("\n> ").find("[conversation cleared]"), std::string::npos);
  chat.Type("Hi again\n");
  EXPECT_NE(chat.ReadUntil("\n> ").find("[reply cut"), std::string::npos);
  chat.Type("/exit\n");
  EXPECT_EQ(chat.Wait(), 0) << chat.output();
}

}  // namespace
}  // namespace infer
