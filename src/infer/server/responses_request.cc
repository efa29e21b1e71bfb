#include "infer/server/responses.h"

#include <unordered_map>

#include <fmt/format.h>

#include "infer/server/request_fields.h"
#include "infer/server/tool_calls.h"

namespace infer::server {
namespace {

using json = nlohmann::ordered_json;
using ordered_json = nlohmann::ordered_json;

[[noreturn]] void Reject(const std::string& message, const std::string& param = {}) {
  throw RequestError(kBadRequest, message, param);
}

[[noreturn]] void Unsupported(const std::string& what, const std::string& param) {
  Reject(what + " is not supported by this server", param);
}

const ordered_json* Find(const ordered_json& object, const char* key) {
  const auto found = object.find(key);
  return found == object.end() || found->is_null() ? nullptr : &*found;
}

std::string StringField(const ordered_json& object, const char* key, const std::string& at) {
  const ordered_json* value = Find(object, key);
  if (value == nullptr || !value->is_string())
    Reject(fmt::format("{}.{} must be a string", at, key), at);
  return value->get<std::string>();
}

// A message's or a tool output's content as text: a string, or input_text / output_text parts
// joined with newlines; images, files and audio are refused (this server reads text only).
std::string ContentText(const ordered_json& content, const std::string& at) {
  static const TextPartsDialect kParts{
      "{0} must be a string or a list of content parts",
      "{0} must be a content part with a 'type'",
      "{0}: content of type '{1}' (text only) is not supported by this server",
      {"input_text", "output_text", "text"}};
  return JoinTextParts(content, at, kParts, at);
}

// The chat messages of a conversation of Responses items (`at` names the list in errors).
// function_call items join the assistant turn before them (or open one), their arguments still
// JSON text; function_call_output items become tool turns named after their call.
void ChatMessagesOf(const ordered_json& items, const std::string& at,
                    std::vector<ChatMessage>& out) {
  std::unordered_map<std::string, std::string> call_names;
  bool open_assistant = false;  // out.back() is an assistant turn calls may join
  for (size_t i = 0; i < items.size(); ++i) {
    const ordered_json& item = items[i];
    const std::string item_at = fmt::format("{}[{}]", at, i);
    if (!item.is_object()) Reject(item_at + " must be an object", at);
    const ordered_json* type = Find(item, "type");
    if (type != nullptr && !type->is_string()) Reject(item_at + ".type must be a string", at);
    const std::string kind = type == nullptr ? "message" : type->get<std::string>();
    if (kind == "message") {
      const std::string role = StringField(item, "role", item_at);
      if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
        Reject(fmt::format("{}.role must be user, system, developer or assistant, got '{}'",
                           item_at, role),
               at);
      }
      const ordered_json* content = Find(item, "content");
      if (content == nullptr) Reject(item_at + ".content is required", at);
      // developer: OpenAI's newer name for the system role.
      out.push_back({role == "developer" ? "system" : role,
                     ContentText(*content, item_at + ".content"),
                     {},
                     {},
                     {}});
      open_assistant = role == "assistant";
    } else if (kind == "function_call") {
      const std::string call_id = StringField(item, "call_id", item_at);
      const std::string name = StringField(item, "name", item_at);
      call_names[call_id] = name;
      if (!open_assistant) {
        out.push_back({"assistant", "", {}, {}, {}});
        open_assistant = true;
      }
      ChatMessage& turn = out.back();
      if (!turn.tool_calls) turn.tool_calls.emplace();
      turn.tool_calls->push_back({call_id, name, StringField(item, "arguments", item_at)});
    } else if (kind == "function_call_output") {
      const std::string call_id = StringField(item, "call_id", item_at);
      const ordered_json* output = Find(item, "output");
      if (output == nullptr) Reject(item_at + ".output is required", at);
      ChatMessage turn{"tool", ContentText(*output, item_at + ".output"), {}, call_id, {}};
      if (const auto name = call_names.find(call_id); name != call_names.end()) {
        turn.name = name->second;
      }
      out.push_back(std::move(turn));
      open_assistant = false;
    } else if (kind == "reasoning") {
      // Past reasoning is dropped: chat templates do not render it.
    } else {
      Unsupported(fmt::format("{}: input items of type '{}'", item_at, kind), at);
    }
  }
}

// The input as Responses items: a string is one user message.
ordered_json InputItems(const ordered_json& input) {
  if (input.is_string()) {
    return ordered_json::array(
        {{{"type", "message"},
          {"role", "user"},
          {"content", ordered_json::array({{{"type", "input_text"}, {"text", input}}})}}});
  }
  if (!input.is_array() || input.empty()) {
    Reject("'input' must be a string or a non-empty list of items", "input");
  }
  return input;
}

// Responses function tools ({type: function, name, description, parameters, strict}); any
// other type (the built-in tools) is refused.
std::vector<Tool> FunctionTools(const ordered_json& tools) {
  if (!tools.is_array()) Reject("'tools' must be a list of tools", "tools");
  std::vector<Tool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& tool = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!tool.is_object() || !tool.contains("type") || !tool["type"].is_string()) {
      Reject(at + " must be a tool with a 'type'", "tools");
    }
    if (tool["type"] != "function") {
      Unsupported(fmt::format("{}: tools of type '{}' (function tools only)", at,
                              tool["type"].get<std::string>()),
                  "tools");
    }
    const std::string name = StringField(tool, "name", at);
    const ordered_json* description = Find(tool, "description");
    if (description && !description->is_string()) {
      Reject(at + ".description must be a string", "tools");
    }
    const ordered_json* parameters = Find(tool, "parameters");
    if (parameters && !parameters->is_object()) {
      Reject(at + ".parameters must be a JSON schema object", "tools");
    }
    const ordered_json* strict = Find(tool, "strict");
    if (strict && !strict->is_boolean()) Reject(at + ".strict must be a boolean", "tools");
    out.push_back(FunctionTool(name, description, parameters, strict));
  }
  return out;
}

