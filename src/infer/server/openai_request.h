// OpenAI's API on the engine, the requests: the bodies of POST /v1/chat/completions and of the
// OpenAI format of POST /v1/completions, parsed field by field (OpenAI's fields, vLLM's
// extensions, unknown fields ignored, output-changing features we lack refused with 400).
// Pure: no sockets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/sampling_params.h"
#include "infer/server/request_fields.h"
#include "infer/server/tool_calls.h"

namespace infer::server {

enum class OpenAiEndpoint { kChatCompletions, kCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kChatCompletions;
  std::string model;
  // Chat: the messages as the chat template reads them ({role, content} with string content),
  // and the extra template variables (chat_template_kwargs, e.g. enable_thinking).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  // Completions: one or more prompts (text or token ids); each gets `n` choices.
  std::vector<std::variant<std::string, std::vector<int32_t>>> prompts;
  // Sampling: the model's defaults (generation_config.json) overridden by the request's fields.
  // max_tokens unset: the rest of the context (max_model_len - prompt tokens), as vLLM.
  SamplingParams params;
  std::optional<int64_t> max_tokens;
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool echo = false;              // completions: the prompt text starts each choice's text
  bool return_token_ids = false;  // vLLM: prompt_token_ids and each choice's token_ids
  int64_t priority = 0;
  // Chat: the tools the model may call and how (tool_choice, parallel_tool_calls), and the call
  // format of the model's chat template (set by the handler, which knows the template).
  std::optional<ToolsRequest> tools;
  ToolCallFormat tool_format = ToolCallFormat::kGeneric;
  // Fields this server does not know and ignored (logged at debug level).
  std::vector<std::string> ignored_fields;
};

// `defaults`: the model's sampling defaults. Throws RequestError: 400 for malformed or invalid
// bodies and for features that would change the output but are not supported (tools, ...),
// 404 for another model. A schema, regex or grammar is compiled (and checked) later, by the
// engine's front door.
OpenAiRequest ParseChatCompletionRequest(std::string_view body, std::string_view served_model,
                                         const SamplingParams& defaults);
// The same from a parsed body (a JSON object).
OpenAiRequest ParseChatCompletionJson(const nlohmann::ordered_json& body,
                                      std::string_view served_model,
                                      const SamplingParams& defaults);
OpenAiRequest ParseOpenAiCompletionRequest(std::string_view body, std::string_view served_model,
                                           const SamplingParams& defaults);

// vLLM's POST /tokenize: a prompt (text), or a chat (messages, with the chat fields a chat
// completion takes: tools, chat_template_kwargs, add_generation_prompt); add_special_tokens
// (default: true for a prompt, false for a chat, whose template writes BOS); return_token_strs.
struct TokenizeRequest {
  std::optional<OpenAiRequest> chat;
  std::string prompt;
  bool add_special_tokens = true;
  bool return_token_strs = false;
};
TokenizeRequest ParseTokenizeRequest(std::string_view body, std::string_view served_model,
                                     const SamplingParams& defaults);
// vLLM's POST /detokenize: {"tokens": [ids]} (and an optional model).
std::vector<int32_t> ParseDetokenizeRequest(std::string_view body, std::string_view served_model);

}  // namespace infer::server
