#include "infer/server/tool_calls.h"

#include <random>
#include <utility>

#include <fmt/format.h>

#include "infer/grammar/structured_output.h"

namespace infer::server {
namespace {

using json = nlohmann::ordered_json;
using ordered_json = nlohmann::ordered_json;

bool ValidToolName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Tool ParseTool(const Fields& fields, const ordered_json& value, size_t index) {
  const std::string param = fmt::format("tools[{}]", index);
  const char* name_param = "tools";
  if (!value.is_object() || value.value("type", "") != "function") {
    fields.Reject(param + " must be {\"type\": \"function\", \"function\": {...}}", name_param);
  }
  const auto function = value.find("function");
  if (function == value.end() || !function->is_object()) {
    fields.Reject(param + ".function must be an object", name_param);
  }
  const auto name = function->find("name");
  if (name == function->end() || !name->is_string() || !ValidToolName(name->get<std::string>())) {
    fields.Reject(param + ".function.name must be 1-64 of a-z, A-Z, 0-9, _, - and .", name_param);
  }
  Tool tool;
  tool.name = name->get<std::string>();
  tool.parameters = ordered_json{{"type", "object"}};
  if (const auto parameters = function->find("parameters");
      parameters != function->end() && !parameters->is_null()) {
    if (!parameters->is_object()) {
      fields.Reject(param + ".function.parameters must be a JSON schema object", name_param);
    }
    tool.parameters = *parameters;
  }
  tool.spec = value;
  return tool;
}

// Tool i of `request` (its earlier tools checked): a valid name, not given before.
void CheckTool(const Fields& fields, const ToolsRequest& request, size_t i) {
  const std::string& name = request.tools[i].name;
  if (!ValidToolName(name)) {
    fields.Reject(
        fmt::format("tools[{}].function.name must be 1-64 of a-z, A-Z, 0-9, _, - and .", i),
        "tools");
  }
  for (size_t j = 0; j < i; ++j) {
    if (request.tools[j].name == name) {
      fields.Reject(fmt::format("tools[{}]: a second tool named '{}'", i, name), "tools");
    }
  }
}

ToolChoice ParseToolChoice(const Fields& fields, const ordered_json& value) {
  const char* name = "tool_choice";
  if (value.is_string()) {
    const std::string mode = value.get<std::string>();
    if (mode == "auto") return {ToolChoice::Mode::kAuto, ""};
    if (mode == "none") return {ToolChoice::Mode::kNone, ""};
    if (mode == "required") return {ToolChoice::Mode::kRequired, ""};
    fields.Reject(
        fmt::format("'tool_choice' must be none, auto, required or a function, got '{}'", mode),
        name);
  }
  if (value.is_object() && value.value("type", "") == "function" && value.contains("function") &&
      value["function"].is_object() && value["function"].contains("name") &&
      value["function"]["name"].is_string()) {
    return {ToolChoice::Mode::kNamed, value["function"]["name"].get<std::string>()};
  }
  fields.Reject(
      "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": "
      "{\"name\": ...}}",
      name);
}

std::string NewCallId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

// The tools the reply may call: all of them, or the named one.
std::vector<const Tool*> Callable(const ToolsRequest& tools) {
  std::vector<const Tool*> callable;
  for (const Tool& tool : tools.tools) {
    if (tools.choice.mode != ToolChoice::Mode::kNamed || tool.name == tools.choice.name) {
      callable.push_back(&tool);
    }
  }
  return callable;
}

// {"name": const, <arguments_key>: parameters} for each callable tool (anyOf when several).
ordered_json CallSchema(const ToolsRequest& tools, const char* arguments_key) {
  ordered_json any = ordered_json::array();
  for (const Tool* tool : Callable(tools)) {
    ordered_json call = {
        {"type", "object"},
        {"properties", {{"name", {{"const", tool->name}}}, {arguments_key, tool->parameters}}},
        {"required", {"name", arguments_key}},
        {"additionalProperties", false}};
    any.push_back(std::move(call));
  }
  if (any.size() == 1) return any.front();
  return {{"anyOf", any}};
}

std::string Trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

// A call object {"name": known tool, <key>: object} -> ToolCall.
std::optional<ToolCall> CallFrom(const ordered_json& value, const ToolsRequest& tools) {
  if (!value.is_object() || !value.contains("name") || !value["name"].is_string()) return {};
  const std::string name = value["name"].get<std::string>();
  bool known = false;
  for (const Tool& tool : tools.tools) known = known || tool.name == name;
  if (!known) return {};
  ordered_json arguments = ordered_json::object();
  for (const char* key : {"arguments", "parameters"}) {
    if (!value.contains(key)) continue;
    arguments = value[key];
    if (arguments.is_string()) {
      arguments = ordered_json::parse(arguments.get<std::string>(), nullptr, false);
    }
    break;
  }
  if (!arguments.is_object()) return {};
  return ToolCall{NewCallId(), name, arguments.dump()};
}

// The end (one past the closing brace) of the JSON object that opens at text[at], or npos when
// it does not close: braces inside strings (and escaped quotes) do not count.
size_t ObjectEnd(std::string_view text, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

ParsedReply ParseHermes(std::string_view text, const ToolsRequest& tools) {
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  ParsedReply reply;
  std::string outside;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string_view::npos) break;
    // The call's JSON ends at its closing brace, so a "</tool_call>" inside an argument's
    // string does not end it.
    const size_t body = text.find_first_not_of(" \t\r\n", open + kOpen.size());
    const size_t body_end = body == std::string_view::npos ? body : ObjectEnd(text, body);
    if (body_end == std::string_view::npos) break;
    const size_t close = text.find(kClose, body_end);
    if (close == std::string_view::npos) break;
    const auto call =
        CallFrom(ordered_json::parse(text.substr(open + kOpen.size(), close - open - kOpen.size()),
                                     nullptr, false),
                 tools);
    if (!call) return {std::string(text), {}};  // a malformed call: all of it is text
    outside += text.substr(at, open - at);
    reply.calls.push_back(*call);
    at = close + kClose.size();
  }
  outside += text.substr(at);
  reply.content = reply.calls.empty() ? std::string(text) : Trim(outside);
  return reply;
}

ParsedReply ParseLlama3Json(std::string_view text, const ToolsRequest& tools) {
  const std::string trimmed = Trim(text);
  if (trimmed.empty() || trimmed.front() != '{') return {std::string(text), {}};
  ParsedReply reply;
  // One call, or several separated by ';' (as Llama 3.x writes parallel calls). A ';' inside
  // an argument's string is part of the call.
  size_t at = 0;
  while (true) {
    const size_t end = ObjectEnd(trimmed, at);
    if (end == std::string::npos) return {std::string(text), {}};
    const auto call =
        CallFrom(ordered_json::parse(trimmed.substr(at, end - at), nullptr, false), tools);
    if (!call) return {std::string(text), {}};
    reply.calls.push_back(*call);
    at = trimmed.find_first_not_of(" \t\r\n", end);
    if (at == std::string::npos) break;
    if (trimmed[at] != ';') return {std::string(text), {}};
    at = trimmed.find_first_not_of(" \t\r\n", at + 1);
    if (at == std::string::npos || trimmed[at] != '{') return {std::string(text), {}};
  }
  return reply;
}

ParsedReply ParseGeneric(std::string_view text, const ToolsRequest& tools) {
  const ordered_json value = ordered_json::parse(Trim(text), nullptr, false);
  if (!value.is_object() || !value.contains("tool_calls") || !value["tool_calls"].is_array() ||
      value["tool_calls"].empty()) {
    return {std::string(text), {}};
  }
  ParsedReply reply;
  for (const ordered_json& item : value["tool_calls"]) {
    const auto call = CallFrom(item, tools);
    if (!call) return {std::string(text), {}};
    reply.calls.push_back(*call);
  }
  return reply;
}

std::string GenericSystemText(const ToolsRequest& tools) {
  std::string text = "You can call these tools (each with a JSON Schema of its arguments):\n";
  for (const Tool& tool : tools.tools) text += tool.spec.dump() + "\n";
  text +=
      "\nTo call tools, reply with only this JSON object and nothing else:\n"
      "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}]}\n"
      "Otherwise, reply to the user normally.";
  return text;
}

}  // namespace

