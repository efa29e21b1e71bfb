// The LoRA adapters a server serves by name (--lora-modules at start, POST /v1/load_lora_adapter
// and /v1/unload_lora_adapter at run time): each loaded against the base model's config and kept
// in memory until unloaded. A request names one by its `model`; it holds the adapter itself, so
// an unload never pulls an adapter from under a running request. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "infer/loader/lora.h"
#include "infer/loader/model_config.h"

namespace infer::server {

// One --lora-modules argument: NAME=PATH, or vLLM's JSON form {"name": ..., "path": ...,
// "base_model_name": ...}. Throws infer::Error saying which form it expects.
struct LoraModule {
  std::string name;
  std::string path;
  std::string base_model_name;  // "" : the served model
};
LoraModule ParseLoraModule(const std::string& argument);

class LoraAdapters {
 public:
  // `config`: the base model's; adapters of a rank above max_rank are refused.
  LoraAdapters(ModelConfig config, int64_t max_rank, std::string served_model)
      : config_(std::move(config)), max_rank_(max_rank), served_model_(std::move(served_model)) {}

  struct Entry {
    std::shared_ptr<const LoraAdapter> adapter;
    std::string parent;  // the model it adapts (/v1/models' parent)
  };
  // Reads the adapter and adds it under module.name; returns it. Throws infer::Error (naming the
  // adapter) when it cannot be loaded or the name is taken (by an adapter or the served model);
  // the adapters already loaded are untouched.
  std::shared_ptr<const LoraAdapter> Load(const LoraModule& module);
  // Removes an adapter; false when no adapter has that name.
  bool Unload(std::string_view name);
  // The adapter named `name`, or null.
  std::shared_ptr<const LoraAdapter> Find(std::string_view name) const;
  std::vector<Entry> List() const;  // in load order
  int64_t max_rank() const { return max_rank_; }

 private:
  const ModelConfig config_;
  const int64_t max_rank_;
  const std::string served_model_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace infer::server
