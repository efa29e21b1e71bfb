// LoRA adapters served by `infer serve` over loopback: the base and three PEFT adapters of the
// fixtures (tests/lora/make_adapter.py: ranks 4, 8 and 16 in f32, bf16 and f16, one rsLoRA)
// asked for the same prompt, all at once, twice, with prefix caching on: every reply is the greedy
// decoding of a float64 reference with that adapter merged (tests/gguf/reference_f64.py --lora
// --greedy), and the repeat hits only its own adapter's cached blocks. Also the routes around
// them: /v1/models, a name no one serves (404 in each protocol's shape), loading and unloading
// at run time, a refused load that leaves the others serving, and vLLM's lora_requests_info.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/loader/test_util.h"
#include "serve_test_util.h"
#include "testing/paths.h"
#include "testing/server_process.h"

namespace infer {
namespace {

using nlohmann::json;
using testing::Post;
using testing::ServerProcess;
using testing::Summarize;

constexpr int kNewTokens = 12;

std::string FixtureModel(const std::string& arch = "llama") {
  return testing::FixturePath("models/" + arch + "/model").string();
}

void RunTool(const std::string& command) {
  ASSERT_EQ(std::system((command + " > /dev/null").c_str()), 0) << command;
}

// 40 ids: two full blocks of 16 to share, then the rest.
std::vector<int32_t> Prompt(const std::string& arch = "llama") {
  std::ifstream in(testing::FixturePath("models/" + arch + "/reference.json"));
  return json::parse(in)["greedy_long"]["prompt_ids"].get<std::vector<int32_t>>();
}

std::vector<int32_t> EosIds(const std::string& arch) {
  std::ifstream in(FixtureModel(arch) + "/config.json");
  const json eos = json::parse(in)["eos_token_id"];
  return eos.is_array() ? eos.get<std::vector<int32_t>>()
                        : std::vector<int32_t>{eos.get<int32_t>()};
}

// The reference's greedy continuation of Prompt(arch) with the adapter at `adapter` ("": none).
std::vector<int32_t> ReferenceGreedy(const std::string& adapter, const std::string& out,
                                     const std::string& arch = "llama") {
  std::string command = fmt::format("{} {} {} --greedy {}", testing::GgufTool("reference_f64.py"),
                                    FixtureModel(arch), out, kNewTokens);
  if (!adapter.empty()) command += " --lora " + adapter;
  for (const int32_t id : Prompt(arch)) command += fmt::format(" {}", id);
  RunTool(command);
  std::ifstream in(out);
  std::vector<int32_t> ids;
  for (int32_t id = 0; in >> id;) ids.push_back(id);
  return ids;
}

class ServeLoraTest : public ::testing::Test {
 protected:
  // The fixture whose base the adapters adapt.
  virtual std::string Arch() const { return "llama"; }
  void SetUp() override {
    const std::string tool =
        testing::LoraTool("make_adapter.py") + " " + FixtureModel(Arch()) + " ";
    for (const auto& [name, options] : std::map<std::string, std::string>{
             {"sql", "--rank 4 --dtype f32 --seed 11"},
             {"poet", "--rank 8 --dtype bf16 --targets q_proj,v_proj,o_proj,down_proj --seed 12"},
             {"chef", "--rank 16 --dtype f16 --rslora --alpha 8 --seed 13"},
             {"late", "--rank 8 --dtype f32 --seed 14"},
             {"wide", "--rank 32 --dtype f32 --seed 15"}}) {
      dirs_[name] = (dir_.path() / name).string();
      RunTool(tool + dirs_[name] + " " + options);
    }
  }
  std::unique_ptr<ServerProcess> Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--model",
                                     FixtureModel(Arch()),
                                     "--served-model-name",
                                     "tiny",
                                     "--max-seq-len",
                                     "128",
                                     "--threads",
                                     "2",
                                     "--matmul-precision",
                                     "f32",
                                     "--kv-cache-dtype",
                                     "f32",
                                     "--enable-lora",
                                     "--max-loras",
                                     "4",
                                     "--lora-modules",
                                     "sql=" + dirs_["sql"],
                                     "poet=" + dirs_["poet"],
                                     fmt::format(R"({{"name": "chef", "path": "{}", )"
                                                 R"("base_model_name": "tiny-base"}})",
                                                 dirs_["chef"])};
    args.insert(args.end(), extra.begin(), extra.end());
    auto server = std::make_unique<ServerProcess>(args);
    EXPECT_TRUE(server->started()) << server->log();
    return server;
  }
  testing::TempDir dir_;
  std::map<std::string, std::string> dirs_;
};

server::CompletionResult Complete(int port, const std::string& model,
                                  const std::string& arch = "llama") {
  return Post(
      port,
      {{"model", model}, {"prompt", Prompt(arch)}, {"max_tokens", kNewTokens}, {"temperature", 0}});
}

