// What generation needs from a model: next-token logits for a growing sequence. The decoder
// implements it (decoder_model.h); tests implement it with mocks that emit chosen ids.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace infer {

// One sequence's share of a batched call: as NextTokenLogits' arguments.
struct SequenceStep {
  int64_t seq_idx = 0;
  std::span<const int32_t> tokens;
  int64_t num_new = 0;
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;

  virtual int64_t vocab_size() const = 0;
  // Longest sequence (prompt + generated) the model supports.
  virtual int64_t context_length() const = 0;

  // Starts `num_seqs` empty sequences of at most `max_seq_len` tokens each; with
  // `use_kv_cache`, allocates the cache they share (one row per sequence).
  virtual void StartSequences(int64_t num_seqs, int64_t max_seq_len, bool use_kv_cache) = 0;

  // f32 logits [vocab] for the token after `tokens` (all of sequence `seq_idx` so far), of
  // which the last `num_new` have not been passed before (the whole prompt at prefill, then
  // one). A cached model runs only those; an uncached one recomputes everything.
  virtual void NextTokenLogits(int64_t seq_idx, std::span<const int32_t> tokens, int64_t num_new,
                               std::vector<float>& logits) = 0;

  // NextTokenLogits for several sequences at once: `logits` receives [steps.size(), vocab].
  // A model that batches runs them as one forward pass; the default runs them one by one.
  virtual void BatchNextTokenLogits(std::span<const SequenceStep> steps,
                                    std::vector<float>& logits) {
    std::vector<float> row;
    logits.clear();
    for (const SequenceStep& step : steps) {
      NextTokenLogits(step.seq_idx, step.tokens, step.num_new, row);
      logits.insert(logits.end(), row.begin(), row.end());
    }
  }

  // Bytes held by the KV cache of the current sequences (0 without one).
  virtual int64_t kv_cache_bytes() const { return 0; }
};

}  // namespace infer
