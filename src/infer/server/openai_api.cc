#include "infer/server/openai_api.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "infer/core/error.h"

namespace infer::server {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr int kBadRequest = 400;
constexpr int kNotFound = 404;

[[noreturn]] void Reject(const std::string& message, const std::string& param = {},
                         int status = kBadRequest) {
  throw RequestError(status, message, param);
}

int64_t Integer(const json& value, const char* name) {
  const auto integer = JsonInteger(value);
  if (!integer) Reject(fmt::format("'{}' must be an integer", name), name);
  return *integer;
}

double Number(const json& value, const char* name) {
  if (!value.is_number()) Reject(fmt::format("'{}' must be a number", name), name);
  return value.get<double>();
}

bool Boolean(const json& value, const char* name) {
  if (!value.is_boolean()) Reject(fmt::format("'{}' must be a boolean", name), name);
  return value.get<bool>();
}

// The fields both endpoints share; `known` collects the names handled.
class Fields {
 public:
  explicit Fields(const json& root) : root_(root) {}

  // The field's value, or null when absent or null (the default then applies).
  const json* Get(const char* name) {
    known_.emplace_back(name);
    const auto it = root_.find(name);
    return it == root_.end() || it->is_null() ? nullptr : &*it;
  }
  std::vector<std::string> Unknown() const {
    std::vector<std::string> unknown;
    for (const auto& [key, value] : root_.items()) {
      if (std::find(known_.begin(), known_.end(), key) == known_.end()) unknown.push_back(key);
    }
    return unknown;
  }

 private:
  const json& root_;
  std::vector<std::string> known_;
};

json ParseBody(std::string_view body) {
  json root = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) Reject("the request body is not valid JSON");
  if (!root.is_object()) Reject("the request body must be a JSON object");
  return root;
}

// Features that change what is generated and that this server does not implement: refused
// rather than silently ignored.
void RefuseUnsupported(Fields& fields) {
  if (const json* tools = fields.Get("tools"); tools && !(tools->is_array() && tools->empty())) {
    Reject("tool calling ('tools') is not supported by this server", "tools");
  }
  if (const json* choice = fields.Get("tool_choice"); choice && *choice != "none") {
    Reject("tool calling ('tool_choice') is not supported by this server", "tool_choice");
  }
  for (const char* name : {"functions", "function_call"}) {
    if (fields.Get(name)) Reject(fmt::format("'{}' is not supported by this server", name), name);
  }
  if (const json* format = fields.Get("response_format")) {
    const bool text = format->is_object() && format->value("type", "") == "text";
    if (!text) {
      Reject(
          "'response_format' other than {\"type\": \"text\"} (JSON mode, JSON schema) is not "
          "supported by this server",
          "response_format");
    }
  }
  for (const char* name : {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                           "structured_outputs", "prompt_logprobs", "audio", "prediction"}) {
    if (fields.Get(name)) Reject(fmt::format("'{}' is not supported by this server", name), name);
  }
  if (const json* modalities = fields.Get("modalities");
      modalities && *modalities != json::array({"text"})) {
    Reject("only the \"text\" modality is supported", "modalities");
  }
}

