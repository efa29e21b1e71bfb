// Hugging Face config.json -> ModelConfig. Defaults are those of the transformers config
// classes (LlamaConfig, Qwen3Config, Qwen3MoeConfig, Gemma3TextConfig, Qwen3_5TextConfig,
// Qwen3_5MoeTextConfig) for keys the file leaves out; the keys that fix tensor shapes are
// required.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/loader/model_config.h"

namespace infer {

using nlohmann::json;

namespace {

enum class Family { kLlama, kQwen3, kQwen3Moe, kGemma3, kQwen35, kQwen35Moe };

class ConfigReader {
 public:
  ConfigReader(const json& object, std::string source)
      : object_(object), source_(std::move(source)) {}

  bool Has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }

  int64_t RequiredInt(const char* key) const {
    INFER_CHECK(Has(key), "{}: missing required key '{}'", source_, key);
    return Int(key, 0);
  }
  int64_t Int(const char* key, int64_t fallback) const {
    if (!Has(key)) return fallback;
    const json& value = object_[key];
    INFER_CHECK(value.is_number_integer(), "{}: '{}' must be an integer, got {}", source_, key,
                value.dump());
    return value.get<int64_t>();
  }
  int64_t PositiveInt(const char* key, int64_t fallback) const {
    const int64_t value = Int(key, fallback);
    INFER_CHECK(value > 0, "{}: '{}' must be positive, got {}", source_, key, value);
    return value;
  }
  double Number(const char* key, double fallback) const {
    if (!Has(key)) return fallback;
    const json& value = object_[key];
    INFER_CHECK(value.is_number(), "{}: '{}' must be a number, got {}", source_, key, value.dump());
    return value.get<double>();
  }
  bool Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    INFER_CHECK(object_[key].is_boolean(), "{}: '{}' must be true or false", source_, key);
    return object_[key].get<bool>();
  }
  std::string String(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    INFER_CHECK(object_[key].is_string(), "{}: '{}' must be a string", source_, key);
    return object_[key].get<std::string>();
  }
  std::vector<int64_t> IntList(const char* key) const {
    std::vector<int64_t> values;
    if (!Has(key)) return values;
    const json& value = object_[key];
    if (value.is_number_integer()) return {value.get<int64_t>()};
    INFER_CHECK(value.is_array(), "{}: '{}' must be an integer or a list of integers", source_,
                key);
    for (const json& item : value) {
      INFER_CHECK(item.is_number_integer(), "{}: '{}' must hold integers, got {}", source_, key,
                  item.dump());
      values.push_back(item.get<int64_t>());
    }
    return values;
  }
  const json& At(const char* key) const { return object_[key]; }
  const std::string& source() const { return source_; }

 private:
  const json& object_;
  std::string source_;
};

RopeConfig ParseRopeScaling(const json& scaling, RopeConfig rope, const std::string& source) {
  if (scaling.is_null()) return rope;
  INFER_CHECK(scaling.is_object(), "{}: rope_scaling must be an object or null", source);
  ConfigReader reader(scaling, source + " rope_scaling");
  const std::string type = reader.Has("rope_type") ? reader.String("rope_type", "default")
                                                   : reader.String("type", "default");
  if (reader.Has("rope_theta")) rope.theta = reader.Number("rope_theta", rope.theta);
  if (type == "default") {
    rope.scaling = RopeScalingType::kDefault;
  } else if (type == "linear") {
    rope.scaling = RopeScalingType::kLinear;
    rope.factor = reader.Number("factor", 1.0);
  } else if (type == "llama3") {
    rope.scaling = RopeScalingType::kLlama3;
    INFER_CHECK(reader.Has("factor") && reader.Has("low_freq_factor") &&
                    reader.Has("high_freq_factor") &&
                    reader.Has("original_max_position_embeddings"),
                "{}: llama3 rope_scaling needs factor, low_freq_factor, high_freq_factor and "
                "original_max_position_embeddings",
                source);
    rope.factor = reader.Number("factor", 1.0);
    rope.low_freq_factor = reader.Number("low_freq_factor", 1.0);
    rope.high_freq_factor = reader.Number("high_freq_factor", 4.0);
    rope.original_max_position_embeddings =
        reader.PositiveInt("original_max_position_embeddings", 8192);
    INFER_CHECK(rope.high_freq_factor != rope.low_freq_factor,
                "{}: llama3 rope_scaling needs high_freq_factor != low_freq_factor", source);
  } else {
    Fail("{}: rope scaling type '{}' is not supported (supported: default, linear, llama3)", source,
         type);
  }
  INFER_CHECK(rope.factor > 0, "{}: rope scaling factor must be positive", source);
  return rope;
}