ToolCallFormat DetectToolCallFormat(std::string_view chat_template_source) {
  if (chat_template_source.find("<tool_call>") != std::string_view::npos) {
    return ToolCallFormat::kHermes;
  }
  if (chat_template_source.find("\"parameters\": ") != std::string_view::npos &&
      chat_template_source.find("tools") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kGeneric;
}

std::optional<ToolsRequest> ParseTools(Fields& fields) {
  const json* tools_field = fields.Get("tools");
  const json* choice_field = fields.Get("tool_choice");
  const json* parallel_field = fields.Get("parallel_tool_calls");
  ToolsRequest request;
  if (parallel_field) request.parallel = fields.Boolean(*parallel_field, "parallel_tool_calls");
  if (choice_field) request.choice = ParseToolChoice(fields, *choice_field);
  if (tools_field && !tools_field->is_array()) {
    fields.Reject("'tools' must be a list of tools", "tools");
  }
  if (tools_field) {
    // A tool's parameters keep the order its properties were given in (the body's key order).
    const ordered_json& tools = *tools_field;
    for (size_t i = 0; i < tools.size(); ++i) {
      request.tools.push_back(ParseTool(fields, tools[i], i));
      CheckTool(fields, request, i);
    }
  }
  return CheckTools(fields, std::move(request));
}

Tool FunctionTool(const std::string& name, const ordered_json* description,
                  const ordered_json* parameters, const ordered_json* strict) {
  Tool tool;
  tool.name = name;
  tool.parameters = parameters ? *parameters : ordered_json{{"type", "object"}};
  ordered_json function = {{"name", name}};
  if (description) function["description"] = *description;
  if (parameters) function["parameters"] = *parameters;
  if (strict) function["strict"] = *strict;
  tool.spec = {{"type", "function"}, {"function", std::move(function)}};
  return tool;
}

std::optional<ToolsRequest> CheckTools(const Fields& fields, ToolsRequest request) {
  if (request.tools.empty()) {
    if (request.choice.mode == ToolChoice::Mode::kRequired ||
        request.choice.mode == ToolChoice::Mode::kNamed) {
      fields.Reject("'tool_choice' needs 'tools'", "tool_choice");
    }
    return std::nullopt;
  }
  for (size_t i = 0; i < request.tools.size(); ++i) CheckTool(fields, request, i);
  if (request.choice.mode == ToolChoice::Mode::kNamed) {
    bool known = false;
    for (const Tool& tool : request.tools) known = known || tool.name == request.choice.name;
    if (!known) {
      fields.Reject(
          fmt::format("'tool_choice' names '{}', which is not in 'tools'", request.choice.name),
          "tool_choice");
    }
  }
  return request;
}

ordered_json ArgumentsObject(const ordered_json& arguments, const std::string& param) {
  if (arguments.is_object()) return ordered_json(nlohmann::json(arguments));
  if (arguments.is_string()) {
    ordered_json parsed = ordered_json::parse(arguments.get<std::string>(), nullptr, false);
    if (parsed.is_object()) return parsed;
  }
  throw RequestError(kBadRequest, param + " must be a JSON object (or its text)", param);
}

ChatMessage ToolTurn(const json& message, const std::string& role, std::string content,
                     const std::string& param) {
  ChatMessage turn{role, std::move(content), {}, {}, {}};
  if (role == "tool") {
    const auto id = message.find("tool_call_id");
    if (id == message.end() || !id->is_string()) {
      throw RequestError(kBadRequest, param + ".tool_call_id must be a string",
                         param + ".tool_call_id");
    }
    turn.tool_call_id = id->get<std::string>();
    if (const auto name = message.find("name"); name != message.end() && name->is_string()) {
      turn.name = name->get<std::string>();
    }
    return turn;
  }
  const auto calls = message.find("tool_calls");
  if (calls == message.end() || calls->is_null()) return turn;
  if (!calls->is_array()) {
    throw RequestError(kBadRequest, param + ".tool_calls must be a list", param + ".tool_calls");
  }
  turn.tool_calls.emplace();
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& call = (*calls)[i];
    const std::string at = fmt::format("{}.tool_calls[{}]", param, i);
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
        !call["function"].contains("name") || !call["function"]["name"].is_string()) {
      throw RequestError(kBadRequest, at + " must be {id, type, function {name, arguments}}", at);
    }
    const json& function = call["function"];
    ordered_json arguments = ordered_json::object();
    if (function.contains("arguments")) {
      arguments = ArgumentsObject(function["arguments"], at + ".function.arguments");
    }
    turn.tool_calls->push_back(
        {call.value("id", ""), function["name"].get<std::string>(), std::move(arguments)});
  }
  return turn;
}

