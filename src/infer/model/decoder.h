// The one decoder for Llama 3, Qwen3, Qwen3-MoE, Gemma 3 and Qwen3.5: every architectural
// difference is a field of ModelConfig (norm style, QK-norm, sandwich norms, embedding scale,
// per-layer RoPE and sliding window, softmax or linear attention per layer, an attention output
// gate, partial RoPE, dense or mixture-of-experts MLP per layer with or without a shared expert,
// activation, soft-cap, tied head), never a branch on a name.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "infer/cache/paged_kv_cache.h"
#include "infer/core/thread_pool.h"
#include "infer/kernels/ops.h"
#include "infer/loader/lora.h"
#include "infer/loader/weights.h"

namespace infer {

// Which positions of a sequence get logits: none (a prompt chunk that does not end the prompt),
// the last, or all (`infer logits`).
enum class LogitsMode { kNone, kLastPosition, kAllPositions };

// One sequence's share of a forward pass: its new tokens at positions first_pos onwards (the
// cache holds the positions before), and the blocks that hold (or will hold) its K/V.
struct SequenceTokens {
  std::span<const int32_t> tokens;
  int64_t first_pos = 0;
  std::span<const int32_t> block_table;  // covers positions 0 .. first_pos + tokens.size() - 1
  LogitsMode logits = LogitsMode::kLastPosition;
  // kLastPosition: rows for this many trailing positions (a speculative draft's check).
  int64_t num_last_logits = 1;
  // The LoRA adapter its projections add (null: the base model alone); outlives the call.
  const LoraAdapter* lora = nullptr;
  // Its recurrent-state slot in the cache (models with linear-attention layers): the state its
  // tokens before first_pos left, cleared when first_pos is 0.
  int64_t state_slot = 0;
};

class Decoder {
 public:
  // `model` and `pool` must outlive the decoder. `precision` applies to every projection of
  // float weights (kBf16: activations rounded to bf16 before multiplying bf16 weights),
  // `activations` to every quantized one (kInt8x2: two int8 planes); see kernels/ops.h.
  Decoder(const LoadedModel& model, ThreadPool& pool,
          kernels::MatMulPrecision precision = kernels::MatMulPrecision::kF32,
          kernels::QuantizedActivations activations = kernels::QuantizedActivations::kInt8);

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }

  // Runs every sequence of `seqs` in one pass (ragged layout: their tokens are concatenated, so
  // every matrix product covers the whole step; attention reads each through its block table).
  // Writes their K/V into `cache`. `logits` receives f32 rows, sequence by sequence: none, the
  // last position's, or every position's, as each asks.
  void Forward(std::span<const SequenceTokens> seqs, PagedKvCache& cache,
               std::vector<float>& logits);

  // One sequence in a cache of its own whose blocks are 0, 1, 2, ... (tests, `infer logits`,
  // `infer bench`): runs `tokens` at positions first_pos onwards.
  void Forward(std::span<const int32_t> tokens, int64_t first_pos, PagedKvCache& cache,
               LogitsMode mode, std::vector<float>& logits, const LoraAdapter* lora = nullptr);

  // The uncached path: recomputes every position of `tokens` from scratch (a fresh f32 cache
  // sized to the sequence). The oracle the cached path is checked against (--no-kv-cache).
  void ForwardUncached(std::span<const int32_t> tokens, LogitsMode mode, std::vector<float>& logits,
                       const LoraAdapter* lora = nullptr);

  // A cache for one sequence of up to max_tokens positions (blocks 0, 1, 2, ...).
  PagedKvCache MakeSequenceCache(int64_t max_tokens, DType dtype = DType::kF32) const;

