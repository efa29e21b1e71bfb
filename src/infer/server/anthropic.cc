#include "infer/server/anthropic.h"

#include <algorithm>

#include <fmt/format.h>

#include "infer/server/chat/chat_request.h"
#include "infer/server/request_fields.h"
#include "infer/server/sse.h"

namespace infer::server {
namespace {

using json = nlohmann::ordered_json;
using ordered_json = nlohmann::ordered_json;

[[noreturn]] void Reject(const std::string& message) { throw RequestError(kBadRequest, message); }

// A block list's text blocks joined with newlines; `what` names the list in errors. Anything but
// text is refused (images, documents: this server reads text only).
std::string TextOfBlocks(const ordered_json& blocks, const std::string& what) {
  static const TextPartsDialect kBlocks{
      "{0} must be a string or a list of content blocks",
      "{0} must be a content block with a 'type'",
      "{0}: content blocks of type '{1}' are not supported here (text only)",
      {"text"},
      /*separate_after_text_only=*/true};
  return JoinTextParts(blocks, what, kBlocks, {});
}

std::string TypeOf(const ordered_json& block, const std::string& at) {
  if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
    Reject(at + " must be a content block with a 'type'");
  }
  return block["type"].get<std::string>();
}

// A turn whose content is a string: one message of `role` (true). Else the content must be a
// list of blocks (false).
bool PlainTurn(const ordered_json& content, const std::string& param, const char* role,
               std::vector<ChatMessage>& out) {
  if (content.is_string()) {
    out.push_back({role, content.get<std::string>(), {}, {}, {}});
    return true;
  }
  if (!content.is_array()) Reject(param + " must be a string or a list of content blocks");
  return false;
}

// A user turn: its tool_result blocks become tool turns (first, as Anthropic orders them), its
// text one user message.
void UserTurn(const ordered_json& content, const std::string& param,
              std::vector<ChatMessage>& out) {
  if (PlainTurn(content, param, "user", out)) return;
  ordered_json text_blocks = ordered_json::array();
  bool results = false;
  for (size_t i = 0; i < content.size(); ++i) {
    const ordered_json& block = content[i];
    const std::string at = fmt::format("{}[{}]", param, i);
    if (TypeOf(block, at) != "tool_result") {
      text_blocks.push_back(block);
      continue;
    }
    if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string()) {
      Reject(at + ".tool_use_id must be a string");
    }
    const auto result = block.find("content");
    results = true;
    ChatMessage turn{"tool",
                     result == block.end() || result->is_null()
                         ? std::string()
                         : TextOfBlocks(*result, at + ".content"),
                     {},
                     block["tool_use_id"].get<std::string>(),
                     {}};
    out.push_back(std::move(turn));
  }
  if (!text_blocks.empty() || !results) {
    out.push_back({"user", TextOfBlocks(text_blocks, param), {}, {}, {}});
  }
}

// An assistant turn: its text, and its tool_use blocks as tool calls; thinking blocks are
// dropped (chat templates do not render past reasoning).
void AssistantTurn(const ordered_json& content, const std::string& param,
                   std::vector<ChatMessage>& out) {
  if (PlainTurn(content, param, "assistant", out)) return;
  ordered_json text_blocks = ordered_json::array();
  std::vector<ChatToolCall> calls;
  for (size_t i = 0; i < content.size(); ++i) {
    const ordered_json& block = content[i];
    const std::string at = fmt::format("{}[{}]", param, i);
    const std::string type = TypeOf(block, at);
    if (type == "thinking" || type == "redacted_thinking") continue;
    if (type != "tool_use") {
      text_blocks.push_back(block);
      continue;
    }
    if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") ||
        !block["name"].is_string()) {
      Reject(at + " must be {\"type\": \"tool_use\", \"id\", \"name\", \"input\"}");
    }
    const auto input = block.find("input");
    if (input != block.end() && !input->is_object()) Reject(at + ".input must be an object");
    calls.push_back(
        {block["id"].get<std::string>(), block["name"].get<std::string>(),
         input == block.end() ? ordered_json::object() : ArgumentsObject(*input, at + ".input")});
  }
  ChatMessage turn{"assistant", TextOfBlocks(text_blocks, param), {}, {}, {}};
  if (!calls.empty()) turn.tool_calls = std::move(calls);
  out.push_back(std::move(turn));
}

