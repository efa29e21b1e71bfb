// OpenAI's API on the engine, the requests: the bodies of POST /v1/chat/completions and of the
// OpenAI format of POST /v1/completions, parsed field by field into the ChatRequest
// (chat/chat_request.h) (OpenAI's fields, vLLM's
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
#include "infer/server/chat/chat_request.h"
#include "infer/server/request_fields.h"

namespace infer::server {

// `defaults`: the model's sampling defaults. Throws RequestError: 400 for malformed or invalid
// bodies and for features that would change the output but are not supported (tools, ...),
// 404 for another model. A schema, regex or grammar is compiled (and checked) later, by the
// engine's front door.
ChatRequest ParseChatCompletionRequest(std::string_view body, const ModelNames& models,
                                       const SamplingParams& defaults);
// The same from a parsed body (a JSON object).
ChatRequest ParseChatCompletionJson(const nlohmann::ordered_json& body, const ModelNames& models,
                                    const SamplingParams& defaults);
ChatRequest ParseOpenAiCompletionRequest(std::string_view body, const ModelNames& models,
                                         const SamplingParams& defaults);

// vLLM's POST /tokenize: a prompt (text), or a chat (messages, with the chat fields a chat
// completion takes: tools, chat_template_kwargs, add_generation_prompt); add_special_tokens
// (default: true for a prompt, false for a chat, whose template writes BOS); return_token_strs.
struct TokenizeRequest {
  std::optional<ChatRequest> chat;
  std::string prompt;
  bool add_special_tokens = true;
  bool return_token_strs = false;
};
TokenizeRequest ParseTokenizeRequest(std::string_view body, const ModelNames& models,
                                     const SamplingParams& defaults);
// vLLM's POST /detokenize: {"tokens": [ids]} (and an optional model).
std::vector<int32_t> ParseDetokenizeRequest(std::string_view body, const ModelNames& models);

}  // namespace infer::server