 private:
  // Embeds batch_tokens_ and runs every layer for the sequences of attention_seqs_; hidden_
  // holds the result.
  void RunLayers(std::span<const SequenceTokens> seqs, PagedKvCache& cache);
  void ForwardLayer(int64_t layer_idx, int64_t num_tokens, std::span<const SequenceTokens> seqs,
                    PagedKvCache& cache);
  // The token mixers of a layer on normed_ [n, hidden], into proj_: softmax attention over the
  // KV cache, or Gated DeltaNet over each sequence's recurrent state.
  void Attention(int64_t layer_idx, const LayerWeights& w, int64_t n,
                 std::span<const SequenceTokens> seqs, PagedKvCache& cache);
  void LinearAttention(int64_t layer_idx, const LayerWeights& w, int64_t n,
                       std::span<const SequenceTokens> seqs, PagedKvCache& cache);
  // Gated DeltaNet's log decay g and write strength beta [n, value_heads] from a and b.
  void DecayAndStrength(int64_t layer_idx, const float* a, const float* b, int64_t n, float* g,
                        float* beta) const;
  // Takes a linear layer's state `state` (the conv's inputs, then S) through `count` tokens of
  // a checkpoint's inputs (PagedKvCache::CheckpointInputs), as their step did.
  void ReplayLinear(int64_t layer_idx, const float* inputs, int64_t count, float* state);
  // The MLP of a layer on normed_ [n, hidden], into proj_: one gated MLP, or the experts the
  // router picks for each row (LayerConfig::sparse_mlp).
  void DenseMlp(int64_t layer_idx, const LayerWeights& w, int64_t n);
  void SparseMlp(const LayerWeights& w, int64_t n);
  void EnsureScratch(int64_t num_tokens);
  // Groups the token rows of `seqs` by their LoRA adapter (lora_groups_).
  void GroupLoraRows(std::span<const SequenceTokens> seqs);
  // Adds the step's adapters' updates to the projections of x [n, k] that `outputs` name.
  struct LoraTargetOutput {
    LoraTarget target;
    float* y;
    int64_t y_stride;
  };
  void ApplyLora(int64_t layer_idx, const float* x, int64_t n, int64_t k,
                 std::initializer_list<LoraTargetOutput> outputs);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ThreadPool& pool_;
  kernels::MatMulPrecision precision_;
  kernels::QuantizedActivations activations_;
  float embed_scale_ = 1.0F;         // rounded to the embedding dtype, as HF does
  float norm_weight_offset_ = 0.0F;  // 1 for (1 + w) norms
  // Distinct RoPE settings (Gemma has two) and which one each layer uses.
  std::vector<std::vector<double>> inv_freqs_;
  std::vector<size_t> layer_rope_;
  std::vector<std::vector<float>> rope_cos_, rope_sin_;
  // Each layer's index among the layers that keep K/V, or among the linear ones (their state).
  std::vector<int64_t> cache_layer_;
  // A linear layer's small parameters in f32: conv taps [conv_dim, kernel], -exp(A_log) and
  // dt_bias [value_heads], the gated norm's weight [value_head_dim].
  struct LinearParams {
    std::vector<float> conv, neg_a, dt_bias, norm;
  };
  std::vector<LinearParams> linear_params_;  // by layer (empty for the others)

  // Activations of the current call, [num_tokens, width] each.
  int64_t scratch_tokens_ = 0;
  std::vector<int32_t> batch_tokens_;
  std::vector<kernels::AttentionSequence> attention_seqs_;
  std::vector<int32_t> sequence_table_;  // 0, 1, 2, ...: the one-sequence Forward's blocks
  std::vector<float> rope_cos_part_, rope_sin_part_;
  // The step's adapters and the rows each updates (none: a base-only step).
  struct LoraGroup {
    const LoraAdapter* adapter;
    std::vector<int32_t> rows;
  };
  std::vector<LoraGroup> lora_groups_;
  std::vector<kernels::LoraRows> lora_rows_;
  std::vector<kernels::LoraOutput> lora_outputs_;
  std::vector<float> hidden_, normed_, q_, k_, v_, attn_, proj_, gate_, up_;
  std::vector<float> q_gate_, attn_gate_;  // attn_output_gate: q_proj's rows, the gates
  // Linear layers: q/k/v (the conv's channels), z, b, a, log decay g, beta, the heads' outputs.
  std::vector<float> mixed_, z_, lin_b_, lin_a_, lin_g_, lin_beta_, lin_out_;
  // Draft checks (PagedKvCache checkpoints), per sequence of the step: the tokens of its last
  // check it keeps, replayed from the checkpoint before it runs (-1: none), and whether this
  // step is a check to checkpoint. Scratch of a replay.
  std::vector<int64_t> replay_;
  std::vector<char> checkpoint_;
  std::vector<float> replay_qkv_, replay_a_, replay_b_, replay_g_, replay_beta_, replay_out_;
  std::vector<float> shared_out_, shared_logit_;       // a shared expert's output and gate logit
  std::vector<float> router_logits_, expert_weights_;  // sparse layers: [n, experts], [n, top k]
  std::vector<int32_t> expert_ids_;                    // [n, top k]
};

}  // namespace infer
