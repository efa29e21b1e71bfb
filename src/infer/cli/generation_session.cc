#include "infer/cli/generation_session.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include <fmt/format.h>

#include "infer/cli/model_tokenizer.h"
#include "infer/core/error.h"
#include "infer/engine/decoder_model.h"
#include "infer/loader/model_path.h"

namespace infer::cli {

void AddSamplingOptions(CLI::App& command, SamplingArgs& args) {
  command.add_option("--temperature", args.temperature, "0 = greedy (default: generation_config)");
  command.add_option("--top-k", args.top_k, "Keep the k most likely tokens; 0 = off");
  command.add_option("--top-p", args.top_p, "Nucleus sampling threshold in (0, 1]; 1 = off");
  command.add_option("--repetition-penalty", args.repetition_penalty, "CTRL penalty; 1 = off");
  command.add_option("--max-new-tokens", args.max_new_tokens, "Most tokens to generate (128)");
  command.add_option("--stop", args.stop, "Stop string (repeatable); excluded from the text");
  command.add_option("--seed", args.seed, "Sampling seed (same seed, same tokens)");
  command.add_flag("--no-kv-cache", args.no_kv_cache, "Recompute the whole sequence each step");
  command
      .add_option("--kv-cache-dtype", args.kv_cache_dtype,
                  "KV cache dtype: bf16 (half the memory) or f32 (exact activations)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  auto* schema = command.add_option("--json-schema", args.json_schema_file,
                                    "The output is JSON valid under this JSON schema (a file)");
  auto* regex = command.add_option("--regex", args.regex, "The output matches this regex");
  auto* grammar =
      command.add_option("--grammar", args.grammar_file,
                         "The output matches this GBNF grammar (llama.cpp's syntax; a file)");
  auto* choice = command
                     .add_option("--choice", args.choices,
                                 "The output is one of these strings (comma-separated)")
                     ->delimiter(',');
  command.add_flag("--enable-jump-forward,!--no-jump-forward", args.jump_forward,
                   "Structured output: emit the tokens the grammar forces (fixed keys, "
                   "punctuation) without a sampling step each (default: on)");
  AddReasoningBudgetOption(command, args.reasoning_budget,
                           "Most tokens inside <think>...</think> before the block's end is "
                           "forced (as llama.cpp's flag); 0 ends it at once, -1 is unbounded");
  AddSpeculativeConfigOption(command, args.speculative_config);
  schema->excludes(regex)->excludes(grammar)->excludes(choice);
  regex->excludes(grammar)->excludes(choice);
  grammar->excludes(choice);
}

void AddReasoningBudgetOption(CLI::App& command, int64_t& budget, const std::string& help) {
  command.add_option("--reasoning-budget", budget, help)
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
}

void AddSpeculativeConfigOption(CLI::App& command, std::string& json) {
  command.add_option("--speculative-config", json,
                     "Speculative decoding by n-gram lookup, as vLLM's flag: "
                     "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                     "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}'. The tokens that "
                     "followed an earlier occurrence of the last n tokens are checked in one "
                     "step; outputs are unchanged (default: off)");
}

SpeculativeConfig ResolveSpeculativeConfig(const std::string& json) {
  if (json.empty()) return {};
  return ParseSpeculativeConfig(json, "--speculative-config");
}

std::string DescribeSpeculativeConfig(const SpeculativeConfig& config) {
  if (!config.enabled()) return "off";
  return fmt::format("ngram ({} tokens, n-grams of {}-{})", config.num_speculative_tokens,
                     config.prompt_lookup_min, config.prompt_lookup_max);
}