Activation ParseActivation(const std::string& name, const std::string& source) {
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_tanh") {
    return Activation::kGeluTanh;
  }
  Fail("{}: activation '{}' is not supported (supported: silu, gelu_pytorch_tanh)", source, name);
}

DType ParseTorchDtype(const ConfigReader& reader) {
  const std::string name = reader.Has("torch_dtype") ? reader.String("torch_dtype", "")
                                                     : reader.String("dtype", "bfloat16");
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16") return DType::kF16;
  if (name == "float32") return DType::kF32;
  Fail("{}: torch_dtype '{}' is not supported (bfloat16, float16, float32)", reader.source(), name);
}

// layer_types wins when present; each entry is "full_attention" or "sliding_attention".
std::vector<bool> ParseLayerTypes(const ConfigReader& reader, int64_t num_layers) {
  const json& types = reader.At("layer_types");
  INFER_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == num_layers,
              "{}: layer_types must list one type per layer ({})", reader.source(), num_layers);
  std::vector<bool> sliding;
  for (const json& type : types) {
    INFER_CHECK(type.is_string(), "{}: layer_types entries must be strings", reader.source());
    const auto name = type.get<std::string>();
    INFER_CHECK(name == "full_attention" || name == "sliding_attention",
                "{}: unknown layer type '{}'", reader.source(), name);
    sliding.push_back(name == "sliding_attention");
  }
  return sliding;
}

// The experts' count, how many a token uses and their width: num_experts,
// num_experts_per_tok and moe_intermediate_size, with the config class's defaults.
struct ExpertDefaults {
  int64_t num_experts, experts_per_token, intermediate_size;
};
void ReadExperts(const ConfigReader& reader, const ExpertDefaults& defaults, MoeConfig& moe) {
  const std::string& source = reader.source();
  moe.num_experts = reader.Int("num_experts", defaults.num_experts);
  INFER_CHECK(moe.num_experts > 0,
              "{}: 'num_experts' is {}; a mixture of experts needs at least one", source,
              moe.num_experts);
  moe.experts_per_token = reader.Int("num_experts_per_tok", defaults.experts_per_token);
  INFER_CHECK(moe.experts_per_token > 0 && moe.experts_per_token <= moe.num_experts,
              "{}: 'num_experts_per_tok' is {}; it must be between 1 and num_experts ({})", source,
              moe.experts_per_token, moe.num_experts);
  moe.intermediate_size = reader.PositiveInt("moe_intermediate_size", defaults.intermediate_size);
}

// Qwen3MoeConfig's experts: which layers are sparse (Qwen3MoeDecoderLayer: not in
// mlp_only_layers, and (i + 1) % decoder_sparse_step == 0) and the router's numbers.
void ParseQwen3Moe(const ConfigReader& reader, ModelConfig& config) {
  const std::string& source = reader.source();
  MoeConfig& moe = config.moe;
  ReadExperts(reader, {128, 8, 768}, moe);
  moe.normalize_top_k = reader.Bool("norm_topk_prob", false);
  const int64_t step = reader.PositiveInt("decoder_sparse_step", 1);
  const std::vector<int64_t> dense = reader.IntList("mlp_only_layers");
  for (const int64_t layer : dense) {
    INFER_CHECK(layer >= 0 && layer < config.num_layers,
                "{}: 'mlp_only_layers' names layer {}, outside [0, {})", source, layer,
                config.num_layers);
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    config.layers[static_cast<size_t>(i)].sparse_mlp =
        std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0;
  }
}

