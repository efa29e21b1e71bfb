#include "infer/loader/weights.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "infer/core/dtype.h"
#include "infer/core/error.h"
#include "infer/core/mapped_file.h"
#include "infer/core/memory.h"
#include "infer/core/splitmix.h"
#include "infer/loader/gguf.h"
#include "infer/loader/gguf_blocks.h"
#include "infer/loader/gguf_model.h"
#include "infer/loader/model_path.h"
#include "infer/loader/safetensors.h"

namespace infer {

std::vector<WeightSlot> WeightSlots(const ModelConfig& config, ModelWeights& weights) {
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  const int64_t head_dim = config.head_dim;
  weights.layers.resize(static_cast<size_t>(config.num_layers));
  std::vector<WeightSlot> slots;
  auto add = [&](std::string name, Shape shape, Tensor* tensor) {
    slots.push_back({std::move(name), std::move(shape), tensor, nullptr});
  };
  auto add_matrix = [&](std::string name, Shape shape, kernels::PackedMatrix* matrix,
                        int64_t expert = -1) {
    slots.push_back({std::move(name), std::move(shape), nullptr, matrix, expert});
  };
  add_matrix("model.embed_tokens.weight", {config.vocab_size, hidden}, &weights.embed_tokens);
  const LinearAttentionConfig& linear = config.linear;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    LayerWeights& layer = weights.layers[static_cast<size_t>(i)];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    add(prefix + "input_layernorm.weight", {hidden}, &layer.attn_norm);
    if (config.linear_layer(i)) {
      const std::string mixer = prefix + "linear_attn.";
      add_matrix(mixer + "in_proj_qkv.weight", {linear.conv_dim(), hidden}, &layer.in_proj_qkv);
      add_matrix(mixer + "in_proj_z.weight", {linear.value_dim(), hidden}, &layer.in_proj_z);
      add_matrix(mixer + "in_proj_b.weight", {linear.value_heads, hidden}, &layer.in_proj_b);
      add_matrix(mixer + "in_proj_a.weight", {linear.value_heads, hidden}, &layer.in_proj_a);
      add(mixer + "conv1d.weight", {linear.conv_dim(), 1, linear.conv_kernel}, &layer.conv1d);
      add(mixer + "dt_bias", {linear.value_heads}, &layer.dt_bias);
      add(mixer + "A_log", {linear.value_heads}, &layer.a_log);
      add(mixer + "norm.weight", {linear.value_head_dim}, &layer.linear_norm);
      add_matrix(mixer + "out_proj.weight", {hidden, linear.value_dim()}, &layer.out_proj);
    } else {
      // With an output gate, q_proj holds each head's query rows and then its gate rows.
      const int64_t q_rows = config.attn_output_gate ? 2 * config.q_dim() : config.q_dim();
      add_matrix(prefix + "self_attn.q_proj.weight", {q_rows, hidden}, &layer.q_proj);
      add_matrix(prefix + "self_attn.k_proj.weight", {config.kv_dim(), hidden}, &layer.k_proj);
      add_matrix(prefix + "self_attn.v_proj.weight", {config.kv_dim(), hidden}, &layer.v_proj);
      add_matrix(prefix + "self_attn.o_proj.weight", {hidden, config.q_dim()}, &layer.o_proj);
    }
    if (config.attention_bias && !config.linear_layer(i)) {
      add(prefix + "self_attn.q_proj.bias", {config.q_dim()}, &layer.q_bias);
      add(prefix + "self_attn.k_proj.bias", {config.kv_dim()}, &layer.k_bias);
      add(prefix + "self_attn.v_proj.bias", {config.kv_dim()}, &layer.v_bias);
      add(prefix + "self_attn.o_proj.bias", {hidden}, &layer.o_bias);
    }
    if (config.qk_norm && !config.linear_layer(i)) {
      add(prefix + "self_attn.q_norm.weight", {head_dim}, &layer.q_norm);
      add(prefix + "self_attn.k_norm.weight", {head_dim}, &layer.k_norm);
    }
    // Llama's "post_attention_layernorm" is the pre-MLP norm; Gemma's sandwich layout has a
    // real post-attention norm and names the pre-MLP one "pre_feedforward_layernorm".
    if (config.sandwich_norms) {
      add(prefix + "post_attention_layernorm.weight", {hidden}, &layer.attn_post_norm);
      add(prefix + "pre_feedforward_layernorm.weight", {hidden}, &layer.mlp_norm);
      add(prefix + "post_feedforward_layernorm.weight", {hidden}, &layer.mlp_post_norm);
    } else {
      add(prefix + "post_attention_layernorm.weight", {hidden}, &layer.mlp_norm);
    }
    if (config.sparse_layer(i)) {
      const int64_t expert_inter = config.moe.intermediate_size;
      const int64_t num_experts = config.moe.num_experts;
      add_matrix(prefix + "mlp.gate.weight", {num_experts, hidden}, &layer.router);
      layer.experts.resize(static_cast<size_t>(num_experts));
      for (int64_t e = 0; e < num_experts; ++e) {
        kernels::Expert& expert = layer.experts[static_cast<size_t>(e)];
        if (config.moe.fused_experts) {
          // One stack per kind: gate_up_proj [experts, 2 I, hidden] (gate rows first) and
          // down_proj [experts, hidden, I].
          const std::string stack = prefix + "mlp.experts.";
          slots.push_back({stack + "gate_up_proj",
                           {expert_inter, hidden},
                           nullptr,
                           &expert.gate,
                           e,
                           {num_experts, 2 * expert_inter, hidden},
                           0});
          slots.push_back({stack + "gate_up_proj",
                           {expert_inter, hidden},
                           nullptr,
                           &expert.up,
                           e,
                           {num_experts, 2 * expert_inter, hidden},
                           expert_inter});
          slots.push_back({stack + "down_proj",
                           {hidden, expert_inter},
                           nullptr,
                           &expert.down,
                           e,
                           {num_experts, hidden, expert_inter},
                           0});
          continue;
        }
        const std::string expert_prefix = prefix + "mlp.experts." + std::to_string(e) + ".";
        add_matrix(expert_prefix + "gate_proj.weight", {expert_inter, hidden}, &expert.gate, e);
        add_matrix(expert_prefix + "up_proj.weight", {expert_inter, hidden}, &expert.up, e);
        add_matrix(expert_prefix + "down_proj.weight", {hidden, expert_inter}, &expert.down, e);
      }
      if (const int64_t shared = config.moe.shared_expert_intermediate_size; shared > 0) {
        kernels::Expert& expert = layer.shared_expert;
        add_matrix(prefix + "mlp.shared_expert.gate_proj.weight", {shared, hidden}, &expert.gate);
        add_matrix(prefix + "mlp.shared_expert.up_proj.weight", {shared, hidden}, &expert.up);
        add_matrix(prefix + "mlp.shared_expert.down_proj.weight", {hidden, shared}, &expert.down);
        add_matrix(prefix + "mlp.shared_expert_gate.weight", {1, hidden},
                   &layer.shared_expert_gate);
      }
      continue;
    }
    add_matrix(prefix + "mlp.gate_proj.weight", {inter, hidden}, &layer.gate_proj);
    add_matrix(prefix + "mlp.up_proj.weight", {inter, hidden}, &layer.up_proj);
    add_matrix(prefix + "mlp.down_proj.weight", {hidden, inter}, &layer.down_proj);
    if (config.mlp_bias) {
      add(prefix + "mlp.gate_proj.bias", {inter}, &layer.gate_bias);
      add(prefix + "mlp.up_proj.bias", {inter}, &layer.up_bias);
      add(prefix + "mlp.down_proj.bias", {hidden}, &layer.down_bias);
    }
  }
  add("model.norm.weight", {hidden}, &weights.final_norm);
  if (!config.tie_word_embeddings)
    add_matrix("lm_head.weight", {config.vocab_size, hidden}, &weights.lm_head);
  return slots;
}

