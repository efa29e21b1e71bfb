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
      tools_(request.endpoint == OpenAiEndpoint::kChatCompletions && request.tools &&
                     request.tools->choice.mode != ToolChoice::Mode::kNone
                 ? request.tools
                 : std::nullopt),
      tool_format_(request.tool_format),
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
  int64_t reasoning_tokens = 0;
  for (const Choice& choice : choices_) {
    completion_tokens += choice.completion_tokens;
    reasoning_tokens += choice.reasoning_tokens;
  }
  // Per prompt, the prompt tokens every one of its choices found in the prefix cache.
  int64_t cached_tokens = 0;
  const size_t per_prompt = prompts_.empty() ? 0 : choices_.size() / prompts_.size();
  for (size_t p = 0; p < prompts_.size() && per_prompt > 0; ++p) {
    int64_t cached = choices_[p * per_prompt].cached_tokens;
    for (size_t c = p * per_prompt; c < (p + 1) * per_prompt; ++c) {
      cached = std::min(cached, choices_[c].cached_tokens);
    }
    cached_tokens += cached;
  }
  return ordered_json{{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}},
                      {"completion_tokens_details", {{"reasoning_tokens", reasoning_tokens}}}};
}

namespace {
std::string_view OpenAiFinishReason(std::optional<FinishReason> reason) {
  return reason == FinishReason::kLength ? "length" : "stop";  // eos and stop strings: "stop"
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

ordered_json OpenAiResponse::ToolReplyChunk(size_t index, const Choice& choice) const {
  const ParsedReply reply = ParseToolCalls(choice.text, tool_format_, *tools_);
  ordered_json delta = ordered_json::object();
  if (reply.calls.empty()) {
    // No call: the text not streamed yet.
    if (choice.streamed < choice.text.size())
      delta["content"] = choice.text.substr(choice.streamed);
  } else {
    // Calls: the text before the first one was streamed as content already.
    delta["tool_calls"] = ToolCallsJson(reply.calls, /*streamed=*/true);
  }
  ordered_json delta_choice = {
      {"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}};
  delta_choice["finish_reason"] =
      reply.calls.empty() ? OpenAiFinishReason(choice.finish_reason) : "tool_calls";
  ordered_json chunk = ChunkBase();
  chunk["choices"] = ordered_json::array({std::move(delta_choice)});
  return chunk;
}

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

ReasoningSplitter::Parts OpenAiResponse::SplitText(Choice& choice, const StepOutput& output) {
  if (!reasoning_) return {{}, output.text_delta};
  ReasoningSplitter::Parts parts = choice.splitter.Feed(output.text_delta);
  if (output.finished) {
    ReasoningSplitter::Parts rest = choice.splitter.Finish();
    parts.reasoning += rest.reasoning;
    parts.content += rest.content;
  }
  return parts;
}

std::string OpenAiResponse::Add(const StepOutput& output) {
  std::string lines;
  for (const ordered_json& chunk : AddChunks(output)) lines += DataLine(chunk);
  return lines;
}

std::vector<ordered_json> OpenAiResponse::AddChunks(const StepOutput& output) {
  const auto found = choice_of_request_.find(output.request_id);
  if (found == choice_of_request_.end()) return {};
  const size_t index = found->second;
  Choice& choice = choices_[index];
  if (choice.finished) return {};
  const size_t text_offset = choice.text.size();
  auto [reasoning, content] = SplitText(choice, output);
  if (output.token_id && !output.error && !reasoning.empty() && content.empty()) {
    ++choice.reasoning_tokens;
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
  choice.cached_tokens = output.cached_tokens;
  if (output.finished) {
    choice.finished = true;
    choice.finish_reason = output.finish_reason;
    ++num_finished_;
    if (output.error && !error_) error_ = output.error;
  }
  if (!stream_) return {};
  if (output.error) return {OpenAiErrorJson(500, *output.error)};
  if (tools_) {
    // The reply may hold a call: text that cannot be part of one streams as content; from
    // where a call may start it is held, and sent when the choice ends, parsed into tool_calls
    // (or as the rest of the content). Reasoning streams as usual.
    const size_t safe =
        output.finished ? choice.streamed : StreamableToolText(choice.text, tool_format_);
    std::string now =
        safe > choice.streamed ? choice.text.substr(choice.streamed, safe - choice.streamed) : "";
    choice.streamed = std::max(choice.streamed, safe);
    std::vector<ordered_json> chunks;
    if (!reasoning.empty() || !now.empty()) {
      StepOutput partial = output;
      partial.finished = false;
      chunks.push_back(
          DeltaChunk(index, partial, {std::move(reasoning), std::move(now)}, {}, text_offset));
    }
    if (output.finished) chunks.push_back(ToolReplyChunk(index, choice));
    return chunks;
  }
  const bool new_token_id = return_token_ids_ && output.token_id.has_value();
  if (content.empty() && reasoning.empty() && new_logprobs.empty() && !new_token_id &&
      !output.finished) {
    return {};
  }
  return {DeltaChunk(index, output, {std::move(reasoning), std::move(content)}, new_logprobs,
                     text_offset)};
}

ordered_json OpenAiResponse::DeltaChunk(size_t index, const StepOutput& output,
                                        const ReasoningSplitter::Parts& text,
                                        std::span<const TokenLogprobs> new_logprobs,
                                        size_t text_offset) const {
  const std::string& reasoning = text.reasoning;
  const std::string& content = text.content;
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
      endpoint_ == OpenAiEndpoint::kChatCompletions ? "chat.completion" : "text_completion";
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
      std::string_view finish_reason = OpenAiFinishReason(choice.finish_reason);
      if (tools_) {
        const ParsedReply reply = ParseToolCalls(choice.text, tool_format_, *tools_);
        if (!reply.calls.empty()) {
          message["content"] =
              reply.content.empty() ? ordered_json(nullptr) : ordered_json(reply.content);
          message["tool_calls"] = ToolCallsJson(reply.calls, /*streamed=*/false);
          finish_reason = "tool_calls";
        }
      }
      entry["finish_reason"] = finish_reason;
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
    if (!entry.contains("finish_reason")) {
      entry["finish_reason"] = OpenAiFinishReason(choice.finish_reason);
    }
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
