// One-shot generation on the engine (engine.h): prefill the prompt, then sample one token per
// step until EOS, a stop string or max_new_tokens; single prompts and batches (rows finish
// independently).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/language_model.h"
#include "infer/engine/ngram_proposer.h"
#include "infer/engine/output.h"
#include "infer/engine/prompt.h"
#include "infer/engine/sampling_params.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer {

struct GenerateOptions {
  bool use_kv_cache = true;
  bool enable_jump_forward = true;  // EngineConfig::enable_jump_forward
  SpeculativeConfig speculative;    // EngineConfig::speculative (off by default)
  DType kv_cache_dtype = DType::kBF16;
  // Most tokens one step runs (longer prompts are prefilled in chunks).
  int64_t max_num_batched_tokens = 512;
  // Ids that end generation (LoadEosTokenIds); empty: only stop strings and length do.
  std::vector<int32_t> eos_token_ids;
  // Receives text of row `row` as soon as it is final (see OutputText::TakeStable).
  std::function<void(size_t row, std::string_view text)> on_text;
  // Renders chat prompts (may be null: no chat prompts).
  const ChatTemplate* chat_template = nullptr;
  // The LoRA adapter each prompt runs with: one per prompt, or one for all; empty or null
  // entries: the base model.
  std::vector<std::shared_ptr<const LoraAdapter>> loras;
};

// `tokenizer` may be null: the text is then empty, and the prompt must be token ids and
// `params.stop` empty. The engine's front door (Engine::PreparePrompt) encodes and checks the
// prompt: throws RequestRejected for invalid params, a prompt it cannot encode or that is
// empty, ids outside the vocab, or prompt + max_new_tokens beyond the model's context.
GenerationOutput Generate(LanguageModel& model, const Tokenizer* tokenizer, const Prompt& prompt,
                          const SamplingParams& params, const GenerateOptions& options = {});

// Runs every prompt as its own request of one engine (continuous batching); a finished row stops
// running. `params` has one entry per prompt, or one for all. Row i's result equals
// Generate(prompts[i], params[i]).
std::vector<GenerationOutput> GenerateBatch(LanguageModel& model, const Tokenizer* tokenizer,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<SamplingParams>& params,
                                            const GenerateOptions& options = {});

// {token_ids, text, finish_reason, prompt_tokens, generated_tokens,
//  timing {prefill_time_s, decode_times_s}}: the `infer generate --json` object.
nlohmann::ordered_json GenerationOutputToJson(const GenerationOutput& output);

}  // namespace infer
