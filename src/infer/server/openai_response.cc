#include "infer/server/openai_response.h"

#include <algorithm>

#include <fmt/format.h>

namespace infer::server {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

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

// OpenAiResponse ----------------------------------------------------------------------------

OpenAiResponse::OpenAiResponse(const ChatRequest& request, std::string id, std::string model,
                               int64_t created, std::vector<PromptInfo> prompts,
                               const Tokenizer* tokenizer, bool reasoning)
    : OpenAiResponse(
          request,
          std::make_shared<ChatReply>(request, std::move(id), std::move(prompts), reasoning),
          std::move(model), created, tokenizer) {}

OpenAiResponse::OpenAiResponse(const ChatRequest& request, std::shared_ptr<ChatReply> reply,
                               std::string model, int64_t created, const Tokenizer* tokenizer)
    : endpoint_(request.endpoint),
      model_(std::move(model)),
      created_(created),
      n_(request.n),
      stream_(request.stream),
      include_usage_(request.include_usage),
      echo_(request.echo),
      return_token_ids_(request.return_token_ids),
      want_logprobs_(request.params.logprobs.has_value()),
      tokenizer_(tokenizer),
      reply_(std::move(reply)) {}

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
  chunk["id"] = reply_->id();
  chunk["object"] =
      endpoint_ == ChatEndpoint::kChatCompletions ? "chat.completion.chunk" : "text_completion";
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
  if (endpoint_ == ChatEndpoint::kChatCompletions) {
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
  const ChatUsage usage = reply_->Usage();
  return ordered_json{
      {"prompt_tokens", usage.prompt_tokens},
      {"completion_tokens", usage.completion_tokens},
      {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
      {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
      {"completion_tokens_details", {{"reasoning_tokens", usage.reasoning_tokens}}}};
}

namespace {
// Eos, stop strings and the grammar's end are all "stop".
std::string_view OpenAiFinishReason(ChatFinish finish) {
  if (finish == ChatFinish::kLength) return "length";
  return finish == ChatFinish::kToolCalls ? "tool_calls" : "stop";
}

ordered_json ToolCallsJson(const std::vector<ToolCall>& calls, bool streamed) {
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    ordered_json call;
    if (streamed) call["index"] = i;
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}
}  // namespace

std::string OpenAiResponse::StreamStart() {
  std::string lines;
  for (size_t i = 0; i < reply_->choices().size(); ++i) {
    ordered_json chunk = ChunkBase();
    ordered_json choice;
    choice["index"] = i;
    if (endpoint_ == ChatEndpoint::kChatCompletions) {
      choice["delta"] = {{"role", "assistant"}, {"content", ""}};
      choice["logprobs"] = nullptr;
    } else if (echo_) {
      choice["text"] = reply_->choices()[i].text;
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
  const std::vector<ChatDelta> deltas = reply_->Add(output);
  if (!stream_) return {};
  std::string lines;
  for (const ChatDelta& delta : deltas) {
    if (delta.error) {
      lines += DataLine(OpenAiErrorJson(500, *delta.error));
    } else if (ordered_json chunk = DeltaChunk(delta); !chunk.is_null()) {
      lines += DataLine(chunk);
    }
  }
  return lines;
}

ordered_json OpenAiResponse::DeltaChunk(const ChatDelta& delta) const {
  const bool new_token_id = return_token_ids_ && delta.token_id.has_value();
  if (delta.content.empty() && delta.reasoning.empty() && !delta.logprobs && !new_token_id &&
      delta.tool_calls.empty() && !delta.finished) {
    return nullptr;
  }
  ordered_json chunk = ChunkBase();
  ordered_json delta_choice;
  delta_choice["index"] = delta.choice;
  if (endpoint_ == ChatEndpoint::kChatCompletions) {
    ordered_json message = ordered_json::object();
    if (!delta.reasoning.empty()) message["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty()) message["content"] = delta.content;
    if (!delta.tool_calls.empty()) {
      message["tool_calls"] = ToolCallsJson(delta.tool_calls, /*streamed=*/true);
    }
    delta_choice["delta"] = std::move(message);
  } else {
    delta_choice["text"] = delta.content;
  }
  delta_choice["logprobs"] =
      want_logprobs_ && delta.logprobs
          ? LogprobsJson(std::span<const TokenLogprobs>(&*delta.logprobs, 1), delta.text_offset)
          : ordered_json(nullptr);
  if (new_token_id) delta_choice["token_ids"] = ordered_json::array({*delta.token_id});
  delta_choice["finish_reason"] =
      delta.finished ? ordered_json(OpenAiFinishReason(delta.finish)) : ordered_json(nullptr);
  chunk["choices"] = ordered_json::array({std::move(delta_choice)});
  return chunk;
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
  ordered_json response = ChunkBase();  // id, object, created, model, in that order
  response["object"] =
      endpoint_ == ChatEndpoint::kChatCompletions ? "chat.completion" : "text_completion";
  ordered_json choices = ordered_json::array();
  const std::vector<ChatReply::Choice>& all = reply_->choices();
  for (size_t i = 0; i < all.size(); ++i) {
    const ChatReply::Choice& choice = all[i];
    ordered_json entry;
    entry["index"] = i;
    const size_t echo_offset =
        echo_ ? reply_->prompts()[i / static_cast<size_t>(n_)].text.size() : 0;
    const ChatFinish finish = choice.finish();
    if (endpoint_ == ChatEndpoint::kChatCompletions) {
      ordered_json message;
      message["role"] = "assistant";
      message["content"] = choice.text;
      if (finish == ChatFinish::kToolCalls) {
        message["content"] = choice.tools->content.empty() ? ordered_json(nullptr)
                                                           : ordered_json(choice.tools->content);
        message["tool_calls"] = ToolCallsJson(choice.tools->calls, /*streamed=*/false);
      }
      entry["finish_reason"] = OpenAiFinishReason(finish);
      if (reply_->splits_reasoning()) {
        message["reasoning_content"] =
            choice.reasoning.empty() ? ordered_json(nullptr) : ordered_json(choice.reasoning);
      }
      entry["message"] = std::move(message);
    } else {
      entry["text"] = choice.text;
    }
    entry["logprobs"] =
        want_logprobs_ ? LogprobsJson(choice.logprobs, echo_offset) : ordered_json(nullptr);
    if (!entry.contains("finish_reason")) entry["finish_reason"] = OpenAiFinishReason(finish);
    if (return_token_ids_) entry["token_ids"] = choice.token_ids;
    choices.push_back(std::move(entry));
  }
  response["choices"] = std::move(choices);
  response["usage"] = Usage();
  if (return_token_ids_) {
    const std::vector<PromptInfo>& prompts = reply_->prompts();
    if (prompts.size() == 1) {
      response["prompt_token_ids"] = prompts.front().ids;
    } else {
      ordered_json all_ids = ordered_json::array();
      for (const PromptInfo& prompt : prompts) all_ids.push_back(prompt.ids);
      response["prompt_token_ids"] = std::move(all_ids);
    }
  }
  return response;
}

}  // namespace infer::server
