#include "infer/model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "infer/core/error.h"
#include "infer/kernels/experts.h"
#include "infer/kernels/linear_attention.h"
#include "infer/kernels/ops.h"
#include "infer/model/rope.h"

namespace infer {

namespace {

// HF multiplies embeddings by embed_scale cast to the weight dtype (sqrt(1152) = 33.94
// becomes 34.0 in bf16).
float RoundToDType(double value, DType dtype) {
  const auto as_float = static_cast<float>(value);
  switch (dtype) {
    case DType::kBF16:
      return Bf16ToF32(F32ToBf16(as_float));
    case DType::kF16:
      return F16ToF32(F32ToF16(as_float));
    default:
      return as_float;
  }
}

bool SameRope(const RopeConfig& a, const RopeConfig& b) {
  return a.theta == b.theta && a.scaling == b.scaling && a.factor == b.factor &&
         a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings &&
         a.frequency_factors == b.frequency_factors;
}

const Tensor* OptionalTensor(const Tensor& tensor) {
  return tensor.raw() != nullptr ? &tensor : nullptr;
}

// Runs fn(first, rows) over token rows [0, n): split across the pool when they are many
// (prefill, large batches), on this thread otherwise. A row's elementwise and per-row work (norms,
// RoPE, activations, residual adds) does not depend on the other rows, so the results are the
// same bits either way. (Left to one thread, they are serial work the other threads of a prefill
// wait out.)
template <typename Fn>
void ForTokenRows(ThreadPool& pool, int64_t n, Fn&& fn) {
  constexpr int64_t kRowsPerChunk = 4;
  if (pool.num_threads() == 1 || n < 2 * kRowsPerChunk) {
    fn(int64_t{0}, n);
    return;
  }
  pool.ParallelFor(n, kRowsPerChunk, [&](int64_t begin, int64_t end) { fn(begin, end - begin); });
}

}  // namespace

Decoder::Decoder(const LoadedModel& model, ThreadPool& pool, kernels::MatMulPrecision precision,
                 kernels::QuantizedActivations activations)
    : config_(model.config),
      weights_(model.weights),
      pool_(pool),
      precision_(precision),
      activations_(activations) {
  embed_scale_ = RoundToDType(config_.embed_scale, weights_.embed_tokens.dtype());
  norm_weight_offset_ = config_.norm_style == NormStyle::kOffsetInF32 ? 1.0F : 0.0F;
  std::vector<RopeConfig> distinct;
  for (const LayerConfig& layer : config_.layers) {
    auto it = std::find_if(distinct.begin(), distinct.end(),
                           [&](const RopeConfig& rope) { return SameRope(rope, layer.rope); });
    if (it == distinct.end()) {
      distinct.push_back(layer.rope);
      it = distinct.end() - 1;
    }
    layer_rope_.push_back(static_cast<size_t>(it - distinct.begin()));
  }
  for (const RopeConfig& rope : distinct) {
    inv_freqs_.push_back(RopeInverseFrequencies(rope, config_.rotary_dims()));
  }
  rope_cos_.resize(distinct.size());
  rope_sin_.resize(distinct.size());
  int64_t kv_layers = 0;
  int64_t linear_layers = 0;
  linear_params_.resize(static_cast<size_t>(config_.num_layers));
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    if (!config_.linear_layer(i)) {
      cache_layer_.push_back(kv_layers++);
      continue;
    }
    cache_layer_.push_back(linear_layers++);
    const LayerWeights& w = weights_.layers[static_cast<size_t>(i)];
    LinearParams& p = linear_params_[static_cast<size_t>(i)];
    const auto widen = [](const Tensor& t, const auto& fn) {
      std::vector<float> values(static_cast<size_t>(t.numel()));
      for (int64_t j = 0; j < t.numel(); ++j)
        values[static_cast<size_t>(j)] = fn(ElementAsF32(t, j));
      return values;
    };
    const auto same = [](float x) { return x; };
    p.conv = widen(w.conv1d, same);
    p.neg_a = widen(w.a_log, [](float x) { return -std::exp(x); });
    p.dt_bias = widen(w.dt_bias, same);
    p.norm = widen(w.linear_norm, same);
  }
}

