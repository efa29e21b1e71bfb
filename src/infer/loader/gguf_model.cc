#include "infer/loader/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "infer/core/error.h"
#include "infer/loader/gguf_blocks.h"

namespace infer {

namespace {

enum class Arch { kLlama, kQwen3, kQwen3Moe, kGemma3, kQwen35, kQwen35Moe };

Arch ArchOf(const GgufFile& file) {
  const std::string arch = file.String("general.architecture").value_or("");
  if (arch == "llama") return Arch::kLlama;
  if (arch == "qwen3") return Arch::kQwen3;
  if (arch == "qwen3moe") return Arch::kQwen3Moe;
  if (arch == "gemma3") return Arch::kGemma3;
  if (arch == "qwen35") return Arch::kQwen35;
  if (arch == "qwen35moe") return Arch::kQwen35Moe;
  Fail(
      "{}: general.architecture is '{}'; infer runs llama, qwen3, qwen3moe, gemma3, qwen35 and "
      "qwen35moe GGUF files",
      file.path(), arch);
}

// The `<arch>.` keys, read with the file's name and the key in every error.
class Keys {
 public:
  Keys(const GgufFile& file, std::string arch) : file_(file), prefix_(std::move(arch) + ".") {}
  int64_t Positive(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    const std::optional<int64_t> value = file_.Int(prefix_ + key);
    INFER_CHECK(value || fallback, "{}: missing metadata '{}{}'", file_.path(), prefix_, key);
    const int64_t n = value.value_or(*fallback);
    INFER_CHECK(n > 0 && n <= (int64_t{1} << 31), "{}: metadata '{}{}' is {}, out of range",
                file_.path(), prefix_, key, n);
    return n;
  }
  double Number(const std::string& key, double fallback) const {
    const double x = file_.Float(prefix_ + key).value_or(fallback);
    INFER_CHECK(std::isfinite(x) && x >= 0, "{}: metadata '{}{}' is {}, out of range", file_.path(),
                prefix_, key, x);
    return x;
  }
  std::optional<std::string> String(const std::string& key) const {
    return file_.String(prefix_ + key);
  }
  bool Has(const std::string& key) const { return file_.Has(prefix_ + key); }
  std::string Name(const std::string& key) const { return prefix_ + key; }

