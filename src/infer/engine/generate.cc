#include "infer/engine/generate.h"

#include <algorithm>

#include "infer/core/error.h"
#include "infer/engine/engine.h"

namespace infer {

namespace {

// Continuous batching on an engine of `prompts.size()` sequences whose KV pool holds exactly
// what the prompts may need; each prompt checked by its front door.
std::vector<GenerationOutput> RunBatch(LanguageModel& model, const Tokenizer* tokenizer,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       const std::vector<SamplingParams>& params,
                                       const GenerateOptions& options) {
  INFER_CHECK(!prompts.empty(), "generate: no prompts");
  INFER_CHECK(params.size() == 1 || params.size() == prompts.size(),
              "generate: {} sampling params for {} prompts (give 1 or one per prompt)",
              params.size(), prompts.size());
  const auto params_of = [&](size_t i) -> const SamplingParams& {
    return params.size() == 1 ? params.front() : params[i];
  };
  EngineConfig config;
  config.max_model_len = model.context_length();
  config.max_num_seqs = static_cast<int64_t>(prompts.size());
  config.max_num_batched_tokens = options.max_num_batched_tokens;
  config.max_waiting_requests = static_cast<int64_t>(prompts.size());
  config.kv_cache_dtype = options.kv_cache_dtype;
  config.use_kv_cache = options.use_kv_cache;
  config.enable_jump_forward = options.enable_jump_forward;
  config.speculative = options.speculative;
  config.num_blocks = 0;
  config.max_loras = std::max<int64_t>(1, static_cast<int64_t>(options.loras.size()));
  for (size_t i = 0; i < prompts.size(); ++i) {
    // What it may need; the front door below refuses requests beyond the context.
    const int64_t total =
        std::clamp<int64_t>(static_cast<int64_t>(prompts[i].size()) + params_of(i).max_new_tokens,
                            1, model.context_length());
    config.num_blocks += (total + config.block_size - 1) / config.block_size;
  }
  Engine engine(config, model, tokenizer, options.eos_token_ids);
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> ids = engine.PreparePrompt(prompts[i], params_of(i));
    const auto& loras = options.loras;
    INFER_CHECK(loras.empty() || loras.size() == 1 || loras.size() == prompts.size(),
                "generate: {} adapters for {} prompts", loras.size(), prompts.size());
    std::shared_ptr<const LoraAdapter> lora =
        loras.empty() ? nullptr : loras[loras.size() == 1 ? 0 : i];
    INFER_CHECK(engine.AddRequest(std::to_string(i), std::move(ids), params_of(i), 0, nullptr,
                                  std::move(lora)) != nullptr,
                "generate: the engine refused request {}", i);
  }
  std::vector<GenerationOutput> results(prompts.size());
  StepCallbacks callbacks;
  if (options.on_text) {
    callbacks.on_output = [&](const StepOutput& output) {
      if (!output.text_delta.empty())
        options.on_text(std::stoul(output.request_id), output.text_delta);
    };
  }
  callbacks.on_end = [&](GenerationOutput output) {
    if (output.error) Fail("{}", *output.error);
    const size_t row = std::stoul(output.request_id);
    results[row] = std::move(output);
  };
  engine.RunUntilDone(callbacks);
  return results;
}

}  // namespace

GenerationOutput Generate(LanguageModel& model, const Tokenizer* tokenizer, const Prompt& prompt,
                          const SamplingParams& params, const GenerateOptions& options) {
  std::vector<std::vector<int32_t>> prompts{EncodePrompt(prompt, tokenizer, options.chat_template)};
  return std::move(RunBatch(model, tokenizer, prompts, {params}, options).front());
}

std::vector<GenerationOutput> GenerateBatch(LanguageModel& model, const Tokenizer* tokenizer,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<SamplingParams>& params,
                                            const GenerateOptions& options) {
  return RunBatch(model, tokenizer, prompts, params, options);
}

nlohmann::ordered_json GenerationOutputToJson(const GenerationOutput& output) {
  nlohmann::ordered_json json;
  json["token_ids"] = output.token_ids;
  json["text"] = output.text;
  json["finish_reason"] = FinishReasonName(output.finish_reason.value_or(FinishReason::kLength));
  json["prompt_tokens"] = output.prompt_tokens();
  json["generated_tokens"] = output.generated_tokens();
  json["timing"] = {{"prefill_time_s", output.timing.prefill_time_s},
                    {"decode_times_s", output.timing.decode_times_s}};
  return json;
}

}  // namespace infer