void Decoder::EnsureScratch(int64_t num_tokens) {
  if (num_tokens <= scratch_tokens_) return;
  const auto n = static_cast<size_t>(num_tokens);
  hidden_.resize(n * config_.hidden_size);
  normed_.resize(n * config_.hidden_size);
  proj_.resize(n * config_.hidden_size);
  q_.resize(n * config_.q_dim());
  attn_.resize(n * config_.q_dim());
  k_.resize(n * config_.kv_dim());
  v_.resize(n * config_.kv_dim());
  gate_.resize(n * config_.intermediate_size);
  up_.resize(n * config_.intermediate_size);
  if (config_.attn_output_gate) {
    q_gate_.resize(n * 2 * config_.q_dim());
    attn_gate_.resize(n * config_.q_dim());
  }
  if (config_.num_linear_layers() > 0) {
    const LinearAttentionConfig& linear = config_.linear;
    mixed_.resize(n * linear.conv_dim());
    z_.resize(n * linear.value_dim());
    lin_out_.resize(n * linear.value_dim());
    for (auto* buffer : {&lin_b_, &lin_a_, &lin_g_, &lin_beta_}) {
      buffer->resize(n * linear.value_heads);
    }
  }
  if (config_.moe.shared_expert_intermediate_size > 0) {
    shared_out_.resize(n * config_.hidden_size);
    shared_logit_.resize(n);
  }
  if (config_.has_sparse_layers()) {
    router_logits_.resize(n * config_.moe.num_experts);
    expert_ids_.resize(n * config_.moe.experts_per_token);
    expert_weights_.resize(n * config_.moe.experts_per_token);
  }
  scratch_tokens_ = num_tokens;
}

void Decoder::Forward(std::span<const SequenceTokens> seqs, PagedKvCache& cache,
                      std::vector<float>& logits) {
  INFER_CHECK(!seqs.empty(), "forward needs at least one sequence");
  RunLayers(seqs, cache);

  // Gather the rows that want logits, then one norm and one lm_head product for all of them.
  const int64_t hidden = config_.hidden_size;
  int64_t num_rows = 0;
  int64_t row = 0;
  for (const SequenceTokens& seq : seqs) {
    const auto n = static_cast<int64_t>(seq.tokens.size());
    const int64_t first = seq.logits == LogitsMode::kAllPositions
                              ? 0
                              : n - std::clamp<int64_t>(seq.num_last_logits, 1, n);
    const int64_t count = seq.logits == LogitsMode::kNone ? 0 : n - first;
    kernels::RmsNorm(hidden_.data() + (row + first) * hidden, count, hidden, weights_.final_norm,
                     static_cast<float>(config_.rms_norm_eps), norm_weight_offset_,
                     normed_.data() + num_rows * hidden);
    num_rows += count;
    row += n;
  }
  logits.resize(static_cast<size_t>(num_rows * config_.vocab_size));
  if (num_rows == 0) return;
  // The int8 simulation rounds the decoder layers' activations only (as llama.cpp keeps its
  // output head in a wider type).
  kernels::MatMul(
      normed_.data(), num_rows, hidden, hidden, weights_.lm_head, nullptr, logits.data(),
      config_.vocab_size, pool_,
      precision_ == kernels::MatMulPrecision::kInt8 ? kernels::MatMulPrecision::kF32 : precision_,
      activations_);
  if (config_.final_logit_softcap > 0) {
    kernels::SoftCap(logits.data(), static_cast<int64_t>(logits.size()),
                     static_cast<float>(config_.final_logit_softcap));
  }
}

void Decoder::Forward(std::span<const int32_t> tokens, int64_t first_pos, PagedKvCache& cache,
                      LogitsMode mode, std::vector<float>& logits, const LoraAdapter* lora) {
  INFER_CHECK(!tokens.empty(), "forward needs at least one token");
  while (static_cast<int64_t>(sequence_table_.size()) < cache.num_blocks()) {
    sequence_table_.push_back(static_cast<int32_t>(sequence_table_.size()));
  }
  const int64_t end = first_pos + static_cast<int64_t>(tokens.size());
  INFER_CHECK(end <= cache.num_blocks() * cache.block_size(),
              "sequence of {} tokens exceeds the KV cache ({} blocks of {})", end,
              cache.num_blocks(), cache.block_size());
  const SequenceTokens seq{
      tokens,
      first_pos,
      std::span<const int32_t>(sequence_table_).first(static_cast<size_t>(cache.num_blocks())),
      mode,
      1,
      lora};
  Forward({&seq, 1}, cache, logits);
}

