#include "infer/engine/front_door.h"

#include <algorithm>

#include "infer/core/error.h"
#include "infer/engine/logits_processor.h"

namespace infer {

namespace {

template <typename... Args>
[[noreturn]] void Reject(bool about_prompt, fmt::format_string<Args...> format, Args&&... args) {
  throw RequestRejected(fmt::format(format, std::forward<Args>(args)...), about_prompt);
}

void ValidateParams(const SamplingParams& params) {
  try {
    params.Validate();
  } catch (const Error& e) {
    throw RequestRejected(e.what(), /*about_prompt=*/false);
  }
}

}  // namespace

FrontDoor::FrontDoor(const EngineConfig& config, const LanguageModel& model,
                     const Tokenizer* tokenizer, const ChatTemplate* chat_template,
                     std::vector<int32_t> eos_token_ids, const KvCacheInfo& kv_cache)
    : config_(config),
      model_(model),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      eos_token_ids_(std::move(eos_token_ids)),
      kv_cache_(kv_cache) {
  if (tokenizer_ != nullptr) {
    structured_ = std::make_unique<StructuredOutputCompiler>(*tokenizer_, eos_token_ids_);
    constraint_factory_ = [this](const StructuredOutput& spec) { return structured_->Make(spec); };
    thinking_tokens_ = ThinkingTokensOf(*tokenizer_);
  }
}

int64_t FrontDoor::max_model_len() const {
  return std::min({config_.max_model_len, model_.context_length(), kv_cache_.capacity_tokens()});
}

std::vector<int32_t> FrontDoor::Tokenize(const Prompt& prompt) const {
  return EncodePrompt(prompt, tokenizer_, chat_template_, &template_mutex_);
}

std::vector<int32_t> FrontDoor::PreparePrompt(const Prompt& prompt, SamplingParams& params,
                                              bool fill_context) const {
  if (!fill_context) ValidateParams(params);
  std::vector<int32_t> ids = EncodePrompt(prompt, tokenizer_, chat_template_, &template_mutex_);
  const auto size = static_cast<int64_t>(ids.size());
  if (ids.empty()) Reject(true, "the prompt is empty");
  if (tokenizer_ == nullptr && !params.stop.empty()) {
    Reject(false, "stop strings need a tokenizer (the model folder has no tokenizer.json)");
  }
  for (const int32_t id : ids) {
    if (id < 0 || id >= model_.vocab_size()) {
      Reject(true, "prompt token id {} is outside the vocab [0, {})", id, model_.vocab_size());
    }
  }
  if (params.structured_output) {
    if (!constraint_factory_) {
      Reject(false, "structured output needs a tokenizer (the model folder has no tokenizer.json)");
    }
    try {
      constraint_factory_(*params.structured_output);  // compiled once: later ones hit the cache
    } catch (const Error& e) {
      Reject(false, "{}", e.what());
    }
  }
  if (fill_context) {
    if (max_model_len() - size < 1) {
      Reject(true, "the prompt ({} tokens) leaves no room to generate within max_model_len ({})",
             size, max_model_len());
    }
    params.max_new_tokens = max_model_len() - size;
    ValidateParams(params);
  }
  const int64_t model_limit = std::min(config_.max_model_len, model_.context_length());
  const int64_t total = size + params.max_new_tokens;
  if (total > model_limit) {
    Reject(true,
           "prompt ({} tokens) + max_tokens ({}) = {} exceeds max_model_len, the context "
           "length ({})",
           size, params.max_new_tokens, total, model_limit);
  }
  if (total > kv_cache_.capacity_tokens()) {
    Reject(true,
           "prompt ({} tokens) + max_tokens ({}) = {} can never fit the KV cache ({} tokens: {} "
           "blocks of {}; see --kv-cache-memory / --num-kv-blocks)",
           size, params.max_new_tokens, total, kv_cache_.capacity_tokens(), kv_cache_.num_blocks,
           kv_cache_.block_size);
  }
  return ids;
}

std::shared_ptr<Request> FrontDoor::MakeRequest(std::string id, std::vector<int32_t> prompt_ids,
                                                SamplingParams params, int64_t priority,
                                                double arrival_s,
                                                std::shared_ptr<const LoraAdapter> lora) const {
  if (!params.seed && config_.seed) params.seed = config_.seed;
  auto request = std::make_shared<Request>(std::move(id), std::move(prompt_ids), std::move(params),
                                           arrival_s, tokenizer_, priority);
  if (lora) request->block_table.salt = static_cast<uint64_t>(lora->id);
  request->lora = std::move(lora);
  if (request->sampling_params.structured_output) {
    INFER_CHECK(constraint_factory_, "structured output needs a tokenizer");
    request->constraint = constraint_factory_(*request->sampling_params.structured_output);
  }
  if (request->sampling_params.thinking_token_budget && thinking_tokens_) {
    request->thinking.emplace(*thinking_tokens_, *request->sampling_params.thinking_token_budget,
                              request->prompt_token_ids);
  }
  request->logits_processors =
      MakeLogitsProcessors(request->sampling_params, eos_token_ids_, request->constraint.get(),
                           request->thinking ? &*request->thinking : nullptr, &request->text);
  return request;
}

}  // namespace infer
