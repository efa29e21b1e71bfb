// The one decoder for Llama 3, Qwen3 and Gemma 3: every architectural difference is a
// field of ModelConfig (norm style, QK-norm, sandwich norms, embedding scale, per-layer
// RoPE and sliding window, activation, soft-cap, tied head), never a branch on a name.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "infer/cache/kv_cache.h"
#include "infer/core/thread_pool.h"
#include "infer/loader/weights.h"

namespace infer {

enum class LogitsMode { kAllPositions, kLastPosition };

class Decoder {
 public:
  // `model` and `pool` must outlive the decoder.
  Decoder(const LoadedModel& model, ThreadPool& pool);

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }

  // Runs `tokens` for sequence `seq_idx` of `cache`, at positions cache.seq_len(seq_idx)
  // onwards; writes their K/V into the cache and advances it. `logits` receives
  // [tokens.size(), vocab] (kAllPositions) or [1, vocab] (kLastPosition) f32 values.
  void Forward(std::span<const int32_t> tokens, KvCache& cache, int64_t seq_idx, LogitsMode mode,
               std::vector<float>& logits);

  // The uncached path: recomputes every position of `tokens` from scratch (a fresh cache
  // sized to the sequence). The oracle the cached path is checked against (--no-kv-cache).
  void ForwardUncached(std::span<const int32_t> tokens, LogitsMode mode,
                       std::vector<float>& logits);

 private:
  void ForwardLayer(int64_t layer_idx, int64_t num_tokens, int64_t first_pos, KvCache& cache,
                    int64_t seq_idx);
  void EnsureScratch(int64_t num_tokens);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ThreadPool& pool_;
  float embed_scale_ = 1.0F;         // rounded to the embedding dtype, as HF does
  float norm_weight_offset_ = 0.0F;  // 1 for (1 + w) norms
  // Distinct RoPE settings (Gemma has two) and which one each layer uses.
  std::vector<std::vector<double>> inv_freqs_;
  std::vector<size_t> layer_rope_;
  std::vector<std::vector<float>> rope_cos_, rope_sin_;

  // Activations of the current call, [num_tokens, width] each.
  int64_t scratch_tokens_ = 0;
  std::vector<float> hidden_, normed_, q_, k_, v_, attn_, proj_, gate_, up_;
};

}  // namespace infer
