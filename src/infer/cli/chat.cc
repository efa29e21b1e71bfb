// `infer chat`: an interactive REPL. Each user line is added to the conversation, rendered with
// the model's chat template and answered with a streamed reply; /reset, /params, /exit.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "infer/cli/generation_session.h"
#include "infer/core/error.h"
#include "infer/engine/generate.h"

namespace infer::cli {

namespace {

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;
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
std::string Reply(GenerationSession& session, const nlohmann::ordered_json& messages,
                  const SamplingParams& params, bool use_kv_cache) {
  const std::vector<int32_t> prompt_ids = session.EncodeChat(messages);
  GenerateOptions options;
  options.use_kv_cache = use_kv_cache;
  options.eos_token_ids = session.eos_token_ids();
  options.on_text = [](size_t, std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  const GenerationResult result =
      Generate(session.model(), session.tokenizer(), prompt_ids, params, options);
  std::printf("\n");
  if (result.finish_reason == FinishReason::kLength) {
    std::printf("[reply cut at max_new_tokens=%lld]\n",
                static_cast<long long>(params.max_new_tokens));
  }
  return result.text;
}

void RunChat(const ChatArgs& args) {
  GenerationSession session(args.model);
  INFER_CHECK(session.tokenizer() != nullptr, "{} has no tokenizer.json: chat needs one",
              session.loaded().path);
  const SamplingParams params = ResolveSamplingParams(args.sampling, session.loaded().generation);
  const bool use_kv_cache = !args.sampling.no_kv_cache;
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
      const std::string reply = Reply(session, messages, params, use_kv_cache);
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
  command->add_option("--system", args->system, "System prompt of every conversation");
  AddSamplingOptions(*command, args->sampling);
  command->callback([args] { RunChat(*args); });
}

}  // namespace infer::cli
