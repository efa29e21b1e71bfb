// The one decoder for Llama 3, Qwen3 and Gemma 3: every architectural difference is a
// field of ModelConfig (norm style, QK-norm, sandwich norms, embedding scale, per-layer
// RoPE and sliding window, activation, soft-cap, tied head), never a branch on a name.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "infer/cache/kv_cache.h"
#include "infer/core/thread_pool.h"
#include "infer/kernels/ops.h"
#include "infer/loader/weights.h"

namespace infer {

enum class LogitsMode { kAllPositions, kLastPosition };

// One sequence's share of a batched forward: new tokens for row `seq_idx` of the cache.
struct SequenceTokens {
  int64_t seq_idx = 0;
  std::span<const int32_t> tokens;
};

class Decoder {
 public:
  // `model` and `pool` must outlive the decoder. `precision` applies to every projection
  // (kBf16: activations rounded to bf16 before multiplying bf16 weights; see kernels/ops.h).
  Decoder(const LoadedModel& model, ThreadPool& pool,
          kernels::MatMulPrecision precision = kernels::MatMulPrecision::kF32);

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }

  // Runs `tokens` for sequence `seq_idx` of `cache`, at positions cache.seq_len(seq_idx)
  // onwards; writes their K/V into the cache and advances it. `logits` receives
  // [tokens.size(), vocab] (kAllPositions) or [1, vocab] (kLastPosition) f32 values.
  void Forward(std::span<const int32_t> tokens, KvCache& cache, int64_t seq_idx, LogitsMode mode,
               std::vector<float>& logits);

  // Runs several sequences of `cache` in one pass (ragged layout: their tokens are concatenated,
  // so every matrix product covers the whole batch; attention stays per sequence). Each runs at
  // its own positions cache.seq_len(seq_idx) onwards and is advanced. `logits` receives
  // [seqs.size(), vocab]: the last position of each sequence, in order.
  void ForwardBatch(std::span<const SequenceTokens> seqs, KvCache& cache,
                    std::vector<float>& logits);

  // The uncached path: recomputes every position of `tokens` from scratch (a fresh cache
  // sized to the sequence). The oracle the cached path is checked against (--no-kv-cache).
  void ForwardUncached(std::span<const int32_t> tokens, LogitsMode mode,
                       std::vector<float>& logits);

 private:
  // Rows [row, row + num_rows) of the activations belong to sequence seq_idx at first_pos.
  struct Segment {
    int64_t seq_idx, first_pos, row, num_rows;
  };
  // Embeds `tokens` (all segments' rows) and runs every layer; hidden_ holds the result.
  void RunLayers(const int32_t* tokens, std::span<const Segment> segments, KvCache& cache);
  void ForwardLayer(int64_t layer_idx, int64_t num_tokens, std::span<const Segment> segments,
                    KvCache& cache);
  void EnsureScratch(int64_t num_tokens);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ThreadPool& pool_;
  kernels::MatMulPrecision precision_;
  float embed_scale_ = 1.0F;         // rounded to the embedding dtype, as HF does
  float norm_weight_offset_ = 0.0F;  // 1 for (1 + w) norms
  // Distinct RoPE settings (Gemma has two) and which one each layer uses.
  std::vector<std::vector<double>> inv_freqs_;
  std::vector<size_t> layer_rope_;
  std::vector<std::vector<float>> rope_cos_, rope_sin_;

  // Activations of the current call, [num_tokens, width] each.
  int64_t scratch_tokens_ = 0;
  std::vector<int32_t> batch_tokens_;
  std::vector<float> rope_cos_part_, rope_sin_part_;
  std::vector<float> hidden_, normed_, q_, k_, v_, attn_, proj_, gate_, up_;
};

}  // namespace infer