std::vector<ChatMessage> MessagesForTemplate(const std::vector<ChatMessage>& messages,
                                             const ToolsRequest& tools, ToolCallFormat format) {
  if (format != ToolCallFormat::kGeneric) return messages;
  // The generic scheme: tools in the system message, tool turns as plain text, and turns of the
  // same role merged (templates such as Gemma 3's insist that user and assistant alternate).
  std::vector<ChatMessage> out;
  const auto append = [&](const std::string& role, const std::string& content) {
    if (!out.empty() && out.back().role == role) {
      out.back().content += "\n\n" + content;
    } else {
      out.push_back({role, content, {}, {}, {}});
    }
  };
  append("system", GenericSystemText(tools));
  for (const ChatMessage& message : messages) {
    std::string content = message.content;
    if (message.role == "assistant" && message.tool_calls) {
      ordered_json calls = ordered_json::array();
      for (const ChatToolCall& call : *message.tool_calls) {
        calls.push_back({{"name", call.name}, {"arguments", call.arguments}});
      }
      content = ordered_json{{"tool_calls", calls}}.dump();
    } else if (message.role == "tool") {
      append("user",
             fmt::format("Result of tool call {}: {}", message.tool_call_id.value_or(""), content));
      continue;
    }
    append(message.role, content);
  }
  return out;
}