int64_t ParameterCount(const ModelConfig& config) {
  ModelWeights scratch;
  int64_t count = 0;
  for (const auto& slot : WeightSlots(config, scratch)) count += NumElements(slot.shape);
  return count;
}

int64_t ActiveParameterCount(const ModelConfig& config) {
  ModelWeights scratch;
  int64_t count = 0;
  for (const auto& slot : WeightSlots(config, scratch)) {
    if (slot.expert >= config.moe.experts_per_token) continue;  // counted as the chosen ones
    count += NumElements(slot.shape);
  }
  return count;
}

namespace {

uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

// Fills `tensor` with uniform values of standard deviation `stddev`: element i depends only
// on (seed, tensor name, i), so the result is the same for any thread count.
void FillUniform(Tensor& tensor, const std::string& name, uint64_t seed, double stddev,
                 ThreadPool* pool) {
  const uint64_t stream = SplitMix64(seed ^ Fnv1a(name));
  const auto half_width = static_cast<float>(stddev * std::sqrt(3.0));
  const int64_t count = tensor.numel();
  const auto value = [&](int64_t i) {
    const uint64_t bits = SplitMix64(stream + static_cast<uint64_t>(i));
    const float unit = static_cast<float>(bits >> 40) * (1.0F / 16777216.0F);  // [0, 1)
    return (2.0F * unit - 1.0F) * half_width;
  };
  // The usual dtypes are written directly (a real-size model's billions of elements: the
  // per-element dtype switch was half of a dummy load).
  ParallelForOn(pool, count, 1 << 16, [&](int64_t begin, int64_t end) {
    if (tensor.dtype() == DType::kBF16) {
      uint16_t* out = tensor.data<uint16_t>();
      for (int64_t i = begin; i < end; ++i) out[i] = F32ToBf16(value(i));
    } else if (tensor.dtype() == DType::kF32) {
      float* out = tensor.data<float>();
      for (int64_t i = begin; i < end; ++i) out[i] = value(i);
    } else {
      for (int64_t i = begin; i < end; ++i) StoreElementF32(tensor, i, value(i));
    }
  });
}

void FillConstant(Tensor& tensor, float value) {
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    StoreElementF32(tensor, i, value);
  }
}

