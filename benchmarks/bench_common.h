// Pieces the benchmark programs share: a progress-printing model wrapper, percentiles, and the
// host/commit/time facts a report records.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "infer/engine/language_model.h"

namespace infer::bench {

// A LanguageModel that passes every call through to `inner`: the base of wrappers that watch
// Forward.
class ForwardingModel : public LanguageModel {
 public:
  explicit ForwardingModel(LanguageModel& inner) : inner_(inner) {}
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  int64_t context_length() const override { return inner_.context_length(); }
  int64_t kv_bytes_per_token(DType kv_dtype) const override {
    return inner_.kv_bytes_per_token(kv_dtype);
  }
  int64_t recurrent_state_bytes() const override { return inner_.recurrent_state_bytes(); }
  void AllocateKvCache(int64_t num_blocks, int64_t block_size, DType kv_dtype, bool use_kv_cache,
                       int64_t state_slots) override {
    inner_.AllocateKvCache(num_blocks, block_size, kv_dtype, use_kv_cache, state_slots);
  }
  void CopyKvBlock(int32_t source, int32_t destination) override {
    inner_.CopyKvBlock(source, destination);
  }
  void CopyState(int64_t source, int64_t destination) override {
    inner_.CopyState(source, destination);
  }
  void EnableStateCheckpoints(int64_t slots, int64_t max_tokens) override {
    inner_.EnableStateCheckpoints(slots, max_tokens);
  }
  int64_t kv_cache_bytes() const override { return inner_.kv_cache_bytes(); }
  void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override {
    inner_.Forward(steps, logits);
  }

 protected:
  LanguageModel& inner_;
};

// Passes calls through to `inner` and prints "label: step N[/total], T s" to stderr about once
// a second (T: seconds since SetLabel).
class ProgressModel final : public ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  // total_steps 0: unknown (not printed).
  void SetLabel(std::string label, int64_t total_steps = 0);
  void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override;
  // Tokens run through Forward since SetLabel (prefill chunks and decode tokens).
  int64_t tokens() const { return tokens_; }

 private:
  void Tick();

  std::string label_;
  int64_t total_steps_ = 0;
  int64_t steps_ = 0;
  int64_t tokens_ = 0;
  std::chrono::steady_clock::time_point label_start_{};
  std::chrono::steady_clock::time_point last_print_{};
};

// Erases the progress line.
void ClearProgressLine();

// Linear interpolation between closest ranks; `sorted` ascending, q in [0, 1].
double Percentile(const std::vector<double>& sorted, double q);

// A shell command's stdout, trimmed of surrounding spaces and newlines ("" on failure).
std::string CommandOutput(const char* command);

// The CPU for reports: lscpu's model name (else /proc/cpuinfo's), then which of the flags
// avx512f, avx512_bf16, amx_bf16 it has, e.g. "AMD EPYC (avx512f avx512_bf16; no amx_bf16)".
std::string CpuDescription();

// The current UTC time in strftime `format`.
std::string UtcTime(const char* format);

// A benchmark's main: parses argv into `app`, then returns run(). A CLI11 error (also one
// thrown by run, e.g. CLI::ValidationError) exits through app.exit (usage, help); any other
// exception prints "error: ..." and returns 1.
int ParseAndRun(CLI::App& app, int argc, char** argv, const std::function<int()>& run);

}  // namespace infer::bench
