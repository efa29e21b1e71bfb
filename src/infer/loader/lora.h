// PEFT LoRA adapters as PEFT saves them (adapter_config.json + adapter_model.safetensors): read,
// checked against the base model, and kept in the file's dtype for kernels::LoraAdd (B in its
// panels of output columns). Applied at
// run time beside the base weights (y = W x + s B (A x)), never merged.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infer/kernels/ops.h"
#include "infer/loader/model_config.h"

namespace infer {

// The projections an adapter may target, in the order of LayerWeights (PEFT's module names).
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr size_t kNumLoraTargets = 7;
std::string_view LoraTargetName(LoraTarget target);  // "q_proj", ..., "down_proj"

struct LoraAdapter {
  std::string name;  // what requests ask for by `model`
  std::string path;  // as given (a folder or a Hugging Face cache id)
  // Unique among the adapters of this process, never reused (a new load of the same files gets a
  // new one): what keys the prefix cache's blocks, so that two adapters never share KV.
  int64_t id = 0;
  int64_t rank = 0;  // the config's r (every module's rank)
  double alpha = 0.0;
  bool rslora = false;
  float scale = 0.0F;  // alpha / r, or alpha / sqrt(r) with use_rslora
  // Per layer, per target: A, B (in the kernels' panels) and the scale; undefined where not
  // targeted.
  std::vector<std::array<kernels::LoraMatrices, kNumLoraTargets>> layers;
  std::vector<std::string> target_modules;  // those present, in LoraTarget order
  int64_t size_bytes = 0;                   // of the matrices held

  const kernels::LoraMatrices& Delta(int64_t layer, LoraTarget target) const {
    return layers[static_cast<size_t>(layer)][static_cast<size_t>(target)];
  }
};

// Reads the adapter at `path` (a folder, or a Hugging Face id in the HF cache as --model takes
// one) for a base of `config`. Throws infer::Error naming the adapter (and the tensor or field at
// fault) for: a missing or corrupt file; a peft_type other than LORA; what is not supported (DoRA,
// modules_to_save, rank_pattern / alpha_pattern, a bias, fan_in_fan_out, a target other than the
// seven projections such as embed_tokens or lm_head); a rank above max_rank; a dtype other than
// f32, bf16 and f16; a shape that does not fit the base; a lora_A without its lora_B.
std::shared_ptr<const LoraAdapter> LoadLoraAdapter(const std::string& name, const std::string& path,
                                                   const ModelConfig& config, int64_t max_rank);

}  // namespace infer