// The sampling fields of both endpoints, over `defaults`.
void ParseSampling(Fields& fields, OpenAiRequest& request, const std::string& served_model) {
  if (const json* model = fields.Get("model")) {
    if (!model->is_string()) Reject("'model' must be a string", "model");
    request.model = model->get<std::string>();
    if (request.model != served_model) {
      Reject(fmt::format("The model `{}` does not exist (this server serves `{}`).", request.model,
                         served_model),
             "model", kNotFound);
    }
  } else {
    request.model = served_model;
  }
  SamplingParams& params = request.params;
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (const json* value = fields.Get(name)) {
      request.max_tokens = Integer(*value, name);
      if (*request.max_tokens < 1) {
        Reject(fmt::format("'{}' must be at least 1, got {}", name, *request.max_tokens), name);
      }
    }
  }
  // Plain numbers and flags (ranges are checked by SamplingParams::Validate).
  for (const auto& [name, target] :
       {std::pair{"temperature", &params.temperature}, std::pair{"top_p", &params.top_p},
        std::pair{"repetition_penalty", &params.repetition_penalty},
        std::pair{"presence_penalty", &params.presence_penalty},
        std::pair{"frequency_penalty", &params.frequency_penalty}}) {
    if (const json* value = fields.Get(name)) *target = Number(*value, name);
  }
  for (const auto& [name, target] :
       {std::pair{"stream", &request.stream}, std::pair{"ignore_eos", &params.ignore_eos},
        std::pair{"return_token_ids", &request.return_token_ids}}) {
    if (const json* value = fields.Get(name)) *target = Boolean(*value, name);
  }
  if (const json* value = fields.Get("top_k")) {
    const int64_t top_k = Integer(*value, "top_k");
    if (top_k < -1) Reject(fmt::format("'top_k' must be >= 1, or 0 / -1 for off, got {}", top_k));
    params.top_k = top_k >= 1 ? std::optional(top_k) : std::nullopt;
  }
  if (const json* value = fields.Get("logit_bias")) {
    if (!value->is_object()) Reject("'logit_bias' must be an object of token id: bias");
    for (const auto& [key, bias] : value->items()) {
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
      params.logit_bias[static_cast<int32_t>(id)] = Number(bias, "logit_bias");
    }
  }
  if (const json* value = fields.Get("stop")) params.stop = ParseStopField(*value);
  if (const json* value = fields.Get("seed")) {
    const int64_t seed = Integer(*value, "seed");
    if (seed < 0) Reject(fmt::format("'seed' must be >= 0, got {}", seed), "seed");
    params.seed = static_cast<uint64_t>(seed);
  }
  if (const json* value = fields.Get("n")) {
    request.n = Integer(*value, "n");
    if (request.n < 1 || request.n > 128) {
      Reject(fmt::format("'n' must be in [1, 128], got {}", request.n), "n");
    }
  }
  if (const json* value = fields.Get("stream_options")) {
    if (!value->is_object()) Reject("'stream_options' must be an object", "stream_options");
    if (const auto it = value->find("include_usage"); it != value->end() && !it->is_null()) {
      request.include_usage = Boolean(*it, "stream_options.include_usage");
    }
  }
  if (const json* value = fields.Get("min_tokens")) {
    params.min_tokens = Integer(*value, "min_tokens");
  }
  if (const json* value = fields.Get("priority")) {
    request.priority = Integer(*value, "priority");
    if (request.priority < -(int64_t{1} << 31) || request.priority >= (int64_t{1} << 31)) {
      Reject(fmt::format("'priority' must fit 32 bits, got {}", request.priority), "priority");
    }
  }
  // Accepted and without effect on the output.
  for (const char* name : {"user", "metadata", "store", "service_tier", "parallel_tool_calls",
                           "skip_special_tokens", "spaces_between_special_tokens"}) {
    fields.Get(name);
  }
}

// Validates params once max_tokens is known (a placeholder when it is derived later).
void ValidateParams(const OpenAiRequest& request) {
  SamplingParams params = request.params;
  params.max_new_tokens = request.max_tokens.value_or(std::numeric_limits<int32_t>::max());
  try {
    params.Validate();
  } catch (const Error& e) {
    Reject(e.what());
  }
}

// A message's content as text: a string, or a list of text parts joined with newlines (as
// vLLM joins them).
std::string MessageContent(const json& content, size_t index) {
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) Reject(param + " must be a string or a list of content parts", param);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      Reject(fmt::format("{}[{}] must be an object with a 'type'", param, i), param);
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      Reject(
          fmt::format("{}[{}]: content of type '{}' is not supported (text only)", param, i, type),
          param);
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      Reject(fmt::format("{}[{}].text must be a string", param, i), param);
    }
    if (i > 0) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

ordered_json ParseMessages(const json& messages) {
  if (!messages.is_array() || messages.empty()) {
    Reject("'messages' must be a non-empty list", "messages");
  }
  ordered_json out = ordered_json::array();
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
    if (name == "tool" || name == "function") {
      Reject(fmt::format("{}: role '{}' needs tool calling, which is not supported", param, name),
             param + ".role");
    }
    if (name != "system" && name != "user" && name != "assistant") {
      Reject(fmt::format("{}.role must be system, developer, user or assistant, got '{}'", param,
                         name),
             param + ".role");
    }
    if (message.contains("tool_calls") && !message["tool_calls"].is_null() &&
        !message["tool_calls"].empty()) {
      Reject(param + ": tool_calls are not supported", param + ".tool_calls");
    }
    const auto content = message.find("content");
    out.push_back(
        {{"role", name}, {"content", content == message.end() ? "" : MessageContent(*content, i)}});
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

}  // namespace

ordered_json OpenAiErrorJson(int status, std::string_view message, std::string_view param) {
  std::string_view type = "server_error";
  switch (status) {
    case 400:
      type = "invalid_request_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 422:
      type = "validation_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 503:
      type = "service_unavailable";
      break;
    default:
      break;
  }
  ordered_json error;
  error["message"] = message;
  error["type"] = type;
  error["param"] = param.empty() ? ordered_json(nullptr) : ordered_json(param);
  error["code"] = status;
  return ordered_json{{"error", std::move(error)}};
}

