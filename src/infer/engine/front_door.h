// The engine's front door: every request (the server's protocols, every CLI command, a
// GenerationRequest) is tokenized (a chat through the chat template) and checked here, once,
// before it is queued; and the Request it then becomes, with its constraint, thinking budget and
// logits processors. Thread-safe: const, but for one chat template render at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "infer/cache/kv_cache_sizing.h"
#include "infer/engine/constraint.h"
#include "infer/engine/engine_config.h"
#include "infer/engine/language_model.h"
#include "infer/engine/prompt.h"
#include "infer/engine/request.h"
#include "infer/engine/sampling_params.h"
#include "infer/engine/structured.h"
#include "infer/engine/thinking_budget.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer {

class FrontDoor {
 public:
  // Everything given must outlive the front door; `tokenizer` and `chat_template` may be null
  // (token-id prompts only; no chat prompts). `eos_token_ids`: what min_tokens holds back.
  FrontDoor(const EngineConfig& config, const LanguageModel& model, const Tokenizer* tokenizer,
            const ChatTemplate* chat_template, std::vector<int32_t> eos_token_ids,
            const KvCacheInfo& kv_cache);

  // The longest prompt + max_tokens a request may ask for: max_model_len, capped by the model
  // and by the KV pool.
  int64_t max_model_len() const;

  // The prompt's ids, checked; throws RequestRejected for invalid sampling params, a prompt that
  // cannot be encoded (no tokenizer, no chat template, the template fails) or encodes to nothing,
  // ids outside the vocab, prompt + max_new_tokens beyond max_model_len or the KV pool, or a
  // structured output that does not compile. With `fill_context`, params.max_new_tokens is first
  // set to the rest of the context (OpenAI's unset max_tokens).
  std::vector<int32_t> PreparePrompt(const Prompt& prompt, SamplingParams& params,
                                     bool fill_context) const;
  // The prompt's ids only, unchecked; throws RequestRejected when it cannot be encoded.
  std::vector<int32_t> Tokenize(const Prompt& prompt) const;

  // A prepared request as the engine runs it, arrived at `arrival_s`: the engine's default seed
  // where it gives none, its constraint, its thinking budget, its logits processors.
  // `lora` (may be null) is the adapter it runs with.
  std::shared_ptr<Request> MakeRequest(std::string id, std::vector<int32_t> prompt_ids,
                                       SamplingParams params, int64_t priority, double arrival_s,
                                       std::shared_ptr<const LoraAdapter> lora = nullptr) const;

  using ConstraintFactory =
      std::function<std::unique_ptr<TokenConstraint>(const StructuredOutput& spec)>;
  void SetConstraintFactory(ConstraintFactory factory) { constraint_factory_ = std::move(factory); }
  void SetThinkingTokens(std::optional<ThinkingTokens> tokens) {
    thinking_tokens_ = std::move(tokens);
  }
  void IndexVocabularyInBackground() {
    if (structured_) structured_->IndexInBackground();
  }

 private:
  const EngineConfig& config_;
  const LanguageModel& model_;
  const Tokenizer* tokenizer_;
  const ChatTemplate* chat_template_;
  const std::vector<int32_t> eos_token_ids_;
  const KvCacheInfo& kv_cache_;
  mutable std::mutex template_mutex_;                     // chat template rendering, one at a time
  std::unique_ptr<StructuredOutputCompiler> structured_;  // null without a tokenizer
  ConstraintFactory constraint_factory_;
  std::optional<ThinkingTokens> thinking_tokens_;  // requests' ThinkingBudgets refer to it
};

}  // namespace infer
