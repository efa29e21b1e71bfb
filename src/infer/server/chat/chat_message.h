// A conversation as every protocol's parser gives it: turns of system, user, assistant and tool,
// their content as text, an assistant's tool calls and a tool turn's result. Rendered for the
// chat template in one place (TemplateMessages). Pure: no engine, no sockets.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer::server {

struct ChatToolCall {
  std::string id;
  std::string name;
  // An object once the request is parsed (a protocol may give it as JSON text until then).
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

struct ChatMessage {
  std::string role;     // system, user, assistant or tool
  std::string content;  // text parts joined
  // Assistant: the calls the turn made (an empty list is kept as given).
  std::optional<std::vector<ChatToolCall>> tool_calls;
  // Tool: the call answered, and the called function's name when the client gave it.
  std::optional<std::string> tool_call_id;
  std::optional<std::string> name;
};

// The conversation in the form Hugging Face chat templates read: {role, content}, an assistant's
// tool_calls as [{id, type: "function", function {name, arguments}}] with arguments an object, a
// tool turn's tool_call_id and name.
nlohmann::ordered_json TemplateMessages(const std::vector<ChatMessage>& messages);

}  // namespace infer::server