// The tokens a stream gave, with the EOS id that ended it (EOS has no token event), beside the
// reference's, which ran on past EOS: cut there.
std::pair<std::vector<int32_t>, std::vector<int32_t>> Compare(
    const server::CompletionResult& result, std::vector<int32_t> expected,
    const std::string& arch = "llama") {
  const std::vector<int32_t> eos = EosIds(arch);
  const testing::StreamSummary summary = Summarize(result);
  std::vector<int32_t> streamed = summary.token_ids;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::find(eos.begin(), eos.end(), expected[i]) != eos.end()) {
      expected.resize(i + 1);
      if (summary.last.value("finish_reason", "") == "eos") streamed.push_back(expected.back());
      break;
    }
  }
  return {streamed, expected};
}

// The same for each of the fixtures' architectures.
class ServeLoraArchTest : public ServeLoraTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string Arch() const override { return GetParam(); }
};

TEST_P(ServeLoraArchTest, EveryAdapterAndTheBaseGiveTheirMergedReferenceGreedyTokensTogether) {
  const std::string arch = Arch();
  std::map<std::string, std::vector<int32_t>> expected;
  for (const char* model : {"tiny", "sql", "poet", "chef"}) {
    expected[model] = ReferenceGreedy(std::string(model) == "tiny" ? "" : dirs_[model],
                                      (dir_.path() / (std::string(model) + ".ids")).string(), arch);
    ASSERT_EQ(expected[model].size(), static_cast<size_t>(kNewTokens)) << model;
  }
  // The adapters change the greedy tokens, so a row that took another's adapter (or none) fails.
  EXPECT_NE(expected["sql"], expected["tiny"]);
  EXPECT_NE(expected["poet"], expected["tiny"]);
  EXPECT_NE(expected["chef"], expected["tiny"]);
  auto server = Start();
  ASSERT_TRUE(server->started());
  const int port = server->port();
  const double hits_before =
      testing::ServerMetric(port, "vllm:prefix_cache_hits_total{model_name=\"tiny\"}");
  for (int wave = 0; wave < 2; ++wave) {
    SCOPED_TRACE(fmt::format("wave {}", wave));
    std::vector<std::pair<std::string, std::future<server::CompletionResult>>> replies;
    for (int copy = 0; copy < 2; ++copy) {
      for (const char* model : {"tiny", "sql", "poet", "chef"}) {
        replies.emplace_back(model, std::async(std::launch::async, [port, model, arch] {
                               return Complete(port, model, arch);
                             }));
      }
    }
    for (auto& [model, reply] : replies) {
      const server::CompletionResult result = reply.get();
      ASSERT_EQ(result.status, 200) << model << ": " << result.body;
      const auto [streamed, want] = Compare(result, expected[model], arch);
      EXPECT_EQ(streamed, want) << model;
    }
  }
  // The second wave found its prompt's blocks cached: 2 blocks for each of the 8 requests at
  // most (the first wave's copies may share too), and none across adapters (their replies above
  // would differ from the references).
  const double hits =
      testing::ServerMetric(port, "vllm:prefix_cache_hits_total{model_name=\"tiny\"}") -
      hits_before;
  EXPECT_GE(hits, 8 * 32);
  EXPECT_EQ(server->Stop(SIGTERM), 0) << server->log();
}

INSTANTIATE_TEST_SUITE_P(Archs, ServeLoraArchTest, ::testing::Values("llama", "qwen3", "gemma3"));

