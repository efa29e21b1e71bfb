#include "infer/server/openai_request.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "infer/core/error.h"
#include "infer/server/structured_fields.h"
#include "infer/server/tool_calls.h"

namespace infer::server {
namespace {

using json = nlohmann::ordered_json;
using ordered_json = nlohmann::ordered_json;

[[noreturn]] void Reject(const std::string& message, const std::string& param = {},
                         int status = kBadRequest) {
  throw RequestError(status, message, param);
}

// Features that change what is generated and that this server does not implement: refused
// rather than silently ignored.
void RefuseUnsupported(Fields& fields) {
  for (const char* name : {"functions", "function_call"}) {
    if (fields.Get(name)) Reject(fmt::format("'{}' is not supported by this server", name), name);
  }
  for (const char* name : {"prompt_logprobs", "audio", "prediction"}) {
    if (fields.Get(name)) Reject(fmt::format("'{}' is not supported by this server", name), name);
  }
  if (const json* modalities = fields.Get("modalities");
      modalities && *modalities != json::array({"text"})) {
    Reject("only the \"text\" modality is supported", "modalities");
  }
}

// logit_bias: {"token id": bias}.
void ParseLogitBias(Fields& fields, SamplingParams& params) {
  const json* value = fields.Get("logit_bias");
  if (!value) return;
  if (!value->is_object()) Reject("'logit_bias' must be an object of token id: bias");
  // Keys in sorted order: of several bad keys, the first so sorted is named.
  const nlohmann::json sorted(*value);
  for (const auto& [key, bias] : sorted.items()) {
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
      id = -1;
    }
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      Reject(fmt::format("'logit_bias' key '{}' is not a token id", key), "logit_bias");
    }
    params.logit_bias[static_cast<int32_t>(id)] = fields.Number(bias, "logit_bias");
  }
}

// The sampling fields of both endpoints, over `defaults`.
void ParseSampling(Fields& fields, ChatRequest& request) {
  SamplingParams& params = request.params;
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    ReadMaxTokens(fields, name, request);
  }
  for (const auto& [name, target] :
       {std::pair{"temperature", &params.temperature}, std::pair{"top_p", &params.top_p},
        std::pair{"repetition_penalty", &params.repetition_penalty},
        std::pair{"presence_penalty", &params.presence_penalty},
        std::pair{"frequency_penalty", &params.frequency_penalty}}) {
    ReadNumber(fields, name, *target);
  }
  for (const auto& [name, target] :
       {std::pair{"stream", &request.stream}, std::pair{"ignore_eos", &params.ignore_eos},
        std::pair{"return_token_ids", &request.return_token_ids}}) {
    ReadBoolean(fields, name, *target);
  }
  ReadTopK(fields, params);
  ParseLogitBias(fields, params);
  if (const json* value = fields.Get("stop")) params.stop = fields.Stop(*value);
}