PagedKvCache Decoder::MakeSequenceCache(int64_t max_tokens, DType dtype) const {
  constexpr int64_t kBlockSize = 16;
  const int64_t num_blocks = std::max<int64_t>(1, (max_tokens + kBlockSize - 1) / kBlockSize);
  return PagedKvCache::FromModelConfig(config_, num_blocks, kBlockSize, dtype);
}

void Decoder::RunLayers(std::span<const SequenceTokens> seqs, PagedKvCache& cache) {
  INFER_CHECK(cache.num_layers() == config_.num_kv_layers() &&
                  cache.num_kv_heads() == config_.num_kv_heads &&
                  cache.head_dim() == config_.head_dim,
              "KV cache shape does not match the model");
  batch_tokens_.clear();
  attention_seqs_.clear();
  for (const SequenceTokens& seq : seqs) {
    const auto n = static_cast<int64_t>(seq.tokens.size());
    INFER_CHECK(n > 0, "forward: a sequence has no tokens");
    INFER_CHECK(
        seq.first_pos >= 0 &&
            seq.first_pos + n <= static_cast<int64_t>(seq.block_table.size()) * cache.block_size(),
        "forward: positions {}..{} do not fit the sequence's {} blocks of {}", seq.first_pos,
        seq.first_pos + n, seq.block_table.size(), cache.block_size());
    attention_seqs_.push_back({static_cast<int64_t>(batch_tokens_.size()), n, seq.first_pos,
                               seq.block_table.data(),
                               static_cast<int64_t>(seq.block_table.size())});
    batch_tokens_.insert(batch_tokens_.end(), seq.tokens.begin(), seq.tokens.end());
    // A sequence that starts now starts from an empty recurrent state.
    if (config_.num_linear_layers() > 0 && seq.first_pos == 0) cache.ClearState(seq.state_slot);
  }
  // Draft checks: a sequence that kept only the first tokens of its last check goes back to the
  // state before it and replays those; a check now is checkpointed.
  replay_.assign(seqs.size(), -1);
  checkpoint_.assign(seqs.size(), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SequenceTokens& seq = seqs[i];
    if (config_.num_linear_layers() == 0 || seq.state_slot >= cache.checkpoint_slots()) continue;
    const PagedKvCache::Checkpoint& last = cache.checkpoint(seq.state_slot);
    if (last.begin >= 0 && seq.first_pos >= last.begin && seq.first_pos < last.end) {
      replay_[i] = seq.first_pos - last.begin;
    }
    const auto n = static_cast<int64_t>(seq.tokens.size());
    checkpoint_[i] = seq.logits == LogitsMode::kLastPosition && seq.num_last_logits > 1 &&
                     n <= cache.checkpoint_tokens();
  }
  const auto num_tokens = static_cast<int64_t>(batch_tokens_.size());
  EnsureScratch(num_tokens);
  GroupLoraRows(seqs);
  kernels::Embed(weights_.embed_tokens, batch_tokens_.data(), num_tokens, embed_scale_,
                 hidden_.data());
  // RoPE tables row by row: each sequence at its own positions.
  for (size_t r = 0; r < inv_freqs_.size(); ++r) {
    if (seqs.size() == 1) {
      RopeTables(inv_freqs_[r], seqs[0].first_pos, num_tokens, rope_cos_[r], rope_sin_[r]);
      continue;
    }
    rope_cos_[r].clear();
    rope_sin_[r].clear();
    for (const SequenceTokens& seq : seqs) {
      RopeTables(inv_freqs_[r], seq.first_pos, static_cast<int64_t>(seq.tokens.size()),
                 rope_cos_part_, rope_sin_part_);
      rope_cos_[r].insert(rope_cos_[r].end(), rope_cos_part_.begin(), rope_cos_part_.end());
      rope_sin_[r].insert(rope_sin_[r].end(), rope_sin_part_.begin(), rope_sin_part_.end());
    }
  }
  for (int64_t layer_idx = 0; layer_idx < config_.num_layers; ++layer_idx) {
    ForwardLayer(layer_idx, num_tokens, seqs, cache);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (config_.num_linear_layers() == 0 || seqs[i].state_slot >= cache.checkpoint_slots()) {
      continue;
    }
    const int64_t first = seqs[i].first_pos;
    cache.checkpoint(seqs[i].state_slot) =
        checkpoint_[i] != 0
            ? PagedKvCache::Checkpoint{first, first + static_cast<int64_t>(seqs[i].tokens.size())}
            : PagedKvCache::Checkpoint{};
  }
}