// Qwen3.5's hybrid layers (Qwen3NextConfig, Qwen3_5TextConfig): layer_types of
// "linear_attention" and "full_attention" (absent: every full_attention_interval-th layer is
// full), the Gated DeltaNet dimensions, and for the MoE variant experts in every layer, always
// renormalised, beside a shared expert.
void ParseQwen35(const ConfigReader& reader, bool moe, ModelConfig& config) {
  const std::string& source = reader.source();
  LinearAttentionConfig& linear = config.linear;
  linear.conv_kernel = reader.PositiveInt("linear_conv_kernel_dim", 4);
  linear.key_heads = reader.PositiveInt("linear_num_key_heads", 16);
  linear.value_heads = reader.PositiveInt("linear_num_value_heads", 32);
  linear.key_head_dim = reader.PositiveInt("linear_key_head_dim", 128);
  linear.value_head_dim = reader.PositiveInt("linear_value_head_dim", 128);
  INFER_CHECK(linear.value_heads % linear.key_heads == 0,
              "{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})",
              source, linear.value_heads, linear.key_heads);
  if (reader.Has("layer_types")) {
    const json& types = reader.At("layer_types");
    INFER_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == config.num_layers,
                "{}: layer_types must list one type per layer ({})", source, config.num_layers);
    for (int64_t i = 0; i < config.num_layers; ++i) {
      const json& type = types[static_cast<size_t>(i)];
      INFER_CHECK(type.is_string() && (type.get<std::string>() == "linear_attention" ||
                                       type.get<std::string>() == "full_attention"),
                  "{}: layer_types[{}] is {}; expected \"linear_attention\" or "
                  "\"full_attention\"",
                  source, i, type.dump());
      config.layers[static_cast<size_t>(i)].linear_attention =
          type.get<std::string>() == "linear_attention";
    }
  } else {
    const int64_t interval = reader.PositiveInt("full_attention_interval", 4);
    for (int64_t i = 0; i < config.num_layers; ++i) {
      config.layers[static_cast<size_t>(i)].linear_attention = (i + 1) % interval != 0;
    }
  }
  if (!moe) return;
  MoeConfig& experts = config.moe;
  ReadExperts(reader, {512, 10, 512}, experts);
  experts.shared_expert_intermediate_size =
      reader.PositiveInt("shared_expert_intermediate_size", 512);
  experts.normalize_top_k = true;  // Qwen3_5MoeTopKRouter renormalises unconditionally
  experts.fused_experts = true;
  for (LayerConfig& layer : config.layers) layer.sparse_mlp = true;
}

