// ModelConfig: every number and switch that changes the decoder's math, as runtime data.
// The only code that knows the architectures' names is hf_config.cc (config.json) and
// gguf_model.cc (a GGUF file's metadata).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infer/core/dtype.h"

namespace infer {

enum class Activation { kSilu, kGeluTanh };
enum class RopeScalingType { kDefault, kLinear, kLlama3 };

struct RopeConfig {
  double theta = 10000.0;
  RopeScalingType scaling = RopeScalingType::kDefault;
  double factor = 1.0;                              // linear and llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
  // Per-frequency divisors applied after the scaling above (a GGUF file's rope_freqs tensor,
  // which is how llama.cpp stores llama3 scaling); empty: none.
  std::vector<double> frequency_factors;
};

struct LayerConfig {
  // Keys a query may attend to, itself included; 0 means the whole causal prefix.
  int64_t sliding_window = 0;
  RopeConfig rope;
  // The MLP is a mixture of experts (ModelConfig::moe) instead of one dense MLP.
  bool sparse_mlp = false;
  // The token mixer is Gated DeltaNet linear attention (ModelConfig::linear), with a recurrent
  // state per sequence, instead of softmax attention over a KV cache.
  bool linear_attention = false;
};

// Gated DeltaNet (linear attention): q, k (key_heads x key_head_dim each) and v (value_heads x
// value_head_dim) from one projection, through a causal depthwise conv1d of conv_kernel taps and
// SiLU; q and k L2-normalised, q scaled by key_head_dim^-0.5; per value head a state S
// [key_head_dim, value_head_dim] in f32, S = exp(g) S + k (beta (v - S^T k))^T, o = S^T q, with
// g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b); value head j reads key head
// j / (value_heads / key_heads); o goes through an RMSNorm (plain weight) times silu(z) per
// value head, then the out projection.
struct LinearAttentionConfig {
  int64_t conv_kernel = 0;  // 0: no layer is linear
  int64_t key_heads = 0;
  int64_t value_heads = 0;
  int64_t key_head_dim = 0;
  int64_t value_head_dim = 0;
  // Which key head value head h reads: h / (value_heads / key_heads) (Hugging Face's grouped
  // order), or h % key_heads when the value heads are tiled (llama.cpp's GGUF files store them
  // so: its value head j key_heads + g is Hugging Face's g (value_heads / key_heads) + j).
  bool value_heads_tiled = false;