// Every vector slot (not the matrices), one after another in 2 MiB pages of their own.
void AllocateSlots(std::vector<WeightSlot>& slots, const std::vector<DType>& dtypes) {
  TensorArena arena;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].tensor != nullptr) *slots[i].tensor = arena.Empty(dtypes[i], slots[i].shape);
  }
}

// What a weight matrix is quantized to at load: `quantization`, except that an untied
// embedding table is only gathered from (it stays as loaded) and the output head takes
// LoadOptions::head's type.
kernels::Quantization QuantizationFor(const WeightSlot& slot, const ModelConfig& config,
                                      const LoadOptions& options) {
  const bool embedding = slot.hf_name == "model.embed_tokens.weight";
  const bool head = slot.hf_name == "lm_head.weight" || (embedding && config.tie_word_embeddings);
  if (embedding && !head) return kernels::Quantization::kNone;
  // The routers (and a shared expert's one-row gate) stay in float.
  if (slot.hf_name.ends_with(".mlp.gate.weight") ||
      slot.hf_name.ends_with(".mlp.shared_expert_gate.weight")) {
    return kernels::Quantization::kNone;
  }
  if (head && options.quantization != kernels::Quantization::kNone) {
    return options.head == LoadOptions::Head::kUnquantized ? kernels::Quantization::kNone
           : options.head == LoadOptions::Head::kInt6      ? kernels::Quantization::kInt6
                                                           : kernels::Quantization::kInt8;
  }
  return options.quantization;
}

// A weight matrix in the layout MatMul reads, quantized when asked.
kernels::PackedMatrix PackMatrix(const WeightSlot& slot, const Tensor& values,
                                 const ModelConfig& config, const LoadOptions& options,
                                 TensorArena& arena) {
  try {
    return kernels::PackedMatrix::Quantize(values, QuantizationFor(slot, config, options), 0,
                                           options.pool, &arena);
  } catch (const Error& error) {
    Fail("tensor '{}': {}", slot.hf_name, error.what());
  }
}