ModelConfig ParseFamily(const ConfigReader& reader, Family family, ModelConfig config) {
  const std::string& source = reader.source();
  config.vocab_size = reader.RequiredInt("vocab_size");
  config.hidden_size = reader.RequiredInt("hidden_size");
  // Qwen3MoeConfig has a default (its dense layers' width; unused when every layer is sparse);
  // Qwen3_5MoeTextConfig has none (no layer is dense): the widest MLP of a layer stands in.
  config.intermediate_size =
      family == Family::kQwen3Moe ? reader.Int("intermediate_size", 6144)
      : family == Family::kQwen35Moe
          ? std::max(reader.PositiveInt("moe_intermediate_size", 512),
                     reader.PositiveInt("shared_expert_intermediate_size", 512))
          : reader.RequiredInt("intermediate_size");
  config.num_layers = reader.RequiredInt("num_hidden_layers");
  config.num_heads = reader.RequiredInt("num_attention_heads");
  for (auto [name, value] : {std::pair{"vocab_size", config.vocab_size},
                             {"hidden_size", config.hidden_size},
                             {"intermediate_size", config.intermediate_size},
                             {"num_hidden_layers", config.num_layers},
                             {"num_attention_heads", config.num_heads}}) {
    INFER_CHECK(value > 0, "{}: '{}' must be positive, got {}", source, name, value);
  }
  config.num_kv_heads = reader.PositiveInt("num_key_value_heads", config.num_heads);
  INFER_CHECK(config.num_heads % config.num_kv_heads == 0,
              "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", source,
              config.num_heads, config.num_kv_heads);
  // Qwen3MoeConfig has no head_dim argument: an absent key means hidden / heads there.
  const int64_t default_head_dim =
      family == Family::kQwen3 ? 128
      : family == Family::kGemma3 || family == Family::kQwen35 || family == Family::kQwen35Moe
          ? 256
          : config.hidden_size / config.num_heads;
  INFER_CHECK((family != Family::kLlama && family != Family::kQwen3Moe) || reader.Has("head_dim") ||
                  config.hidden_size % config.num_heads == 0,
              "{}: hidden_size ({}) must be a multiple of num_attention_heads ({}) when head_dim "
              "is not given",
              source, config.hidden_size, config.num_heads);
  config.head_dim = reader.PositiveInt("head_dim", default_head_dim);
  INFER_CHECK(config.head_dim % 2 == 0, "{}: head_dim must be even for RoPE, got {}", source,
              config.head_dim);
  config.max_position_embeddings =
      reader.PositiveInt("max_position_embeddings", family == Family::kLlama    ? 2048
                                                    : family == Family::kGemma3 ? 131072
                                                                                : 32768);
  config.rms_norm_eps = reader.Number("rms_norm_eps", 1e-6);
  INFER_CHECK(config.rms_norm_eps >= 0, "{}: 'rms_norm_eps' must be at least 0, got {}", source,
              config.rms_norm_eps);
  config.attention_bias = reader.Bool("attention_bias", false);
  config.mlp_bias = family == Family::kLlama && reader.Bool("mlp_bias", false);
  config.tie_word_embeddings = reader.Bool("tie_word_embeddings", family == Family::kGemma3);
  config.dtype = ParseTorchDtype(reader);
  config.bos_token_id = reader.Int("bos_token_id", -1);
  config.pad_token_id = reader.Int("pad_token_id", -1);
  config.eos_token_ids = reader.IntList("eos_token_id");
  // Special ids must name tokens of the vocabulary (an EOS id past it could never be sampled;
  // a BOS id past it would index past the embeddings). pad_token_id is not used here, and some
  // checkpoints set it to vocab_size, so it is not checked.
  INFER_CHECK(config.bos_token_id < config.vocab_size,
              "{}: bos_token_id {} is outside the vocab (vocab_size {})", source,
              config.bos_token_id, config.vocab_size);
  for (const int64_t id : config.eos_token_ids) {
    INFER_CHECK(id >= 0 && id < config.vocab_size,
                "{}: eos_token_id {} is outside the vocab (vocab_size {})", source, id,
                config.vocab_size);
  }

  // RoPE for full-attention layers: rope_theta + rope_scaling, or v5's rope_parameters.
  RopeConfig full_rope;
  full_rope.theta = reader.Number("rope_theta", family == Family::kGemma3 ? 1e6 : 10000.0);
  RopeConfig local_rope;
  local_rope.theta = reader.Number("rope_local_base_freq", 10000.0);
  if (reader.Has("rope_parameters")) {
    const json& params = reader.At("rope_parameters");
    if (params.contains("full_attention") || params.contains("sliding_attention")) {
      if (params.contains("full_attention")) {
        full_rope = ParseRopeScaling(params["full_attention"], full_rope, source);
      }
      if (params.contains("sliding_attention")) {
        local_rope = ParseRopeScaling(params["sliding_attention"], local_rope, source);
      }
    } else {
      full_rope = ParseRopeScaling(params, full_rope, source);
    }
  } else if (reader.Has("rope_scaling")) {
    full_rope = ParseRopeScaling(reader.At("rope_scaling"), full_rope, source);
  }
  INFER_CHECK(full_rope.theta > 0 && local_rope.theta > 0, "{}: rope_theta must be positive",
              source);

  std::vector<bool> sliding(static_cast<size_t>(config.num_layers), false);
  int64_t window = 0;
  if (family == Family::kGemma3) {
    window = reader.PositiveInt("sliding_window", 4096);
    if (reader.Has("layer_types")) {
      sliding = ParseLayerTypes(reader, config.num_layers);
    } else {
      const int64_t pattern = reader.PositiveInt("sliding_window_pattern", 6);
      for (int64_t i = 0; i < config.num_layers; ++i) sliding[i] = (i + 1) % pattern != 0;
    }
  } else if (family == Family::kQwen3 || family == Family::kQwen3Moe) {
    if (reader.Bool("use_sliding_window", false) && reader.Has("sliding_window")) {
      window = reader.PositiveInt("sliding_window", 4096);
      if (reader.Has("layer_types")) {
        sliding = ParseLayerTypes(reader, config.num_layers);
      } else {
        const int64_t first = reader.Int("max_window_layers", config.num_layers);
        for (int64_t i = 0; i < config.num_layers; ++i) sliding[i] = i >= first;
      }
    }
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    LayerConfig layer;
    // Gemma: local layers use default RoPE at rope_local_base_freq; scaling is global-only.
    const bool local = sliding[i];
    layer.sliding_window = local ? window : 0;
    layer.rope = (local && family == Family::kGemma3) ? local_rope : full_rope;
    config.layers.push_back(layer);
  }
  if (family == Family::kQwen3Moe) ParseQwen3Moe(reader, config);
  if (family == Family::kQwen35 || family == Family::kQwen35Moe) {
    ParseQwen35(reader, family == Family::kQwen35Moe, config);
    // Qwen3NextRMSNorm: x_hat (1 + w) in f32 for every norm, q_norm and k_norm included; the
    // attention output gated; RoPE on the first partial_rotary_factor of each head.
    config.norm_style = NormStyle::kOffsetInF32;
    config.attn_output_gate = true;
    double factor = reader.Number("partial_rotary_factor", 0.25);
    if (reader.Has("rope_parameters") && reader.At("rope_parameters").is_object() &&
        reader.At("rope_parameters").contains("partial_rotary_factor")) {
      ConfigReader rope_reader(reader.At("rope_parameters"), source + " rope_parameters");
      factor = rope_reader.Number("partial_rotary_factor", factor);
    }
    config.rotary_dim = static_cast<int64_t>(static_cast<double>(config.head_dim) * factor);
    INFER_CHECK(factor > 0 && factor <= 1 && config.rotary_dim % 2 == 0 && config.rotary_dim > 0,
                "{}: partial_rotary_factor {} gives {} rotary dimensions of head_dim {}; they "
                "must be a positive even number",
                source, factor, config.rotary_dim, config.head_dim);
  }

  if (family == Family::kGemma3) {
    config.norm_style = NormStyle::kOffsetInF32;
    config.qk_norm = true;
    config.sandwich_norms = true;
    config.embed_scale = std::sqrt(static_cast<double>(config.hidden_size));
    const double scalar = reader.Number("query_pre_attn_scalar", 256.0);
    INFER_CHECK(scalar > 0, "{}: query_pre_attn_scalar must be positive", source);
    config.query_scale = 1.0 / std::sqrt(scalar);
    config.final_logit_softcap = reader.Number("final_logit_softcapping", 0.0);
    INFER_CHECK(config.final_logit_softcap >= 0,
                "{}: 'final_logit_softcapping' must be at least 0 (0: none), got {}", source,
                config.final_logit_softcap);
    const std::string act = reader.Has("hidden_activation")
                                ? reader.String("hidden_activation", "")
                                : reader.String("hidden_act", "gelu_pytorch_tanh");
    config.activation = ParseActivation(act, source);
  } else {
    config.qk_norm = family != Family::kLlama;
    config.query_scale = 1.0 / std::sqrt(static_cast<double>(config.head_dim));
    config.activation = ParseActivation(reader.String("hidden_act", "silu"), source);
  }
  return config;
}

}  // namespace

