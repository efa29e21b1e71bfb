#include "infer/server/responses.h"

#include <algorithm>
#include <iterator>
#include <random>
#include <unordered_map>

#include <fmt/format.h>

#include "infer/server/request_fields.h"
#include "infer/server/sse.h"

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
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) Reject(at + " must be a string or a list of content parts", at);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ordered_json& part = content[i];
    const std::string part_at = fmt::format("{}[{}]", at, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      Reject(part_at + " must be a content part with a 'type'", at);
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "input_text" && type != "output_text" && type != "text") {
      Unsupported(fmt::format("{}: content of type '{}' (text only)", part_at, type), at);
    }
    if (i > 0) text += '\n';
    text += StringField(part, "text", part_at);
  }
  return text;
}

// The chat messages of a conversation of Responses items (`at` names the list in errors).
// function_call items join the assistant turn before them (or open one); function_call_output
// items become role "tool" messages named after their call.
void ChatMessagesOf(const ordered_json& items, const std::string& at, ordered_json& out) {
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
      out.push_back({{"role", role}, {"content", ContentText(*content, item_at + ".content")}});
      open_assistant = role == "assistant";
    } else if (kind == "function_call") {
      const std::string call_id = StringField(item, "call_id", item_at);
      const std::string name = StringField(item, "name", item_at);
      call_names[call_id] = name;
      if (!open_assistant) {
        out.push_back({{"role", "assistant"}, {"content", ""}});
        open_assistant = true;
      }
      ordered_json& turn = out.back();
      if (!turn.contains("tool_calls")) turn["tool_calls"] = ordered_json::array();
      turn["tool_calls"].push_back(
          {{"id", call_id},
           {"type", "function"},
           {"function", {{"name", name}, {"arguments", StringField(item, "arguments", item_at)}}}});
    } else if (kind == "function_call_output") {
      const std::string call_id = StringField(item, "call_id", item_at);
      const ordered_json* output = Find(item, "output");
      if (output == nullptr) Reject(item_at + ".output is required", at);
      ordered_json turn = {{"role", "tool"},
                           {"tool_call_id", call_id},
                           {"content", ContentText(*output, item_at + ".output")}};
      if (const auto name = call_names.find(call_id); name != call_names.end()) {
        turn["name"] = name->second;
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

// Responses function tools ({type: function, name, description, parameters, strict}) as chat
// tools; any other type (the built-in tools) is refused.
ordered_json ChatTools(const ordered_json& tools) {
  if (!tools.is_array()) Reject("'tools' must be a list of tools", "tools");
  ordered_json out = ordered_json::array();
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
    ordered_json function = {{"name", StringField(tool, "name", at)}};
    if (const ordered_json* description = Find(tool, "description")) {
      if (!description->is_string()) Reject(at + ".description must be a string", "tools");
      function["description"] = *description;
    }
    if (const ordered_json* parameters = Find(tool, "parameters")) {
      if (!parameters->is_object())
        Reject(at + ".parameters must be a JSON schema object", "tools");
      function["parameters"] = *parameters;
    }
    if (const ordered_json* strict = Find(tool, "strict")) {
      if (!strict->is_boolean()) Reject(at + ".strict must be a boolean", "tools");
      function["strict"] = *strict;
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// tool_choice: "auto" | "none" | "required" | {type: function, name}.
ordered_json ChatToolChoice(const ordered_json& choice) {
  if (choice.is_string() && (choice == "auto" || choice == "none" || choice == "required")) {
    return choice;
  }
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name") &&
      choice["name"].is_string()) {
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
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

// text: {format: {type: text | json_object | json_schema (name, schema, strict)}, verbosity}
// into the chat body's response_format.
void ChatTextFormat(const ordered_json& text, ordered_json& chat) {
  if (!text.is_object()) Reject("'text' must be an object", "text");
  if (const ordered_json* verbosity = Find(text, "verbosity");
      verbosity && *verbosity != "medium") {
    Unsupported("'text.verbosity' other than \"medium\"", "text");
  }
  const ordered_json* format = Find(text, "format");
  if (format == nullptr) return;
  if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
    Reject("'text.format' must be an object with a 'type'", "text");
  }
  const std::string type = (*format)["type"].get<std::string>();
  if (type == "text") return;
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
    return;
  }
  if (type != "json_schema") {
    Reject(
        fmt::format("'text.format.type' must be text, json_object or json_schema, got '{}'", type),
        "text");
  }
  const ordered_json* schema = Find(*format, "schema");
  if (schema == nullptr || !schema->is_object()) {
    Reject("'text.format.schema' must be a JSON schema object", "text");
  }
  ordered_json json_schema = {{"name", format->value("name", "response")}, {"schema", *schema}};
  if (const ordered_json* strict = Find(*format, "strict")) json_schema["strict"] = *strict;
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(json_schema)}};
}

// reasoning {effort, summary}: Qwen3's enable_thinking ("none" turns it off; unset: the
// template's default).
void ChatReasoning(const ordered_json& reasoning, ordered_json& chat) {
  if (!reasoning.is_object()) Reject("'reasoning' must be an object", "reasoning");
  const ordered_json* effort = Find(reasoning, "effort");
  if (effort == nullptr) return;
  if (!effort->is_string() || !IsReasoningEffort(effort->get<std::string>())) {
    Reject(ReasoningEffortError("reasoning.effort"), "reasoning");
  }
  chat["chat_template_kwargs"] = {{"enable_thinking", *effort != "none"}};
}

std::string HexId(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

}  // namespace

std::string NewResponseId() { return HexId("resp_"); }

// ResponseStore -----------------------------------------------------------------------------

bool ResponseStore::Put(StoredResponse entry) {
  const std::string id = entry.response.value("id", "");
  const size_t bytes =
      entry.response.dump(-1, ' ', false, ordered_json::error_handler_t::replace).size() +
      entry.conversation.dump(-1, ' ', false, ordered_json::error_handler_t::replace).size();
  const std::lock_guard lock(mutex_);
  EraseLocked(id);
  if (max_entries_ == 0 || bytes > max_bytes_) return false;
  while (!order_.empty() && (entries_.size() + 1 > max_entries_ || bytes_ + bytes > max_bytes_)) {
    EraseLocked(order_.front());
  }
  order_.push_back(id);
  entries_[id] = {std::make_shared<const StoredResponse>(std::move(entry)), bytes,
                  std::prev(order_.end())};
  bytes_ += bytes;
  return true;
}

std::shared_ptr<const StoredResponse> ResponseStore::Get(const std::string& id) const {
  const std::lock_guard lock(mutex_);
  const auto found = entries_.find(id);
  return found == entries_.end() ? nullptr : found->second.value;
}

bool ResponseStore::Erase(const std::string& id) {
  const std::lock_guard lock(mutex_);
  const bool present = entries_.contains(id);
  EraseLocked(id);
  return present;
}

void ResponseStore::EraseLocked(const std::string& id) {
  const auto found = entries_.find(id);
  if (found == entries_.end()) return;
  bytes_ -= found->second.bytes;
  order_.erase(found->second.order);
  entries_.erase(found);
}

size_t ResponseStore::size() const {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  const std::lock_guard lock(mutex_);
  return bytes_;
}

// The request ----------------------------------------------------------------------------------

namespace {

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

// model, instructions, previous_response_id and input: the conversation and its chat messages.
void ParseConversation(Fields& fields, const json& body, const ResponseStore& store,
                       ResponsesRequest& request) {
  ordered_json& chat = request.chat;
  ordered_json& echo = request.echo;
  if (fields.Get("model")) chat["model"] = body["model"];
  echo["instructions"] = nullptr;
  chat["messages"] = ordered_json::array();
  if (const json* instructions = fields.Get("instructions")) {
    if (!instructions->is_string()) Reject("'instructions' must be a string", "instructions");
    chat["messages"].push_back({{"role", "system"}, {"content", body["instructions"]}});
    echo["instructions"] = body["instructions"];
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
  Named("input", [&] { ChatMessagesOf(request.conversation, "input", chat["messages"]); });
}

// max_output_tokens, temperature, top_p, stream, store.
void ParseSampling(Fields& fields, const json& body, ResponsesRequest& request) {
  ordered_json& chat = request.chat;
  if (const json* max = fields.Get("max_output_tokens")) {
    const auto tokens = JsonInteger(*max);
    if (!tokens || *tokens < 1) {
      Reject("'max_output_tokens' must be an integer of at least 1", "max_output_tokens");
    }
    chat["max_tokens"] = *tokens;
  }
  request.echo["max_output_tokens"] = chat.contains("max_tokens") ? chat["max_tokens"] : nullptr;
  for (const char* name : {"temperature", "top_p"}) {
    if (fields.Get(name)) chat[name] = body[name];
  }
  if (const json* stream = fields.Get("stream")) {
    request.stream = fields.Boolean(*stream, "stream");
  }
  chat["stream"] = true;
  if (const json* store_field = fields.Get("store")) {
    request.store = fields.Boolean(*store_field, "store");
  }
}

// tools, tool_choice, parallel_tool_calls, text and reasoning.
void ParseToolsAndFormat(Fields& fields, const json& body, ResponsesRequest& request) {
  ordered_json& chat = request.chat;
  ordered_json& echo = request.echo;
  echo["tools"] = ordered_json::array();
  if (fields.Get("tools")) {
    Named("tools", [&] { chat["tools"] = ChatTools(body["tools"]); });
    echo["tools"] = body["tools"];
  }
  echo["tool_choice"] = "auto";
  if (fields.Get("tool_choice")) {
    chat["tool_choice"] = ChatToolChoice(body["tool_choice"]);
    echo["tool_choice"] = body["tool_choice"];
  }
  echo["parallel_tool_calls"] = true;
  if (const json* parallel = fields.Get("parallel_tool_calls")) {
    echo["parallel_tool_calls"] = fields.Boolean(*parallel, "parallel_tool_calls");
    chat["parallel_tool_calls"] = echo["parallel_tool_calls"];
  }
  echo["text"] = {{"format", {{"type", "text"}}}};
  if (fields.Get("text")) {
    ChatTextFormat(body["text"], chat);
    if (const ordered_json* format = Find(body["text"], "format")) {
      echo["text"] = {{"format", *format}};
    }
  }
  echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  if (fields.Get("reasoning")) {
    ChatReasoning(body["reasoning"], chat);
    echo["reasoning"] = {{"effort", body["reasoning"].value("effort", ordered_json())},
                         {"summary", body["reasoning"].value("summary", ordered_json())}};
  }
}

}  // namespace

ResponsesRequest ResponsesToChatBody(std::string_view body, const ResponseStore& store,
                                     std::vector<std::string>* ignored) {
  const json root = ParseJsonObject(body);
  Fields fields(root, /*name_param=*/true);
  ResponsesRequest request;
  RefuseUnsupported(fields);
  ParseConversation(fields, root, store, request);
  ParseSampling(fields, root, request);
  ParseToolsAndFormat(fields, root, request);
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
    echo["metadata"] = root["metadata"];
  }
  // Accepted and without effect on the output.
  for (const char* name : {"service_tier", "safety_identifier", "prompt_cache_key",
                           "prompt_cache_retention", "stream_options"}) {
    fields.Get(name);
  }
  if (ignored != nullptr) *ignored = fields.Unknown();
  return request;
}

// ResponsesReply --------------------------------------------------------------------------------

ResponsesReply::ResponsesReply(std::shared_ptr<ChatReply> reply, std::string id, std::string model,
                               int64_t created_at, int64_t input_tokens, ResponsesRequest request,
                               ResponseStore* store)
    : reply_(std::move(reply)),
      id_(std::move(id)),
      model_(std::move(model)),
      created_at_(created_at),
      input_tokens_(input_tokens),
      request_(std::move(request)),
      store_(store) {}

std::string ResponsesReply::Event(const std::string& type, const ordered_json& data) {
  ordered_json event = {{"type", type}};
  event.update(data);
  event["sequence_number"] = sequence_number_++;
  return FormatSseEvent(type, event.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
}

std::string ResponsesReply::NewItemId(std::string_view prefix) {
  return fmt::format("{}_{}_{}", prefix, id_.substr(5), next_item_++);
}

ordered_json ResponsesReply::Response(const std::string& status) const {
  ordered_json response = {{"id", id_},
                           {"object", "response"},
                           {"created_at", created_at_},
                           {"status", status},
                           {"background", false},
                           {"error", nullptr},
                           {"incomplete_details", nullptr}};
  if (status == "incomplete") {
    response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  } else if (status == "failed") {
    response["error"] = {{"code", "server_error"}, {"message", error_.value_or("")}};
  }
  response["instructions"] = request_.echo["instructions"];
  response["max_output_tokens"] = request_.echo["max_output_tokens"];
  response["model"] = model_;
  response["output"] = status == "in_progress" ? ordered_json::array() : output_;
  for (const char* key : {"parallel_tool_calls", "previous_response_id", "reasoning", "store",
                          "temperature", "text", "tool_choice", "tools", "top_p", "truncation"}) {
    response[key] = request_.echo.value(key, ordered_json());
  }
  if (status != "in_progress") {
    const ChatUsage usage = reply_->Usage();
    response["usage"] = {{"input_tokens", input_tokens_},
                         {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
                         {"output_tokens", output_tokens_},
                         {"output_tokens_details", {{"reasoning_tokens", usage.reasoning_tokens}}},
                         {"total_tokens", input_tokens_ + output_tokens_}};
  } else {
    response["usage"] = nullptr;
  }
  response["user"] = request_.echo["user"];
  response["metadata"] = request_.echo["metadata"];
  return response;
}

std::string ResponsesReply::Start() {
  std::string events = Event("response.created", {{"response", Response("in_progress")}});
  return events + Event("response.in_progress", {{"response", Response("in_progress")}});
}

std::string ResponsesReply::CloseItem(const std::string& status) {
  if (open_ == Open::kNone) return {};
  const Open kind = open_;
  open_ = Open::kNone;
  ordered_json& item = output_.back();
  item["status"] = status;
  const size_t index = output_.size() - 1;
  const ordered_json& part = item["content"].back();
  const std::string text = part["text"].get<std::string>();
  std::string events;
  const ordered_json where = {
      {"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}};
  if (kind == Open::kReasoning) {
    ordered_json done = where;
    done["text"] = text;
    events += Event("response.reasoning_text.done", done);
  } else {
    ordered_json done = where;
    done["text"] = text;
    done["logprobs"] = ordered_json::array();
    events += Event("response.output_text.done", done);
  }
  ordered_json part_done = where;
  part_done["part"] = part;
  events += Event("response.content_part.done", part_done);
  return events + Event("response.output_item.done", {{"output_index", index}, {"item", item}});
}

std::string ResponsesReply::AppendText(Open kind, const std::string& text) {
  if (text.empty()) return {};
  std::string events;
  if (open_ != kind) {
    events += CloseItem("completed");
    ordered_json item;
    ordered_json part;
    if (kind == Open::kReasoning) {
      item = {{"id", NewItemId("rs")},
              {"type", "reasoning"},
              {"summary", ordered_json::array()},
              {"content", ordered_json::array()},
              {"status", "in_progress"}};
      part = {{"type", "reasoning_text"}, {"text", ""}};
    } else {
      item = {{"id", NewItemId("msg")},
              {"type", "message"},
              {"status", "in_progress"},
              {"role", "assistant"},
              {"content", ordered_json::array()}};
      part = {{"type", "output_text"},
              {"annotations", ordered_json::array()},
              {"logprobs", ordered_json::array()},
              {"text", ""}};
    }
    const size_t index = output_.size();
    events += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
    events += Event(
        "response.content_part.added",
        {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    item["content"].push_back(std::move(part));
    output_.push_back(std::move(item));
    open_ = kind;
  }
  ordered_json& item = output_.back();
  ordered_json& field = item["content"].back()["text"];
  field = field.get<std::string>() + text;
  ordered_json delta = {{"item_id", item["id"]},
                        {"output_index", output_.size() - 1},
                        {"content_index", 0},
                        {"delta", text}};
  if (kind == Open::kReasoning) return events + Event("response.reasoning_text.delta", delta);
  delta["logprobs"] = ordered_json::array();
  return events + Event("response.output_text.delta", delta);
}

std::string ResponsesReply::Translate(const ChatDelta& delta) {
  if (delta.error) {
    error_ = *delta.error;
    return Event("error", {{"code", "server_error"}, {"message", *error_}, {"param", nullptr}});
  }
  std::string events = AppendText(Open::kReasoning, delta.reasoning);  // before the text
  events += AppendText(Open::kMessage, delta.content);
  if (delta.finished) incomplete_ = delta.finish == ChatFinish::kLength;
  if (!delta.tool_calls.empty()) {
    events += CloseItem("completed");
    for (const ToolCall& call : delta.tool_calls) {
      const size_t index = output_.size();
      ordered_json item = {{"id", NewItemId("fc")},   {"type", "function_call"},
                           {"status", "in_progress"}, {"arguments", ""},
                           {"call_id", call.id},      {"name", call.name}};
      events += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
      events +=
          Event("response.function_call_arguments.delta",
                {{"item_id", item["id"]}, {"output_index", index}, {"delta", call.arguments}});
      events += Event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                                {"output_index", index},
                                                                {"name", item["name"]},
                                                                {"arguments", call.arguments}});
      item["arguments"] = call.arguments;
      item["status"] = "completed";
      events += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
      output_.push_back(std::move(item));
    }
  }
  if (delta.finished) events += CloseItem(incomplete_ ? "incomplete" : "completed");
  return events;
}

std::string ResponsesReply::Add(const StepOutput& output) {
  if (!output.error) output_tokens_ = output.completion_tokens;
  std::string events;
  for (const ChatDelta& delta : reply_->Add(output)) events += Translate(delta);
  if (reply_->finished() && !error_ && request_.store && store_ != nullptr) {
    StoredResponse stored{Final(), request_.conversation};
    for (const ordered_json& item : output_) stored.conversation.push_back(item);
    store_->Put(std::move(stored));
  }
  return events;
}

std::string ResponsesReply::End() {
  if (error_) return Event("response.failed", {{"response", Response("failed")}});
  return incomplete_ ? Event("response.incomplete", {{"response", Response("incomplete")}})
                     : Event("response.completed", {{"response", Response("completed")}});
}

ordered_json ResponsesReply::Final() const {
  if (error_) return Response("failed");
  return Response(incomplete_ ? "incomplete" : "completed");
}

}  // namespace infer::server