 private:
  const GgufFile& file_;
  std::string prefix_;
};

RopeConfig GlobalRope(const GgufFile& file, const Keys& keys, int64_t head_dim) {
  RopeConfig rope;
  rope.theta = keys.Number("rope.freq_base", 10000.0);
  const std::string scaling = keys.String("rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    rope.scaling = RopeScalingType::kLinear;
    rope.factor = keys.Number("rope.scaling.factor", 1.0);
    INFER_CHECK(rope.factor > 0, "{}: {} must be positive", file.path(),
                keys.Name("rope.scaling.factor"));
  } else {
    INFER_CHECK(scaling == "none", "{}: {} is '{}' (infer reads none and linear)", file.path(),
                keys.Name("rope.scaling.type"), scaling);
  }
  // llama3 scaling arrives as per-frequency divisors (the converter's rope_freqs tensor).
  if (const GgufTensorInfo* factors = file.FindTensor("rope_freqs.weight")) {
    INFER_CHECK(factors->dims.size() == 1 && factors->dims[0] == head_dim / 2,
                "{}: rope_freqs.weight has {} values; the head size {} needs {}", file.path(),
                factors->elements(), head_dim, head_dim / 2);
    std::vector<float> values(static_cast<size_t>(head_dim / 2));
    DequantizeGgmlRow(factors->type, file.Data(*factors), values);
    for (const float f : values) {
      INFER_CHECK(std::isfinite(f) && f > 0, "{}: rope_freqs.weight holds {}", file.path(), f);
      rope.frequency_factors.push_back(f);
    }
  }
  return rope;
}

// Gemma 3's local layers: llama.cpp's converter writes no pattern, and llama.cpp takes every
// sixth layer as global; a file with <arch>.attention.sliding_window_pattern (a period, or a
// bool per layer) says so itself.
std::vector<bool> SlidingLayers(const GgufFile& file, const Keys& keys, int64_t num_layers) {
  std::vector<bool> sliding(static_cast<size_t>(num_layers));
  const std::string key = keys.Name("attention.sliding_window_pattern");
  if (const GgufValue* value = file.Has(key) ? &file.header().metadata.at(key) : nullptr;
      value != nullptr && value->type == GgufType::kArray) {
    const std::vector<int64_t>* flags = file.Ints(key);
    INFER_CHECK(flags->size() == sliding.size(), "{}: {} has {} entries for {} layers", file.path(),
                key, flags->size(), num_layers);
    for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = (*flags)[i] != 0;
    return sliding;
  }
  const int64_t period = keys.Positive("attention.sliding_window_pattern", 6);
  for (int64_t i = 0; i < num_layers; ++i) sliding[i] = (i + 1) % period != 0;
  return sliding;
}

// llama.cpp's expert keys; a layer is sparse where the file holds its router (ffn_gate_inp) or
// its experts (ffn_gate_exps): a missing one of the two is then named as missing.
// llama.cpp's qwen3moe graph renormalises the top-k weights unless expert_weights_norm says
// otherwise.
void ReadExperts(const GgufFile& file, const Keys& keys, ModelConfig& config) {
  MoeConfig& moe = config.moe;
  const std::optional<int64_t> count = file.Int(keys.Name("expert_count"));
  INFER_CHECK(count.has_value(), "{}: missing metadata '{}'", file.path(),
              keys.Name("expert_count"));
  INFER_CHECK(*count > 0 && *count <= 65536,
              "{}: metadata '{}' is {}; a mixture of experts needs 1 "
              "to 65536 experts",
              file.path(), keys.Name("expert_count"), *count);
  moe.num_experts = *count;
  moe.experts_per_token = keys.Positive("expert_used_count");
  INFER_CHECK(moe.experts_per_token <= moe.num_experts,
              "{}: metadata '{}' is {}, more than the {} experts ('{}')", file.path(),
              keys.Name("expert_used_count"), moe.experts_per_token, moe.num_experts,
              keys.Name("expert_count"));
  moe.intermediate_size = keys.Positive("expert_feed_forward_length");
  moe.normalize_top_k = file.Int(keys.Name("expert_weights_norm")).value_or(1) != 0;
  if (keys.Has("expert_shared_feed_forward_length")) {
    moe.shared_expert_intermediate_size = keys.Positive("expert_shared_feed_forward_length");
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string layer = "blk." + std::to_string(i) + ".";
    config.layers[static_cast<size_t>(i)].sparse_mlp =
        file.FindTensor(layer + "ffn_gate_inp.weight") != nullptr ||
        file.FindTensor(layer + "ffn_gate_exps.weight") != nullptr;
  }
}

// llama.cpp's hybrid (qwen35, qwen35moe) keys: the Gated DeltaNet sizes under ssm.*, the value
// head size as inner_size / time_step_rank (llama.cpp itself takes it equal to the key head's),
// value heads tiled (its converter reorders them so), and the layer kinds from
// attention.recurrent_layers (a bool per layer) or full_attention_interval (every interval-th
// layer full, as in Hugging Face's config).
void ReadLinearAttention(const GgufFile& file, const Keys& keys, ModelConfig& config) {
  LinearAttentionConfig& linear = config.linear;
  linear.conv_kernel = keys.Positive("ssm.conv_kernel");
  linear.key_head_dim = keys.Positive("ssm.state_size");
  linear.key_heads = keys.Positive("ssm.group_count");
  linear.value_heads = keys.Positive("ssm.time_step_rank");
  const int64_t inner = keys.Positive("ssm.inner_size");
  INFER_CHECK(inner % linear.value_heads == 0,
              "{}: metadata '{}' ({}) is not a whole number of '{}' ({}) value heads", file.path(),
              keys.Name("ssm.inner_size"), inner, keys.Name("ssm.time_step_rank"),
              linear.value_heads);
  linear.value_head_dim = inner / linear.value_heads;
  INFER_CHECK(linear.value_heads % linear.key_heads == 0,
              "{}: metadata '{}' ({}) must be a multiple of '{}' ({})", file.path(),
              keys.Name("ssm.time_step_rank"), linear.value_heads, keys.Name("ssm.group_count"),
              linear.key_heads);
  linear.value_heads_tiled = true;
  const std::string recurrent = keys.Name("attention.recurrent_layers");
  if (const std::vector<int64_t>* flags = file.Has(recurrent) ? file.Ints(recurrent) : nullptr) {
    INFER_CHECK(static_cast<int64_t>(flags->size()) >= config.num_layers,
                "{}: {} has {} entries for {} layers", file.path(), recurrent, flags->size(),
                config.num_layers);
    for (int64_t i = 0; i < config.num_layers; ++i) {
      config.layers[static_cast<size_t>(i)].linear_attention = (*flags)[i] != 0;
    }
    return;
  }
  const int64_t interval = keys.Positive("full_attention_interval", 4);
  for (int64_t i = 0; i < config.num_layers; ++i) {
    config.layers[static_cast<size_t>(i)].linear_attention = (i + 1) % interval != 0;
  }
}

}  // namespace

ModelConfig GgufModelConfig(const GgufFile& file) {
  const Arch arch = ArchOf(file);
  const std::string arch_name = *file.String("general.architecture");
  const Keys keys(file, arch_name);
  ModelConfig config;
  config.model_type = arch_name;
  const bool hybrid = arch == Arch::kQwen35 || arch == Arch::kQwen35Moe;
  const bool experts = arch == Arch::kQwen3Moe || arch == Arch::kQwen35Moe;
  config.architecture = arch == Arch::kLlama       ? "LlamaForCausalLM"
                        : arch == Arch::kQwen3     ? "Qwen3ForCausalLM"
                        : arch == Arch::kQwen3Moe  ? "Qwen3MoeForCausalLM"
                        : arch == Arch::kQwen35    ? "Qwen3_5ForCausalLM"
                        : arch == Arch::kQwen35Moe ? "Qwen3_5MoeForCausalLM"
                                                   : "Gemma3ForCausalLM";
  config.num_layers = keys.Positive("block_count");
  // The converter counts the multi-token-prediction layers in block_count and stores them
  // after the decoder's (blk.N and up); the decoder is the layers before them.
  if (const std::optional<int64_t> extra = file.Int(keys.Name("nextn_predict_layers"))) {
    INFER_CHECK(*extra >= 0 && *extra < config.num_layers,
                "{}: metadata '{}' is {}, out of range for {} blocks", file.path(),
                keys.Name("nextn_predict_layers"), *extra, config.num_layers);
    config.num_layers -= *extra;
  }
  config.hidden_size = keys.Positive("embedding_length");
  // A mixture of experts' dense width is unused when every layer is sparse.
  config.intermediate_size =
      keys.Positive("feed_forward_length", experts ? std::optional<int64_t>(1) : std::nullopt);
  config.num_heads = keys.Positive("attention.head_count");
  config.num_kv_heads = keys.Positive("attention.head_count_kv", config.num_heads);
  INFER_CHECK(config.num_heads % config.num_kv_heads == 0, "{}: {} heads cannot share {} KV heads",
              file.path(), config.num_heads, config.num_kv_heads);
  config.head_dim = keys.Positive("attention.key_length", config.hidden_size / config.num_heads);
  const int64_t value_length = keys.Positive("attention.value_length", config.head_dim);
  INFER_CHECK(value_length == config.head_dim && config.head_dim % 2 == 0,
              "{}: key and value heads of {} and {} values (infer needs one even size)",
              file.path(), config.head_dim, value_length);
  const int64_t rope_dims = keys.Positive("rope.dimension_count", config.head_dim);
  // The hybrids rotate part of each head (their rope.dimension_sections split it for image
  // positions; a text position is the same in every section, so the rope is a plain one).
  INFER_CHECK(rope_dims == config.head_dim || (hybrid && rope_dims < config.head_dim),
              "{}: rope over {} of the head's {} values (partial rope) is not supported",
              file.path(), rope_dims, config.head_dim);
  INFER_CHECK(rope_dims % 2 == 0, "{}: metadata '{}' is {}; rope rotates pairs", file.path(),
              keys.Name("rope.dimension_count"), rope_dims);
  if (rope_dims < config.head_dim) config.rotary_dim = rope_dims;
  config.max_position_embeddings = keys.Positive("context_length");
  config.rms_norm_eps =
      keys.Number("attention.layer_norm_rms_epsilon", arch == Arch::kLlama ? 1e-5 : 1e-6);
  const GgufTensorInfo* embedding = file.FindTensor("token_embd.weight");
  INFER_CHECK(embedding != nullptr && embedding->dims.size() == 2 &&
                  embedding->dims[0] == config.hidden_size,
              "{}: token_embd.weight is missing or not [vocab, {}]", file.path(),
              config.hidden_size);
  config.vocab_size = embedding->dims[1];
  // The converter writes no output.weight for a tied head; llama.cpp then uses token_embd.
  config.tie_word_embeddings = file.FindTensor("output.weight") == nullptr;
  config.dtype = embedding->type == static_cast<uint32_t>(GgmlType::kF32)   ? DType::kF32
                 : embedding->type == static_cast<uint32_t>(GgmlType::kF16) ? DType::kF16
                                                                            : DType::kBF16;
  const RopeConfig rope = GlobalRope(file, keys, config.head_dim);
  std::vector<bool> sliding(static_cast<size_t>(config.num_layers), false);
  int64_t window = 0;
  RopeConfig local_rope;
  if (arch == Arch::kGemma3) {
    window = keys.Has("attention.sliding_window") ? keys.Positive("attention.sliding_window") : 0;
    if (window > 0) sliding = SlidingLayers(file, keys, config.num_layers);
    local_rope.theta = keys.Number("rope.freq_base_swa", 10000.0);
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    LayerConfig layer;
    layer.sliding_window = sliding[i] ? window : 0;
    layer.rope = sliding[i] ? local_rope : rope;
    config.layers.push_back(layer);
  }
  config.query_scale = 1.0 / std::sqrt(static_cast<double>(config.head_dim));
  if (arch == Arch::kGemma3) {
    // The converter stored Gemma's norm weights as 1 + w (in f32, as HF computes them), so
    // they scale directly: HF's (1 + w) in f32 exactly.
    config.norm_style = NormStyle::kScaleAfterCast;
    config.qk_norm = true;
    config.sandwich_norms = true;
    config.activation = Activation::kGeluTanh;
    config.embed_scale = std::sqrt(static_cast<double>(config.hidden_size));
    // query_pre_attn_scalar is not in the file: the head size, but hidden / heads for the
    // 62-layer 27B model (llama.cpp's rule).
    if (config.num_layers == 62) {
      config.query_scale = 1.0 / std::sqrt(static_cast<double>(config.hidden_size) /
                                           static_cast<double>(config.num_heads));
    }
    config.final_logit_softcap = keys.Number("final_logit_softcapping", 0.0);
  } else {
    config.qk_norm = arch != Arch::kLlama;
    config.activation = Activation::kSilu;
  }
  if (hybrid) {
    // The converter stored every norm but the gated one (ssm_norm) as 1 + w, in f32 as Hugging
    // Face computes it, so they scale directly; q_proj's rows are each head's query, then its
    // output gate, as in the checkpoint.
    config.attn_output_gate = true;
    ReadLinearAttention(file, keys, config);
    config.skipped_prefixes.clear();
    for (int64_t i = config.num_layers; i < keys.Positive("block_count"); ++i) {
      config.skipped_prefixes.push_back("blk." + std::to_string(i) + ".");
    }
  }
  if (experts) ReadExperts(file, keys, config);
  if (arch == Arch::kQwen35Moe) {
    // Qwen3.5's router renormalises its top k unconditionally; no layer is dense.
    config.moe.normalize_top_k = true;
    config.intermediate_size =
        std::max(config.moe.intermediate_size, config.moe.shared_expert_intermediate_size);
  }
  const GenerationConfig generation = GgufGenerationConfig(file);
  config.bos_token_id = generation.bos_token_id.value_or(-1);
  config.pad_token_id = generation.pad_token_id.value_or(-1);
  config.eos_token_ids = generation.eos_token_ids;
  return config;
}

GenerationConfig GgufGenerationConfig(const GgufFile& file) {
  GenerationConfig generation;
  const auto id = [&](const char* key) { return file.Int(std::string("tokenizer.ggml.") + key); };
  generation.bos_token_id = id("bos_token_id");
  generation.pad_token_id = id("padding_token_id");
  // End of generation: EOS, and the end-of-turn and end-of-message ids where they differ.
  std::set<int64_t> seen;
  for (const char* key : {"eos_token_id", "eot_token_id", "eom_token_id"}) {
    if (const std::optional<int64_t> value = id(key); value && seen.insert(*value).second) {
      generation.eos_token_ids.push_back(*value);
    }
  }
  return generation;
}

std::string GgufTensorName(const std::string& hf_name, const ModelConfig& config) {
  static const std::vector<std::pair<std::string, std::string>> kGlobal = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  for (const auto& [hf, gguf] : kGlobal) {
    if (hf_name == hf) return gguf;
  }
  const std::string prefix = "model.layers.";
  INFER_CHECK(hf_name.starts_with(prefix), "no GGUF name for '{}'", hf_name);
  const size_t dot = hf_name.find('.', prefix.size());
  const std::string layer = hf_name.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf_name.substr(dot + 1);
  // Gated DeltaNet's two parameters without a ".weight": ssm_a holds -exp(A_log) (GgufVector
  // undoes it), ssm_dt's bias is dt_bias.
  if (rest == "linear_attn.A_log") return "blk." + layer + ".ssm_a";
  if (rest == "linear_attn.dt_bias") return "blk." + layer + ".ssm_dt.bias";
  const size_t last = rest.rfind('.');
  std::string part = rest.substr(0, last);
  // The experts of a layer are stacked in one tensor per matrix: "mlp.experts.E.up_proj" is
  // expert E of "mlp.experts.up_proj" (GgufMatrix's `expert`).
  if (part.starts_with("mlp.experts.")) {
    const size_t index_end = part.find('.', std::string("mlp.experts.").size());
    part = "mlp.experts" + part.substr(index_end);
  }
  const std::string suffix = rest.substr(last);  // ".weight" or ".bias"
  static const std::vector<std::pair<std::string, std::string>> kLayer = {
      {"input_layernorm", "attn_norm"},
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
      {"mlp.gate", "ffn_gate_inp"},
      {"mlp.experts.gate_proj", "ffn_gate_exps"},
      {"mlp.experts.up_proj", "ffn_up_exps"},
      {"mlp.experts.down_proj", "ffn_down_exps"},
      {"mlp.shared_expert.gate_proj", "ffn_gate_shexp"},
      {"mlp.shared_expert.up_proj", "ffn_up_shexp"},
      {"mlp.shared_expert.down_proj", "ffn_down_shexp"},
      {"mlp.shared_expert_gate", "ffn_gate_inp_shexp"},
      {"linear_attn.in_proj_qkv", "attn_qkv"},
      {"linear_attn.in_proj_z", "attn_gate"},
      {"linear_attn.in_proj_b", "ssm_beta"},
      {"linear_attn.in_proj_a", "ssm_alpha"},
      {"linear_attn.conv1d", "ssm_conv1d"},
      {"linear_attn.norm", "ssm_norm"},
      {"linear_attn.out_proj", "ssm_out"}};
  std::string gguf;
  if (part == "post_attention_layernorm") {
    // Llama's is the pre-MLP norm, ffn_norm; llama.cpp's hybrids (qwen35, qwen35moe) name that
    // one post_attention_norm, as does Gemma's sandwich layout for its real post-attention norm.
    gguf =
        config.sandwich_norms || config.linear.conv_kernel > 0 ? "post_attention_norm" : "ffn_norm";
  }
  for (const auto& [hf, name] : kLayer) {
    if (part == hf) gguf = name;
  }
  INFER_CHECK(!gguf.empty(), "no GGUF name for '{}'", hf_name);
  return "blk." + layer + "." + gguf + suffix;
}

namespace {

// The converter's row order for llama's q and k (llama.cpp rotates adjacent pairs, HF the two
// halves of a head): HF row j half + i of a head sits at row 2 i + j of the file's.
int64_t PermutedRow(int64_t row, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const int64_t head = row / head_dim;
  const int64_t o = row % head_dim;
  return head * head_dim + 2 * (o % half) + o / half;
}

}  // namespace

kernels::PackedMatrix GgufMatrix(const GgufFile& file, const GgufTensorInfo& tensor,
                                 const std::string& hf_name, const ModelConfig& config,
                                 kernels::Quantization quantization, ThreadPool* pool,
                                 TensorArena* arena, int64_t expert) {
  // A one-row matrix may be stored as a vector (the converter squeezes unit dimensions).
  INFER_CHECK(expert < 0 ? tensor.dims.size() == 2 || tensor.dims.size() == 1
                         : tensor.dims.size() == 3 && expert < tensor.dims[2],
              "{}: tensor '{}' is not {}", file.path(), tensor.name,
              expert < 0 ? std::string("a matrix")
                         : fmt::format("a stack of matrices holding expert {}", expert));
  const int64_t rows = tensor.dims.size() == 1 ? 1 : tensor.dims[1];
  const int64_t cols = tensor.dims[0];
  const int64_t first_row = expert < 0 ? 0 : expert * rows;
  const bool permuted = ArchOf(file) == Arch::kLlama &&
                        (hf_name.ends_with("q_proj.weight") || hf_name.ends_with("k_proj.weight"));
  const auto source_row = [&](int64_t row) {
    return permuted ? PermutedRow(row, config.head_dim) : row;
  };
  const std::span<const std::byte> data = file.Data(tensor);
  const auto row_bytes =
      static_cast<size_t>(tensor.bytes / static_cast<uint64_t>(tensor.elements() / cols));
  const auto row_of = [&](int64_t row) {
    return data.subspan(static_cast<size_t>(first_row + source_row(row)) * row_bytes, row_bytes);
  };
  const std::string type = GgmlTypeName(tensor.type);
  const bool float_type = tensor.type == static_cast<uint32_t>(GgmlType::kF32) ||
                          tensor.type == static_cast<uint32_t>(GgmlType::kF16) ||
                          tensor.type == static_cast<uint32_t>(GgmlType::kBF16);
  INFER_CHECK(float_type || CanDequantizeGgml(tensor.type),
              "{}: tensor '{}' is {}; infer reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
              "Q4_K, Q5_K and Q6_K",
              file.path(), tensor.name, type);
  INFER_CHECK(float_type || quantization == kernels::Quantization::kNone,
              "{}: tensor '{}' is already {}; --quantization {} applies to f32, f16 and bf16 "
              "weights (nothing is requantized)",
              file.path(), tensor.name, type, kernels::QuantizationName(quantization));
  if (const std::optional<kernels::Quantization> exact = ExactQuantization(tensor.type)) {
    try {
      return kernels::PackedMatrix::FromQuantizedRows(
          *exact, rows, cols,
          [&](int64_t row, kernels::PackedMatrix::QuantizedRow& out) {
            FillQuantizedRow(tensor.type, row_of(row), out);
          },
          pool, arena);
    } catch (const Error& error) {
      Fail("{}: tensor '{}': {}", file.path(), tensor.name, error.what());
    }
  }
  INFER_CHECK(float_type, "{}: tensor '{}': {} has no infer layout", file.path(), tensor.name,
              type);
  Tensor values = expert < 0 ? file.View(tensor).Reshape({rows, cols})
                             : file.View(tensor).Row(expert).Reshape({rows, cols});
  if (permuted) {
    Tensor reordered = Tensor::Empty(values.dtype(), values.shape(), /*huge_pages=*/true);
    ParallelForOn(pool, rows, 64, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const std::span<const std::byte> from = row_of(row);
        std::memcpy(static_cast<std::byte*>(reordered.raw()) + row * row_bytes, from.data(),
                    row_bytes);
      }
    });
    values = std::move(reordered);
  }
  try {
    return kernels::PackedMatrix::Quantize(values, quantization, 0, pool, arena);
  } catch (const Error& error) {
    Fail("{}: tensor '{}': {}", file.path(), tensor.name, error.what());
  }
}

}  // namespace infer
