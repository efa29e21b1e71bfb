#include "infer/server/chat/chat_request.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "infer/core/error.h"

namespace infer::server {

using ordered_json = nlohmann::ordered_json;

ordered_json TemplateMessages(const std::vector<ChatMessage>& messages) {
  ordered_json out = ordered_json::array();
  for (const ChatMessage& message : messages) {
    ordered_json turn = {{"role", message.role}, {"content", message.content}};
    if (message.tool_call_id) turn["tool_call_id"] = *message.tool_call_id;
    if (message.name) turn["name"] = *message.name;
    if (message.tool_calls) {
      ordered_json calls = ordered_json::array();
      for (const ChatToolCall& call : *message.tool_calls) {
        calls.push_back({{"id", call.id},
                         {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
      turn["tool_calls"] = std::move(calls);
    }
    out.push_back(std::move(turn));
  }
  return out;
}

std::string ParseModel(Fields& fields, const ModelNames& models) {
  const ordered_json* model = fields.Get("model");
  if (!model) return std::string(models.served());
  if (!model->is_string()) throw RequestError(kBadRequest, "'model' must be a string", "model");
  if (!models.Serves(model->get<std::string>())) {
    throw RequestError(kNotFound,
                       fmt::format("The model `{}` does not exist (this server serves `{}`).",
                                   model->get<std::string>(), models.served()),
                       "model");
  }
  return model->get<std::string>();
}

void ReadMaxTokens(Fields& fields, const char* name, ChatRequest& request) {
  const ordered_json* value = fields.Get(name);
  if (!value) return;
  request.max_tokens = fields.Integer(*value, name);
  if (*request.max_tokens < 1) {
    throw RequestError(kBadRequest,
                       fmt::format("'{}' must be at least 1, got {}", name, *request.max_tokens),
                       name);
  }
}

void ReadNumber(Fields& fields, const char* name, double& target) {
  if (const ordered_json* value = fields.Get(name)) target = fields.Number(*value, name);
}

void ReadBoolean(Fields& fields, const char* name, bool& target) {
  if (const ordered_json* value = fields.Get(name)) target = fields.Boolean(*value, name);
}

void ReadTopK(Fields& fields, SamplingParams& params) {
  const ordered_json* value = fields.Get("top_k");
  if (!value) return;
  const int64_t top_k = fields.Integer(*value, "top_k");
  if (top_k < -1) {
    throw RequestError(kBadRequest,
                       fmt::format("'top_k' must be >= 1, or 0 / -1 for off, got {}", top_k));
  }
  params.top_k = top_k >= 1 ? std::optional(top_k) : std::nullopt;
}

void SetEnableThinking(ChatRequest& request, bool enabled, bool overwrite) {
  if (overwrite || !request.chat_template_kwargs.contains("enable_thinking")) {
    request.chat_template_kwargs["enable_thinking"] = enabled;
  }
}

void ValidateSampling(const ChatRequest& request) {
  SamplingParams params = request.params;
  params.max_new_tokens = request.max_tokens.value_or(std::numeric_limits<int32_t>::max());
  try {
    params.Validate();
  } catch (const Error& e) {
    throw RequestError(kBadRequest, e.what());
  }
}

std::string JoinTextParts(const ordered_json& content, const std::string& at,
                          const TextPartsDialect& dialect, const std::string& param) {
  const auto reject = [&](const std::string& message) {
    throw RequestError(kBadRequest, message, param);
  };
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) reject(fmt::format(fmt::runtime(dialect.not_a_list), at));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ordered_json& part = content[i];
    const std::string part_at = fmt::format("{}[{}]", at, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      reject(fmt::format(fmt::runtime(dialect.no_type), part_at));
    }
    const std::string type = part["type"].get<std::string>();
    if (std::find(dialect.text_types.begin(), dialect.text_types.end(), type) ==
        dialect.text_types.end()) {
      reject(fmt::format(fmt::runtime(dialect.not_text), part_at, type));
    }
    const auto part_text = part.find("text");
    if (part_text == part.end() || !part_text->is_string()) {
      reject(part_at + ".text must be a string");
    }
    if (dialect.separate_after_text_only ? !text.empty() : i > 0) text += '\n';
    text += part_text->get<std::string>();
  }
  return text;
}

}  // namespace infer::server