// seed, n, stream_options, min_tokens, thinking_token_budget, priority; then the fields accepted
// without effect.
void ParseOptions(Fields& fields, ChatRequest& request) {
  SamplingParams& params = request.params;
  if (const json* value = fields.Get("seed")) {
    const int64_t seed = fields.Integer(*value, "seed");
    if (seed < 0) Reject(fmt::format("'seed' must be >= 0, got {}", seed), "seed");
    params.seed = static_cast<uint64_t>(seed);
  }
  if (const json* value = fields.Get("n")) {
    request.n = fields.Integer(*value, "n");
    if (request.n < 1 || request.n > 128) {
      Reject(fmt::format("'n' must be in [1, 128], got {}", request.n), "n");
    }
  }
  if (const json* value = fields.Get("stream_options")) {
    if (!value->is_object()) Reject("'stream_options' must be an object", "stream_options");
    if (const auto it = value->find("include_usage"); it != value->end() && !it->is_null()) {
      request.include_usage = fields.Boolean(*it, "stream_options.include_usage");
    }
  }
  if (const json* value = fields.Get("min_tokens")) {
    params.min_tokens = fields.Integer(*value, "min_tokens");
  }
  if (const json* value = fields.Get("thinking_token_budget")) {
    // vLLM's field; -1 lifts a server default (--reasoning-budget), as llama.cpp's -1.
    const int64_t budget = fields.Integer(*value, "thinking_token_budget");
    if (budget < -1) {
      Reject(
          fmt::format("'thinking_token_budget' must be >= 0, or -1 for unbounded, got {}", budget),
          "thinking_token_budget");
    }
    params.thinking_token_budget = budget >= 0 ? std::optional(budget) : std::nullopt;
  }
  if (const json* value = fields.Get("priority")) {
    request.priority = fields.Integer(*value, "priority");
    if (request.priority < -(int64_t{1} << 31) || request.priority >= (int64_t{1} << 31)) {
      Reject(fmt::format("'priority' must fit 32 bits, got {}", request.priority), "priority");
    }
  }
  // Accepted and without effect on the output.
  for (const char* name : {"user", "metadata", "store", "service_tier", "skip_special_tokens",
                           "spaces_between_special_tokens"}) {
    fields.Get(name);
  }
}

// A message's content as text: a string, or a list of text parts joined with newlines (as
// vLLM joins them).
std::string MessageContent(const json& content, size_t index) {
  static const TextPartsDialect kParts{"{0} must be a string or a list of content parts",
                                       "{0} must be an object with a 'type'",
                                       "{0}: content of type '{1}' is not supported (text only)",
                                       {"text"}};
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_null()) return {};
  return JoinTextParts(content, param, kParts, param);
}

std::vector<ChatMessage> ParseMessages(const json& messages) {
  if (!messages.is_array() || messages.empty()) {
    Reject("'messages' must be a non-empty list", "messages");
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& message = messages[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!message.is_object()) Reject(param + " must be an object", param);
    const auto role = message.find("role");
    if (role == message.end() || !role->is_string()) {
      Reject(param + ".role must be a string", param + ".role");
    }
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";  // OpenAI's newer name for the system role
    if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
      Reject(fmt::format("{}.role must be system, developer, user, assistant or tool, got '{}'",
                         param, name),
             param + ".role");
    }
    const auto content = message.find("content");
    std::string text = content == message.end() ? "" : MessageContent(*content, i);
    if (name == "tool" || (name == "assistant" && message.contains("tool_calls") &&
                           !message["tool_calls"].is_null())) {
      out.push_back(ToolTurn(message, name, std::move(text), param));
    } else {
      out.push_back({name, std::move(text), {}, {}, {}});
    }
  }
  return out;
}

