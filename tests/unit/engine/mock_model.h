// LanguageModel mocks for generation tests: a model that emits a chosen id sequence, one that
// always emits the same id, and one with uniform logits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "infer/engine/language_model.h"

namespace infer::testing {

// Emits script[k] as the k-th generated token of every sequence (the last entry once the
// script runs out). Records how many new tokens each call passed.
class ScriptedModel : public LanguageModel {
 public:
  ScriptedModel(int64_t vocab_size, std::vector<int32_t> script, int64_t context_length = 4096)
      : vocab_size_(vocab_size), context_length_(context_length), script_(std::move(script)) {}

  int64_t vocab_size() const override { return vocab_size_; }
  int64_t context_length() const override { return context_length_; }
  void StartSequences(int64_t num_seqs, int64_t /*max_seq_len*/, bool use_kv_cache) override {
    prompt_lens_.assign(static_cast<size_t>(num_seqs), 0);
    used_cache_ = use_kv_cache;
  }
  void NextTokenLogits(int64_t seq_idx, std::span<const int32_t> tokens, int64_t num_new,
                       std::vector<float>& logits) override {
    auto& prompt_len = prompt_lens_.at(static_cast<size_t>(seq_idx));
    if (num_new == static_cast<int64_t>(tokens.size())) prompt_len = num_new;
    num_new_calls_.push_back(num_new);
    const auto step = static_cast<size_t>(static_cast<int64_t>(tokens.size()) - prompt_len);
    const int32_t next = script_.at(std::min(step, script_.size() - 1));
    logits.assign(static_cast<size_t>(vocab_size_), 0.0F);
    logits.at(static_cast<size_t>(next)) = 30.0F;  // certain even when sampling at T = 1
  }

  bool used_cache() const { return used_cache_; }
  const std::vector<int64_t>& num_new_calls() const { return num_new_calls_; }

 private:
  int64_t vocab_size_;
  int64_t context_length_;
  std::vector<int32_t> script_;
  std::vector<int64_t> prompt_lens_;
  std::vector<int64_t> num_new_calls_;
  bool used_cache_ = false;
};

// Equal logits for every token: sampling at T = 1 is uniform.
class UniformModel : public LanguageModel {
 public:
  explicit UniformModel(int64_t vocab_size) : vocab_size_(vocab_size) {}
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t context_length() const override { return 1 << 20; }
  void StartSequences(int64_t, int64_t, bool) override {}
  void NextTokenLogits(int64_t, std::span<const int32_t>, int64_t,
                       std::vector<float>& logits) override {
    logits.assign(static_cast<size_t>(vocab_size_), 0.0F);
  }

 private:
  int64_t vocab_size_;
};

}  // namespace infer::testing
