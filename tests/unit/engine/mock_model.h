// LanguageModel mocks for engine and generation tests (no forward pass, as vLLM's scheduler tests
// use): a model that emits a chosen id sequence and records every step it is given, and one with
// uniform logits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "infer/engine/language_model.h"

namespace infer::testing {

// Emits script[k] as the k-th generated token of every sequence (the last entry once the
// script runs out): k counts the tokens after the prompt, whose length is taken from the first
// step that asks the sequence for logits. Records each step's (seq_id, num_new).
class ScriptedModel : public LanguageModel {
 public:
  ScriptedModel(int64_t vocab_size, std::vector<int32_t> script, int64_t context_length = 4096)
      : vocab_size_(vocab_size), context_length_(context_length), script_(std::move(script)) {}

  int64_t vocab_size() const override { return vocab_size_; }
  int64_t context_length() const override { return context_length_; }
  void AllocateKvCache(int64_t num_blocks, int64_t, DType, bool use_kv_cache, int64_t) override {
    num_blocks_ = num_blocks;
    used_cache_ = use_kv_cache;
  }
  void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override {
    logits.clear();
    std::vector<std::pair<int64_t, int64_t>> call;
    for (const SequenceStep& step : steps) {
      call.emplace_back(step.seq_id, step.num_new);
      num_new_calls_.push_back(step.num_new);
      if (!step.wants_logits) continue;
      const auto length = static_cast<int64_t>(step.tokens.size());
      const int64_t prompt_len = prompt_lens_.try_emplace(step.seq_id, length).first->second;
      // One row per position asked (a speculative draft's check asks several): the row after
      // token j predicts generated token j + 1 - prompt_len.
      for (int64_t end = length - step.num_logits + 1; end <= length; ++end) {
        const auto k = static_cast<size_t>(end - prompt_len);
        const int32_t next = script_.at(std::min(k, script_.size() - 1));
        const size_t row = logits.size();
        logits.resize(row + static_cast<size_t>(vocab_size_), 0.0F);
        logits.at(row + static_cast<size_t>(next)) = 30.0F;  // certain even when sampling at T = 1
      }
    }
    calls_.push_back(std::move(call));
  }

  bool used_cache() const { return used_cache_; }
  int64_t num_blocks() const { return num_blocks_; }
  // num_new of every sequence step, call after call.
  const std::vector<int64_t>& num_new_calls() const { return num_new_calls_; }
  // Each Forward call's (seq_id, num_new) pairs.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>>& calls() const { return calls_; }

 private:
  int64_t vocab_size_;
  int64_t context_length_;
  std::vector<int32_t> script_;
  std::map<int64_t, int64_t> prompt_lens_;
  std::vector<int64_t> num_new_calls_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> calls_;
  int64_t num_blocks_ = 0;
  bool used_cache_ = false;
};

// Equal logits for every token: sampling at T = 1 is uniform.
class UniformModel : public LanguageModel {
 public:
  explicit UniformModel(int64_t vocab_size) : vocab_size_(vocab_size) {}
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t context_length() const override { return 1 << 20; }
  void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override {
    int64_t rows = 0;
    for (const SequenceStep& s : steps) rows += s.wants_logits ? s.num_logits : 0;
    logits.assign(static_cast<size_t>(rows * vocab_size_), 0.0F);
  }

 private:
  int64_t vocab_size_;
};

}  // namespace infer::testing
