// Chat-template loading and render-context construction.
#include "infer/tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "infer/core/error.h"
#include "infer/tokenizer/jinja/interpreter.h"

namespace infer {

ChatTemplate::ChatTemplate(std::string_view source, nlohmann::ordered_json special_tokens)
    : source_(source),
      template_(std::make_unique<jinja::Template>(source)),
      special_tokens_(std::move(special_tokens)) {}

ChatTemplate::~ChatTemplate() = default;

std::unique_ptr<ChatTemplate> ChatTemplate::FromModelDir(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  const auto jinja_path = dir / "chat_template.jinja";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::filesystem::is_regular_file(config_path)) {
    std::ifstream file(config_path);
    try {
      config = nlohmann::ordered_json::parse(file);
    } catch (const nlohmann::json::exception& e) {
      Fail("{}: invalid JSON: {}", config_path.string(), e.what());
    }
  }
  std::string source;
  if (std::filesystem::is_regular_file(jinja_path)) {
    std::ifstream file(jinja_path, std::ios::binary);
    std::stringstream buffer;
    buffer << file.rdbuf();
    source = buffer.str();
  } else if (config.is_object() && config.contains("chat_template")) {
    const auto& chat_template = config["chat_template"];
    if (chat_template.is_string()) {
      source = chat_template.get<std::string>();
    } else if (chat_template.is_array()) {
      for (const auto& entry : chat_template)
        if (entry.value("name", "") == "default") source = entry.value("template", "");
      INFER_CHECK(!source.empty(), "{}: chat_template has no \"default\" entry",
                  config_path.string());
    }
  }
  INFER_CHECK(!source.empty(),
              "model folder {} has no chat template (tokenizer_config.json \"chat_template\" or "
              "chat_template.jinja)",
              dir.string());
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!config.is_object() || !config.contains(key)) continue;
    const auto& token = config[key];
    if (token.is_string())
      special_tokens[key] = token;
    else if (token.is_object() && token.contains("content") && token["content"].is_string())
      special_tokens[key] = token["content"];
  }
  try {
    return std::make_unique<ChatTemplate>(source, std::move(special_tokens));
  } catch (const Error& e) {
    Fail("{}: {}", dir.string(), e.what());
  }
}

std::string ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& options) const {
  INFER_CHECK(messages.is_array(), "chat template: messages must be a list");
  INFER_CHECK(options.is_null() || options.is_object(), "chat template: options must be an object");
  jinja::ValueDict context;
  const auto set = [&](const std::string& key, jinja::Value value) {
    for (auto& [k, v] : context) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
    context.emplace_back(key, std::move(value));
  };
  set("messages", jinja::Value::FromJson(messages));
  set("tools", jinja::Value(jinja::None{}));
  set("documents", jinja::Value(jinja::None{}));
  set("add_generation_prompt", jinja::Value(false));
  for (const auto& [key, value] : special_tokens_.items()) set(key, jinja::Value::FromJson(value));
  if (options.is_object())
    for (const auto& [key, value] : options.items()) set(key, jinja::Value::FromJson(value));
  return template_->Render(context);
}

}  // namespace infer