std::variant<std::string, std::vector<int32_t>> TokenPrompt(const json& value) {
  std::vector<int32_t> ids;
  for (const json& item : value) {
    const auto id = JsonInteger(item);
    if (!id) Reject("'prompt' must be a string, a list of strings or token ids", "prompt");
    if (*id < 0 || *id > std::numeric_limits<int32_t>::max()) {
      Reject(fmt::format("prompt token id {} is outside the vocab", *id), "prompt");
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  if (ids.empty()) Reject("'prompt' must not be empty", "prompt");
  return ids;
}

std::vector<std::variant<std::string, std::vector<int32_t>>> ParsePrompts(const json& value) {
  const char* const wrong = "'prompt' must be a string, a list of strings or token ids";
  std::vector<std::variant<std::string, std::vector<int32_t>>> prompts;
  if (value.is_string()) {
    prompts.emplace_back(value.get<std::string>());
  } else if (!value.is_array() || value.empty()) {
    Reject(value.is_array() ? "'prompt' must not be empty" : wrong, "prompt");
  } else if (value.front().is_string()) {
    for (const json& item : value) {
      if (!item.is_string()) Reject(wrong, "prompt");
      prompts.emplace_back(item.get<std::string>());
    }
  } else if (value.front().is_array()) {
    for (const json& item : value) {
      if (!item.is_array()) Reject(wrong, "prompt");
      prompts.push_back(TokenPrompt(item));
    }
  } else {
    prompts.push_back(TokenPrompt(value));
  }
  for (const auto& prompt : prompts) {
    if (const auto* text = std::get_if<std::string>(&prompt); text && text->empty()) {
      Reject("'prompt' must not be empty", "prompt");
    }
  }
  return prompts;
}

// Chat only: logprobs / top_logprobs, the template's variables (reasoning_effort among them),
// continue_final_message.
void ParseChatFields(Fields& fields, ChatRequest& request) {
  const json* logprobs = fields.Get("logprobs");
  const bool want_logprobs = logprobs && fields.Boolean(*logprobs, "logprobs");
  if (const json* value = fields.Get("top_logprobs")) {
    const int64_t top = fields.Integer(*value, "top_logprobs");
    if (top < 0 || top > kMaxLogprobs) {
      Reject(fmt::format("'top_logprobs' must be in [0, {}], got {}", kMaxLogprobs, top),
             "top_logprobs");
    }
    if (top > 0 && !want_logprobs) Reject("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    request.params.logprobs = top;
  }
  if (want_logprobs && !request.params.logprobs) request.params.logprobs = 0;
  if (!want_logprobs) request.params.logprobs.reset();
  if (const json* value = fields.Get("chat_template_kwargs")) {
    if (!value->is_object()) Reject("'chat_template_kwargs' must be an object");
    request.chat_template_kwargs = ordered_json(nlohmann::json(*value));  // keys sorted
  }
  if (const json* value = fields.Get("reasoning_effort"); value && !value->is_null()) {
    // OpenAI's field, as Responses' reasoning.effort: Qwen3's enable_thinking ("none" turns it
    // off) unless chat_template_kwargs sets it; the template also gets it, as vLLM passes it.
    if (!value->is_string() || !IsReasoningEffort(value->get<std::string>())) {
      Reject(ReasoningEffortError("reasoning_effort"), "reasoning_effort");
    }
    SetEnableThinking(request, *value != "none", /*overwrite=*/false);
    request.chat_template_kwargs["reasoning_effort"] = *value;
  }
  if (const json* value = fields.Get("add_generation_prompt")) {
    request.add_generation_prompt = fields.Boolean(*value, "add_generation_prompt");
  }
  if (const json* value = fields.Get("continue_final_message");
      value && fields.Boolean(*value, "continue_final_message")) {
    Reject("'continue_final_message' is not supported by this server", "continue_final_message");
  }
}

// Completions only: logprobs (a count), echo, best_of, suffix.
void ParseCompletionFields(Fields& fields, ChatRequest& request) {
  if (const json* value = fields.Get("logprobs")) {
    const int64_t top = fields.Integer(*value, "logprobs");
    if (top < 0 || top > kMaxLogprobs) {
      Reject(fmt::format("'logprobs' must be in [0, {}], got {}", kMaxLogprobs, top), "logprobs");
    }
    request.params.logprobs = top;
  } else {
    request.params.logprobs.reset();
  }
  if (const json* value = fields.Get("echo")) request.echo = fields.Boolean(*value, "echo");
  if (request.echo && request.params.logprobs) {
    Reject("'echo' together with 'logprobs' (prompt logprobs) is not supported", "echo");
  }
  if (const json* value = fields.Get("best_of")) {
    if (fields.Integer(*value, "best_of") != request.n) {
      Reject("'best_of' other than n is not supported", "best_of");
    }
  }
  if (const json* value = fields.Get("suffix"); value && *value != "") {
    Reject("'suffix' is not supported by this server", "suffix");
  }
}

// Either endpoint's body: the required field (messages, or prompt), the fields both share, then
// the endpoint's own.
ChatRequest ParseOpenAi(const ordered_json& root, const ModelNames& models,
                        const SamplingParams& defaults, ChatEndpoint endpoint) {
  const bool chat = endpoint == ChatEndpoint::kChatCompletions;
  Fields fields(root, /*name_param=*/true);
  ChatRequest request;
  request.endpoint = endpoint;
  request.params = defaults;
  if (!chat) request.max_tokens = 16;  // OpenAI's default for completions
  RefuseUnsupported(fields);
  const char* const required = chat ? "messages" : "prompt";
  const json* value = fields.Get(required);
  if (!value) Reject(fmt::format("missing required field '{}'", required), required);
  if (chat) {
    request.messages = ParseMessages(*value);
  } else {
    request.prompts = ParsePrompts(*value);
  }
  request.model = ParseModel(fields, models);
  ParseSampling(fields, request);
  request.params.structured_output = ParseStructuredOutput(fields);
  ParseOptions(fields, request);
  if (chat) {
    request.tools = ParseTools(fields);
    ParseChatFields(fields, request);
  } else {
    ParseCompletionFields(fields, request);
  }
  request.ignored_fields = fields.Unknown();
  ValidateSampling(request);
  return request;
}

}  // namespace

ChatRequest ParseChatCompletionJson(const ordered_json& body, const ModelNames& models,
                                    const SamplingParams& defaults) {
  return ParseOpenAi(body, models, defaults, ChatEndpoint::kChatCompletions);
}

ChatRequest ParseChatCompletionRequest(std::string_view body, const ModelNames& models,
                                       const SamplingParams& defaults) {
  return ParseChatCompletionJson(ParseJsonObject(body), models, defaults);
}

ChatRequest ParseOpenAiCompletionRequest(std::string_view body, const ModelNames& models,
                                         const SamplingParams& defaults) {
  return ParseOpenAi(ParseJsonObject(body), models, defaults, ChatEndpoint::kCompletions);
}

TokenizeRequest ParseTokenizeRequest(std::string_view body, const ModelNames& models,
                                     const SamplingParams& defaults) {
  const json root = ParseJsonObject(body);
  Fields fields(root, /*name_param=*/true);
  TokenizeRequest request;
  const json* messages = fields.Get("messages");
  const json* prompt = fields.Get("prompt");
  if ((messages == nullptr) == (prompt == nullptr)) {
    Reject("give one of 'prompt' (a string) and 'messages' (a chat)",
           messages == nullptr ? "prompt" : "messages");
  }
  if (messages != nullptr) {
    // The chat fields as a chat completion reads them (messages, tools, the template's).
    request.chat = ParseChatCompletionJson(root, models, defaults);
  } else {
    if (!prompt->is_string()) Reject("'prompt' must be a string", "prompt");
    request.prompt = prompt->get<std::string>();
    ParseModel(fields, models);
  }
  // vLLM's defaults: a prompt gets the special tokens (BOS), a chat's template writes its own.
  request.add_special_tokens = messages == nullptr;
  if (const json* value = fields.Get("add_special_tokens")) {
    request.add_special_tokens = fields.Boolean(*value, "add_special_tokens");
  }
  if (const json* value = fields.Get("return_token_strs")) {
    request.return_token_strs = fields.Boolean(*value, "return_token_strs");
  }
  return request;
}

std::vector<int32_t> ParseDetokenizeRequest(std::string_view body, const ModelNames& models) {
  const json root = ParseJsonObject(body);
  Fields fields(root, /*name_param=*/true);
  ParseModel(fields, models);
  const json* tokens = fields.Get("tokens");
  if (!tokens) Reject("missing required field 'tokens'", "tokens");
  if (!tokens->is_array()) Reject("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const json& item : *tokens) {
    const auto id = JsonInteger(item);
    if (!id || *id < 0 || *id > std::numeric_limits<int32_t>::max()) {
      Reject("'tokens' must be a list of token ids", "tokens");
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

}  // namespace infer::server
