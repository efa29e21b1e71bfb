// `infer chat`: an interactive REPL. Each user line is added to the conversation, rendered with
// the model's chat template and answered with a streamed reply; /reset, /params, /exit. One
// engine serves the whole session, so the conversation so far stays in its prefix cache and a
// turn prefills only what is new (the last message, and the rest of a partly filled block).
#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <string>

#include "infer/cache/paged_kv_cache.h"
#include "infer/cli/generation_session.h"
#include "infer/core/error.h"
#include "infer/engine/engine.h"

namespace infer::cli {

namespace {

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;
  int64_t max_model_len = 8192;
};

constexpr const char* kHelp = "commands: /reset (new conversation), /params, /exit\n";

std::string Trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1);
}

nlohmann::ordered_json NewConversation(const std::string& system) {
  auto messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  return messages;
}

// Answers the last user message of `messages`; returns the reply text.
std::string Reply(Engine& engine, const nlohmann::ordered_json& messages,
                  const SamplingParams& params, int64_t turn,
                  const std::shared_ptr<const LoraAdapter>& lora) {
  std::vector<int32_t> prompt_ids = engine.PreparePrompt(ChatPrompt{messages}, params);
  const auto num_prompt = static_cast<int64_t>(prompt_ids.size());
  INFER_CHECK(engine.AddRequest(fmt::format("turn-{}", turn), std::move(prompt_ids), params, 0,
                                nullptr, lora) != nullptr,
              "the engine refused the request");
  std::optional<GenerationOutput> result;
  engine.RunUntilDone({[](const StepOutput& output) {
                         std::fwrite(output.text_delta.data(), 1, output.text_delta.size(), stdout);
                         std::fflush(stdout);
                       },
                       [&](GenerationOutput output) { result = std::move(output); }});
  std::printf("\n");
  INFER_CHECK(result.has_value(), "the reply produced no output");
  if (result->error) Fail("{}", *result->error);
  const double decode_s = result->timing.decode_time_s();
  std::fprintf(
      stderr,
      "[%lld prompt tokens, %lld from the prefix cache; %lld generated; prefill %.1f ms, "
      "decode %.2f tok/s]\n",
      static_cast<long long>(num_prompt), static_cast<long long>(result->cached_tokens),
      static_cast<long long>(result->token_ids.size()), result->timing.prefill_time_s * 1e3,
      decode_s > 0 ? static_cast<double>(result->timing.decode_times_s.size()) / decode_s : 0.0);
  if (result->finish_reason == FinishReason::kLength) {
    std::printf("[reply cut at max_new_tokens=%lld]\n",
                static_cast<long long>(params.max_new_tokens));
  }
  return result->text;
}

void RunChat(const ChatArgs& args) {
  GenerationSession session(args.model);
  INFER_CHECK(session.tokenizer() != nullptr, "{} has no tokenizer.json: chat needs one",
              session.loaded().path);
  const SamplingParams params = ResolveSamplingParams(args.sampling, session.loaded().generation);
  const bool use_kv_cache = !args.sampling.no_kv_cache;
  EngineConfig config;
  config.max_num_seqs = 1;
  config.max_model_len = args.max_model_len;
  config.kv_cache_dtype = ParseKvCacheDType(args.sampling.kv_cache_dtype);
  config.use_kv_cache = use_kv_cache;
  config.enable_jump_forward = args.sampling.jump_forward;
  config.speculative = ResolveSpeculativeConfig(args.sampling.speculative_config);
  Engine engine(config, session.model(), session.tokenizer(), session.eos_token_ids(),
                session.chat_template_or_null());
  int64_t turn = 0;
  std::printf("infer chat: %s (%s)\n%s", session.loaded().path.c_str(),
              DescribeSamplingParams(params, use_kv_cache).c_str(), kHelp);
  nlohmann::ordered_json messages = NewConversation(args.system);
  std::string line;
  while (true) {
    std::printf("> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) {
      std::printf("\n");
      break;
    }
    const std::string input = Trim(line);
    if (input.empty()) continue;
    if (input == "/exit" || input == "/quit") break;
    if (input == "/reset") {
      messages = NewConversation(args.system);
      std::printf("[conversation cleared]\n");
      continue;
    }
    if (input == "/params") {
      std::printf("%s\n", DescribeSamplingParams(params, use_kv_cache).c_str());
      continue;
    }
    if (input.front() == '/') {
      std::printf("unknown command %s; %s", input.c_str(), kHelp);
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", input}});
    try {
      const std::string reply = Reply(engine, messages, params, ++turn, session.lora());
      messages.push_back({{"role", "assistant"}, {"content", reply}});
    } catch (const Error& error) {
      messages.erase(messages.size() - 1);  // the turn did not happen
      std::printf("\nerror: %s\n", error.what());
    }
  }
}

}  // namespace

void AddChatCommand(CLI::App& app) {
  auto* command = app.add_subcommand("chat", "Interactive chat with a model (streams replies)");
  auto args = std::make_shared<ChatArgs>();
  AddModelOptions(*command, args->model);
  AddLoraOption(*command, args->model);
  command->add_option("--system", args->system, "System prompt of every conversation");
  command
      ->add_option("--max-model-len", args->max_model_len,
                   "Longest conversation (prompt + reply) in tokens")
      ->capture_default_str();
  AddSamplingOptions(*command, args->sampling);
  command->callback([args] { RunChat(*args); });
}

}  // namespace infer::cli