void Decoder::GroupLoraRows(std::span<const SequenceTokens> seqs) {
  lora_groups_.clear();
  int32_t row = 0;
  for (const SequenceTokens& seq : seqs) {
    const auto n = static_cast<int32_t>(seq.tokens.size());
    if (seq.lora != nullptr) {
      auto group = std::find_if(lora_groups_.begin(), lora_groups_.end(),
                                [&](const LoraGroup& g) { return g.adapter == seq.lora; });
      if (group == lora_groups_.end()) group = lora_groups_.insert(group, {seq.lora, {}});
      for (int32_t i = 0; i < n; ++i) group->rows.push_back(row + i);
    }
    row += n;
  }
}

void Decoder::ApplyLora(int64_t layer_idx, const float* x, int64_t n, int64_t k,
                        std::initializer_list<LoraTargetOutput> outputs) {
  if (lora_groups_.empty()) return;
  lora_rows_.clear();
  lora_outputs_.clear();
  // Every output's groups, one after another in lora_rows_ (reserved first: spans point in).
  lora_rows_.reserve(outputs.size() * lora_groups_.size());
  for (const LoraTargetOutput& output : outputs) {
    const size_t first = lora_rows_.size();
    for (const LoraGroup& group : lora_groups_) {
      const kernels::LoraMatrices& delta = group.adapter->Delta(layer_idx, output.target);
      if (delta.defined()) lora_rows_.push_back({&delta, group.rows});
    }
    if (lora_rows_.size() == first) continue;
    lora_outputs_.push_back(
        {std::span<const kernels::LoraRows>(lora_rows_).subspan(first, lora_rows_.size() - first),
         output.y, output.y_stride});
  }
  kernels::LoraAdd(x, n, k, k, lora_outputs_, pool_);
}

void Decoder::ForwardUncached(std::span<const int32_t> tokens, LogitsMode mode,
                              std::vector<float>& logits, const LoraAdapter* lora) {
  PagedKvCache scratch_cache = MakeSequenceCache(static_cast<int64_t>(tokens.size()));
  Forward(tokens, 0, scratch_cache, mode, logits, lora);
}

void Decoder::ForwardLayer(int64_t layer_idx, int64_t num_tokens,
                           std::span<const SequenceTokens> seqs, PagedKvCache& cache) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer_idx)];
  const LayerConfig& layer = config_.layers[static_cast<size_t>(layer_idx)];
  const int64_t hidden = config_.hidden_size;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  const int64_t n = num_tokens;

  ForTokenRows(pool_, n, [&](int64_t t0, int64_t rows) {
    kernels::RmsNorm(hidden_.data() + t0 * hidden, rows, hidden, w.attn_norm, eps,
                     norm_weight_offset_, normed_.data() + t0 * hidden);
  });
  if (layer.linear_attention) {
    LinearAttention(layer_idx, w, n, seqs, cache);
  } else {
    Attention(layer_idx, w, n, seqs, cache);
  }
  // The residual add, then the MLP's norm.
  ForTokenRows(pool_, n, [&](int64_t t0, int64_t rows) {
    float* x = hidden_.data() + t0 * hidden;
    float* proj = proj_.data() + t0 * hidden;
    if (config_.sandwich_norms) {
      kernels::RmsNorm(proj, rows, hidden, w.attn_post_norm, eps, norm_weight_offset_, proj);
    }
    kernels::Add(x, proj, rows * hidden);
    kernels::RmsNorm(x, rows, hidden, w.mlp_norm, eps, norm_weight_offset_,
                     normed_.data() + t0 * hidden);
  });
  if (layer.sparse_mlp) {
    SparseMlp(w, n);
  } else {
    DenseMlp(layer_idx, w, n);
  }
  ForTokenRows(pool_, n, [&](int64_t t0, int64_t rows) {
    float* proj = proj_.data() + t0 * hidden;
    if (config_.sandwich_norms) {
      kernels::RmsNorm(proj, rows, hidden, w.mlp_post_norm, eps, norm_weight_offset_, proj);
    }
    kernels::Add(hidden_.data() + t0 * hidden, proj, rows * hidden);
  });
}

