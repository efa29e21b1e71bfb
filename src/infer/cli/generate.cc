// `infer generate`: one completion for a prompt (text, chat message or token ids), streamed as
// plain text, or printed as one JSON result object with --json.
#include <cstdio>
#include <memory>
#include <string>

#include "infer/cache/paged_kv_cache.h"
#include "infer/cli/generation_session.h"
#include "infer/core/error.h"
#include "infer/engine/generate.h"

namespace infer::cli {

namespace {

struct GenerateArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string prompt;
  std::string prompt_ids;
  bool chat = false;
  bool json = false;
};

void RunGenerate(const GenerateArgs& args) {
  INFER_CHECK(args.prompt.empty() != args.prompt_ids.empty(),
              "give exactly one of --prompt and --prompt-ids");
  INFER_CHECK(!args.chat || !args.prompt.empty(), "--chat needs --prompt (a user message)");
  GenerationSession session(args.model);
  const SamplingParams params = ResolveSamplingParams(args.sampling, session.loaded().generation);
  Prompt prompt = args.prompt;
  GenerateOptions options;
  if (!args.prompt_ids.empty()) {
    prompt = ParseIdList(args.prompt_ids, "--prompt-ids");
  } else if (args.chat) {
    prompt =
        ChatPrompt{nlohmann::ordered_json::array({{{"role", "user"}, {"content", args.prompt}}})};
    options.chat_template = session.chat_template_or_null();
  }
  options.use_kv_cache = !args.sampling.no_kv_cache;
  options.enable_jump_forward = args.sampling.jump_forward;
  options.speculative = ResolveSpeculativeConfig(args.sampling.speculative_config);
  options.kv_cache_dtype = ParseKvCacheDType(args.sampling.kv_cache_dtype);
  options.eos_token_ids = session.eos_token_ids();
  if (session.lora()) options.loras = {session.lora()};
  if (!args.json) {
    options.on_text = [](size_t, std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  const GenerationOutput result =
      Generate(session.model(), session.tokenizer(), prompt, params, options);
  if (args.json) {
    std::printf("%s\n", GenerationOutputToJson(result).dump().c_str());
    return;
  }
  std::printf("\n");
  const double decode_s = result.timing.decode_time_s();
  std::fprintf(
      stderr, "[%lld prompt + %lld generated tokens, %s; prefill %.1f ms, decode %.2f tok/s]\n",
      static_cast<long long>(result.prompt_tokens()),
      static_cast<long long>(result.generated_tokens()),
      std::string(FinishReasonName(result.finish_reason.value_or(FinishReason::kLength))).c_str(),
      result.timing.prefill_time_s * 1e3,
      decode_s > 0 ? static_cast<double>(result.timing.decode_times_s.size()) / decode_s : 0.0);
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto* command = app.add_subcommand("generate", "Generate a completion for one prompt");
  auto args = std::make_shared<GenerateArgs>();
  AddModelOptions(*command, args->model);
  AddLoraOption(*command, args->model);
  command->add_option("--prompt", args->prompt, "Prompt text");
  command->add_option("--prompt-ids", args->prompt_ids, "Comma-separated prompt token ids");
  command->add_flag("--chat", args->chat, "Wrap --prompt as a user message in the chat template");
  command->add_flag("--json", args->json, "Print the result object as JSON instead of streaming");
  AddSamplingOptions(*command, args->sampling);
  command->callback([args] { RunGenerate(*args); });
}

}  // namespace infer::cli