OpenAiRequest ParseChatCompletionRequest(std::string_view body, std::string_view served_model,
                                         const SamplingParams& defaults) {
  const json root = ParseBody(body);
  Fields fields(root);
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kChatCompletions;
  request.params = defaults;
  RefuseUnsupported(fields);
  const json* messages = fields.Get("messages");
  if (!messages) Reject("missing required field 'messages'", "messages");
  request.messages = ParseMessages(*messages);
  ParseSampling(fields, request, std::string(served_model));
  const json* logprobs = fields.Get("logprobs");
  const bool want_logprobs = logprobs && Boolean(*logprobs, "logprobs");
  if (const json* value = fields.Get("top_logprobs")) {
    const int64_t top = Integer(*value, "top_logprobs");
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
    request.chat_template_kwargs = *value;
  }
  if (const json* value = fields.Get("add_generation_prompt")) {
    request.add_generation_prompt = Boolean(*value, "add_generation_prompt");
  }
  if (const json* value = fields.Get("continue_final_message");
      value && Boolean(*value, "continue_final_message")) {
    Reject("'continue_final_message' is not supported by this server", "continue_final_message");
  }
  request.ignored_fields = fields.Unknown();
  ValidateParams(request);
  return request;
}

OpenAiRequest ParseOpenAiCompletionRequest(std::string_view body, std::string_view served_model,
                                           const SamplingParams& defaults) {
  const json root = ParseBody(body);
  Fields fields(root);
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kCompletions;
  request.params = defaults;
  request.max_tokens = 16;  // OpenAI's default for completions
  RefuseUnsupported(fields);
  const json* prompt = fields.Get("prompt");
  if (!prompt) Reject("missing required field 'prompt'", "prompt");
  request.prompts = ParsePrompts(*prompt);
  ParseSampling(fields, request, std::string(served_model));
  if (const json* value = fields.Get("logprobs")) {
    const int64_t top = Integer(*value, "logprobs");
    if (top < 0 || top > kMaxLogprobs) {
      Reject(fmt::format("'logprobs' must be in [0, {}], got {}", kMaxLogprobs, top), "logprobs");
    }
    request.params.logprobs = top;
  } else {
    request.params.logprobs.reset();
  }
  if (const json* value = fields.Get("echo")) request.echo = Boolean(*value, "echo");
  if (request.echo && request.params.logprobs) {
    Reject("'echo' together with 'logprobs' (prompt logprobs) is not supported", "echo");
  }
  if (const json* value = fields.Get("best_of")) {
    if (Integer(*value, "best_of") != request.n) {
      Reject("'best_of' other than n is not supported", "best_of");
    }
  }
  if (const json* value = fields.Get("suffix"); value && *value != "") {
    Reject("'suffix' is not supported by this server", "suffix");
  }
  request.ignored_fields = fields.Unknown();
  ValidateParams(request);
  return request;
}

// ReasoningSplitter -------------------------------------------------------------------------

namespace {
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  for (size_t length = std::min(text.size(), tag.size() - 1); length > 0; --length) {
    if (text.substr(text.size() - length) == tag.substr(0, length)) return length;
  }
  return 0;
}
}  // namespace

ReasoningSplitter::Parts ReasoningSplitter::Feed(std::string_view text) {
  pending_.append(text);
  return Drain(false);
}

ReasoningSplitter::Parts ReasoningSplitter::Finish() { return Drain(true); }