TEST_F(ServeLoraTest, ModelsListTheAdaptersAndUnknownNamesAre404InEachShape) {
  auto server = Start();
  ASSERT_TRUE(server->started());
  const int port = server->port();
  const auto [status, body] = server::HttpGet("127.0.0.1", port, "/v1/models");
  ASSERT_EQ(status, 200) << body;
  std::map<std::string, json> models;
  const json listed = json::parse(body);
  for (const json& model : listed["data"]) models[model["id"].get<std::string>()] = model;
  ASSERT_EQ(models.size(), 4U) << body;
  EXPECT_TRUE(models["tiny"]["parent"].is_null());
  EXPECT_EQ(models["sql"]["parent"], "tiny");
  EXPECT_EQ(models["sql"]["root"], dirs_["sql"]);
  EXPECT_EQ(models["chef"]["parent"], "tiny-base");
  // An unknown name: OpenAI's and Anthropic's 404s; the seed protocol's 422 (its spec).
  const json chat = {{"model", "nobody"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const auto [openai_status, openai_body] =
      server::HttpPost("127.0.0.1", port, "/v1/chat/completions", chat.dump());
  EXPECT_EQ(openai_status, 404) << openai_body;
  EXPECT_EQ(json::parse(openai_body)["error"]["param"], "model");
  json messages = chat;
  messages["max_tokens"] = 4;
  const auto [anthropic_status, anthropic_body] =
      server::HttpPost("127.0.0.1", port, "/v1/messages", messages.dump());
  EXPECT_EQ(anthropic_status, 404) << anthropic_body;
  EXPECT_EQ(json::parse(anthropic_body)["error"]["type"], "not_found_error") << anthropic_body;
  const auto seed = Post(port, {{"model", "nobody"}, {"prompt", Prompt()}, {"max_tokens", 2}});
  EXPECT_EQ(seed.status, 422) << seed.body;
  // The Responses API takes an adapter by name, and answers with it.
  const auto [responses_status, responses_body] =
      server::HttpPost("127.0.0.1", port, "/v1/responses",
                       json{{"model", "sql"},
                            {"input", json::array({{{"role", "user"}, {"content", "hi"}}})},
                            {"max_output_tokens", 2}}
                           .dump());
  // (The fixture has no chat template: the request gets as far as the template.)
  EXPECT_NE(responses_status, 404) << responses_body;
  // A runtime load route is not served without the flag.
  const auto [load_status, load_body] =
      server::HttpPost("127.0.0.1", port, "/v1/load_lora_adapter",
                       json{{"lora_name", "late"}, {"lora_path", dirs_["late"]}}.dump());
  EXPECT_EQ(load_status, 404) << load_body;
  EXPECT_EQ(server->Stop(SIGTERM), 0) << server->log();
}

TEST_F(ServeLoraTest, RuntimeLoadAndUnloadAndARefusedLoadKeepsTheOthersServing) {
  auto server = Start({"--allow-runtime-lora-updating", "--max-lora-rank", "16"});
  ASSERT_TRUE(server->started());
  const int port = server->port();
  const auto post = [&](const std::string& path, const json& body) {
    return server::HttpPost("127.0.0.1", port, path, body.dump());
  };
  // Refused: rank 32 over --max-lora-rank 16, a path with no adapter, a name in use, no name.
  auto [status, body] =
      post("/v1/load_lora_adapter", {{"lora_name", "wide"}, {"lora_path", dirs_["wide"]}});
  EXPECT_EQ(status, 400) << body;
  EXPECT_NE(body.find("exceeds --max-lora-rank 16"), std::string::npos) << body;
  std::tie(status, body) =
      post("/v1/load_lora_adapter",
           {{"lora_name", "ghost"}, {"lora_path", (dir_.path() / "none").string()}});
  EXPECT_EQ(status, 400) << body;
  std::tie(status, body) =
      post("/v1/load_lora_adapter", {{"lora_name", "sql"}, {"lora_path", dirs_["late"]}});
  EXPECT_EQ(status, 400) << body;
  std::tie(status, body) = post("/v1/load_lora_adapter", {{"lora_path", dirs_["late"]}});
  EXPECT_EQ(status, 400) << body;
  EXPECT_EQ(Complete(port, "sql").status, 200);   // the others keep serving
  EXPECT_EQ(Complete(port, "wide").status, 422);  // (the seed protocol's unknown model)
  // Loaded at run time: served by name and listed; unloaded: gone.
  std::tie(status, body) =
      post("/v1/load_lora_adapter", {{"lora_name", "late"}, {"lora_path", dirs_["late"]}});
  EXPECT_EQ(status, 200) << body;
  const std::vector<int32_t> late =
      ReferenceGreedy(dirs_["late"], (dir_.path() / "late.ids").string());
  const auto [streamed, want] = Compare(Complete(port, "late"), late);
  EXPECT_EQ(streamed, want);
  EXPECT_NE(server::HttpGet("127.0.0.1", port, "/v1/models").second.find("\"late\""),
            std::string::npos);
  const std::string metrics = server::HttpGet("127.0.0.1", port, "/metrics").second;
  EXPECT_NE(metrics.find("vllm:lora_requests_info{model_name=\"tiny\",max_lora=\"4\","
                         "running_lora_adapters=\"\",waiting_lora_adapters=\"\"}"),
            std::string::npos)
      << metrics;
  std::tie(status, body) = post("/v1/unload_lora_adapter", {{"lora_name", "late"}});
  EXPECT_EQ(status, 200) << body;
  EXPECT_EQ(Complete(port, "late").status, 422);
  std::tie(status, body) = post("/v1/unload_lora_adapter", {{"lora_name", "late"}});
  EXPECT_EQ(status, 404) << body;
  EXPECT_EQ(server->Stop(SIGTERM), 0) << server->log();
}

TEST_F(ServeLoraTest, AnAdapterThatDoesNotFitStopsStartUpNamingIt) {
  // An adapter made for the qwen3 fixture (another hidden size) on the llama fixture.
  const std::string qwen = (dir_.path() / "qwen").string();
  RunTool(testing::LoraTool("make_adapter.py") + " " +
          testing::FixturePath("models/qwen3/model").string() + " " + qwen + " --rank 4");
  ServerProcess server(
      {"--model", FixtureModel(), "--enable-lora", "--lora-modules", "odd=" + qwen}, 60);
  EXPECT_FALSE(server.started());
  EXPECT_NE(server.Stop(SIGTERM), 0);
  EXPECT_NE(server.log().find("LoRA adapter 'odd'"), std::string::npos) << server.log();
  EXPECT_NE(server.log().find("model.layers.0.self_attn."), std::string::npos) << server.log();
  EXPECT_NE(server.log().find("does not fit"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace infer