// One line on a terminal that updates while the matrices load ("loading NAME: 120/290 matrices,
// 1.2 GB"), then says what was loaded and how long it took; nothing when stderr is not one.
class LoadProgress {
 public:
  LoadProgress(const std::string& path, const std::vector<WeightSlot>& slots)
      : enabled_(isatty(STDERR_FILENO) != 0),
        name_(std::filesystem::path(path).filename().string()) {
    for (const auto& slot : slots) total_ += slot.matrix != nullptr ? 1 : 0;
  }
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;
  ~LoadProgress() {
    if (!enabled_ || done_ == 0) return;
    if (std::uncaught_exceptions() > 0) {  // the load failed: its error says why
      std::fputs("\r\033[K", stderr);
      return;
    }
    std::fprintf(stderr, "\r\033[Kloaded %s: %lld matrices, %.2f GB in %.1f s\n", name_.c_str(),
                 static_cast<long long>(done_), static_cast<double>(bytes_) / 1e9, Elapsed());
  }
  // A matrix of `bytes` (as packed) is done.
  void Step(size_t bytes) {
    ++done_;
    bytes_ += bytes;
    if (!enabled_ || Elapsed() < next_s_) return;
    next_s_ = Elapsed() + 0.1;
    std::fprintf(stderr, "\r\033[Kloading %s: %lld/%lld matrices, %.2f GB", name_.c_str(),
                 static_cast<long long>(done_), static_cast<long long>(total_),
                 static_cast<double>(bytes_) / 1e9);
  }

 private:
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  const bool enabled_;
  const std::string name_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t total_ = 0;
  int64_t done_ = 0;
  size_t bytes_ = 0;
  double next_s_ = 0.0;
};

void InitDummy(const std::string& path, const ModelConfig& config, std::vector<WeightSlot>& slots,
               const LoadOptions& options) {
  LoadProgress progress(path, slots);
  std::vector<DType> dtypes(slots.size(), config.dtype);
  // No file to map: dummy weights always live in 2 MiB pages, the best case a checkpoint
  // reaches with --weights-placement hugepage.
  (void)options.placement;
  AllocateSlots(slots, dtypes);
  // Matrices are generated row-major into one reused buffer (2 MiB pages: no zeroing pass),
  // then packed.
  size_t max_matrix_bytes = 0;
  for (const auto& slot : slots) {
    if (slot.matrix != nullptr &&
        QuantizationFor(slot, config, options) == kernels::Quantization::kNone) {
      max_matrix_bytes = std::max(
          max_matrix_bytes, static_cast<size_t>(NumElements(slot.shape)) * DTypeSize(config.dtype));
    }
  }
  AlignedBuffer staging(max_matrix_bytes, /*huge_pages=*/true);
  TensorArena arena;
  const float norm_value = config.norm_style == NormStyle::kOffsetInF32 ? 0.0F : 1.0F;
  for (auto& slot : slots) {
    if (slot.matrix != nullptr &&
        QuantizationFor(slot, config, options) != kernels::Quantization::kNone) {
      // Quantized: random values and scales made in the packed layout directly (no float
      // copy: a real-size mixture of experts is tens of billions of weights).
      *slot.matrix = kernels::PackedMatrix::Random(
          QuantizationFor(slot, config, options), slot.shape[0], slot.shape[1],
          SplitMix64(options.dummy_seed ^ Fnv1a(slot.hf_name)),
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(slot.shape.back()))), options.pool,
          &arena);
      progress.Step(slot.matrix->size_bytes());
      continue;
    }
    if (slot.matrix != nullptr) {
      // std 1/sqrt(fan_in) keeps activations O(1) through the random network.
      Tensor values = Tensor::Borrow(config.dtype, slot.shape, staging.data());
      FillUniform(values, slot.hf_name, options.dummy_seed,
                  1.0 / std::sqrt(static_cast<double>(slot.shape.back())), options.pool);
      *slot.matrix = PackMatrix(slot, values, config, options, arena);
      progress.Step(slot.matrix->size_bytes());
      continue;
    }
    const bool is_norm = slot.hf_name.find("norm.weight") != std::string::npos;
    const bool is_bias = slot.hf_name.ends_with(".bias");
    if (slot.hf_name.ends_with("linear_attn.norm.weight")) {
      FillConstant(*slot.tensor, 1.0F);  // the gated norm's plain weight
    } else if (slot.hf_name.ends_with("linear_attn.conv1d.weight")) {
      FillUniform(*slot.tensor, slot.hf_name, options.dummy_seed,
                  1.0 / std::sqrt(static_cast<double>(slot.shape.back())), options.pool);
    } else if (slot.hf_name.ends_with("linear_attn.A_log") ||
               slot.hf_name.ends_with("linear_attn.dt_bias")) {
      FillConstant(*slot.tensor, 0.0F);  // decay exp(-softplus(a)) per step
    } else if (is_norm) {
      FillConstant(*slot.tensor, norm_value);
    } else {
      INFER_CHECK(is_bias, "dummy weights: no rule for '{}'", slot.hf_name);
      FillConstant(*slot.tensor, 0.0F);
    }
  }
}

