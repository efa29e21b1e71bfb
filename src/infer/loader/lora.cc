#include "infer/loader/lora.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/loader/model_path.h"
#include "infer/loader/safetensors.h"
#include "infer/loader/weights.h"

namespace infer {

namespace {

using json = nlohmann::json;

constexpr std::array<std::string_view, kNumLoraTargets> kTargetNames = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

std::optional<LoraTarget> TargetNamed(std::string_view name) {
  for (size_t t = 0; t < kNumLoraTargets; ++t) {
    if (kTargetNames[t] == name) return static_cast<LoraTarget>(t);
  }
  return std::nullopt;
}

// The base's weight matrices by Hugging Face name and their shapes [out, in]: WeightSlots, the one
// list of what a model of `config` holds.
std::map<std::string, Shape> BaseMatrixShapes(const ModelConfig& config) {
  ModelWeights unused;
  std::map<std::string, Shape> shapes;
  for (const WeightSlot& slot : WeightSlots(config, unused)) {
    if (slot.matrix != nullptr) shapes.emplace(slot.hf_name, slot.shape);
  }
  return shapes;
}

// One tensor of the adapter file, by where it sits.
struct TensorName {
  int64_t layer = -1;
  std::optional<LoraTarget> target;
  std::string module;  // "self_attn.q_proj", as the base's weights are named
  bool is_b = false;
};

// PEFT's names: [base_model.model.][model.|language_model.model.]layers.L.(self_attn|mlp).
// PROJ.lora_(A|B)[.default].weight. Throws for anything else, saying what it targets.
TensorName ParseTensorName(const std::string& adapter, const std::string& name) {
  const auto fail = [&](std::string_view what) {
    throw Error(fmt::format("LoRA adapter '{}': tensor '{}': {}", adapter, name, what));
  };
  if (name.find("lora_embedding") != std::string::npos ||
      name.find("embed_tokens") != std::string::npos) {
    fail("targets the embeddings, which is not supported (only q/k/v/o/gate/up/down_proj)");
  }
  if (name.find("lm_head") != std::string::npos) {
    fail("targets lm_head, which is not supported (only q/k/v/o/gate/up/down_proj)");
  }
  if (name.find("lora_magnitude_vector") != std::string::npos) fail("DoRA is not supported");
  if (name.find(".mlp.experts.") != std::string::npos ||
      name.find(".mlp.gate.") != std::string::npos) {
    fail(
        "targets a mixture of experts' experts or router, which is not supported (LoRA applies "
        "to q/k/v/o_proj, and to gate/up/down_proj of dense MLP layers)");
  }
  const size_t layers = name.find("layers.");
  if (layers == std::string::npos) fail("not a LoRA weight of a decoder layer");
  std::stringstream parts(name.substr(layers + 7));
  std::vector<std::string> fields;
  for (std::string field; std::getline(parts, field, '.');) fields.push_back(field);
  // L, self_attn|mlp, PROJ, lora_A|lora_B, [default,] weight|bias
  if (fields.size() == 6 && fields[4] == "default") fields.erase(fields.begin() + 4);
  if (fields.size() != 5) fail("not a LoRA weight of a decoder layer");
  if (fields[4] == "bias") fail("a LoRA bias is not supported");
  TensorName parsed;
  try {
    size_t used = 0;
    parsed.layer = std::stoll(fields[0], &used);
    if (used != fields[0].size()) fail("bad layer number");
  } catch (const std::logic_error&) {
    fail("bad layer number");
  }
  parsed.target = TargetNamed(fields[2]);
  if (!parsed.target || (fields[1] != "self_attn" && fields[1] != "mlp")) {
    fail(fmt::format("targets '{}.{}', which is not supported (only q/k/v/o/gate/up/down_proj)",
                     fields[1], fields[2]));
  }
  if ((fields[3] != "lora_A" && fields[3] != "lora_B") || fields[4] != "weight") {
    fail("not a lora_A or lora_B weight");
  }
  parsed.module = fields[1] + "." + fields[2];
  parsed.is_b = fields[3] == "lora_B";
  return parsed;
}

json ReadAdapterConfig(const std::string& name, const std::string& folder) {
  const std::string path = folder + "/adapter_config.json";
  std::ifstream in(path);
  INFER_CHECK(in.good(),
              "LoRA adapter '{}': {} not found (a PEFT adapter folder holds "
              "adapter_config.json and adapter_model.safetensors)",
              name, path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    json config = json::parse(text.str());
    INFER_CHECK(config.is_object(), "LoRA adapter '{}': {} is not a JSON object", name, path);
    return config;
  } catch (const json::exception& e) {
    throw Error(fmt::format("LoRA adapter '{}': {}: {}", name, path, e.what()));
  }
}

// Rejects what the config asks for that infer does not do; fills rank, alpha and rslora.
void ReadConfigFields(const json& config, LoraAdapter& adapter) {
  const auto fail = [&](std::string_view what) {
    throw Error(fmt::format("LoRA adapter '{}': adapter_config.json: {}", adapter.name, what));
  };
  const auto is_set = [&](const char* key) {
    const auto it = config.find(key);
    return it != config.end() && !it->is_null() && *it != false && *it != json::array() &&
           *it != json::object();
  };
  if (const auto type = config.find("peft_type"); type != config.end() && *type != "LORA") {
    fail(fmt::format("peft_type {} is not supported (LORA only)", type->dump()));
  }
  if (is_set("use_dora")) fail("use_dora: DoRA is not supported");
  if (is_set("modules_to_save")) fail("modules_to_save is not supported");
  if (is_set("rank_pattern")) fail("rank_pattern (per-module ranks) is not supported");
  if (is_set("alpha_pattern")) fail("alpha_pattern (per-module alphas) is not supported");
  if (is_set("fan_in_fan_out")) fail("fan_in_fan_out is not supported");
  if (is_set("lora_bias")) fail("lora_bias is not supported");
  if (const auto bias = config.find("bias"); bias != config.end() && *bias != "none") {
    fail(fmt::format("bias {} is not supported (\"none\" only)", bias->dump()));
  }
  if (const auto targets = config.find("target_modules"); targets != config.end()) {
    if (targets->is_array()) {
      for (const json& target : *targets) {
        if (!target.is_string() || !TargetNamed(target.get<std::string>())) {
          fail(fmt::format("target_modules: {} is not supported (only q/k/v/o/gate/up/down_proj)",
                           target.dump()));
        }
      }
    }
  }
  const auto r = config.find("r");
  if (r == config.end() || !r->is_number_integer() || r->get<int64_t>() < 1) {
    fail("'r' must be a positive integer");
  }
  adapter.rank = r->get<int64_t>();
  adapter.alpha = 8.0;  // PEFT's default
  if (const auto alpha = config.find("lora_alpha"); alpha != config.end()) {
    if (!alpha->is_number() || !std::isfinite(alpha->get<double>())) {
      fail("'lora_alpha' must be a number");
    }
    adapter.alpha = alpha->get<double>();
  }
  if (const auto rslora = config.find("use_rslora"); rslora != config.end()) {
    if (!rslora->is_boolean()) fail("'use_rslora' must be true or false");
    adapter.rslora = rslora->get<bool>();
  }
  adapter.scale = static_cast<float>(adapter.alpha /
                                     (adapter.rslora ? std::sqrt(static_cast<double>(adapter.rank))
                                                     : static_cast<double>(adapter.rank)));
}

// A contiguous copy of `view` in its own dtype.
Tensor CopyMatrix(const Tensor& view) {
  Tensor out = Tensor::Empty(view.dtype(), view.shape());
  std::memcpy(out.raw(), view.raw(), out.size_bytes());
  return out;
}

std::atomic<int64_t> next_adapter_id{1};

}  // namespace

std::string_view LoraTargetName(LoraTarget target) {
  return kTargetNames[static_cast<size_t>(target)];
}

std::shared_ptr<const LoraAdapter> LoadLoraAdapter(const std::string& name, const std::string& path,
                                                   const ModelConfig& config, int64_t max_rank) {
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->name = name;
  adapter->path = path;
  std::string folder;
  try {
    folder = ResolveModelPath(path);
  } catch (const Error& e) {
    throw Error(fmt::format("LoRA adapter '{}': {}", name, e.what()));
  }
  INFER_CHECK(std::filesystem::is_directory(folder), "LoRA adapter '{}': {} is not a folder", name,
              folder);
  ReadConfigFields(ReadAdapterConfig(name, folder), *adapter);
  INFER_CHECK(adapter->rank <= max_rank, "LoRA adapter '{}': rank {} exceeds --max-lora-rank {}",
              name, adapter->rank, max_rank);
  const std::string weights = folder + "/adapter_model.safetensors";
  if (!std::filesystem::exists(weights)) {
    INFER_CHECK(!std::filesystem::exists(folder + "/adapter_model.bin"),
                "LoRA adapter '{}': adapter_model.bin (PyTorch pickle) is not supported; save "
                "the adapter with safe_serialization=True (adapter_model.safetensors)",
                name);
    throw Error(fmt::format("LoRA adapter '{}': {} not found", name, weights));
  }
  std::optional<SafetensorsFile> file;
  try {
    file = SafetensorsFile::Open(weights);
  } catch (const Error& e) {
    throw Error(fmt::format("LoRA adapter '{}': {}", name, e.what()));
  }
  adapter->layers.resize(static_cast<size_t>(config.num_layers));
  const std::map<std::string, Shape> base = BaseMatrixShapes(config);
  // A and B of each (layer, target), found.
  std::map<std::pair<int64_t, size_t>, std::array<const SafetensorsEntry*, 2>> found;
  for (const SafetensorsEntry& entry : file->header().entries) {
    const TensorName parsed = ParseTensorName(name, entry.name);
    const auto fail = [&](const std::string& what) {
      throw Error(fmt::format("LoRA adapter '{}': tensor '{}': {}", name, entry.name, what));
    };
    if (parsed.layer < 0 || parsed.layer >= config.num_layers) {
      fail(fmt::format("layer {} is outside the base model's {} layers", parsed.layer,
                       config.num_layers));
    }
    const std::optional<DType> dtype = SafetensorsToDType(entry.dtype);
    if (!dtype) fail(fmt::format("dtype {} is not supported (F32, BF16 or F16)", entry.dtype));
    const auto weight =
        base.find(fmt::format("model.layers.{}.{}.weight", parsed.layer, parsed.module));
    if (weight == base.end()) {
      fail(config.sparse_layer(parsed.layer)
               ? fmt::format("the base model has no {}: layer {} is a mixture of experts, and "
                             "LoRA on experts is not supported",
                             parsed.module, parsed.layer)
               : fmt::format("the base model has no {}", parsed.module));
    }
    const int64_t out = weight->second[0];
    const int64_t in = weight->second[1];
    const Shape want = parsed.is_b ? Shape{out, adapter->rank} : Shape{adapter->rank, in};
    if (entry.shape != want) {
      fail(fmt::format("shape {} does not fit the base model's {} of rank {} (expected {})",
                       ShapeString(entry.shape), LoraTargetName(*parsed.target), adapter->rank,
                       ShapeString(want)));
    }
    auto& slot = found[{parsed.layer, static_cast<size_t>(*parsed.target)}][parsed.is_b ? 1 : 0];
    if (slot != nullptr) fail("appears twice");
    slot = &entry;
  }
  INFER_CHECK(!found.empty(), "LoRA adapter '{}': {} holds no LoRA weights", name, weights);
  std::array<bool, kNumLoraTargets> targeted{};
  for (const auto& [where, pair] : found) {
    const auto& [layer, target] = where;
    const std::string module =
        fmt::format("layer {} {}", layer, LoraTargetName(static_cast<LoraTarget>(target)));
    INFER_CHECK(pair[0] != nullptr && pair[1] != nullptr,
                "LoRA adapter '{}': {} has a {} without its {}", name, module,
                pair[0] != nullptr ? "lora_A" : "lora_B", pair[0] != nullptr ? "lora_B" : "lora_A");
    kernels::LoraMatrices& delta = adapter->layers[static_cast<size_t>(layer)][target];
    delta = kernels::LoraMatrices::Make(CopyMatrix(file->View(*pair[0])), file->View(*pair[1]),
                                        adapter->scale);
    adapter->size_bytes += static_cast<int64_t>(delta.a.size_bytes() + delta.b.size_bytes());
    targeted[target] = true;
  }
  for (size_t t = 0; t < kNumLoraTargets; ++t) {
    if (targeted[t]) adapter->target_modules.emplace_back(kTargetNames[t]);
  }
  adapter->id = next_adapter_id.fetch_add(1);
  return adapter;
}

}  // namespace infer