// tool_choice: "auto" | "none" | "required" | {type: function, name}.
ToolChoice ParseToolChoice(const ordered_json& choice) {
  if (choice == "auto") return {ToolChoice::Mode::kAuto, ""};
  if (choice == "none") return {ToolChoice::Mode::kNone, ""};
  if (choice == "required") return {ToolChoice::Mode::kRequired, ""};
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name") &&
      choice["name"].is_string()) {
    return {ToolChoice::Mode::kNamed, choice["name"].get<std::string>()};
  }
  if (choice.is_object() && choice.contains("type") && choice["type"].is_string()) {
    Unsupported(fmt::format("'tool_choice' of type '{}'", choice["type"].get<std::string>()),
                "tool_choice");
  }
  Reject(
      "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
      "\"name\": ...}",
      "tool_choice");
}

// text: {format: {type: text | json_object | json_schema (name, schema, strict)}, verbosity}:
// the structured output it asks for.
std::optional<StructuredOutput> TextFormat(const ordered_json& text) {
  if (!text.is_object()) Reject("'text' must be an object", "text");
  if (const ordered_json* verbosity = Find(text, "verbosity");
      verbosity && *verbosity != "medium") {
    Unsupported("'text.verbosity' other than \"medium\"", "text");
  }
  const ordered_json* format = Find(text, "format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
    Reject("'text.format' must be an object with a 'type'", "text");
  }
  const std::string type = (*format)["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return StructuredOutput{StructuredOutput::Kind::kJsonObject, "", {}};
  if (type != "json_schema") {
    Reject(
        fmt::format("'text.format.type' must be text, json_object or json_schema, got '{}'", type),
        "text");
  }
  const ordered_json* schema = Find(*format, "schema");
  if (schema == nullptr || !schema->is_object()) {
    Reject("'text.format.schema' must be a JSON schema object", "text");
  }
  return StructuredOutput{StructuredOutput::Kind::kJsonSchema, schema->dump(), {}};
}

// reasoning {effort, summary}: Qwen3's enable_thinking ("none" turns it off; unset: the
// template's default).
std::optional<bool> EnableThinking(const ordered_json& reasoning) {
  if (!reasoning.is_object()) Reject("'reasoning' must be an object", "reasoning");
  const ordered_json* effort = Find(reasoning, "effort");
  if (effort == nullptr) return std::nullopt;
  if (!effort->is_string() || !IsReasoningEffort(effort->get<std::string>())) {
    Reject(ReasoningEffortError("reasoning.effort"), "reasoning");
  }
  return *effort != "none";
}

// What would change the output and is not here.
void RefuseUnsupported(Fields& fields) {
  if (const json* background = fields.Get("background"); background && *background != false) {
    Unsupported("'background' mode", "background");
  }
  for (const char* name : {"conversation", "prompt", "context_management", "max_tool_calls"}) {
    if (fields.Get(name)) Unsupported(fmt::format("'{}'", name), name);
  }
  if (const json* include = fields.Get("include"); include && !include->empty()) {
    Unsupported(fmt::format("'include' of {}", include->dump()), "include");
  }
  if (const json* truncation = fields.Get("truncation"); truncation && *truncation != "disabled") {
    Unsupported(fmt::format("'truncation' {}", truncation->dump()), "truncation");
  }
  if (const json* top = fields.Get("top_logprobs"); top && *top != 0) {
    Unsupported("'top_logprobs'", "top_logprobs");
  }
}

// Errors inside a translated field name the field they came in.
template <typename Translate>
void Named(const char* param, const Translate& translate) {
  try {
    translate();
  } catch (const RequestError& e) {
    throw RequestError(e.status(), e.what(), param);
  }
}

// instructions, previous_response_id and input: the conversation and its chat messages.
void ParseConversation(Fields& fields, const json& body, const ResponseStore& store,
                       ResponsesRequest& request) {
  ordered_json& echo = request.echo;
  std::vector<ChatMessage>& messages = request.chat.messages;
  echo["instructions"] = nullptr;
  if (const json* instructions = fields.Get("instructions")) {
    if (!instructions->is_string()) Reject("'instructions' must be a string", "instructions");
    messages.push_back({"system", instructions->get<std::string>(), {}, {}, {}});
    echo["instructions"] = *instructions;
  }
  echo["previous_response_id"] = nullptr;
  if (const json* previous = fields.Get("previous_response_id")) {
    if (!previous->is_string()) {
      Reject("'previous_response_id' must be a string", "previous_response_id");
    }
    const auto stored = store.Get(previous->get<std::string>());
    if (stored == nullptr) {
      throw RequestError(
          kNotFound,
          fmt::format("Previous response with id '{}' not found.", previous->get<std::string>()),
          "previous_response_id");
    }
    request.conversation = stored->conversation;
    echo["previous_response_id"] = *previous;
  }
  if (!fields.Get("input")) Reject("missing required field 'input'", "input");
  for (ordered_json& item : InputItems(body["input"])) {
    request.conversation.push_back(std::move(item));
  }
  Named("input", [&] { ChatMessagesOf(request.conversation, "input", messages); });
}

// max_output_tokens, stream, store.
void ParseLimits(Fields& fields, ResponsesRequest& request) {
  if (const json* max = fields.Get("max_output_tokens")) {
    const auto tokens = JsonInteger(*max);
    if (!tokens || *tokens < 1) {
      Reject("'max_output_tokens' must be an integer of at least 1", "max_output_tokens");
    }
    request.chat.max_tokens = *tokens;
  }
  request.echo["max_output_tokens"] =
      request.chat.max_tokens ? ordered_json(*request.chat.max_tokens) : ordered_json();
  if (const json* stream = fields.Get("stream")) {
    request.stream = fields.Boolean(*stream, "stream");
  }
  if (const json* store_field = fields.Get("store")) {
    request.store = fields.Boolean(*store_field, "store");
  }
}

// tools, tool_choice, parallel_tool_calls, text and reasoning.
void ParseToolsAndFormat(Fields& fields, const json& body, ResponsesRequest& request,
                         ToolsRequest& tools, std::optional<bool>& thinking) {
  ordered_json& echo = request.echo;
  echo["tools"] = ordered_json::array();
  if (fields.Get("tools")) {
    Named("tools", [&] { tools.tools = FunctionTools(body["tools"]); });
    echo["tools"] = body["tools"];
  }
  echo["tool_choice"] = "auto";
  if (fields.Get("tool_choice")) {
    tools.choice = ParseToolChoice(body["tool_choice"]);
    echo["tool_choice"] = body["tool_choice"];
  }
  echo["parallel_tool_calls"] = true;
  if (const json* parallel = fields.Get("parallel_tool_calls")) {
    tools.parallel = fields.Boolean(*parallel, "parallel_tool_calls");
    echo["parallel_tool_calls"] = tools.parallel;
  }
  echo["text"] = {{"format", {{"type", "text"}}}};
  if (fields.Get("text")) {
    request.chat.params.structured_output = TextFormat(body["text"]);
    if (const ordered_json* format = Find(body["text"], "format")) {
      echo["text"] = {{"format", *format}};
    }
  }
  echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  if (fields.Get("reasoning")) {
    thinking = EnableThinking(body["reasoning"]);
    echo["reasoning"] = {{"effort", body["reasoning"].value("effort", ordered_json())},
                         {"summary", body["reasoning"].value("summary", ordered_json())}};
  }
}

// user, metadata and the fields accepted without effect.
void ParseEchoed(Fields& fields, const json& body, ResponsesRequest& request) {
  ordered_json& echo = request.echo;
  echo["store"] = request.store;
  echo["truncation"] = "disabled";
  echo["user"] = nullptr;
  if (const json* user = fields.Get("user")) {
    if (!user->is_string()) Reject("'user' must be a string", "user");
    echo["user"] = *user;
  }
  echo["metadata"] = ordered_json::object();
  if (const json* metadata = fields.Get("metadata")) {
    if (!metadata->is_object()) Reject("'metadata' must be an object of strings", "metadata");
    echo["metadata"] = body["metadata"];
  }
  for (const char* name : {"service_tier", "safety_identifier", "prompt_cache_key",
                           "prompt_cache_retention", "stream_options"}) {
    fields.Get(name);
  }
}

// The checks of the chat the request asks for, as a chat completion's: each call's arguments an
// object, a conversation left, the model, the sampling numbers, the tools; the reply is streamed
// to the encoder (how it is sent is the request's `stream`).
void CheckChat(Fields& fields, const ModelNames& models, ToolsRequest tools,
               std::optional<bool> thinking, ChatRequest& chat) {
  for (size_t i = 0; i < chat.messages.size(); ++i) {
    if (!chat.messages[i].tool_calls) continue;
    std::vector<ChatToolCall>& calls = *chat.messages[i].tool_calls;
    for (size_t j = 0; j < calls.size(); ++j) {
      calls[j].arguments = ArgumentsObject(
          calls[j].arguments, fmt::format("messages[{}].tool_calls[{}].function.arguments", i, j));
    }
  }
  if (chat.messages.empty()) Reject("'messages' must be a non-empty list", "messages");
  chat.model = ParseModel(fields, models);
  ReadNumber(fields, "temperature", chat.params.temperature);
  ReadNumber(fields, "top_p", chat.params.top_p);
  chat.stream = true;
  chat.tools = CheckTools(fields, std::move(tools));
  chat.params.logprobs.reset();
  if (thinking) SetEnableThinking(chat, *thinking);
  ValidateSampling(chat);
}

}  // namespace

ResponsesRequest ParseResponsesRequest(std::string_view body, const ResponseStore& store,
                                       const ModelNames& models, const SamplingParams& defaults) {
  const json root = ParseJsonObject(body);
  Fields fields(root, /*name_param=*/true);
  ResponsesRequest request;
  request.chat.params = defaults;
  RefuseUnsupported(fields);
  ParseConversation(fields, root, store, request);
  ParseLimits(fields, request);
  ToolsRequest tools;
  std::optional<bool> thinking;
  ParseToolsAndFormat(fields, root, request, tools, thinking);
  ParseEchoed(fields, root, request);
  // model, temperature and top_p are read here, once the Responses fields are checked.
  CheckChat(fields, models, std::move(tools), thinking, request.chat);
  request.chat.ignored_fields = fields.Unknown();
  return request;
}

}  // namespace infer::server