// The norm and bias vectors: views of the file (kMmap) or one copy into 2 MiB pages.
void PlaceVectors(std::vector<WeightSlot>& slots, const std::vector<Tensor>& views,
                  const LoadOptions& options) {
  if (options.placement == WeightPlacement::kMmap) {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].tensor != nullptr) *slots[i].tensor = views[i];
    }
    return;
  }
  std::vector<DType> dtypes;
  dtypes.reserve(views.size());
  for (const Tensor& view : views) dtypes.push_back(view.defined() ? view.dtype() : DType::kF32);
  AllocateSlots(slots, dtypes);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].tensor == nullptr) continue;
    auto* destination = static_cast<std::byte*>(slots[i].tensor->raw());
    const auto* source = static_cast<const std::byte*>(views[i].raw());
    ParallelForOn(options.pool, static_cast<int64_t>(views[i].size_bytes()), 1 << 20,
                  [&](int64_t begin, int64_t end) {
                    std::memcpy(destination + begin, source + begin,
                                static_cast<size_t>(end - begin));
                  });
  }
}

void LoadFromCheckpoint(const std::string& folder, std::vector<WeightSlot>& slots,
                        const ModelConfig& config, const LoadOptions& options,
                        std::vector<std::string>& warnings) {
  SafetensorsCheckpoint checkpoint = SafetensorsCheckpoint::Open(folder);
  const auto& tensors = checkpoint.tensors();
  // Multimodal Gemma 3 checkpoints keep the language model under "language_model.".
  std::string prefix;
  if (!tensors.contains("model.embed_tokens.weight") &&
      tensors.contains("language_model.model.embed_tokens.weight")) {
    prefix = "language_model.";
  }
  // The slots' "model." is the config's weights_prefix in the checkpoint (Qwen3.5's
  // "model.language_model.").
  const auto checkpoint_name = [&](const std::string& hf_name) {
    return hf_name.starts_with("model.")
               ? prefix + config.weights_prefix + hf_name.substr(std::string("model.").size())
               : prefix + hf_name;
  };
  std::set<std::string> used;
  std::vector<Tensor> views;
  for (auto& slot : slots) {
    const std::string name = checkpoint_name(slot.hf_name);
    auto it = tensors.find(name);
    const Shape& shape = slot.stack_shape.empty() ? slot.shape : slot.stack_shape;
    INFER_CHECK(it != tensors.end(), "{}: missing tensor '{}' (shape {})", folder, name,
                ShapeString(shape));
    const SafetensorsEntry& entry = *it->second.entry;
    INFER_CHECK(entry.shape == shape, "{}: tensor '{}' has shape {} but the config needs {}",
                it->second.file->path(), name, ShapeString(entry.shape), ShapeString(shape));
    Tensor view = it->second.file->View(entry);
    if (!slot.stack_shape.empty()) {
      // Expert `expert`'s rows [row_begin, row_begin + rows) of the stack.
      const Tensor matrix = view.Row(slot.expert);
      const int64_t row_bytes = slot.shape[1] * static_cast<int64_t>(DTypeSize(matrix.dtype()));
      view = Tensor::Borrow(matrix.dtype(), slot.shape,
                            static_cast<std::byte*>(matrix.raw()) + slot.row_begin * row_bytes);
    }
    views.push_back(view);
    used.insert(name);
  }
  std::map<std::string, int64_t> skipped;  // prefix -> tensors
  for (const auto& [name, location] : tensors) {
    if (used.contains(name)) continue;
    const std::string& tensor_name = name;  // (a lambda cannot capture a structured binding)
    const auto part =
        std::find_if(config.skipped_prefixes.begin(), config.skipped_prefixes.end(),
                     [&](const std::string& p) { return tensor_name.starts_with(p); });
    if (part != config.skipped_prefixes.end()) {
      ++skipped[*part];
      continue;
    }
    std::string warning =
        (name == prefix + "lm_head.weight" && config.tie_word_embeddings)
            ? fmt::format("tensor '{}' ignored: tie_word_embeddings uses the embedding", name)
            : fmt::format("unexpected tensor '{}' in {} ignored", name, location.file->path());
    warnings.push_back(std::move(warning));
  }
  for (const auto& [part, count] : skipped) {
    spdlog::info("{}: {} tensors under '{}' skipped (not part of the text model infer runs)",
                 folder, count, part);
  }
  TensorArena arena;  // the matrices, one after another in 2 MiB pages
  LoadProgress progress(folder, slots);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].matrix == nullptr) continue;
    INFER_CHECK(views[i].dtype() == DType::kF32 || views[i].dtype() == DType::kBF16 ||
                    views[i].dtype() == DType::kF16,
                "{}: tensor '{}' has dtype {}, which infer cannot compute with (f32, bf16 or f16)",
                folder, prefix + slots[i].hf_name, DTypeName(views[i].dtype()));
    *slots[i].matrix = PackMatrix(slots[i], views[i], config, options, arena);
    progress.Step(slots[i].matrix->size_bytes());
  }
  PlaceVectors(slots, views, options);
}