ReasoningSplitter::Parts ReasoningSplitter::Drain(bool final) {
  Parts parts;
  while (!pending_.empty()) {
    if (state_ == State::kAfter) {
      parts.content += pending_;
      pending_.clear();
      break;
    }
    const std::string_view tag = state_ == State::kBefore ? kThinkStart : kThinkEnd;
    std::string& out = state_ == State::kBefore ? parts.content : parts.reasoning;
    const size_t at = pending_.find(tag);
    if (at != std::string::npos) {
      out.append(pending_, 0, at);
      pending_.erase(0, at + tag.size());
      state_ = state_ == State::kBefore ? State::kThinking : State::kAfter;
      continue;
    }
    const size_t keep = final ? 0 : PartialTagSuffix(pending_, tag);
    out.append(pending_, 0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    break;
  }
  return parts;
}

// OpenAiResponse ----------------------------------------------------------------------------

OpenAiResponse::OpenAiResponse(const OpenAiRequest& request, std::string id, std::string model,
                               int64_t created, std::vector<PromptInfo> prompts,
                               const Tokenizer* tokenizer, bool reasoning)
    : endpoint_(request.endpoint),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      n_(request.n),
      stream_(request.stream),
      include_usage_(request.include_usage),
      echo_(request.echo),
      return_token_ids_(request.return_token_ids),
      want_logprobs_(request.params.logprobs.has_value()),
      reasoning_(reasoning && request.endpoint == OpenAiEndpoint::kChatCompletions),
      prompts_(std::move(prompts)),
      tokenizer_(tokenizer),
      choices_(prompts_.size() * static_cast<size_t>(request.n)) {
  for (size_t i = 0; i < choices_.size(); ++i) {
    choice_of_request_.emplace(ChoiceRequestId(id_, static_cast<int64_t>(i)), i);
    if (echo_) choices_[i].text = prompts_[i / static_cast<size_t>(n_)].text;
  }
}

std::string OpenAiResponse::ChoiceRequestId(std::string_view base, int64_t choice) {
  return fmt::format("{}-{}", base, choice);
}

std::string OpenAiResponse::TokenText(int32_t id) const {
  if (tokenizer_ == nullptr) return {};
  return tokenizer_->Decode(std::span<const int32_t>(&id, 1), /*skip_special_tokens=*/false);
}

std::string OpenAiResponse::DataLine(const ordered_json& chunk) {
  return fmt::format("data: {}\n\n",
                     chunk.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
}

ordered_json OpenAiResponse::ChunkBase() const {
  ordered_json chunk;
  chunk["id"] = id_;
  chunk["object"] =
      endpoint_ == OpenAiEndpoint::kChatCompletions ? "chat.completion.chunk" : "text_completion";
  chunk["created"] = created_;
  chunk["model"] = model_;
  return chunk;
}

ordered_json OpenAiResponse::LogprobsJson(std::span<const TokenLogprobs> logprobs,
                                          size_t text_offset) const {
  const auto bytes = [](const std::string& text) {
    ordered_json list = ordered_json::array();
    for (const char c : text) list.push_back(static_cast<unsigned char>(c));
    return list;
  };
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
    ordered_json content = ordered_json::array();
    for (const TokenLogprobs& entry : logprobs) {
      const std::string token = TokenText(entry.token_id);
      ordered_json top = ordered_json::array();
      for (const auto& [id, logprob] : entry.top) {
        const std::string text = TokenText(id);
        top.push_back({{"token", text}, {"logprob", logprob}, {"bytes", bytes(text)}});
      }
      content.push_back({{"token", token},
                         {"logprob", entry.logprob},
                         {"bytes", bytes(token)},
                         {"top_logprobs", std::move(top)}});
    }
    return ordered_json{{"content", std::move(content)}};
  }
  ordered_json tokens = ordered_json::array();
  ordered_json token_logprobs = ordered_json::array();
  ordered_json top_logprobs = ordered_json::array();
  ordered_json offsets = ordered_json::array();
  for (const TokenLogprobs& entry : logprobs) {
    const std::string token = TokenText(entry.token_id);
    tokens.push_back(token);
    token_logprobs.push_back(entry.logprob);
    ordered_json top = ordered_json::object();
    for (const auto& [id, logprob] : entry.top) top[TokenText(id)] = logprob;
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += token.size();
  }
  return ordered_json{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_logprobs)},
                      {"top_logprobs", std::move(top_logprobs)},
                      {"text_offset", std::move(offsets)}};
}