ordered_json ToolsVariable(const ToolsRequest& tools, ToolCallFormat format) {
  if (format == ToolCallFormat::kGeneric) return nullptr;
  ordered_json specs = ordered_json::array();
  for (const Tool& tool : tools.tools) specs.push_back(tool.spec);
  return specs;
}

namespace {

// GBNF of text that never holds `word` (whose first character occurs nowhere else in it, so a
// mismatch restarts the match at 0, or at 1 on that character): rule `<name>-<i>` is the text
// after a match of word's first i characters.
std::string TextWithout(std::string_view word, std::string_view name) {
  std::string gbnf;
  const auto escape = [](char c) { return c == '\\' || c == ']' || c == '^' || c == '-'; };
  for (size_t i = 0; i < word.size(); ++i) {
    const char c = word[i];
    const auto klass = [&](char a) { return fmt::format("{}{}", escape(a) ? "\\" : "", a); };
    std::string others = klass(word[0]);
    if (i > 0) others += klass(c);
    std::string line = fmt::format("{}-{} ::= \"\" | [^{}] {}-0", name, i, others, name);
    if (i > 0) line += fmt::format(" | [{}] {}-1", klass(word[0]), name);
    if (i + 1 < word.size()) line += fmt::format(" | [{}] {}-{}", klass(c), name, i + 1);
    gbnf += line + "\n";
  }
  return gbnf;
}

}  // namespace

std::optional<StructuredOutput> ToolCallConstraint(const ToolsRequest& tools,
                                                   ToolCallFormat format) {
  using Mode = ToolChoice::Mode;
  if (tools.choice.mode == Mode::kNone || Callable(tools).empty()) return {};
  const bool forced = tools.choice.mode == Mode::kRequired || tools.choice.mode == Mode::kNamed;
  const size_t most = tools.parallel && tools.choice.mode != Mode::kNamed ? 8 : 1;
  ordered_json call;  // the JSON of the reply's call(s), for the JSON formats
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      call = CallSchema(tools, "parameters");
      break;
    case ToolCallFormat::kGeneric:
      call = {{"type", "object"},
              {"properties",
               {{"tool_calls",
                 {{"type", "array"},
                  {"minItems", 1},
                  {"maxItems", most},
                  {"items", CallSchema(tools, "arguments")}}}}},
              {"required", {"tool_calls"}},
              {"additionalProperties", false}};
      break;
    case ToolCallFormat::kHermes: {
      std::string gbnf =
          JsonSchemaRuleGbnf(CallSchema(tools, "arguments").dump(), "tool-call-json");
      gbnf += fmt::format(
          "\ntool-calls ::= tool-call-tagged (\"\\n\" tool-call-tagged){{0,{}}}\n"
          "tool-call-tagged ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n",
          most - 1);
      if (forced) {
        gbnf += "root ::= tool-calls\n";
      } else {
        // auto: free text (never "<tool_call>" itself), then maybe the calls.
        gbnf += "root ::= free-0 tool-calls?\n" + TextWithout("<tool_call>", "free");
      }
      return StructuredOutput{StructuredOutput::Kind::kGrammar, gbnf, {}};
    }
  }
  if (forced) return StructuredOutput{StructuredOutput::Kind::kJsonSchema, call.dump(), {}};
  // auto, a reply that is the call or text: the call, or text whose first character after
  // any whitespace is not '{'.
  std::string gbnf = JsonSchemaRuleGbnf(call.dump(), "tool-call-json");
  gbnf +=
      "\nroot ::= [ \\t\\r\\n]{0,4} tool-call-json | [ \\t\\r\\n]* free\n"
      "free ::= \"\" | [^{ \\t\\r\\n] [^\\x00]*\n";
  return StructuredOutput{StructuredOutput::Kind::kGrammar, gbnf, {}};
}

size_t StreamableToolText(std::string_view text, ToolCallFormat format) {
  if (format != ToolCallFormat::kHermes) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos || text[first] == '{') return 0;  // may be a call
    return text.size();
  }
  static constexpr std::string_view kOpen = "<tool_call>";
  if (const size_t open = text.find(kOpen); open != std::string_view::npos) return open;
  // A '<' near the end that may grow into "<tool_call>" waits.
  const size_t lt = text.rfind('<');
  if (lt != std::string_view::npos && text.size() - lt < kOpen.size() &&
      kOpen.substr(0, text.size() - lt) == text.substr(lt)) {
    return lt;
  }
  return text.size();
}

ParsedReply ParseToolCalls(std::string_view text, ToolCallFormat format,
                           const ToolsRequest& tools) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text, tools);
    case ToolCallFormat::kLlama3Json:
      return ParseLlama3Json(text, tools);
    case ToolCallFormat::kGeneric:
      return ParseGeneric(text, tools);
  }
  return {std::string(text), {}};
}

}  // namespace infer::server