void Decoder::Attention(int64_t layer_idx, const LayerWeights& w, int64_t n,
                        std::span<const SequenceTokens> seqs, PagedKvCache& cache) {
  const LayerConfig& layer = config_.layers[static_cast<size_t>(layer_idx)];
  const int64_t hidden = config_.hidden_size;
  const int64_t q_dim = config_.q_dim();
  const int64_t kv_dim = config_.kv_dim();
  const int64_t head_dim = config_.head_dim;
  const int64_t rotary_dim = config_.rotary_dims();
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  const bool gated = config_.attn_output_gate;
  // With an output gate, q_proj's rows are each head's query then its gate: into q_gate_ first.
  const kernels::MatMulOutput qkv[] = {
      {&w.q_proj, OptionalTensor(w.q_bias), gated ? q_gate_.data() : q_.data(),
       gated ? 2 * q_dim : q_dim},
      {&w.k_proj, OptionalTensor(w.k_bias), k_.data(), kv_dim},
      {&w.v_proj, OptionalTensor(w.v_bias), v_.data(), kv_dim}};
  kernels::MatMuls(normed_.data(), n, hidden, hidden, qkv, pool_, precision_, activations_);
  if (gated) {
    ForTokenRows(pool_, n, [&](int64_t t0, int64_t rows) {
      for (int64_t t = t0; t < t0 + rows; ++t) {
        for (int64_t h = 0; h < config_.num_heads; ++h) {
          const float* from = q_gate_.data() + t * 2 * q_dim + 2 * h * head_dim;
          std::copy_n(from, head_dim, q_.data() + t * q_dim + h * head_dim);
          std::copy_n(from + head_dim, head_dim, attn_gate_.data() + t * q_dim + h * head_dim);
        }
      }
    });
  }
  ApplyLora(layer_idx, normed_.data(), n, hidden,
            {{LoraTarget::kQ, q_.data(), q_dim},
             {LoraTarget::kK, k_.data(), kv_dim},
             {LoraTarget::kV, v_.data(), kv_dim}});
  const size_t rope = layer_rope_[static_cast<size_t>(layer_idx)];
  ForTokenRows(pool_, n, [&](int64_t t0, int64_t rows) {
    float* q = q_.data() + t0 * q_dim;
    float* k = k_.data() + t0 * kv_dim;
    if (config_.qk_norm) {
      // Per head over head_dim, before RoPE.
      kernels::RmsNorm(q, rows * config_.num_heads, head_dim, w.q_norm, eps, norm_weight_offset_,
                       q);
      kernels::RmsNorm(k, rows * config_.num_kv_heads, head_dim, w.k_norm, eps, norm_weight_offset_,
                       k);
    }
    // (The tables hold rotary_dim / 2 angles per token.)
    const float* cos = rope_cos_[rope].data() + t0 * (rotary_dim / 2);
    const float* sin = rope_sin_[rope].data() + t0 * (rotary_dim / 2);
    if (rotary_dim == head_dim) {
      kernels::Rope(q, rows, config_.num_heads, head_dim, q_dim, cos, sin);
      kernels::Rope(k, rows, config_.num_kv_heads, head_dim, kv_dim, cos, sin);
    } else {
      // Partial RoPE: the first rotary_dim dimensions of each head, one head at a time.
      for (int64_t h = 0; h < config_.num_heads; ++h) {
        kernels::Rope(q + h * head_dim, rows, 1, rotary_dim, q_dim, cos, sin);
      }
      for (int64_t h = 0; h < config_.num_kv_heads; ++h) {
        kernels::Rope(k + h * head_dim, rows, 1, rotary_dim, kv_dim, cos, sin);
      }
    }
  });
  kernels::AttentionParams params;
  params.num_heads = config_.num_heads;
  params.num_kv_heads = config_.num_kv_heads;
  params.head_dim = head_dim;
  params.scale = static_cast<float>(config_.query_scale);
  params.sliding_window = layer.sliding_window;
  // Every sequence's new K/V first, then one attention call for the step: a query reads keys
  // only from the cache (bf16-rounded in a bf16 cache), the same values alone or in a batch.
  const int64_t kv_layer = cache_layer_[static_cast<size_t>(layer_idx)];
  for (size_t i = 0; i < seqs.size(); ++i) {
    const kernels::AttentionSequence& a = attention_seqs_[i];
    cache.Write(kv_layer, seqs[i].block_table, a.first_pos, k_.data() + a.row * kv_dim,
                v_.data() + a.row * kv_dim, a.num_tokens);
  }
  kernels::PagedAttention(q_.data(), attention_seqs_, cache.Layer(kv_layer), params, attn_.data(),
                          pool_);
  if (gated) {
    ForTokenRows(pool_, n, [&](int64_t t0, int64_t rows) {
      float* out = attn_.data() + t0 * q_dim;
      const float* gate = attn_gate_.data() + t0 * q_dim;
      for (int64_t i = 0; i < rows * q_dim; ++i) out[i] *= 1.0F / (1.0F + std::exp(-gate[i]));
    });
  }
  kernels::MatMul(attn_.data(), n, q_dim, q_dim, w.o_proj, OptionalTensor(w.o_bias), proj_.data(),
                  hidden, pool_, precision_, activations_);
  ApplyLora(layer_idx, attn_.data(), n, q_dim, {{LoraTarget::kO, proj_.data(), hidden}});
}