ModelConfig ParseModelConfig(const std::string& json_text, const std::string& source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  INFER_CHECK(!root.is_discarded(), "{}: not valid JSON", source);
  INFER_CHECK(root.is_object(), "{}: not a JSON object", source);
  ConfigReader top(root, source);
  INFER_CHECK(top.Has("model_type"), "{}: missing required key 'model_type'", source);
  ModelConfig config;
  config.model_type = top.String("model_type", "");
  if (top.Has("architectures") && top.At("architectures").is_array() &&
      !top.At("architectures").empty() && top.At("architectures")[0].is_string()) {
    config.architecture = top.At("architectures")[0].get<std::string>();
  }
  if (config.model_type == "llama") return ParseFamily(top, Family::kLlama, config);
  if (config.model_type == "qwen3") return ParseFamily(top, Family::kQwen3, config);
  if (config.model_type == "qwen3_moe") return ParseFamily(top, Family::kQwen3Moe, config);
  if (config.model_type == "gemma3_text") return ParseFamily(top, Family::kGemma3, config);
  if (config.model_type == "qwen3_5_text" || config.model_type == "qwen3_5_moe_text") {
    const Family family =
        config.model_type == "qwen3_5_text" ? Family::kQwen35 : Family::kQwen35Moe;
    config.skipped_prefixes = {"mtp."};
    return ParseFamily(top, family, config);
  }
  if (config.model_type == "gemma3" || config.model_type == "qwen3_5" ||
      config.model_type == "qwen3_5_moe") {
    // Multimodal wrapper: the language model's keys are in text_config; ids stay at the top.
    INFER_CHECK(top.Has("text_config") && top.At("text_config").is_object(),
                "{}: model_type {} needs a 'text_config' object", source, config.model_type);
    json text = top.At("text_config");
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype"}) {
      if (!text.contains(key) && root.contains(key)) text[key] = root[key];
    }
    // Qwen3.5's checkpoints repeat tie_word_embeddings at the top level (both the same in every
    // released one); text_config's wins.
    if (config.model_type != "gemma3" && !text.contains("tie_word_embeddings") &&
        root.contains("tie_word_embeddings")) {
      text["tie_word_embeddings"] = root["tie_word_embeddings"];
    }
    ConfigReader text_reader(text, source + " text_config");
    if (config.model_type == "gemma3") return ParseFamily(text_reader, Family::kGemma3, config);
    // The vision-language checkpoints keep the language model under its own prefix, beside a
    // vision tower and a multi-token-prediction layer the text path does not run.
    config.weights_prefix = "model.language_model.";
    config.skipped_prefixes = {"model.visual.", "mtp."};
    return ParseFamily(
        text_reader, config.model_type == "qwen3_5" ? Family::kQwen35 : Family::kQwen35Moe, config);
  }
  Fail(
      "{}: model_type '{}' is not supported (supported: llama, qwen3, qwen3_moe, gemma3_text, "
      "gemma3, qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text)",
      source, config.model_type);
}

ModelConfig LoadModelConfig(const std::string& config_path) {
  std::ifstream in(config_path);
  INFER_CHECK(in.good(), "{}: cannot open", config_path);
  std::stringstream text;
  text << in.rdbuf();
  return ParseModelConfig(text.str(), config_path);
}

}  // namespace infer
