// The completions API against the real `infer serve` over loopback (seed phase 4 API tests):
// valid streams on the three fixture models (the reference greedy tokens), concurrent requests
// equal to one at a time, every error status, string prompts, stop strings, and shutdown.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/loader/test_util.h"
#include "infer/kernels/cpu/isa.h"
#include "serve_test_util.h"
#include "testing/llama3_vocab_model.h"
#include "testing/paths.h"
#include "testing/server_process.h"
#include "testing/subprocess.h"

namespace infer {
namespace {

using nlohmann::json;
using testing::Post;
using testing::ServerProcess;
using testing::Summarize;

json Reference(const std::string& arch) {
  std::ifstream in(testing::FixturePath("models/" + arch + "/reference.json"));
  return json::parse(in);
}

std::vector<int32_t> EosIds(const std::string& arch) {
  std::ifstream in(testing::FixturePath("models/" + arch + "/model/config.json"));
  const json eos = json::parse(in)["eos_token_id"];
  return eos.is_array() ? eos.get<std::vector<int32_t>>()
                        : std::vector<int32_t>{eos.get<int32_t>()};
}

// The fixture's checkpoint folder, or its weights in a BF16 GGUF file (the same bf16 values)
// written as llama.cpp's converter writes it (tests/gguf/write_gguf.py).
enum class Source { kFolder, kGguf };

std::string FixtureModel(const std::string& arch, Source source, const testing::TempDir& dir) {
  const std::string folder = testing::FixturePath("models/" + arch + "/model").string();
  if (source == Source::kFolder) return folder;
  const std::string file = (dir.path() / (arch + ".gguf")).string();
  const std::string command = ::infer::testing::GgufTool("write_gguf.py") + " " + folder + " " +
                              file + " --type BF16 > /dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return file;
}

class ServeFixtureTest : public ::testing::TestWithParam<std::tuple<std::string, Source>> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model", FixtureModel(arch(), std::get<1>(GetParam()), dir_), "--served-model-name",
        "tiny", "--max-seq-len", "64", "--threads", "1"});
    ASSERT_TRUE(server_->started()) << server_->log();
  }
  const std::string& arch() const { return std::get<0>(GetParam()); }
  void TearDown() override {
    if (server_ && server_->started()) {
      EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->log();
    }
  }
  testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_P(ServeFixtureTest, StreamsTheReferenceGreedyTokens) {
  const json reference = Reference(arch());
  const auto prompt = reference["greedy_short"]["prompt_ids"].get<std::vector<int32_t>>();
  auto expected = reference["greedy_short"]["generated_ids"].get<std::vector<int32_t>>();
  // The server stops at the model's EOS ids; the reference ran on regardless.
  std::string expected_reason = "length";
  const std::vector<int32_t> eos = EosIds(arch());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::find(eos.begin(), eos.end(), expected[i]) != eos.end()) {
      expected.resize(i + 1);
      expected_reason = "eos";
      break;
    }
  }
  const auto result =
      Post(server_->port(),
           {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 32}, {"temperature", 0}});
  ASSERT_EQ(result.status, 200) << result.body << result.transport_error;
  const auto summary = Summarize(result);
  EXPECT_EQ(summary.done_events, 1);
  EXPECT_EQ(summary.error_events, 0);
  ASSERT_EQ(summary.last_event, "done");
  std::vector<int32_t> streamed = summary.token_ids;
  if (expected_reason == "eos") streamed.push_back(expected.back());  // EOS has no token event
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(summary.last["finish_reason"], expected_reason);
  EXPECT_EQ(summary.last["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(summary.last["usage"]["completion_tokens"], expected.size());
  EXPECT_EQ(summary.last["usage"]["total_tokens"], prompt.size() + expected.size());
}

TEST_P(ServeFixtureTest, ConcurrentRequestsEqualOneAtATime) {
  const json reference = Reference(arch());
  const json short_prompt = reference["greedy_short"]["prompt_ids"];  // 16 ids
  const json long_prompt = reference["greedy_long"]["prompt_ids"];    // 40 ids
  const std::vector<json> bodies = {
      {{"model", "tiny"}, {"prompt", short_prompt}, {"max_tokens", 20}, {"temperature", 0}},
      {{"model", "tiny"}, {"prompt", long_prompt}, {"max_tokens", 20}, {"temperature", 0}},
      {{"model", "tiny"},
       {"prompt", long_prompt},
       {"max_tokens", 24},
       {"temperature", 0.8},
       {"top_k", 50},
       {"top_p", 0.95},
       {"repetition_penalty", 1.1},
       {"seed", 42}},
      {{"model", "tiny"},
       {"prompt", short_prompt},
       {"max_tokens", 12},
       {"temperature", 1.0},
       {"seed", 7}},
  };
  std::vector<testing::StreamSummary> alone;
  for (const json& body : bodies) alone.push_back(Summarize(Post(server_->port(), body)));
  std::vector<std::future<server::CompletionResult>> futures;
  for (const json& body : bodies) {
    futures.push_back(
        std::async(std::launch::async, [&, body] { return Post(server_->port(), body); }));
  }
  for (size_t i = 0; i < bodies.size(); ++i) {
    const auto together = Summarize(futures[i].get());
    EXPECT_EQ(together.token_ids, alone[i].token_ids) << "request " << i;
    EXPECT_EQ(together.last, alone[i].last) << "request " << i;
    EXPECT_EQ(together.done_events, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ServeFixtureTest,
                         ::testing::Combine(::testing::Values("llama", "qwen3", "gemma3"),
                                            ::testing::Values(Source::kFolder, Source::kGguf)),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) == Source::kGguf ? "_gguf" : "");
                         });