void Decoder::LinearAttention(int64_t layer_idx, const LayerWeights& w, int64_t n,
                              std::span<const SequenceTokens> seqs, PagedKvCache& cache) {
  const LinearAttentionConfig& linear = config_.linear;
  const LinearParams& p = linear_params_[static_cast<size_t>(layer_idx)];
  const int64_t hidden = config_.hidden_size;
  const int64_t conv_dim = linear.conv_dim();
  const int64_t value_dim = linear.value_dim();
  const int64_t heads = linear.value_heads;
  const kernels::MatMulOutput projections[] = {{&w.in_proj_qkv, nullptr, mixed_.data(), conv_dim},
                                               {&w.in_proj_z, nullptr, z_.data(), value_dim},
                                               {&w.in_proj_b, nullptr, lin_b_.data(), heads},
                                               {&w.in_proj_a, nullptr, lin_a_.data(), heads}};
  kernels::MatMuls(normed_.data(), n, hidden, hidden, projections, pool_, precision_, activations_);
  DecayAndStrength(layer_idx, lin_a_.data(), lin_b_.data(), n, lin_g_.data(), lin_beta_.data());
  const kernels::GatedDeltaDims dims{linear.key_heads, linear.value_heads, linear.key_head_dim,
                                     linear.value_head_dim, linear.value_heads_tiled};
  const int64_t state_layer = cache_layer_[static_cast<size_t>(layer_idx)];
  const int64_t input_floats = conv_dim + 2 * heads;  // a checkpoint's per token: qkv, a, b
  const size_t state_bytes = static_cast<size_t>(linear.state_floats()) * sizeof(float);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const kernels::AttentionSequence& a = attention_seqs_[i];
    const int64_t slot = seqs[i].state_slot;
    float* state = cache.State(state_layer, slot);
    if (replay_[i] >= 0) {
      std::memcpy(state, cache.CheckpointState(state_layer, slot), state_bytes);
      ReplayLinear(layer_idx, cache.CheckpointInputs(state_layer, slot), replay_[i], state);
    }
    if (checkpoint_[i] != 0) {
      std::memcpy(cache.CheckpointState(state_layer, slot), state, state_bytes);
      float* inputs = cache.CheckpointInputs(state_layer, slot);
      for (int64_t t = 0; t < a.num_tokens; ++t) {
        const int64_t row = a.row + t;
        float* to = inputs + t * input_floats;
        std::copy_n(mixed_.data() + row * conv_dim, conv_dim, to);
        std::copy_n(lin_a_.data() + row * heads, heads, to + conv_dim);
        std::copy_n(lin_b_.data() + row * heads, heads, to + conv_dim + heads);
      }
    }
    float* conv_state = state;  // [kernel - 1, conv_dim], then S
    float* delta_state = state + (linear.conv_kernel - 1) * conv_dim;
    kernels::CausalConv1dSilu(mixed_.data() + a.row * conv_dim, a.num_tokens, conv_dim, conv_dim,
                              p.conv.data(), linear.conv_kernel, conv_state, pool_);
    kernels::GatedDeltaRule(mixed_.data() + a.row * conv_dim, a.num_tokens, conv_dim,
                            lin_g_.data() + a.row * heads, lin_beta_.data() + a.row * heads, dims,
                            delta_state, lin_out_.data() + a.row * value_dim, value_dim, pool_);
  }
  kernels::GatedRmsNorm(lin_out_.data(), z_.data(), n, heads, linear.value_head_dim, p.norm.data(),
                        static_cast<float>(config_.rms_norm_eps), pool_);
  kernels::MatMul(lin_out_.data(), n, value_dim, value_dim, w.out_proj, nullptr, proj_.data(),
                  hidden, pool_, precision_, activations_);
}