// A GGUF file's tensors by llama.cpp's names (gguf_model.h), matrices kept exactly or widened.
// Each tensor group's types and bits per weight, in file order.
std::vector<LoadedModel::TensorGroup> GgufTensorGroups(const GgufFile& file) {
  std::vector<LoadedModel::TensorGroup> groups;
  std::map<std::string, std::pair<uint64_t, int64_t>> sizes;  // bytes, elements
  for (const GgufTensorInfo& tensor : file.tensors()) {
    std::string name = tensor.name;
    if (name.starts_with("blk.")) name = name.substr(name.find('.', 4) + 1);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.name == name; });
    if (it == groups.end()) {
      groups.push_back({name, GgmlTypeName(tensor.type), 0.0});
      it = groups.end() - 1;
    } else if (it->types.find(GgmlTypeName(tensor.type)) == std::string::npos) {
      it->types += "+" + GgmlTypeName(tensor.type);
    }
    sizes[name].first += tensor.bytes;
    sizes[name].second += tensor.elements();
  }
  for (auto& group : groups) {
    const auto& [bytes, elements] = sizes[group.name];
    group.bits_per_weight = static_cast<double>(bytes) * 8.0 / static_cast<double>(elements);
  }
  return groups;
}

// `shape` without its unit dimensions: llama.cpp's converter squeezes them (conv1d's [C, 1, K]
// is stored [C, K], a one-row gate [1, H] as [H]).
Shape Squeezed(const Shape& shape) {
  Shape out;
  for (const int64_t d : shape) {
    if (d != 1) out.push_back(d);
  }
  return out;
}

// Gated DeltaNet's A_log from the converter's ssm_a = -exp(A_log), in f32.
Tensor ALogFromSsmA(const GgufFile& file, const GgufTensorInfo& tensor, const Shape& shape) {
  Tensor a_log = Tensor::Empty(DType::kF32, shape);
  std::vector<float> values(static_cast<size_t>(tensor.elements()));
  DequantizeGgmlRow(tensor.type, file.Data(tensor), values);
  for (size_t i = 0; i < values.size(); ++i) {
    INFER_CHECK(std::isfinite(values[i]) && values[i] < 0,
                "{}: tensor '{}' holds {} at {}; it must hold -exp(A_log) < 0", file.path(),
                tensor.name, values[i], i);
    a_log.data<float>()[i] = std::log(-values[i]);
  }
  return a_log;
}

