#include "infer/server/lora_adapters.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"

namespace infer::server {

LoraModule ParseLoraModule(const std::string& argument) {
  LoraModule module;
  if (!argument.empty() && argument.front() == '{') {
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(argument);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("--lora-modules {}: not valid JSON ({})", argument, e.what()));
    }
    const auto text = [&](const char* key, bool required) {
      const auto it = json.find(key);
      if (it == json.end() || it->is_null()) {
        INFER_CHECK(!required, "--lora-modules {}: '{}' is required", argument, key);
        return std::string();
      }
      INFER_CHECK(it->is_string(), "--lora-modules {}: '{}' must be a string", argument, key);
      return it->get<std::string>();
    };
    module = {text("name", true), text("path", true), text("base_model_name", false)};
  } else {
    const size_t equals = argument.find('=');
    INFER_CHECK(equals != std::string::npos,
                "--lora-modules {}: expected NAME=PATH or {{\"name\": ..., \"path\": ..., "
                "\"base_model_name\": ...}}",
                argument);
    module = {argument.substr(0, equals), argument.substr(equals + 1), ""};
  }
  INFER_CHECK(!module.name.empty() && !module.path.empty(),
              "--lora-modules {}: the name and the path must not be empty", argument);
  return module;
}

std::shared_ptr<const LoraAdapter> LoraAdapters::Load(const LoraModule& module) {
  INFER_CHECK(module.name != served_model_, "LoRA adapter '{}': the name is the served model's",
              module.name);
  INFER_CHECK(!Find(module.name), "LoRA adapter '{}' is already loaded", module.name);
  // Read outside the lock: a load takes as long as its files, and requests keep finding the
  // others meanwhile.
  Entry entry{LoadLoraAdapter(module.name, module.path, config_, max_rank_),
              module.base_model_name.empty() ? served_model_ : module.base_model_name};
  std::lock_guard lock(mutex_);
  INFER_CHECK(std::none_of(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.adapter->name == module.name; }),
              "LoRA adapter '{}' is already loaded", module.name);
  entries_.push_back(entry);
  return entry.adapter;
}

bool LoraAdapters::Unload(std::string_view name) {
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(entries_.begin(), entries_.end(),
                               [&](const Entry& e) { return e.adapter->name == name; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  return true;
}

std::shared_ptr<const LoraAdapter> LoraAdapters::Find(std::string_view name) const {
  std::lock_guard lock(mutex_);
  for (const Entry& e : entries_) {
    if (e.adapter->name == name) return e.adapter;
  }
  return nullptr;
}

std::vector<LoraAdapters::Entry> LoraAdapters::List() const {
  std::lock_guard lock(mutex_);
  return entries_;
}

}  // namespace infer::server
