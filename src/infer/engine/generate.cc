#include "infer/engine/generate.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>
#include <unordered_set>

#include "infer/core/error.h"
#include "infer/engine/output_text.h"
#include "infer/engine/sampler.h"

namespace infer {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The state of one sequence of a batch.
struct Row {
  Row(const Tokenizer* tokenizer, const SamplingParams& row_params, std::span<const int32_t> prompt)
      : params(row_params),
        tokens(prompt.begin(), prompt.end()),
        sampler(row_params),
        text(tokenizer, row_params.stop) {
    result.prompt_tokens = static_cast<int64_t>(prompt.size());
  }

  const SamplingParams& params;
  std::vector<int32_t> tokens;  // prompt + generated
  Sampler sampler;
  OutputText text;
  GenerationResult result;
  bool done = false;
};

void CheckRequest(const LanguageModel& model, const Tokenizer* tokenizer,
                  std::span<const int32_t> prompt, const SamplingParams& params) {
  params.Validate();
  INFER_CHECK(!prompt.empty(), "the prompt is empty: give at least one token");
  INFER_CHECK(tokenizer != nullptr || params.stop.empty(),
              "stop strings need a tokenizer (the model folder has no tokenizer.json)");
  for (const int32_t id : prompt) {
    INFER_CHECK(id >= 0 && id < model.vocab_size(),
                "prompt token id {} is outside the vocab [0, {})", id, model.vocab_size());
  }
  const auto total = static_cast<int64_t>(prompt.size()) + params.max_new_tokens;
  INFER_CHECK(
      total <= model.context_length(),
      "prompt ({} tokens) + max_new_tokens ({}) = {} exceeds the model's context length ({})",
      prompt.size(), params.max_new_tokens, total, model.context_length());
}

// Samples from `logits`, records the token and applies the stop conditions in priority order:
// EOS, stop string, length.
void TakeToken(Row& row, std::vector<float>& logits, const std::unordered_set<int32_t>& eos_ids) {
  const int32_t token = row.sampler.Sample(logits, row.tokens);
  row.tokens.push_back(token);
  row.result.token_ids.push_back(token);
  row.result.generated_tokens = static_cast<int64_t>(row.result.token_ids.size());
  if (eos_ids.contains(token)) {
    row.result.finish_reason = FinishReason::kEos;
    row.done = true;
  } else if (row.text.Add(token)) {
    row.result.finish_reason = FinishReason::kStop;
    row.done = true;
  } else if (row.result.generated_tokens >= row.params.max_new_tokens) {
    row.result.finish_reason = FinishReason::kLength;
    row.done = true;
  }
  if (row.done && row.text.Finish() && row.result.finish_reason == FinishReason::kLength) {
    row.result.finish_reason = FinishReason::kStop;
  }
}

void Stream(Row& row, size_t row_idx, const GenerateOptions& options) {
  if (!options.on_text) return;
  const std::string stable = row.text.TakeStable();
  if (!stable.empty()) options.on_text(row_idx, stable);
}

}  // namespace

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "length";
}

double GenerationTiming::decode_time_s() const {
  return std::accumulate(decode_times_s.begin(), decode_times_s.end(), 0.0);
}

GenerationResult Generate(LanguageModel& model, const Tokenizer* tokenizer,
                          std::span<const int32_t> prompt_ids, const SamplingParams& params,
                          const GenerateOptions& options) {
  std::vector<std::vector<int32_t>> prompts{{prompt_ids.begin(), prompt_ids.end()}};
  return std::move(GenerateBatch(model, tokenizer, prompts, {params}, options).front());
}

std::vector<GenerationResult> GenerateBatch(LanguageModel& model, const Tokenizer* tokenizer,
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
  int64_t max_seq_len = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    CheckRequest(model, tokenizer, prompts[i], params_of(i));
    max_seq_len = std::max(max_seq_len,
                           static_cast<int64_t>(prompts[i].size()) + params_of(i).max_new_tokens);
  }
  const std::unordered_set<int32_t> eos_ids(options.eos_token_ids.begin(),
                                            options.eos_token_ids.end());

  std::vector<std::optional<Row>> rows(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) rows[i].emplace(tokenizer, params_of(i), prompts[i]);
  model.StartSequences(static_cast<int64_t>(prompts.size()), max_seq_len, options.use_kv_cache);

  std::vector<float> logits;
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& row = *rows[i];
    const Clock::time_point start = Clock::now();
    model.NextTokenLogits(static_cast<int64_t>(i), row.tokens,
                          static_cast<int64_t>(row.tokens.size()), logits);
    TakeToken(row, logits, eos_ids);
    row.result.timing.prefill_time_s = SecondsSince(start);
    Stream(row, i, options);
  }
  for (bool any_running = true; any_running;) {
    any_running = false;
    for (size_t i = 0; i < rows.size(); ++i) {
      Row& row = *rows[i];
      if (row.done) continue;
      any_running = true;
      const Clock::time_point start = Clock::now();
      model.NextTokenLogits(static_cast<int64_t>(i), row.tokens, 1, logits);
      row.result.timing.decode_times_s.push_back(SecondsSince(start));
      TakeToken(row, logits, eos_ids);
      Stream(row, i, options);
    }
  }

  std::vector<GenerationResult> results;
  results.reserve(rows.size());
  for (auto& row : rows) {
    row->result.text = row->text.text();
    results.push_back(std::move(row->result));
  }
  return results;
}

nlohmann::ordered_json GenerationResultToJson(const GenerationResult& result) {
  nlohmann::ordered_json json;
  json["token_ids"] = result.token_ids;
  json["text"] = result.text;
  json["finish_reason"] = FinishReasonName(result.finish_reason);
  json["prompt_tokens"] = result.prompt_tokens;
  json["generated_tokens"] = result.generated_tokens;
  json["timing"] = {{"prefill_time_s", result.timing.prefill_time_s},
                    {"decode_times_s", result.timing.decode_times_s}};
  return json;
}

}  // namespace infer