std::vector<ChatMessage> ChatMessages(const ordered_json* system, const ordered_json& messages) {
  if (!messages.is_array() || messages.empty()) Reject("'messages' must be a non-empty list");
  std::vector<ChatMessage> out;
  if (system != nullptr) out.push_back({"system", TextOfBlocks(*system, "system"), {}, {}, {}});
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& message = messages[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!message.is_object()) Reject(param + " must be an object");
    const auto role = message.find("role");
    if (role == message.end() || !role->is_string()) Reject(param + ".role must be a string");
    const auto content = message.find("content");
    if (content == message.end()) Reject(param + ".content is required");
    if (*role == "user") {
      UserTurn(*content, param + ".content", out);
    } else if (*role == "assistant") {
      if (i + 1 == messages.size()) {
        Reject(
            "a final assistant message (a prefill for the reply to continue) is not supported by "
            "this server");
      }
      AssistantTurn(*content, param + ".content", out);
    } else {
      Reject(param + ".role must be \"user\" or \"assistant\"");
    }
  }
  return out;
}

// Custom tools ({name, description, input_schema}) as function tools.
std::vector<Tool> ChatTools(const ordered_json& tools) {
  if (!tools.is_array()) Reject("'tools' must be a list of tools");
  std::vector<Tool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& tool = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!tool.is_object()) Reject(at + " must be an object");
    if (const auto type = tool.find("type");
        type != tool.end() && !type->is_null() && *type != "custom") {
      Reject(
          fmt::format("{}: tools of type {} are not supported (custom tools only: name, "
                      "description, input_schema)",
                      at, type->dump()));
    }
    if (!tool.contains("name") || !tool["name"].is_string()) Reject(at + ".name must be a string");
    if (!tool.contains("input_schema") || !tool["input_schema"].is_object()) {
      Reject(at + ".input_schema must be a JSON schema object");
    }
    const ordered_json* description = nullptr;
    if (tool.contains("description") && !tool["description"].is_null()) {
      if (!tool["description"].is_string()) Reject(at + ".description must be a string");
      description = &tool["description"];
    }
    out.push_back(
        FunctionTool(tool["name"].get<std::string>(), description, &tool["input_schema"], nullptr));
  }
  return out;
}

// tool_choice {type: auto | any | tool (name) | none, disable_parallel_tool_use} into `tools`.
void ChatToolChoice(const ordered_json& choice, ToolsRequest& tools) {
  const char* const wrong =
      "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"tool\", "
      "\"name\": ...} or {\"type\": \"none\"}";
  if (!choice.is_object() || !choice.contains("type") || !choice["type"].is_string()) {
    Reject(wrong);
  }
  const std::string type = choice["type"].get<std::string>();
  if (type == "auto") {
    tools.choice = {ToolChoice::Mode::kAuto, ""};
  } else if (type == "none") {
    tools.choice = {ToolChoice::Mode::kNone, ""};
  } else if (type == "any") {
    tools.choice = {ToolChoice::Mode::kRequired, ""};
  } else if (type == "tool" && choice.contains("name") && choice["name"].is_string()) {
    tools.choice = {ToolChoice::Mode::kNamed, choice["name"].get<std::string>()};
  } else {
    Reject(wrong);
  }
  if (const auto single = choice.find("disable_parallel_tool_use");
      single != choice.end() && !single->is_null()) {
    if (!single->is_boolean()) Reject("'tool_choice.disable_parallel_tool_use' must be a boolean");
    tools.parallel = !single->get<bool>();
  }
}

// thinking {type: enabled (budget_tokens) | disabled | adaptive}: Qwen3's enable_thinking (the
// budget is read beside it).
bool EnableThinking(const ordered_json& thinking) {
  if (thinking.is_object() && thinking.contains("type") && thinking["type"].is_string()) {
    const std::string type = thinking["type"].get<std::string>();
    if (type == "enabled" || type == "adaptive") return true;
    if (type == "disabled") return false;
  }
  Reject(
      "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": "
      "\"disabled\"}");
}

std::string ToolUseId(const std::string& call_id) {
  return "toolu_" + (call_id.starts_with("call_") ? call_id.substr(5) : call_id);
}

}  // namespace

