// What `infer generate` and `infer chat` share: the sampling options (unset ones fall back to
// generation_config.json), and a loaded model with its tokenizer (when the folder has one),
// chat template and EOS ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infer/cli/common.h"
#include "infer/engine/language_model.h"
#include "infer/engine/ngram_proposer.h"
#include "infer/engine/sampling_params.h"
#include "infer/tokenizer/chat_template.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer::cli {

struct SamplingArgs {
  std::optional<double> temperature;
  std::optional<int64_t> top_k;  // 0 disables
  std::optional<double> top_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::vector<std::string> stop;
  std::optional<uint64_t> seed;
  bool no_kv_cache = false;
  std::string kv_cache_dtype = "bf16";
  // Structured output (at most one): a JSON schema file, a regex, a GBNF grammar file, choices.
  std::string json_schema_file;
  std::string regex;
  std::string grammar_file;
  std::vector<std::string> choices;
  bool jump_forward = true;        // structured output: take forced tokens without sampling each
  int64_t reasoning_budget = -1;   // thinking_token_budget; -1: unbounded
  std::string speculative_config;  // vLLM's --speculative-config JSON; empty: off
};

void AddSamplingOptions(CLI::App& command, SamplingArgs& args);
// --reasoning-budget N (llama.cpp's flag: -1 unbounded, 0 ends the thinking at once), for the
// generation commands (AddSamplingOptions) and for `infer serve`'s default.
void AddReasoningBudgetOption(CLI::App& command, int64_t& budget, const std::string& help);
// --speculative-config JSON (vLLM's flag: n-gram drafts checked by the model, same outputs),
// for the generation commands, `infer serve` and `infer bench`.
void AddSpeculativeConfigOption(CLI::App& command, std::string& json);
// The option's value as the engine takes it (off when empty); throws infer::Error naming the
// bad field.
SpeculativeConfig ResolveSpeculativeConfig(const std::string& json);
// "off", or "ngram (4 tokens, n-grams of 2-4)" for logs.
std::string DescribeSpeculativeConfig(const SpeculativeConfig& config);
// The user's values first, then generation_config.json's, then SamplingParams' defaults.
SamplingParams ResolveSamplingParams(const SamplingArgs& args, const GenerationConfig& config);
// "temperature=0.6 top_k=off top_p=0.9 ..." for /params and logs.
std::string DescribeSamplingParams(const SamplingParams& params, bool use_kv_cache);

class GenerationSession {
 public:
  explicit GenerationSession(const ModelArgs& args);
  ~GenerationSession();

  LanguageModel& model() { return *model_; }
  const LoadedModel& loaded() const { return loaded_; }
  // Null when the folder has no tokenizer.json.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }
  // The --lora adapter its requests run with (null: none).
  const std::shared_ptr<const LoraAdapter>& lora() const { return lora_; }

  // The model's chat template (loaded on first use); throws infer::Error when it has none.
  const ChatTemplate& chat_template();
  // The same, or null when the model has none (the engine's front door then refuses chats).
  const ChatTemplate* chat_template_or_null();

 private:
  ThreadPool pool_;
  LoadedModel loaded_;
  std::unique_ptr<LanguageModel> model_;
  std::shared_ptr<const LoraAdapter> lora_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::vector<int32_t> eos_token_ids_;
};

}  // namespace infer::cli
