// `infer inspect`: what a model folder holds: architecture, parameters, weight bytes,
// per-layer attention kind and RoPE base, KV-cache bytes per token.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "infer/cli/common.h"
#include "infer/core/mapped_file.h"

namespace infer::cli {

namespace {

std::string HumanCount(int64_t count) {
  const auto value = static_cast<double>(count);
  if (value >= 1e9) return fmt::format("{:.2f}B", value / 1e9);
  if (value >= 1e6) return fmt::format("{:.2f}M", value / 1e6);
  return fmt::format("{:.1f}K", value / 1e3);
}

std::string HumanBytes(int64_t bytes) {
  const auto value = static_cast<double>(bytes);
  if (value >= 1e9) return fmt::format("{:.3f} GB", value / 1e9);
  return fmt::format("{:.3f} MB", value / 1e6);
}

// The scaling's name; a GGUF file's per-frequency factors (its rope_freqs tensor) follow it.
std::string RopeScalingName(const RopeConfig& rope) {
  const std::string factors = rope.frequency_factors.empty() ? "" : " + rope_freqs factors";
  switch (rope.scaling) {
    case RopeScalingType::kDefault:
      return factors.empty() ? "default" : "rope_freqs factors";
    case RopeScalingType::kLinear:
      return "linear" + factors;
    case RopeScalingType::kLlama3:
      return "llama3" + factors;
  }
  return "?";
}

// "linear" (Gated DeltaNet), "sliding" (a window) or "full".
const char* AttentionKind(const LayerConfig& layer) {
  return layer.linear_attention ? "linear" : layer.sliding_window > 0 ? "sliding" : "full";
}

void RunInspect(const ModelArgs& args, bool as_json) {
  ThreadPool pool(args.threads);
  LoadedModel loaded = LoadModelFromArgs(args, &pool);
  const ModelConfig& config = loaded.config;
  const int64_t params = ParameterCount(config);
  const int64_t active_params = ActiveParameterCount(config);
  const int64_t bytes_per_token = loaded.weight_bytes_per_token;
  int64_t sparse_layers = 0;
  for (const auto& layer : config.layers) sparse_layers += layer.sparse_mlp ? 1 : 0;
  const int64_t kv_bytes_f32 = config.KvCacheBytesPerToken(DType::kF32);
  const int64_t kv_bytes_bf16 = config.KvCacheBytesPerToken(DType::kBF16);
  const std::vector<int64_t>& eos = loaded.generation.eos_token_ids.empty()
                                        ? config.eos_token_ids
                                        : loaded.generation.eos_token_ids;

  // Bits per weight of the packed matrices (padding included), and the process's resident
  // memory once loaded.
  const double bits_per_weight = static_cast<double>(loaded.matrix_weight_bytes) * 8.0 /
                                 static_cast<double>(std::max<int64_t>(1, loaded.matrix_weights));
  const auto rss_bytes = static_cast<int64_t>(CurrentRssBytes());
  if (as_json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& layer : config.layers) {
      layers.push_back({{"attention", AttentionKind(layer)},
                        {"sliding_window", layer.sliding_window},
                        {"rope_theta", layer.rope.theta},
                        {"mlp", layer.sparse_mlp ? "experts" : "dense"},
                        {"rope_scaling", RopeScalingName(layer.rope)}});
    }
    nlohmann::json out = {{"path", loaded.path},
                          {"architecture", config.architecture},
                          {"model_type", config.model_type},
                          {"matrix_bits_per_weight", bits_per_weight},
                          {"rss_after_load_bytes", rss_bytes},
                          {"load_time_s", loaded.load_time_s},
                          {"num_layers", config.num_layers},
                          {"hidden_size", config.hidden_size},
                          {"num_heads", config.num_heads},
                          {"num_kv_heads", config.num_kv_heads},
                          {"head_dim", config.head_dim},
                          {"intermediate_size", config.intermediate_size},
                          {"vocab_size", config.vocab_size},
                          {"tie_word_embeddings", config.tie_word_embeddings},
                          {"eos_token_ids", eos},
                          {"kv_cache_bytes_per_token_f32", kv_bytes_f32},
                          {"kv_cache_bytes_per_token_bf16", kv_bytes_bf16},
                          {"parameters", params},
                          {"active_parameters", active_params},
                          {"weight_bytes_per_token", bytes_per_token},
                          {"layers", layers}};
    if (config.has_sparse_layers()) {
      out["experts"] = {
          {"num_experts", config.moe.num_experts},
          {"experts_per_token", config.moe.experts_per_token},
          {"intermediate_size", config.moe.intermediate_size},
          {"shared_expert_intermediate_size", config.moe.shared_expert_intermediate_size},
          {"normalize_top_k", config.moe.normalize_top_k},
          {"sparse_layers", sparse_layers}};
    }
    if (config.num_linear_layers() > 0) {
      const LinearAttentionConfig& linear = config.linear;
      out["linear_attention"] = {{"layers", config.num_linear_layers()},
                                 {"key_heads", linear.key_heads},
                                 {"value_heads", linear.value_heads},
                                 {"key_head_dim", linear.key_head_dim},
                                 {"value_head_dim", linear.value_head_dim},
                                 {"conv_kernel", linear.conv_kernel},
                                 {"recurrent_state_bytes", config.RecurrentStateBytes()}};
    }
    out["rotary_dim"] = config.rotary_dims();
    out.update(LoadedWeightsJson(args, loaded));
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& group : loaded.file_tensor_groups) {
      groups.push_back({{"name", group.name},
                        {"types", group.types},
                        {"bits_per_weight", group.bits_per_weight}});
    }
    if (!groups.empty()) out["file_tensor_groups"] = groups;
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::string text;
  auto line = [&](const std::string& key, const std::string& value) {
    text += fmt::format("{:<22}{}\n", key + ":", value);
  };
  line("model", loaded.path);
  line("architecture", fmt::format("{} (model_type {})", config.architecture, config.model_type));
  line("parameters",
       fmt::format("{} ({}{})", HumanCount(params), params,
                   config.tie_word_embeddings ? ", tied embeddings counted once" : ""));
  if (config.has_sparse_layers()) {
    line("experts", fmt::format("{} per sparse layer ({} of {} layers), {} per token, "
                                "intermediate {}, top-k weights {}",
                                config.moe.num_experts, sparse_layers, config.num_layers,
                                config.moe.experts_per_token, config.moe.intermediate_size,
                                config.moe.normalize_top_k ? "renormalised" : "as softmax gives"));
    if (config.moe.shared_expert_intermediate_size > 0) {
      line("shared expert", fmt::format("intermediate {}, behind a sigmoid gate",
                                        config.moe.shared_expert_intermediate_size));
    }
  }
  if (config.num_linear_layers() > 0) {
    const LinearAttentionConfig& linear = config.linear;
    line("linear attention",
         fmt::format("Gated DeltaNet in {} of {} layers: {} key heads of {}, {} value heads of {}, "
                     "conv {}",
                     config.num_linear_layers(), config.num_layers, linear.key_heads,
                     linear.key_head_dim, linear.value_heads, linear.value_head_dim,
                     linear.conv_kernel));
  }
  line("active parameters",
       fmt::format("{} per token ({})", HumanCount(active_params), active_params));
  line("bytes per token",
       fmt::format("{} of weights read per decoded token", HumanBytes(bytes_per_token)));
  line("weights",
       fmt::format("{}{}, {:.3f} GB in memory, matrices {:.2f} bits per weight{}",
                   loaded.file_tensor_groups.empty() ? std::string(DTypeName(loaded.weight_dtype))
                                                     : std::string("GGUF tensors (below)"),
                   loaded.quantization == kernels::Quantization::kNone
                       ? ""
                       : fmt::format(" quantized to {} (output head {})",
                                     kernels::QuantizationName(loaded.quantization),
                                     OutputHeadType(loaded)),
                   static_cast<double>(loaded.weight_bytes) / 1e9, bits_per_weight,
                   args.load_format == "dummy" ? " (dummy random)" : ""));
  for (const auto& group : loaded.file_tensor_groups) {
    line("  " + group.name,
         fmt::format("{}, {:.2f} bits per weight in the file", group.types, group.bits_per_weight));
  }
  line("resident memory",
       fmt::format("{:.3f} GB after load", static_cast<double>(rss_bytes) / 1e9));
  line("load time", fmt::format("{:.3f} s", loaded.load_time_s));
  line("shape",
       fmt::format("{} layers, hidden {}, heads {}/{} kv, head_dim {}, intermediate {}, "
                   "vocab {}",
                   config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads,
                   config.head_dim, config.intermediate_size, config.vocab_size));
  if (config.rotary_dims() != config.head_dim) {
    line("rope", fmt::format("first {} of each head's {} dimensions", config.rotary_dims(),
                             config.head_dim));
  }
  line("activation", config.activation == Activation::kSilu ? "silu" : "gelu_pytorch_tanh");
  line("norms", fmt::format("rms eps {}{}{}", config.rms_norm_eps,
                            config.norm_style == NormStyle::kOffsetInF32 ? ", (1+w) in f32" : "",
                            config.qk_norm ? ", qk-norm" : ""));
  line("max positions", std::to_string(config.max_position_embeddings));
  line("eos ids", fmt::format("{}", fmt::join(eos, ", ")));
  line("kv cache per token",
       fmt::format("{} bytes (f32), {} bytes (bf16){}", kv_bytes_f32, kv_bytes_bf16,
                   config.num_linear_layers() > 0
                       ? fmt::format(" in the {} attention layers", config.num_kv_layers())
                       : ""));
  if (config.num_linear_layers() > 0) {
    line("recurrent state", fmt::format("{} per sequence (f32), whatever its length",
                                        HumanBytes(config.RecurrentStateBytes())));
  }
  text += "layer  attention  window  rope_theta  mlp      rope_scaling\n";
  for (size_t i = 0; i < config.layers.size(); ++i) {
    const auto& layer = config.layers[i];
    text += fmt::format("{:>5}  {:<9}  {:>6}  {:>10}  {:<7}  {}\n", i, AttentionKind(layer),
                        layer.sliding_window > 0 ? std::to_string(layer.sliding_window) : "-",
                        layer.rope.theta, layer.sparse_mlp ? "experts" : "dense",
                        RopeScalingName(layer.rope));
  }
  std::fputs(text.c_str(), stdout);
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  auto* command =
      app.add_subcommand("inspect", "Describe a model: architecture, parameters, layers");
  auto args = std::make_shared<ModelArgs>();
  auto as_json = std::make_shared<bool>(false);
  AddModelOptions(*command, *args, /*add_threads=*/true, /*add_compute=*/false);
  command->add_flag("--json", *as_json, "Print one JSON object");
  command->callback([args, as_json] { RunInspect(*args, *as_json); });
}

}  // namespace infer::cli