void Decoder::DecayAndStrength(int64_t layer_idx, const float* a, const float* b, int64_t n,
                               float* g, float* beta) const {
  const LinearParams& p = linear_params_[static_cast<size_t>(layer_idx)];
  const int64_t heads = config_.linear.value_heads;
  // beta = sigmoid(b); g = -exp(A_log) softplus(a + dt_bias) (softplus linear past 20, as
  // torch's threshold).
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t i = t * heads + h;
      const float x = a[i] + p.dt_bias[static_cast<size_t>(h)];
      const float softplus = x > 20.0F ? x : std::log1p(std::exp(x));
      g[i] = p.neg_a[static_cast<size_t>(h)] * softplus;
      beta[i] = 1.0F / (1.0F + std::exp(-b[i]));
    }
  }
}

void Decoder::ReplayLinear(int64_t layer_idx, const float* inputs, int64_t count, float* state) {
  if (count == 0) return;
  const LinearAttentionConfig& linear = config_.linear;
  const LinearParams& p = linear_params_[static_cast<size_t>(layer_idx)];
  const int64_t conv_dim = linear.conv_dim();
  const int64_t heads = linear.value_heads;
  const int64_t input_floats = conv_dim + 2 * heads;
  const auto rows = static_cast<size_t>(count);
  replay_qkv_.resize(rows * static_cast<size_t>(conv_dim));
  replay_a_.resize(rows * static_cast<size_t>(heads));
  replay_b_.resize(rows * static_cast<size_t>(heads));
  replay_g_.resize(rows * static_cast<size_t>(heads));
  replay_beta_.resize(rows * static_cast<size_t>(heads));
  replay_out_.resize(rows * static_cast<size_t>(linear.value_dim()));
  for (int64_t t = 0; t < count; ++t) {
    const float* from = inputs + t * input_floats;
    std::copy_n(from, conv_dim, replay_qkv_.data() + t * conv_dim);
    std::copy_n(from + conv_dim, heads, replay_a_.data() + t * heads);
    std::copy_n(from + conv_dim + heads, heads, replay_b_.data() + t * heads);
  }
  DecayAndStrength(layer_idx, replay_a_.data(), replay_b_.data(), count, replay_g_.data(),
                   replay_beta_.data());
  const kernels::GatedDeltaDims dims{linear.key_heads, linear.value_heads, linear.key_head_dim,
                                     linear.value_head_dim, linear.value_heads_tiled};
  kernels::CausalConv1dSilu(replay_qkv_.data(), count, conv_dim, conv_dim, p.conv.data(),
                            linear.conv_kernel, state, pool_);
  kernels::GatedDeltaRule(replay_qkv_.data(), count, conv_dim, replay_g_.data(),
                          replay_beta_.data(), dims, state + (linear.conv_kernel - 1) * conv_dim,
                          replay_out_.data(), linear.value_dim(), pool_);
}