ordered_json AnthropicErrorJson(int status, std::string_view message) {
  std::string_view type = "api_error";
  switch (status) {
    case 400:
    case 422:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
    case 529:
      type = "overloaded_error";
      break;
    default:
      break;
  }
  return ordered_json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

ChatRequest ParseAnthropicRequest(std::string_view body, bool count_tokens,
                                  const ModelNames& models, const SamplingParams& defaults) {
  const json root = ParseJsonObject(body);
  Fields fields(root, /*name_param=*/false);
  ChatRequest request;
  request.params = defaults;
  // The body's shape first: what Anthropic's API requires, what this server cannot serve.
  if (!fields.Get("model")) Reject("missing required field 'model'");
  if (!fields.Get("messages")) Reject("missing required field 'messages'");
  request.messages =
      ChatMessages(fields.Get("system") ? &root["system"] : nullptr, root["messages"]);
  // count_tokens counts the prompt only: max_tokens and stream play no part.
  if (!fields.Get("max_tokens") && !count_tokens) Reject("missing required field 'max_tokens'");
  if (const json* stop = fields.Get("stop_sequences")) {
    if (!stop->is_array() ||
        !std::all_of(stop->begin(), stop->end(), [](const json& s) { return s.is_string(); })) {
      Reject("'stop_sequences' must be a list of strings");
    }
  }
  ToolsRequest tools;
  if (fields.Get("tools")) tools.tools = ChatTools(root["tools"]);
  if (fields.Get("tool_choice")) ChatToolChoice(root["tool_choice"], tools);
  std::optional<bool> thinking;
  std::optional<int64_t> thinking_budget;
  if (const json* value = fields.Get("thinking")) {
    thinking = EnableThinking(*value);
    // budget_tokens bounds the thinking (the engine forces the block's end once it is spent).
    if (const auto budget = value->find("budget_tokens");
        *thinking && budget != value->end() && !budget->is_null()) {
      thinking_budget = JsonInteger(*budget);
      if (!thinking_budget || *thinking_budget < 0) {
        Reject("'thinking.budget_tokens' must be a non-negative integer");
      }
    }
  }
  if (fields.Get("mcp_servers")) Reject("'mcp_servers' is not supported by this server");
  if (fields.Get("container")) Reject("'container' is not supported by this server");
  // Then the fields' values, as the chat path reads them.
  request.model = ParseModel(fields, models);
  if (!count_tokens) ReadMaxTokens(fields, "max_tokens", request);
  ReadNumber(fields, "temperature", request.params.temperature);
  ReadNumber(fields, "top_p", request.params.top_p);
  if (!count_tokens) ReadBoolean(fields, "stream", request.stream);
  ReadTopK(fields, request.params);
  if (const json* stop = fields.Get("stop_sequences")) request.params.stop = fields.Stop(*stop);
  if (thinking_budget) request.params.thinking_token_budget = *thinking_budget;
  request.tools = CheckTools(fields, std::move(tools));
  request.params.logprobs.reset();
  if (thinking) SetEnableThinking(request, *thinking);
  ValidateSampling(request);
  // Accepted and without effect on the output.
  for (const char* name : {"metadata", "service_tier", "cache_control"}) fields.Get(name);
  request.ignored_fields = fields.Unknown();
  return request;
}

// AnthropicMessage --------------------------------------------------------------------------

AnthropicMessage::AnthropicMessage(std::shared_ptr<ChatReply> reply, std::string id,
                                   std::string model, int64_t input_tokens)
    : reply_(std::move(reply)),
      id_(std::move(id)),
      model_(std::move(model)),
      input_tokens_(input_tokens) {}

std::string AnthropicMessage::Event(std::string_view name, const ordered_json& data) {
  return FormatSseEvent(name, data.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
}

ordered_json AnthropicMessage::Usage() const {
  // Anthropic's contract: the prompt is input_tokens + cache_creation_input_tokens +
  // cache_read_input_tokens. The prefix cache's hits are the reads; nothing is "written" as
  // Anthropic bills it, so creation is 0 (as vLLM reports it).
  return {{"input_tokens", input_tokens_ - cached_tokens_},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached_tokens_},
          {"output_tokens", output_tokens_}};
}

std::string AnthropicMessage::Start() {
  // The prefix cache's share is not known before the request is scheduled: message_start
  // gives the whole prompt as input_tokens, and message_delta the split (clients take its
  // counts as the message's totals).
  ordered_json message = {{"id", id_},
                          {"type", "message"},
                          {"role", "assistant"},
                          {"model", model_},
                          {"content", ordered_json::array()},
                          {"stop_reason", nullptr},
                          {"stop_sequence", nullptr},
                          {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}};
  return Event("message_start", {{"type", "message_start"}, {"message", std::move(message)}}) +
         Event("ping", {{"type", "ping"}});
}

std::string AnthropicMessage::CloseBlock() {
  if (!block_open_) return {};
  block_open_ = false;
  return Event("content_block_stop",
               {{"type", "content_block_stop"}, {"index", blocks_.size() - 1}});
}

std::string AnthropicMessage::AppendText(const std::string& type, const std::string& text) {
  if (text.empty()) return {};
  std::string events;
  if (!block_open_ || blocks_.back()["type"] != type) {
    events += CloseBlock();
    ordered_json block =
        type == "text" ? ordered_json{{"type", "text"}, {"text", ""}}
                       : ordered_json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
    events += Event(
        "content_block_start",
        {{"type", "content_block_start"}, {"index", blocks_.size()}, {"content_block", block}});
    blocks_.push_back(std::move(block));
    block_open_ = true;
  }
  ordered_json& field = blocks_.back()[type];
  field = field.get<std::string>() + text;
  return events +
         Event("content_block_delta", {{"type", "content_block_delta"},
                                       {"index", blocks_.size() - 1},
                                       {"delta", {{"type", type + "_delta"}, {type, text}}}});
}

std::string AnthropicMessage::Translate(const ChatDelta& delta) {
  if (delta.error) {
    failed_ = true;
    return Event("error", AnthropicErrorJson(500, *delta.error));
  }
  std::string events = AppendText("thinking", delta.reasoning);  // before the text
  events += AppendText("text", delta.content);
  if (!delta.tool_calls.empty()) {
    events += CloseBlock();
    for (const ToolCall& call : delta.tool_calls) {
      const size_t index = blocks_.size();
      events += Event("content_block_start", {{"type", "content_block_start"},
                                              {"index", index},
                                              {"content_block",
                                               {{"type", "tool_use"},
                                                {"id", ToolUseId(call.id)},
                                                {"name", call.name},
                                                {"input", ordered_json::object()}}}});
      events +=
          Event("content_block_delta",
                {{"type", "content_block_delta"},
                 {"index", index},
                 {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}});
      events += Event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
      blocks_.push_back({{"type", "tool_use"},
                         {"id", ToolUseId(call.id)},
                         {"name", call.name},
                         {"input", ordered_json::parse(call.arguments)}});
    }
  }
  if (delta.finished) {
    events += CloseBlock();
    if (delta.finish == ChatFinish::kToolCalls) {
      stop_reason_ = "tool_use";
    } else if (delta.finish == ChatFinish::kLength) {
      stop_reason_ = "max_tokens";
    } else if (delta.stop_string) {
      stop_sequence_ = delta.stop_string;
      stop_reason_ = "stop_sequence";
    }
  }
  return events;
}

std::string AnthropicMessage::Add(const StepOutput& output) {
  if (!output.error) {
    output_tokens_ = output.completion_tokens;
    cached_tokens_ = std::clamp<int64_t>(output.cached_tokens, 0, input_tokens_);
  }
  std::string events;
  for (const ChatDelta& delta : reply_->Add(output)) events += Translate(delta);
  return events;
}

std::string AnthropicMessage::End() {
  if (failed_) return {};
  return Event("message_delta",
               {{"type", "message_delta"},
                {"delta",
                 {{"stop_reason", stop_reason_},
                  {"stop_sequence", stop_sequence_ ? ordered_json(*stop_sequence_) : nullptr}}},
                {"usage", Usage()}}) +
         Event("message_stop", {{"type", "message_stop"}});
}

ordered_json AnthropicMessage::Final() const {
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", blocks_},
          {"stop_reason", stop_reason_},
          {"stop_sequence", stop_sequence_ ? ordered_json(*stop_sequence_) : nullptr},
          {"usage", Usage()}};
}

}  // namespace infer::server