  int64_t key_dim() const { return key_heads * key_head_dim; }
  int64_t value_dim() const { return value_heads * value_head_dim; }
  // The conv1d's channels: q, k and v.
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  // f32 values of one sequence's state in one layer: the conv's last conv_kernel - 1 inputs
  // and the value heads' S.
  int64_t state_floats() const {
    return (conv_kernel - 1) * conv_dim() + value_heads * key_head_dim * value_head_dim;
  }
};

// A mixture-of-experts MLP: a router (hidden -> num_experts, no bias) whose f32 softmax over all
// experts picks the top experts_per_token (ties to the lower index), their weights divided by
// their sum when normalize_top_k; each chosen expert is a gated MLP of `intermediate_size` (the
// model's activation); the layer's output is the weighted sum of the chosen experts' outputs.
struct MoeConfig {
  int64_t num_experts = 0;  // 0: no layer is sparse
  int64_t experts_per_token = 0;
  int64_t intermediate_size = 0;
  bool normalize_top_k = false;
  // A shared expert every token uses beside the routed ones (0: none): a gated MLP of this
  // width whose output is scaled by sigmoid(shared_expert_gate . x), then added.
  int64_t shared_expert_intermediate_size = 0;
  // The checkpoint stacks every expert's matrices in one tensor per kind (`mlp.experts.
  // gate_up_proj`, `mlp.experts.down_proj`) instead of naming each expert's.
  bool fused_experts = false;
};

// How RMSNorm applies its weight. kScaleAfterCast: w * cast(x_hat) (Llama, Qwen3);
// kOffsetInF32: cast(x_hat * (1 + w)) computed in f32 (Gemma).
enum class NormStyle { kScaleAfterCast, kOffsetInF32 };

struct ModelConfig {
  std::string model_type;    // as in config.json; for display only
  std::string architecture;  // architectures[0]; for display only
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  NormStyle norm_style = NormStyle::kScaleAfterCast;
  bool qk_norm = false;  // RMSNorm per head on q and k, before RoPE
  // q_proj gives each head's query and then its output gate (2 head_dim rows per head); the
  // attention output is multiplied by sigmoid(gate) before o_proj.
  bool attn_output_gate = false;
  // RoPE rotates the first rotary_dim dimensions of each head (pairs i, i + rotary_dim / 2) and
  // leaves the rest (0: the whole head).
  int64_t rotary_dim = 0;
  bool sandwich_norms = false;  // extra norms after attention and after the MLP (Gemma)
  bool attention_bias = false;  // q, k, v and o projections
  bool mlp_bias = false;        // gate, up and down projections
  Activation activation = Activation::kSilu;
  double embed_scale = 1.0;          // embeddings are multiplied by this (Gemma: sqrt(hidden))
  double query_scale = 0.0;          // attention scores are q.k * query_scale
  double final_logit_softcap = 0.0;  // 0: none; else logits = tanh(logits / c) * c
  bool tie_word_embeddings = false;
  DType dtype = DType::kBF16;  // torch_dtype: the dtype dummy weights are made in
  std::vector<LayerConfig> layers;
  MoeConfig moe;
  LinearAttentionConfig linear;
  // Where the checkpoint keeps the language model's tensors: "model." ("model.layers.N...", the
  // text-only classes) or "model.language_model." (the vision-language classes).
  std::string weights_prefix = "model.";
  // Tensor-name prefixes of the checkpoint's parts a text engine does not run (a vision tower, a
  // multi-token-prediction layer): skipped at load with one line each, never an error.
  std::vector<std::string> skipped_prefixes;
  int64_t bos_token_id = -1;
  int64_t pad_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  int64_t q_dim() const { return num_heads * head_dim; }
  bool has_sparse_layers() const { return moe.num_experts > 0; }
  // Whether layer i's MLP is a mixture of experts (LayerConfig::sparse_mlp; false past `layers`).
  bool sparse_layer(int64_t i) const {
    return i >= 0 && i < static_cast<int64_t>(layers.size()) &&
           layers[static_cast<size_t>(i)].sparse_mlp;
  }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t rotary_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // Whether layer i mixes tokens by linear attention (LayerConfig::linear_attention).
  bool linear_layer(int64_t i) const {
    return i >= 0 && i < static_cast<int64_t>(layers.size()) &&
           layers[static_cast<size_t>(i)].linear_attention;
  }
  int64_t num_linear_layers() const {
    int64_t count = 0;
    for (int64_t i = 0; i < num_layers; ++i) count += linear_layer(i) ? 1 : 0;
    return count;
  }
  // Layers that keep K and V (every layer but the linear ones).
  int64_t num_kv_layers() const { return num_layers - num_linear_layers(); }
  // K and V bytes for one token across the layers that keep them, at `kv_dtype`.
  int64_t KvCacheBytesPerToken(DType kv_dtype) const {
    return 2 * num_kv_layers() * kv_dim() * static_cast<int64_t>(DTypeSize(kv_dtype));
  }
  // f32 bytes of one sequence's recurrent state across the linear layers (0: none).
  int64_t RecurrentStateBytes() const {
    return num_linear_layers() * linear.state_floats() * static_cast<int64_t>(sizeof(float));
  }
};

// Reads config.json (a file path). Throws infer::Error naming the file and key.
ModelConfig LoadModelConfig(const std::string& config_path);
// The same from JSON text; `source` names it in errors.
ModelConfig ParseModelConfig(const std::string& json_text, const std::string& source);

}  // namespace infer