namespace {

std::string ReadTextFile(const std::string& path, const char* option) {
  std::ifstream file(path, std::ios::binary);
  INFER_CHECK(file, "{}: cannot read '{}'", option, path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

std::optional<StructuredOutput> ResolveStructuredOutput(const SamplingArgs& args) {
  using Kind = StructuredOutput::Kind;
  if (!args.json_schema_file.empty()) {
    const auto schema = nlohmann::ordered_json::parse(
        ReadTextFile(args.json_schema_file, "--json-schema"), nullptr, /*allow_exceptions=*/false);
    INFER_CHECK(!schema.is_discarded(), "--json-schema: '{}' is not valid JSON",
                args.json_schema_file);
    return StructuredOutput{Kind::kJsonSchema, schema.dump(), {}};
  }
  if (!args.regex.empty()) return StructuredOutput{Kind::kRegex, args.regex, {}};
  if (!args.grammar_file.empty()) {
    return StructuredOutput{Kind::kGrammar, ReadTextFile(args.grammar_file, "--grammar"), {}};
  }
  if (!args.choices.empty()) return StructuredOutput{Kind::kChoice, "", args.choices};
  return std::nullopt;
}

}  // namespace

SamplingParams ResolveSamplingParams(const SamplingArgs& args, const GenerationConfig& config) {
  SamplingParams params = SamplingParamsFromGenerationConfig(config);
  if (config.max_new_tokens) params.max_new_tokens = *config.max_new_tokens;
  if (args.temperature) params.temperature = *args.temperature;
  if (args.top_k) params.top_k = *args.top_k == 0 ? std::nullopt : args.top_k;
  if (args.top_p) params.top_p = *args.top_p;
  if (args.repetition_penalty) params.repetition_penalty = *args.repetition_penalty;
  if (args.max_new_tokens) params.max_new_tokens = *args.max_new_tokens;
  if (args.reasoning_budget >= 0) params.thinking_token_budget = args.reasoning_budget;
  params.stop = args.stop;
  params.seed = args.seed;
  params.structured_output = ResolveStructuredOutput(args);
  params.Validate();
  return params;
}

std::string DescribeSamplingParams(const SamplingParams& params, bool use_kv_cache) {
  std::string stops;
  for (const std::string& stop : params.stop) {
    stops += (stops.empty() ? "" : ",") + nlohmann::json(stop).dump();
  }
  return fmt::format(
      "temperature={} top_k={} top_p={} repetition_penalty={} max_new_tokens={} stop=[{}] "
      "seed={} reasoning_budget={} kv_cache={}",
      params.temperature, params.top_k ? std::to_string(*params.top_k) : "off", params.top_p,
      params.repetition_penalty, params.max_new_tokens, stops,
      params.seed ? std::to_string(*params.seed) : "random",
      params.thinking_token_budget ? std::to_string(*params.thinking_token_budget) : "off",
      use_kv_cache ? "on" : "off");
}

GenerationSession::GenerationSession(const ModelArgs& args)
    : pool_(args.threads), loaded_(LoadModelFromArgs(args, &pool_)) {
  model_ = MakeDecoderModel(loaded_, pool_, args.matmul_precision, args.quantized_activations);
  const std::filesystem::path dir = ModelFolder(loaded_.path);
  tokenizer_ = LoadModelTokenizer(loaded_.path);
  eos_token_ids_ = LoadEosTokenIds(dir, tokenizer_.get());
  // A GGUF file names its end-of-generation ids in its metadata (loaded_.generation).
  for (const int64_t id : loaded_.generation.eos_token_ids) {
    if (std::find(eos_token_ids_.begin(), eos_token_ids_.end(), id) == eos_token_ids_.end()) {
      eos_token_ids_.push_back(static_cast<int32_t>(id));
    }
  }
  const auto adapters = LoadLorasFromArgs(args, loaded_.config);
  if (!adapters.empty()) lora_ = adapters.front();
}

GenerationSession::~GenerationSession() = default;

const ChatTemplate& GenerationSession::chat_template() {
  if (!chat_template_) chat_template_ = LoadModelChatTemplate(loaded_.path);
  return *chat_template_;
}

const ChatTemplate* GenerationSession::chat_template_or_null() {
  if (tokenizer_ == nullptr) return nullptr;
  try {
    return &chat_template();
  } catch (const Error&) {
    return nullptr;
  }
}

}  // namespace infer::cli