TEST(ServeApi, ErrorStatusesAndInfoRoutes) {
  ServerProcess server({"--model", testing::FixturePath("models/llama/model").string(),
                        "--served-model-name", "tiny", "--max-seq-len", "64", "--threads", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  const std::vector<std::pair<std::string, int>> cases = {
      {"{not json", 400},
      {"[1,2,3]", 400},
      {R"({"model":"tiny","prompt":""})", 400},
      {R"({"model":"tiny","prompt":[]})", 400},
      {R"({"model":"tiny"})", 400},
      {R"({"model":"tiny","prompt":[1],"temperature":"warm"})", 400},
      {R"({"model":"tiny","prompt":[1],"stream":"yes"})", 400},
      {R"({"model":"nonexistent","prompt":[1]})", 422},
      {R"({"model":"tiny","prompt":[1],"temperature":-1.0})", 422},
      {R"({"model":"tiny","prompt":[1],"top_p":0})", 422},
      {R"({"model":"tiny","prompt":[1],"max_tokens":0})", 422},
      {R"({"model":"tiny","prompt":[1],"foo":"bar"})", 422},
      {R"({"model":"tiny","prompt":[1,2,3,4,5,6,7,8],"max_tokens":57})", 422},  // 65 > 64
      {R"({"model":"tiny","prompt":[1,512]})", 422},                            // vocab is 512
      {R"({"model":"tiny","prompt":"no tokenizer here"})", 422},
  };
  for (const auto& [body, status] : cases) {
    const auto result = server::PostCompletion("127.0.0.1", server.port(), body);
    EXPECT_EQ(result.status, status) << body << " -> " << result.body;
    const json error = json::parse(result.body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << result.body;
    EXPECT_EQ(error["error"]["code"], status) << result.body;
    EXPECT_FALSE(error["error"]["message"].get<std::string>().empty()) << result.body;
  }
  // The longest allowed request still runs.
  const auto fits = Post(server.port(), json::parse(R"({"model":"tiny","prompt":[1,2,3,4,5,6,7,8],
                                                        "max_tokens":56,"temperature":0})"));
  EXPECT_EQ(fits.status, 200) << fits.body;

  const auto [health_status, health] = server::HttpGet("127.0.0.1", server.port(), "/health");
  EXPECT_EQ(health_status, 200);
  EXPECT_EQ(json::parse(health)["status"], "ok");
  // The KV pool: blocks of 16 tokens; capacity = blocks x 16.
  const json kv = json::parse(health)["kv_cache"];
  EXPECT_EQ(kv["block_size"], 16);
  EXPECT_EQ(kv["capacity_tokens"].get<int64_t>(), kv["num_blocks"].get<int64_t>() * 16);
  EXPECT_EQ(kv["dtype"], "bf16");
  const auto [models_status, models] = server::HttpGet("127.0.0.1", server.port(), "/v1/models");
  EXPECT_EQ(models_status, 200);
  EXPECT_EQ(json::parse(models)["data"][0]["id"], "tiny");
  EXPECT_EQ(json::parse(models)["data"][0]["max_model_len"], 64);
  EXPECT_EQ(server::HttpGet("127.0.0.1", server.port(), "/v2/nothing").first, 404);
  EXPECT_EQ(server.Stop(SIGINT), 0) << server.log();
}

// --api-key, --api-key-file, $INFER_API_KEY or $INFER_API_KEY_FILE (the systemd unit's way):
// /v1/* needs "Authorization: Bearer KEY", compared exactly; anything else is 401 in OpenAI's
// error shape; /health stays open.
TEST(ServeApi, ApiKeyGuardsTheApiRoutes) {
  testing::TempDir dir;
  const std::string key_file = (dir.path() / "api-key").string();
  testing::WriteFile(key_file, "  s3cret-key \n# the first line is the key\n");
  for (const std::string source :
       {"--api-key", "--api-key-file", "INFER_API_KEY", "INFER_API_KEY_FILE"}) {
    SCOPED_TRACE(source);
    std::vector<std::string> args = {"--model",
                                     testing::FixturePath("models/llama/model").string(),
                                     "--served-model-name",
                                     "tiny",
                                     "--threads",
                                     "1"};
    if (source == "--api-key") args.insert(args.end(), {"--api-key", "s3cret-key"});
    if (source == "--api-key-file") args.insert(args.end(), {"--api-key-file", key_file});
    if (source == "INFER_API_KEY") ::setenv("INFER_API_KEY", "s3cret-key", 1);
    if (source == "INFER_API_KEY_FILE") ::setenv("INFER_API_KEY_FILE", key_file.c_str(), 1);
    ServerProcess server(args);
    ::unsetenv("INFER_API_KEY");
    ::unsetenv("INFER_API_KEY_FILE");
    ASSERT_TRUE(server.started()) << server.log();
    const int port = server.port();
    EXPECT_EQ(server::HttpGet("127.0.0.1", port, "/health").first, 200);
    EXPECT_EQ(server::HttpGet("127.0.0.1", port, "/v1/models", "s3cret-key").first, 200);
    // (Trailing blanks of a header value are not part of it in HTTP, so "KEY " is KEY.)
    for (const char* key : {"", "s3cret-kez", "s3cret-key0", "s3cret", "S3CRET-KEY"}) {
      const auto [status, body] = server::HttpGet("127.0.0.1", port, "/v1/models", key);
      EXPECT_EQ(status, 401) << "key '" << key << "'";
      const json error = json::parse(body, nullptr, false);
      ASSERT_TRUE(error.is_object()) << body;
      EXPECT_EQ(error["error"]["code"], 401) << body;
      EXPECT_EQ(error["error"]["type"], "authentication_error") << body;
    }
    const std::string request = R"({"model":"tiny","prompt":[1,2,3],"max_tokens":2})";
    EXPECT_EQ(server::PostCompletion("127.0.0.1", port, request).status, 401);
    EXPECT_EQ(server::PostCompletion("127.0.0.1", port, request, {}, 60, "wrong").status, 401);
    const auto ok = server::PostCompletion("127.0.0.1", port, request, {}, 60, "s3cret-key");
    EXPECT_EQ(ok.status, 200) << ok.body;
    EXPECT_FALSE(ok.events.empty());
    EXPECT_EQ(server.log().find("s3cret"), std::string::npos) << "the key is logged";
    EXPECT_EQ(server.Stop(SIGINT), 0) << server.log();
  }
}

// GET /metrics under vLLM's names: Debian's promtool accepts the exposition (its only remarks
// are the lint that names should not contain ':', which every vLLM name does; with vllm_
// instead of vllm: it is clean), and the counters and histograms move by exactly what two
// requests did.
TEST(ServeApi, MetricsPassPromtoolAndCountRequests) {
  ServerProcess server({"--model", testing::FixturePath("models/llama/model").string(),
                        "--served-model-name", "tiny", "--threads", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  const auto check = [](const std::string& text) {
    const auto promtool = testing::RunCommand({"/usr/bin/promtool", "check", "metrics"}, text);
    std::istringstream remarks(promtool.out + promtool.err);
    for (std::string line; std::getline(remarks, line);) {
      EXPECT_NE(line.find("metric names should not contain ':'"), std::string::npos) << line;
    }
    std::string renamed = text;
    for (size_t at; (at = renamed.find("vllm:")) != std::string::npos;) renamed[at + 4] = '_';
    const auto clean = testing::RunCommand({"/usr/bin/promtool", "check", "metrics"}, renamed);
    EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  };
  const auto [before_status, before] = server::HttpGet("127.0.0.1", server.port(), "/metrics");
  ASSERT_EQ(before_status, 200);
  check(before);
  const std::string model = R"({model_name="tiny"})";
  EXPECT_EQ(testing::MetricValue(before, "vllm:generation_tokens_total" + model), 0) << before;
  // What the products run on: this process's ISA level (the server's, same CPU and environment)
  // and the f32 that ServerProcess pins.
  EXPECT_EQ(testing::MetricValue(before, R"(infer_compute_info{model_name="tiny",isa=")" +
                                             std::string(kernels::IsaName(kernels::ActiveIsa())) +
                                             R"(",matmul_precision="f32"})"),
            1)
      << before;
  // The build: CMake's version (the commit is checked by CliVersion).
  EXPECT_NE(before.find(R"(infer_build_info{model_name="tiny",version=")" +
                        std::string(testing::ProjectVersion()) + R"(",commit=")"),
            std::string::npos)
      << before;
  for (const auto& [prompt, max_tokens] :
       std::vector<std::pair<json, int>>{{json{1, 2, 3, 4}, 5}, {json{7, 8}, 3}}) {
    const auto result =
        Post(server.port(), {{"model", "tiny"},
                             {"prompt", prompt},
                             {"max_tokens", max_tokens},
                             {"temperature", 0},
                             {"repetition_penalty", 1.5}});  // no EOS before max_tokens in practice
    ASSERT_EQ(result.status, 200) << result.body;
    ASSERT_EQ(Summarize(result).last["finish_reason"], "length") << result.body;
  }
  const auto [status, after] = server::HttpGet("127.0.0.1", server.port(), "/metrics");
  ASSERT_EQ(status, 200);
  check(after);
  EXPECT_EQ(testing::MetricValue(after, "vllm:generation_tokens_total" + model), 8) << after;
  EXPECT_EQ(testing::MetricValue(after, "vllm:prompt_tokens_total" + model), 6);
  EXPECT_EQ(testing::MetricValue(after, "vllm:prefix_cache_queries_total" + model), 6);
  EXPECT_EQ(testing::MetricValue(
                after, R"(vllm:request_success_total{model_name="tiny",finished_reason="length"})"),
            2);
  EXPECT_EQ(testing::MetricValue(after, "vllm:time_to_first_token_seconds_count" + model), 2);
  EXPECT_EQ(testing::MetricValue(after, "vllm:inter_token_latency_seconds_count" + model), 4 + 2);
  EXPECT_EQ(testing::MetricValue(after, "vllm:e2e_request_latency_seconds_count" + model), 2);
  EXPECT_EQ(testing::MetricValue(after, "vllm:request_queue_time_seconds_count" + model), 2);
  EXPECT_EQ(testing::MetricValue(after, "vllm:request_generation_tokens_sum" + model), 8);
  EXPECT_GT(testing::MetricValue(after, "vllm:e2e_request_latency_seconds_sum" + model), 0);
  EXPECT_EQ(testing::MetricValue(after, "vllm:num_requests_running" + model), 0);
  EXPECT_EQ(testing::MetricValue(after, "vllm:num_requests_waiting" + model), 0);
  // Requests by route (vLLM's http_requests_total): the two completions, counted once each
  // response is written (so perhaps just after the client read it); the scrapes are not counted.
  const std::string completions =
      R"(http_requests_total{handler="/v1/completions",method="POST",status="2xx"})";
  double counted = -1;
  for (int i = 0; i < 100 && (counted = testing::ServerMetric(server.port(), completions)) != 2;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(counted, 2) << after;
  EXPECT_EQ(after.find(R"(handler="/metrics")"), std::string::npos);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

// Sends `head` on a new loopback connection and returns the server's first response (headers
// and a Content-Length body) as soon as it is complete, or what came within `timeout_s`.
std::string RawExchange(int port, const std::string& head, int timeout_s) {
  const int fd = testing::ConnectLoopback(port);
  if (fd < 0) return "";
  timeval timeout{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  (void)::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  std::string answer;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    answer.append(buffer, static_cast<size_t>(n));
    const size_t end = answer.find("\r\n\r\n");
    const size_t length = answer.find("Content-Length: ");
    if (end == std::string::npos || length == std::string::npos || length > end) continue;
    if (answer.size() >= end + 4 + std::stoul(answer.substr(length + 16))) break;
  }
  ::close(fd);
  return answer;
}

// A body larger than --max-body-size is refused from its Content-Length alone: 413 at once,
// in OpenAI's error shape. Only 9 of the announced 100 MiB are ever sent, so an answer at all
// shows the server did not wait for (or buffer) the body.
TEST(ServeApi, OversizedBodyIsRefusedUnread) {
  ServerProcess server({"--model", testing::FixturePath("models/llama/model").string(),
                        "--served-model-name", "tiny", "--threads", "1", "--max-body-size",
                        "1MiB"});
  ASSERT_TRUE(server.started()) << server.log();
  const auto start = std::chrono::steady_clock::now();
  const std::string answer =
      RawExchange(server.port(),
                  "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Content-Length: 104857600\r\n\r\n{\"model\":",
                  10);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(answer.find("HTTP/1.1 413"), std::string::npos) << answer;
  EXPECT_NE(answer.find("\"request_too_large\""), std::string::npos) << answer;
  EXPECT_LT(seconds, 3.0) << "the server waited for the body";
  // On Anthropic's routes the same refusal comes in Anthropic's error shape.
  const std::string anthropic =
      RawExchange(server.port(),
                  "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Content-Length: 104857600\r\n\r\n{\"model\":",
                  10);
  EXPECT_NE(anthropic.find("HTTP/1.1 413"), std::string::npos) << anthropic;
  EXPECT_NE(anthropic.find(R"({"type":"error","error":{"type":"request_too_large")"),
            std::string::npos)
      << anthropic;
  // Just under the limit is read and judged as usual (here: not JSON, 400).
  const std::string fits(1 << 20, ' ');
  EXPECT_EQ(server::PostCompletion("127.0.0.1", server.port(), fits).status, 400);
  EXPECT_EQ(server::HttpGet("127.0.0.1", server.port(), "/health").first, 200);
  EXPECT_EQ(server.Stop(SIGINT), 0) << server.log();
}

TEST(ServeApi, BadCommandLineIsOneError) {
  // vLLM's name and the phase-4 alias.
  for (const char* flag : {"--max-num-seqs", "--max-batch-size"}) {
    const auto result = testing::RunCommand({::infer::testing::InferBinary(), "serve", "--model",
                                             testing::FixturePath("models/llama/model").string(),
                                             flag, "0", "--port", "0"});
    EXPECT_EQ(result.exit_code, 1) << result.err;
    EXPECT_NE(result.err.find("error: "), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("max_num_seqs"), std::string::npos) << result.err;
  }
  const auto memory = testing::RunCommand({::infer::testing::InferBinary(), "serve", "--model",
                                           testing::FixturePath("models/llama/model").string(),
                                           "--kv-cache-memory", "lots", "--port", "0"});
  EXPECT_EQ(memory.exit_code, 1) << memory.err;
  EXPECT_NE(memory.err.find("--kv-cache-memory"), std::string::npos) << memory.err;
  // An API key file that is missing or holds no key stops start-up; so do both kinds of key.
  testing::TempDir dir;
  const std::string blank = (dir.path() / "blank").string();
  testing::WriteFile(blank, " \n");
  const std::string missing = (dir.path() / "missing").string();
  for (const auto& [flags, expected] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--api-key-file", missing}, missing + ": cannot be read (No such file or directory)"},
           {{"--api-key-file", blank}, blank + ": its first line holds no key"},
           {{"--api-key", "k", "--api-key-file", blank}, "not both"}}) {
    std::vector<std::string> command = {::infer::testing::InferBinary(),
                                        "serve",
                                        "--model",
                                        testing::FixturePath("models/llama/model").string(),
                                        "--port",
                                        "0"};
    command.insert(command.end(), flags.begin(), flags.end());
    const auto result = testing::RunCommand(command);
    EXPECT_EQ(result.exit_code, 1) << result.err;
    EXPECT_NE(result.err.find("error: "), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(expected), std::string::npos) << result.err;
  }
}

// A tiny model with the real Llama 3 vocabulary: text in, text out.
class ServeTextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RequireRealTokenizer("llama3")) GTEST_SKIP();
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model", model_.path(), "--load-format", "dummy", "--served-model-name", "llama3",
        "--max-batch-size", "2", "--threads", "1"});
    ASSERT_TRUE(server_->started()) << server_->log();
  }
  testing::Llama3VocabModelDir model_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ServeTextTest, StringPromptMatchesInferGenerate) {
  const auto result = Post(
      server_->port(),
      {{"model", "llama3"}, {"prompt", "Hello world"}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(result.status, 200) << result.body;
  const auto summary = Summarize(result);
  ASSERT_EQ(summary.last_event, "done") << result.body;
  // Hugging Face: "Hello world" -> <|begin_of_text|> Hello ␣world = 3 tokens.
  EXPECT_EQ(summary.last["usage"]["prompt_tokens"], 3);
  EXPECT_FALSE(summary.token_ids.empty());
  // The same request through `infer generate` (the sequential path) gives the same tokens/text.
  const auto generate =
      testing::RunCommand({::infer::testing::InferBinary(), "generate", "--model", model_.path(),
                           "--load-format", "dummy", "--prompt", "Hello world", "--temperature",
                           "0", "--max-new-tokens", "12", "--threads", "1", "--json",
                           "--matmul-precision", "f32"});  // as ServerProcess runs the server
  ASSERT_EQ(generate.exit_code, 0) << generate.err;
  const json expected = json::parse(generate.out);
  auto ids = expected["token_ids"].get<std::vector<int32_t>>();
  if (expected["finish_reason"] == "eos") ids.pop_back();
  EXPECT_EQ(summary.token_ids, ids);
  EXPECT_EQ(summary.text, expected["text"].get<std::string>());
  EXPECT_EQ(summary.last["finish_reason"], expected["finish_reason"]);
}

TEST_F(ServeTextTest, StopStringEndsTheStream) {
  const json body = {
      {"model", "llama3"}, {"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}};
  const auto free_run = Summarize(Post(server_->port(), body));
  ASSERT_EQ(free_run.last_event, "done");
  // A stop string taken from the middle of the unconstrained text (one token's whole text, so
  // never half a UTF-8 character).
  std::string stop;
  for (size_t i = free_run.pieces.size() / 2; i < free_run.pieces.size() && stop.empty(); ++i) {
    stop = free_run.pieces[i];
  }
  ASSERT_FALSE(stop.empty()) << free_run.text;
  const std::string expected = free_run.text.substr(0, free_run.text.find(stop));
  for (const json& stop_field : {json(stop), json::array({"\x01never", stop})}) {
    json stopped_body = body;
    stopped_body["stop"] = stop_field;
    const auto stopped = Summarize(Post(server_->port(), stopped_body));
    ASSERT_EQ(stopped.last_event, "done");
    EXPECT_EQ(stopped.last["finish_reason"], "stop") << stop_field;
    EXPECT_EQ(stopped.text, expected) << stop_field;
    EXPECT_LT(stopped.last["usage"]["completion_tokens"].get<int>(), 16);
  }
}

TEST_F(ServeTextTest, ShutdownEndsEveryStreamWithAnError) {
  // Two running (the batch is 2) and one queued, all far from done.
  const json body = {
      {"model", "llama3"}, {"prompt", "Tell me a story"}, {"max_tokens", 3000}, {"temperature", 0}};
  std::atomic<int> streaming{0};
  std::vector<std::future<server::CompletionResult>> futures;
  for (int i = 0; i < 3; ++i) {
    futures.push_back(std::async(std::launch::async, [&] {
      bool first = true;
      return server::PostCompletion("127.0.0.1", server_->port(), body.dump(),
                                    [&](const server::SseEvent&) {
                                      if (first) ++streaming;
                                      first = false;
                                      return true;
                                    });
    }));
  }
  for (int i = 0; i < 3000 && streaming < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(streaming, 2);
  EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->log();
  for (auto& future : futures) {
    const auto result = future.get();
    EXPECT_EQ(result.status, 200) << result.body;
    const auto summary = Summarize(result);
    EXPECT_EQ(summary.last_event, "error") << result.body;
    EXPECT_EQ(summary.done_events, 0);
    EXPECT_NE(summary.last.value("error", "").find("shutting down"), std::string::npos);
  }
  EXPECT_NE(server_->log().find("shutting down"), std::string::npos) << server_->log();
}

// A tiny model with the real Qwen3 vocabulary, OpenAI's completions: a prompt that opens the
// reasoning block thinks for the budget's tokens, then has the block's end forced; the server's
// --reasoning-budget is the default a request lifts with -1 or replaces with its own.
TEST(ServeThinking, TheBudgetForcesTheEndOfTheBlock) {
  if (!testing::RequireRealTokenizer("qwen3")) return;
  testing::Qwen3VocabModelDir model;
  ServerProcess server({"--model", model.path(), "--load-format", "dummy", "--served-model-name",
                        "qwen3", "--completions-format", "openai", "--reasoning-budget", "3",
                        "--threads", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  EXPECT_NE(server.log().find("reasoning budget 3"), std::string::npos) << server.log();
  const auto post = [&](const std::string& path, const json& body) {
    const auto [status, text] = server::HttpPost("127.0.0.1", server.port(), path, body.dump());
    EXPECT_EQ(status, 200) << text;
    return json::parse(text);
  };
  const auto complete = [&](std::optional<int> budget) {
    json body = {{"model", "qwen3"},
                 {"prompt", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"},
                 {"max_tokens", 10},
                 {"temperature", 0},
                 {"return_token_ids", true}};
    if (budget) body["thinking_token_budget"] = *budget;
    return post("/v1/completions", body)["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  };
  const auto forced = post("/tokenize", {{"model", "qwen3"},
                                         {"prompt", "\n</think>\n\n"},
                                         {"add_special_tokens", false}})["tokens"]
                          .get<std::vector<int32_t>>();
  ASSERT_EQ(forced.size(), 3U);  // "\n", </think>, "\n\n"
  const std::vector<int32_t> free = complete(-1);
  ASSERT_EQ(free.size(), 10U);
  ASSERT_EQ(std::find(free.begin(), free.begin() + 5, forced[1]), free.begin() + 5)
      << "the random model closed its block by itself";
  for (const auto& [budget, spent] :
       {std::pair{std::optional<int>(), 3}, std::pair{std::optional(5), 5},
        std::pair{std::optional(0), 0}}) {
    const std::vector<int32_t> ids = complete(budget);
    ASSERT_EQ(ids.size(), 10U);
    EXPECT_TRUE(std::equal(free.begin(), free.begin() + spent, ids.begin())) << spent;
    EXPECT_TRUE(std::equal(forced.begin(), forced.end(), ids.begin() + spent)) << spent;
  }
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

// --speculative-config (vLLM's flag): the server checks n-gram drafts and its replies are those
// of the sequential path; /metrics counts the drafts under vLLM's names.
// A GGUF model takes the engine's whole path: n-gram drafts and the prefix cache on the fixture's
// BF16 GGUF give the tokens `infer generate` gives on its checkpoint folder.
TEST(ServeSpeculative, AGgufModelDraftsAndCachesAsAFolderDoes) {
  testing::TempDir dir;
  const std::string gguf = FixtureModel("llama", Source::kGguf, dir);
  ServerProcess server({"--model", gguf, "--served-model-name", "tiny", "--max-seq-len", "128",
                        "--speculative-config",
                        R"({"method": "ngram", "num_speculative_tokens": 4,
                            "prompt_lookup_min": 1, "prompt_lookup_max": 3})",
                        "--threads", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  // The reference's prompt, its greedy continuation and the prompt again: the model's own
  // tokens recur, so n-gram drafts are proposed.
  const json reference = Reference("llama")["greedy_short"];
  std::vector<int32_t> prompt = reference["prompt_ids"].get<std::vector<int32_t>>();
  const auto first = prompt;
  const auto generated = reference["generated_ids"].get<std::vector<int32_t>>();
  prompt.insert(prompt.end(), generated.begin(), generated.end());
  prompt.insert(prompt.end(), first.begin(), first.end());
  std::string ids;
  for (const int32_t id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const auto generate = testing::RunCommand(
      {::infer::testing::InferBinary(), "generate", "--model",
       testing::FixturePath("models/llama/model").string(), "--prompt-ids", ids, "--temperature",
       "0", "--max-new-tokens", "24", "--threads", "1", "--json", "--matmul-precision", "f32"});
  ASSERT_EQ(generate.exit_code, 0) << generate.err;
  const auto expected = json::parse(generate.out)["token_ids"].get<std::vector<int32_t>>();
  for (int round = 0; round < 2; ++round) {  // the second finds the prompt in the prefix cache
    const auto result =
        Post(server.port(),
             {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}});
    ASSERT_EQ(result.status, 200) << result.body << result.transport_error;
    const auto summary = Summarize(result);
    auto streamed = summary.token_ids;
    if (summary.last["finish_reason"] == "eos") streamed.push_back(expected.back());  // no event
    EXPECT_EQ(streamed, expected) << "round " << round;
  }
  const auto metrics = server::HttpGet("127.0.0.1", server.port(), "/metrics");
  ASSERT_EQ(metrics.first, 200);
  const auto counter = [&](const std::string& name) {
    const std::string prefix = name + "{model_name=\"tiny\"} ";
    const size_t at = metrics.second.find(prefix);
    return at == std::string::npos ? -1.0 : std::stod(metrics.second.substr(at + prefix.size()));
  };
  EXPECT_GT(counter("vllm:spec_decode_num_drafts_total"), 0);
  EXPECT_GE(counter("vllm:prefix_cache_hits_total"), 16);  // the prompt's first block
}

TEST(ServeSpeculative, RepliesAreThoseOfPlainDecodingAndDraftsAreCounted) {
  if (!testing::RequireRealTokenizer("llama3")) return;
  testing::Llama3VocabModelDir model;
  const std::string config =
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
          "prompt_lookup_max": 3})";
  ServerProcess server({"--model", model.path(), "--load-format", "dummy", "--served-model-name",
                        "llama3", "--completions-format", "openai", "--speculative-config", config,
                        "--threads", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  EXPECT_NE(server.log().find("speculative decoding ngram (4 tokens, n-grams of 1-3)"),
            std::string::npos)
      << server.log();
  const std::string prompt = "one two three, one two three, one two three, one two";
  const auto [status, text] = server::HttpPost("127.0.0.1", server.port(), "/v1/completions",
                                               json{{"model", "llama3"},
                                                    {"prompt", prompt},
                                                    {"max_tokens", 40},
                                                    {"temperature", 0},
                                                    {"ignore_eos", true},
                                                    {"return_token_ids", true}}
                                                   .dump());
  ASSERT_EQ(status, 200) << text;
  const auto ids = json::parse(text)["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  const auto generate = testing::RunCommand(
      {::infer::testing::InferBinary(), "generate", "--model", model.path(), "--load-format",
       "dummy", "--prompt", prompt, "--temperature", "0", "--max-new-tokens", "40", "--threads",
       "1", "--json", "--matmul-precision", "f32"});  // as ServerProcess runs the server
  ASSERT_EQ(generate.exit_code, 0) << generate.err;
  auto expected = json::parse(generate.out)["token_ids"].get<std::vector<int32_t>>();
  expected.resize(std::min(expected.size(), ids.size()));  // generate stops at EOS
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + expected.size()), expected);
  // (Not a structured binding: the lambda below reads it, which clang 14 refuses.)
  const auto metrics_response = server::HttpGet("127.0.0.1", server.port(), "/metrics");
  ASSERT_EQ(metrics_response.first, 200);
  const std::string& metrics = metrics_response.second;
  const auto counter = [&](const std::string& name) {
    const std::string prefix = name + "{model_name=\"llama3\"} ";
    const size_t at = metrics.find(prefix);
    EXPECT_NE(at, std::string::npos) << name;
    return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + prefix.size()));
  };
  const double drafts = counter("vllm:spec_decode_num_draft_tokens_total");
  const double accepted = counter("vllm:spec_decode_num_accepted_tokens_total");
  EXPECT_GT(counter("vllm:spec_decode_num_drafts_total"), 0);
  EXPECT_GE(drafts, accepted);
  // The greedy reply of the dummy model (fixed weights) repeats itself, so a lookup of its
  // last tokens proposes what came next before, and the check keeps some of it.
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace infer
