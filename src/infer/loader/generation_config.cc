#include "infer/loader/generation_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"

namespace infer {

using nlohmann::json;

GenerationConfig ParseGenerationConfig(const std::string& json_text, const std::string& source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  INFER_CHECK(!root.is_discarded() && root.is_object(), "{}: not a valid JSON object", source);
  GenerationConfig config;
  auto has = [&](const char* key) { return root.contains(key) && !root[key].is_null(); };
  auto integer = [&](const char* key) -> std::optional<int64_t> {
    if (!has(key)) return std::nullopt;
    INFER_CHECK(root[key].is_number_integer(), "{}: '{}' must be an integer", source, key);
    return root[key].get<int64_t>();
  };
  auto number = [&](const char* key) -> std::optional<double> {
    if (!has(key)) return std::nullopt;
    INFER_CHECK(root[key].is_number(), "{}: '{}' must be a number", source, key);
    return root[key].get<double>();
  };
  if (has("eos_token_id")) {
    const json& eos = root["eos_token_id"];
    if (eos.is_number_integer()) {
      config.eos_token_ids.push_back(eos.get<int64_t>());
    } else {
      INFER_CHECK(eos.is_array(), "{}: 'eos_token_id' must be an integer or a list", source);
      for (const json& id : eos) {
        INFER_CHECK(id.is_number_integer(), "{}: 'eos_token_id' must hold integers", source);
        config.eos_token_ids.push_back(id.get<int64_t>());
      }
    }
  }
  config.bos_token_id = integer("bos_token_id");
  config.pad_token_id = integer("pad_token_id");
  if (has("do_sample")) {
    INFER_CHECK(root["do_sample"].is_boolean(), "{}: 'do_sample' must be true or false", source);
    config.do_sample = root["do_sample"].get<bool>();
  }
  config.temperature = number("temperature");
  config.top_k = integer("top_k");
  config.top_p = number("top_p");
  config.repetition_penalty = number("repetition_penalty");
  config.max_new_tokens = integer("max_new_tokens");
  return config;
}

GenerationConfig LoadGenerationConfig(const std::string& path) {
  if (!std::filesystem::exists(path)) return {};
  std::ifstream in(path);
  INFER_CHECK(in.good(), "{}: cannot open", path);
  std::stringstream text;
  text << in.rdbuf();
  return ParseGenerationConfig(text.str(), path);
}

}  // namespace infer