ordered_json OpenAiResponse::Usage() const {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  for (const PromptInfo& prompt : prompts_) prompt_tokens += std::ssize(prompt.ids);
  for (const Choice& choice : choices_) completion_tokens += choice.completion_tokens;
  return ordered_json{{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
std::string_view OpenAiFinishReason(std::optional<FinishReason> reason) {
  return reason == FinishReason::kLength ? "length" : "stop";  // eos and stop strings: "stop"
}
}  // namespace

std::string OpenAiResponse::StreamStart() {
  std::string lines;
  for (size_t i = 0; i < choices_.size(); ++i) {
    ordered_json chunk = ChunkBase();
    ordered_json choice;
    choice["index"] = i;
    if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
      choice["delta"] = {{"role", "assistant"}, {"content", ""}};
      choice["logprobs"] = nullptr;
    } else if (echo_) {
      choice["text"] = choices_[i].text;
      choice["logprobs"] = nullptr;
    } else {
      continue;
    }
    choice["finish_reason"] = nullptr;
    chunk["choices"] = ordered_json::array({std::move(choice)});
    lines += DataLine(chunk);
  }
  return lines;
}

std::string OpenAiResponse::Add(const StepOutput& output) {
  const auto found = choice_of_request_.find(output.request_id);
  if (found == choice_of_request_.end()) return {};
  const size_t index = found->second;
  Choice& choice = choices_[index];
  if (choice.finished) return {};
  const size_t text_offset = choice.text.size();
  std::string content = output.text_delta;
  std::string reasoning;
  if (reasoning_) {
    ReasoningSplitter::Parts parts = choice.splitter.Feed(output.text_delta);
    if (output.finished) {
      ReasoningSplitter::Parts rest = choice.splitter.Finish();
      parts.reasoning += rest.reasoning;
      parts.content += rest.content;
    }
    content = std::move(parts.content);
    reasoning = std::move(parts.reasoning);
  }
  choice.text += content;
  choice.reasoning += reasoning;
  if (output.token_id && !output.error) choice.token_ids.push_back(*output.token_id);
  std::span<const TokenLogprobs> new_logprobs;
  if (output.logprobs && !output.error) {
    choice.logprobs.push_back(*output.logprobs);
    new_logprobs = std::span(choice.logprobs).last(1);
  }
  choice.completion_tokens = output.completion_tokens;
  if (output.finished) {
    choice.finished = true;
    choice.finish_reason = output.finish_reason;
    ++num_finished_;
    if (output.error && !error_) error_ = output.error;
  }
  if (!stream_) return {};
  if (output.error) {
    return DataLine(OpenAiErrorJson(500, *output.error));
  }
  const bool new_token_id = return_token_ids_ && output.token_id.has_value();
  if (content.empty() && reasoning.empty() && new_logprobs.empty() && !new_token_id &&
      !output.finished) {
    return {};
  }
  ordered_json chunk = ChunkBase();
  ordered_json delta_choice;
  delta_choice["index"] = index;
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
    ordered_json delta = ordered_json::object();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!content.empty()) delta["content"] = content;
    delta_choice["delta"] = std::move(delta);
  } else {
    delta_choice["text"] = content;
  }
  delta_choice["logprobs"] = want_logprobs_ && !new_logprobs.empty()
                                 ? LogprobsJson(new_logprobs, text_offset)
                                 : ordered_json(nullptr);
  if (return_token_ids_ && output.token_id) {
    delta_choice["token_ids"] = ordered_json::array({*output.token_id});
  }
  delta_choice["finish_reason"] = output.finished
                                      ? ordered_json(OpenAiFinishReason(output.finish_reason))
                                      : ordered_json(nullptr);
  chunk["choices"] = ordered_json::array({std::move(delta_choice)});
  return DataLine(chunk);
}

std::string OpenAiResponse::StreamEnd() {
  std::string lines;
  if (include_usage_) {
    ordered_json chunk = ChunkBase();
    chunk["choices"] = ordered_json::array();
    chunk["usage"] = Usage();
    lines += DataLine(chunk);
  }
  lines += "data: [DONE]\n\n";
  return lines;
}

ordered_json OpenAiResponse::Final() const {
  ordered_json response;
  response["id"] = id_;
  response["object"] =
      endpoint_ == OpenAiEndpoint::kChatCompletions ? "chat.completion" : "text_completion";
  response["created"] = created_;
  response["model"] = model_;
  ordered_json choices = ordered_json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& choice = choices_[i];
    ordered_json entry;
    entry["index"] = i;
    const size_t echo_offset = echo_ ? prompts_[i / static_cast<size_t>(n_)].text.size() : 0;
    if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
      ordered_json message;
      message["role"] = "assistant";
      message["content"] = choice.text;
      if (reasoning_) {
        message["reasoning_content"] =
            choice.reasoning.empty() ? ordered_json(nullptr) : ordered_json(choice.reasoning);
      }
      entry["message"] = std::move(message);
    } else {
      entry["text"] = choice.text;
    }
    entry["logprobs"] =
        want_logprobs_ ? LogprobsJson(choice.logprobs, echo_offset) : ordered_json(nullptr);
    entry["finish_reason"] = OpenAiFinishReason(choice.finish_reason);
    if (return_token_ids_) entry["token_ids"] = choice.token_ids;
    choices.push_back(std::move(entry));
  }
  response["choices"] = std::move(choices);
  response["usage"] = Usage();
  if (return_token_ids_) {
    if (prompts_.size() == 1) {
      response["prompt_token_ids"] = prompts_.front().ids;
    } else {
      ordered_json all = ordered_json::array();
      for (const PromptInfo& prompt : prompts_) all.push_back(prompt.ids);
      response["prompt_token_ids"] = std::move(all);
    }
  }
  return response;
}

}  // namespace infer::server
