#include "infer/engine/logits_processor.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"

namespace infer {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// The grammar's allowed tokens; before min_tokens, not the end of generation.
class GrammarMask final : public LogitsProcessor {
 public:
  GrammarMask(TokenConstraint& constraint, std::span<const int32_t> eos_ids, int64_t min_tokens)
      : constraint_(constraint),
        eos_ids_(eos_ids.begin(), eos_ids.end()),
        min_tokens_(min_tokens) {}
  Stage stage() const override { return Stage::kMask; }

  void Apply(const DrawContext& context, std::span<float> logits) override {
    const size_t vocab = logits.size();
    mask_.assign((vocab + 31) / 32, 0);
    constraint_.FillMask(mask_);
    if (context.num_generated() < min_tokens_) {
      for (const int32_t id : eos_ids_) {
        if (id >= 0 && static_cast<size_t>(id) < vocab) mask_[id / 32] &= ~(1U << (id % 32));
      }
    }
    if (std::all_of(mask_.begin(), mask_.end(), [](uint32_t word) { return word == 0; })) {
      // The grammar allows only the end, which min_tokens forbids.
      throw GrammarError(fmt::format("the output is complete after {} tokens but min_tokens is {}",
                                     context.num_generated(), min_tokens_));
    }
    ApplyTokenMask(logits, mask_);
  }

 private:
  TokenConstraint& constraint_;
  const std::vector<int32_t> eos_ids_;
  const int64_t min_tokens_;
  std::vector<uint32_t> mask_;  // one bit a token
};

// A spent thinking budget forces the end of the reasoning block, one token a draw, where the
// masks before it (the grammar's) leave that token: every other token is ruled out. It begins
// once the text does not end inside a character (or after a few draws).
class ThinkingBudgetForce final : public LogitsProcessor {
 public:
  ThinkingBudgetForce(const ThinkingBudget& thinking, const OutputText* text)
      : thinking_(thinking), text_(text) {}
  Stage stage() const override { return Stage::kMask; }

  void Apply(const DrawContext& /*context*/, std::span<float> logits) override {
    const std::optional<int32_t> forced = thinking_.Forced();
    if (!forced || *forced < 0 || static_cast<size_t>(*forced) >= logits.size()) return;
    if (text_ != nullptr && text_->MidCharacter() && thinking_.MayWait()) return;
    const auto keep = static_cast<size_t>(*forced);
    if (logits[keep] == kMasked) return;  // a mask before this one rules it out
    for (size_t i = 0; i < logits.size(); ++i) {
      if (i != keep) logits[i] = kMasked;
    }
  }

 private:
  const ThinkingBudget& thinking_;
  const OutputText* text_;
};

// The end of generation before min_tokens.
class MinTokensEos final : public LogitsProcessor {
 public:
  MinTokensEos(std::span<const int32_t> eos_ids, int64_t min_tokens)
      : eos_ids_(eos_ids.begin(), eos_ids.end()), min_tokens_(min_tokens) {}
  Stage stage() const override { return Stage::kAdjust; }

  void Apply(const DrawContext& context, std::span<float> logits) override {
    if (context.num_generated() >= min_tokens_) return;
    for (const int32_t id : eos_ids_) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) {
        logits[static_cast<size_t>(id)] = kMasked;
      }
    }
  }

 private:
  const std::vector<int32_t> eos_ids_;
  const int64_t min_tokens_;
};

class LogitBias final : public LogitsProcessor {
 public:
  explicit LogitBias(std::map<int32_t, double> bias) : bias_(std::move(bias)) {}
  Stage stage() const override { return Stage::kAdjust; }
  void Apply(const DrawContext& /*context*/, std::span<float> logits) override {
    ApplyLogitBias(logits, bias_);
  }

 private:
  const std::map<int32_t, double> bias_;
};

// Over every token of the context, the prompt's too.
class RepetitionPenalty final : public LogitsProcessor {
 public:
  explicit RepetitionPenalty(double penalty) : penalty_(penalty) {}
  Stage stage() const override { return Stage::kAdjust; }
  void Apply(const DrawContext& context, std::span<float> logits) override {
    ApplyRepetitionPenalty(logits, context.token_ids, penalty_);
  }

 private:
  const double penalty_;
};

// Over the generated tokens only.
class PresenceFrequencyPenalty final : public LogitsProcessor {
 public:
  PresenceFrequencyPenalty(double presence, double frequency)
      : presence_(presence), frequency_(frequency) {}
  Stage stage() const override { return Stage::kAdjust; }
  void Apply(const DrawContext& context, std::span<float> logits) override {
    const auto prompt = static_cast<size_t>(std::clamp<int64_t>(
        context.num_prompt_tokens, 0, static_cast<int64_t>(context.token_ids.size())));
    ApplyPresenceFrequencyPenalty(logits, context.token_ids.subspan(prompt), presence_, frequency_);
  }

 private:
  const double presence_;
  const double frequency_;
};

}  // namespace

LogitsProcessors MakeLogitsProcessors(const SamplingParams& params,
                                      std::span<const int32_t> eos_ids, TokenConstraint* constraint,
                                      const ThinkingBudget* thinking, const OutputText* text) {
  LogitsProcessors processors;
  if (constraint != nullptr) {
    processors.push_back(std::make_unique<GrammarMask>(*constraint, eos_ids, params.min_tokens));
  }
  if (thinking != nullptr)
    processors.push_back(std::make_unique<ThinkingBudgetForce>(*thinking, text));
  if (params.min_tokens > 0 && !eos_ids.empty()) {
    processors.push_back(std::make_unique<MinTokensEos>(eos_ids, params.min_tokens));
  }
  if (!params.logit_bias.empty())
    processors.push_back(std::make_unique<LogitBias>(params.logit_bias));
  if (params.repetition_penalty != 1.0) {
    processors.push_back(std::make_unique<RepetitionPenalty>(params.repetition_penalty));
  }
  if (params.presence_penalty != 0.0 || params.frequency_penalty != 0.0) {
    processors.push_back(std::make_unique<PresenceFrequencyPenalty>(params.presence_penalty,
                                                                    params.frequency_penalty));
  }
  return processors;
}

int32_t DrawToken(std::span<float> logits, const DrawContext& context,
                  const LogitsProcessors& processors, Sampler& sampler,
                  std::optional<int64_t> top_logprobs, TokenLogprobs* logprobs,
                  std::vector<float>& raw) {
  const bool want_logprobs = logprobs != nullptr && top_logprobs.has_value();
  for (const auto& processor : processors) {
    if (processor->stage() == LogitsProcessor::Stage::kMask) processor->Apply(context, logits);
  }
  if (want_logprobs) raw.assign(logits.begin(), logits.end());
  for (const auto& processor : processors) {
    if (processor->stage() == LogitsProcessor::Stage::kAdjust) processor->Apply(context, logits);
  }
  const int32_t token = sampler.Sample(logits);
  if (want_logprobs) *logprobs = ComputeLogprobs(raw, token, *top_logprobs);
  return token;
}

}  // namespace infer