void Decoder::DenseMlp(int64_t layer_idx, const LayerWeights& w, int64_t n) {
  const int64_t hidden = config_.hidden_size;
  const int64_t inter = config_.intermediate_size;
  const kernels::MatMulOutput gate_up[] = {
      {&w.gate_proj, OptionalTensor(w.gate_bias), gate_.data(), inter},
      {&w.up_proj, OptionalTensor(w.up_bias), up_.data(), inter}};
  kernels::MatMuls(normed_.data(), n, hidden, hidden, gate_up, pool_, precision_, activations_);
  ApplyLora(layer_idx, normed_.data(), n, hidden,
            {{LoraTarget::kGate, gate_.data(), inter}, {LoraTarget::kUp, up_.data(), inter}});
  ForTokenRows(pool_, n, [&](int64_t t0, int64_t rows) {
    float* gate = gate_.data() + t0 * inter;
    const float* up = up_.data() + t0 * inter;
    if (config_.activation == Activation::kSilu) {
      kernels::SiluMul(gate, up, gate, rows * inter);
    } else {
      kernels::GeluTanhMul(gate, up, gate, rows * inter);
    }
  });
  kernels::MatMul(gate_.data(), n, inter, inter, w.down_proj, OptionalTensor(w.down_bias),
                  proj_.data(), hidden, pool_, precision_, activations_);
  ApplyLora(layer_idx, gate_.data(), n, inter, {{LoraTarget::kDown, proj_.data(), hidden}});
}

void Decoder::SparseMlp(const LayerWeights& w, int64_t n) {
  const int64_t hidden = config_.hidden_size;
  const MoeConfig& moe = config_.moe;
  kernels::MatMul(normed_.data(), n, hidden, hidden, w.router, nullptr, router_logits_.data(),
                  moe.num_experts, pool_, precision_, activations_);
  kernels::SoftmaxTopK(router_logits_.data(), n, moe.num_experts, moe.experts_per_token,
                       moe.normalize_top_k, expert_ids_.data(), expert_weights_.data());
  const kernels::ExpertRouting routing{expert_ids_.data(), expert_weights_.data(),
                                       moe.experts_per_token};
  kernels::MixtureOfExperts(normed_.data(), n, hidden, hidden, w.experts, routing,
                            config_.activation == Activation::kSilu
                                ? kernels::GatedActivation::kSilu
                                : kernels::GatedActivation::kGeluTanh,
                            proj_.data(), hidden, pool_, precision_, activations_);
  if (const int64_t shared = moe.shared_expert_intermediate_size; shared > 0) {
    // out += sigmoid(shared_expert_gate . x) * shared_expert(x).
    const kernels::MatMulOutput gate_up[] = {
        {&w.shared_expert.gate, nullptr, gate_.data(), shared},
        {&w.shared_expert.up, nullptr, up_.data(), shared},
        {&w.shared_expert_gate, nullptr, shared_logit_.data(), 1}};
    kernels::MatMuls(normed_.data(), n, hidden, hidden, gate_up, pool_, precision_, activations_);
    kernels::SiluMul(gate_.data(), up_.data(), gate_.data(), n * shared);
    kernels::MatMul(gate_.data(), n, shared, shared, w.shared_expert.down, nullptr,
                    shared_out_.data(), hidden, pool_, precision_, activations_);
    ForTokenRows(pool_, n, [&](int64_t t0, int64_t rows) {
      for (int64_t t = t0; t < t0 + rows; ++t) {
        const float scale = 1.0F / (1.0F + std::exp(-shared_logit_[static_cast<size_t>(t)]));
        float* out = proj_.data() + t * hidden;
        const float* from = shared_out_.data() + t * hidden;
        for (int64_t i = 0; i < hidden; ++i) out[i] += scale * from[i];
      }
    });
  }
}

}  // namespace infer
