// OpenAI tool calling on a local model (pure: no engine, no sockets): the request's `tools`,
// `tool_choice` and `parallel_tool_calls`; the conversation's tool turns (assistant messages
// with tool_calls, role "tool" results) in the form chat templates read; the call format the
// model's template teaches (Qwen3's <tool_call> tags, Llama 3.x's JSON object, or, for a
// template that takes no tools such as Gemma 3's, a documented generic scheme given in a system
// message); the grammar that makes a required or named call always valid; and the reply parsed
// back into message.tool_calls.
//
// The generic scheme (templates without tools), as llama.cpp does for them: the system message
// lists the tools as JSON and asks for a reply that is only
//   {"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]}
// when the model calls tools, and plain text otherwise.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/grammar/structured_output.h"
#include "infer/server/chat/chat_message.h"
#include "infer/server/request_fields.h"

namespace infer::server {

enum class ToolCallFormat {
  kHermes,      // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen3)
  kLlama3Json,  // {"name": ..., "parameters": {...}} as the whole reply (Llama 3.x)
  kGeneric,     // {"tool_calls": [{"name": ..., "arguments": {...}}]} (templates without tools)
};
// The format a chat template teaches, read from its source.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template_source);

struct Tool {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema ({"type": "object"} when not given)
  nlohmann::ordered_json spec;        // the whole {"type": "function", "function": {...}}
};

struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed
};

struct ToolsRequest {
  std::vector<Tool> tools;
  ToolChoice choice;
  bool parallel = true;  // parallel_tool_calls
};

// OpenAI's tools, tool_choice, parallel_tool_calls (the tools' parameters keep the body's key
// order); nullopt when no tools are given (tool_choice must then be absent, "none" or "auto").
// Throws RequestError(400) naming the field at fault.
std::optional<ToolsRequest> ParseTools(Fields& fields);

// A function tool from the parts a protocol gives (description, parameters and strict when
// given; parameters default to {"type": "object"}), its spec in the form chat templates read:
// {"type": "function", "function": {name, description, parameters, strict}}.
Tool FunctionTool(const std::string& name, const nlohmann::ordered_json* description,
                  const nlohmann::ordered_json* parameters, const nlohmann::ordered_json* strict);
// The checks every protocol's tools pass, as one: each name valid (1-64 of a-z, A-Z, 0-9, _, -
// and .) and given once; a required or named tool_choice needs tools, a named one among them.
// nullopt when there are no tools. RequestError(400) naming tools[i] or tool_choice.
std::optional<ToolsRequest> CheckTools(const Fields& fields, ToolsRequest tools);

// A call's arguments as an object: OpenAI sends them as JSON text, which keeps its key order; an
// object given as such (Anthropic's tool_use input) is written with its keys sorted.
// RequestError(400) naming `param` when they are neither.
nlohmann::ordered_json ArgumentsObject(const nlohmann::ordered_json& arguments,
                                       const std::string& param);

// An OpenAI message with tool turns: an assistant message's tool_calls ({id, type, function
// {name, arguments}}, the arguments as an object), a tool message's tool_call_id and name.
// `param` names the message in errors.
ChatMessage ToolTurn(const nlohmann::ordered_json& message, const std::string& role,
                     std::string content, const std::string& param);

// The conversation the template renders: for kGeneric, the tools are described in a system
// message (merged into the first one when there is one) and tool turns are written as text.
std::vector<ChatMessage> MessagesForTemplate(const std::vector<ChatMessage>& messages,
                                             const ToolsRequest& tools, ToolCallFormat format);
// The template's `tools` variable: the tools' specs (kGeneric: none).
nlohmann::ordered_json ToolsVariable(const ToolsRequest& tools, ToolCallFormat format);

// The grammar of the reply, so that every call it makes is well-formed, in the model's format,
// each tool's arguments valid under its parameters:
// - tool_choice required or a named function: the reply is the call(s);
// - auto: text is free until the model opens a call (Qwen3: any text that does not hold
//   "<tool_call>", then maybe the tagged calls; Llama 3.x and the generic scheme, whose call is
//   the whole reply: the call, or text that does not start with '{');
// - none (or no tool left to call): nullopt, the reply is free.
// Up to 8 calls with parallel_tool_calls (1 for a named function).
std::optional<StructuredOutput> ToolCallConstraint(const ToolsRequest& tools,
                                                   ToolCallFormat format);

struct ToolCall {
  std::string id;  // call_<24 hex digits>
  std::string name;
  std::string arguments;  // JSON text
};
struct ParsedReply {
  std::string content;  // the text outside the calls
  std::vector<ToolCall> calls;
};
// How much of a reply in progress can be streamed as content now: all of it when no call can
// start in it; else up to where a call may start (Qwen3: "<tool_call>" or a prefix of it at
// the end; Llama 3.x and the generic scheme: nothing once the reply starts with '{', since
// their call is the whole reply).
size_t StreamableToolText(std::string_view text, ToolCallFormat format);

// The reply split into text and calls to known tools; a reply that does not hold a
// well-formed call is all content.
ParsedReply ParseToolCalls(std::string_view text, ToolCallFormat format, const ToolsRequest& tools);

}  // namespace infer::server