void LoadFromGguf(const GgufFile& file, std::vector<WeightSlot>& slots, const ModelConfig& config,
                  const LoadOptions& options, std::vector<std::string>& warnings) {
  std::set<std::string> used = {"rope_freqs.weight"};  // read into the config
  std::vector<Tensor> views(slots.size());
  TensorArena arena;
  LoadProgress progress(file.path(), slots);
  for (size_t i = 0; i < slots.size(); ++i) {
    WeightSlot& slot = slots[i];
    const std::string name = GgufTensorName(slot.hf_name, config);
    const GgufTensorInfo* tensor = file.FindTensor(name);
    // Experts live in one stack per matrix kind: [experts, rows, cols].
    const int64_t expert = slot.expert;
    Shape shape = slot.shape;
    if (expert >= 0) shape.insert(shape.begin(), config.moe.num_experts);
    INFER_CHECK(tensor != nullptr, "{}: missing tensor '{}' (shape {})", file.path(), name,
                ShapeString(shape));
    INFER_CHECK(tensor->shape() == shape || Squeezed(tensor->shape()) == Squeezed(shape),
                "{}: tensor '{}' has shape {} but the metadata needs {}", file.path(), name,
                ShapeString(tensor->shape()), ShapeString(shape));
    used.insert(name);
    if (slot.matrix != nullptr) {
      *slot.matrix =
          GgufMatrix(file, *tensor, slot.hf_name, config, QuantizationFor(slot, config, options),
                     options.pool, &arena, expert);
      progress.Step(slot.matrix->size_bytes());
    } else if (slot.hf_name.ends_with(".linear_attn.A_log")) {
      views[i] = ALogFromSsmA(file, *tensor, slot.shape);
    } else {
      views[i] = file.View(*tensor).Reshape(slot.shape);
    }
  }
  std::map<std::string, int64_t> skipped;  // prefix -> tensors
  for (const GgufTensorInfo& tensor : file.tensors()) {
    if (used.contains(tensor.name)) continue;
    const auto part =
        std::find_if(config.skipped_prefixes.begin(), config.skipped_prefixes.end(),
                     [&](const std::string& prefix) { return tensor.name.starts_with(prefix); });
    if (part != config.skipped_prefixes.end()) {
      ++skipped[*part];
      continue;
    }
    warnings.push_back(
        fmt::format("unexpected tensor '{}' in {} ignored", tensor.name, file.path()));
  }
  for (const auto& [part, count] : skipped) {
    spdlog::info(
        "{}: {} tensors under '{}' skipped (the multi-token-prediction layer infer "
        "does not run)",
        file.path(), count, part);
  }
  PlaceVectors(slots, views, options);
}

}  // namespace

namespace {

// Before anything is allocated: the weights as they will sit in memory (packed, quantized when
// asked) must fit in what the machine has available, or the load stops with one clear error
// instead of allocating for a long time and failing on one tensor (or meeting the OOM killer).
void CheckWeightsFitMemory(const LoadedModel& loaded, const std::vector<WeightSlot>& slots,
                           const LoadOptions& options) {
  const ModelConfig& config = loaded.config;
  double bytes = 0;
  for (const auto& slot : slots) {
    const auto elements = static_cast<double>(NumElements(slot.shape));
    double per_element = static_cast<double>(DTypeSize(config.dtype));
    if (slot.matrix != nullptr && options.quantization != kernels::Quantization::kNone) {
      per_element = options.quantization == kernels::Quantization::kInt8   ? 8.5 / 8
                    : options.quantization == kernels::Quantization::kInt6 ? 6.5 / 8
                    : options.quantization == kernels::Quantization::kInt4 ? 5.0 / 8
                                                                           : 4.5 / 8;
    }
    bytes += elements * per_element;
  }
  const auto available = static_cast<double>(AvailableMemoryBytes());
  INFER_CHECK(
      available == 0 || bytes <= available,
      "{}: the weights need {:.2f} GiB in memory ({} parameters, {}{}), more than the "
      "{:.2f} GiB this machine has available; try --quantization int8, int6, int4 or int4k, or a "
      "machine with more memory",
      loaded.path, bytes / 0x1p30, ParameterCount(config), DTypeName(config.dtype),
      options.quantization == kernels::Quantization::kNone
          ? ""
          : std::string(", quantized to ") +
                std::string(kernels::QuantizationName(options.quantization)),
      available / 0x1p30);
}

}  // namespace

