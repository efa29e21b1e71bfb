// The one request every protocol's parser gives the handlers: OpenAI's chat and completions,
// Anthropic's Messages and OpenAI's Responses each read their own JSON into a ChatRequest (none
// writes or reads another's), and the handlers serve it. Also the readers of the fields the
// protocols share, so that each translation (a model check, max tokens, the sampling numbers,
// text content parts, thinking on or off) and its error wording live once. Pure: no engine, no
// sockets.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/sampling_params.h"
#include "infer/server/chat/chat_message.h"
#include "infer/server/request_fields.h"
#include "infer/server/tool_calls.h"

namespace infer::server {

// The names a request's `model` may give: the served model's, and each LoRA adapter's (asked of
// `is_adapter`, which the server's adapter registry answers). Made from the served name alone
// where there are no adapters.
class ModelNames {
 public:
  template <typename Name>
  requires std::convertible_to<const Name&, std::string_view> ModelNames(
      const Name& served)  // NOLINT(google-explicit-constructor): a name is a ModelNames
      : served_(std::string_view(served)) {}
  ModelNames(std::string_view served, std::function<bool(std::string_view)> is_adapter)
      : served_(served), is_adapter_(std::move(is_adapter)) {}

  std::string_view served() const { return served_; }
  bool Serves(std::string_view name) const {
    return name == served_ || (is_adapter_ && is_adapter_(name));
  }

 private:
  std::string served_;
  std::function<bool(std::string_view)> is_adapter_;
};

// A chat (messages through the chat template) or a completion (prompts as given).
enum class ChatEndpoint { kChatCompletions, kCompletions };

struct ChatRequest {
  ChatEndpoint endpoint = ChatEndpoint::kChatCompletions;
  std::string model;
  // Chat: the conversation, and the extra template variables (chat_template_kwargs, e.g.
  // enable_thinking).
  std::vector<ChatMessage> messages;
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

// model: optional (the served one), and when given one `models` serves (RequestError 404 for
// another).
std::string ParseModel(Fields& fields, const ModelNames& models);
// max_tokens under `name` (max_tokens, max_completion_tokens): an integer of at least 1.
void ReadMaxTokens(Fields& fields, const char* name, ChatRequest& request);
// A number or a flag under `name`, when given (ranges are SamplingParams::Validate's).
void ReadNumber(Fields& fields, const char* name, double& target);
void ReadBoolean(Fields& fields, const char* name, bool& target);
// top_k: >= 1, or 0 / -1 for off.
void ReadTopK(Fields& fields, SamplingParams& params);
// The template's enable_thinking (Qwen3's switch); `overwrite` false keeps one already set.
void SetEnableThinking(ChatRequest& request, bool enabled, bool overwrite = true);
// SamplingParams::Validate once max_tokens is known (a placeholder when it is derived later);
// RequestError(400) with its message.
void ValidateSampling(const ChatRequest& request);

// How a protocol spells text content: a string, or a list of typed parts of which only text
// ones are read, joined with newlines. The messages take {0} (the list's name), {0} and {1} (a
// part's name and its type).
struct TextPartsDialect {
  const char* not_a_list;  // "{0} must be a string or a list of content parts"
  const char* no_type;     // "{0} must be an object with a 'type'"
  const char* not_text;    // "{0}: content of type '{1}' is not supported (text only)"
  std::vector<std::string_view> text_types;
  // Anthropic joins only after text: an empty first part adds no newline.
  bool separate_after_text_only = false;
};
// The content's text; RequestError(400) naming `param` (where the protocol names one).
std::string JoinTextParts(const nlohmann::ordered_json& content, const std::string& at,
                          const TextPartsDialect& dialect, const std::string& param);

}  // namespace infer::server