LoadedModel LoadModel(const std::string& model, const LoadOptions& options) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  loaded.path = ResolveModelPath(model);
  const std::string gguf_path = GgufModelFile(loaded.path);
  std::optional<GgufFile> gguf;
  std::vector<WeightSlot> slots;
  if (!gguf_path.empty()) {
    loaded.path = gguf_path;
    gguf = GgufFile::Open(gguf_path);
    loaded.config = GgufModelConfig(*gguf);
    loaded.generation = GgufGenerationConfig(*gguf);
    slots = WeightSlots(loaded.config, loaded.weights);
  } else {
    const fs::path folder(loaded.path);
    loaded.config = LoadModelConfig((folder / "config.json").string());
    loaded.generation = LoadGenerationConfig((folder / "generation_config.json").string());
    slots = WeightSlots(loaded.config, loaded.weights);
    CheckWeightsFitMemory(loaded, slots, options);
  }
  if (options.dummy) {
    InitDummy(loaded.path, loaded.config, slots, options);
  } else if (gguf) {
    LoadFromGguf(*gguf, slots, loaded.config, options, loaded.warnings);
  } else {
    LoadFromCheckpoint(loaded.path, slots, loaded.config, options, loaded.warnings);
  }
  if (loaded.config.tie_word_embeddings) loaded.weights.lm_head = loaded.weights.embed_tokens;
  int64_t expert_bytes = 0;
  for (const auto& slot : slots) {
    const auto bytes = static_cast<int64_t>(slot.matrix != nullptr ? slot.matrix->size_bytes()
                                                                   : slot.tensor->size_bytes());
    if (slot.matrix != nullptr) {
      loaded.matrix_weights += NumElements(slot.shape);
      loaded.matrix_weight_bytes += bytes;
    }
    loaded.weight_bytes += bytes;
    // An untied embedding table is gathered a row at a time, not read per token.
    if (slot.hf_name == "model.embed_tokens.weight" && !loaded.config.tie_word_embeddings) continue;
    if (slot.expert >= 0) {
      expert_bytes += bytes;
    } else {
      loaded.weight_bytes_per_token += bytes;
    }
  }
  if (loaded.config.moe.num_experts > 0) {
    loaded.weight_bytes_per_token +=
        expert_bytes * loaded.config.moe.experts_per_token / loaded.config.moe.num_experts;
  }
  loaded.quantization = options.quantization;
  // The first layer's first projection (q_proj, or a linear-attention layer's in_proj_qkv).
  const kernels::PackedMatrix* first_matrix = nullptr;
  if (!loaded.weights.layers.empty()) {
    const LayerWeights& layer = loaded.weights.layers[0];
    first_matrix = layer.q_proj.defined() ? &layer.q_proj : &layer.in_proj_qkv;
  }
  if (gguf) {
    loaded.file_tensor_groups = GgufTensorGroups(*gguf);
    // The file's own quantization when it has one (a Q4_K_M file's layers: int4k).
    if (!options.dummy && first_matrix != nullptr) {
      loaded.quantization = first_matrix->quantization();
    }
  }
  loaded.head_quantization = loaded.weights.lm_head.quantization();
  const bool packed_as_loaded = first_matrix != nullptr && !first_matrix->quantized();
  loaded.weight_dtype = packed_as_loaded ? first_matrix->dtype() : loaded.config.dtype;
  constexpr size_t kMaxWarningsShown = 10;
  for (size_t i = 0; i < loaded.warnings.size() && i < kMaxWarningsShown; ++i) {
    spdlog::warn("{}", loaded.warnings[i]);
  }
  if (loaded.warnings.size() > kMaxWarningsShown) {
    spdlog::warn("... and {} more unexpected tensors", loaded.warnings.size() - kMaxWarningsShown);
  }
  loaded.load_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

}  // namespace infer
