// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens): a parser from its
// JSON to the ChatRequest the handlers serve (chat/chat_request.h), and an encoder from the
// reply's deltas (chat/chat_reply.h) to Anthropic's content blocks and named events. Pure: no
// engine, no sockets.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/sampling_params.h"
#include "infer/server/chat/chat_reply.h"
#include "infer/server/chat/chat_request.h"
#include "infer/server/stream.h"

namespace infer::server {

// {"type": "error", "error": {"type", "message"}}: Anthropic's error shape (the type from the
// status: invalid_request_error, authentication_error, not_found_error, request_too_large,
// overloaded_error, api_error, ...).
nlohmann::ordered_json AnthropicErrorJson(int status, std::string_view message);

// An Anthropic Messages body as the chat it asks for: system (a string or text blocks) as the
// first message; messages with string or block content (text, tool_use as the assistant's tool
// calls, tool_result as tool turns); max_tokens (required, except for count_tokens),
// temperature, top_p, top_k, stop_sequences, stream over `defaults`; model (`models`: 404
// for another); tools ({name, description, input_schema}) as function tools; tool_choice (auto,
// any as required, tool as a named function, none; disable_parallel_tool_use); thinking (Qwen3's
// enable_thinking, budget_tokens as the thinking token budget); metadata accepted. Throws
// RequestError(400) for what Anthropic's API refuses or this server cannot do (images,
// documents, server tools, an assistant prefill). Fields this server does not know are the
// request's ignored_fields.
ChatRequest ParseAnthropicRequest(std::string_view body, bool count_tokens,
                                  const ModelNames& models, const SamplingParams& defaults);

// Anthropic's encoding of a one-choice reply (chat_reply.h): content blocks (thinking from the
// reasoning split, text, tool_use from the parsed tool calls), stop_reason (end_turn, max_tokens,
// stop_sequence, tool_use), stop_sequence (the one the engine cut the reply before) and usage (the
// prefix cache's hits as cache_read_input_tokens). As a StreamEncoder it writes Anthropic's named
// events (message_start, ping, content_block_start / _delta / _stop, message_delta, message_stop; a
// failure mid-stream is an `error` event); Final() is the non-streaming reply.
class AnthropicMessage final : public StreamEncoder {
 public:
  AnthropicMessage(std::shared_ptr<ChatReply> reply, std::string id, std::string model,
                   int64_t input_tokens);

  std::string Start() override;
  std::string Add(const StepOutput& output) override;
  bool finished() const override { return reply_->finished(); }
  std::string End() override;

  // The whole message (once finished).
  nlohmann::ordered_json Final() const;
  const std::optional<std::string>& error() const { return reply_->error(); }

 private:
  // Events for one delta of the reply.
  std::string Translate(const ChatDelta& delta);
  // Appends to the open block of `type` (thinking or text), opening it first.
  std::string AppendText(const std::string& type, const std::string& text);
  std::string CloseBlock();
  nlohmann::ordered_json Usage() const;
  static std::string Event(std::string_view name, const nlohmann::ordered_json& data);

  std::shared_ptr<ChatReply> reply_;
  const std::string id_;
  const std::string model_;
  const int64_t input_tokens_;
  nlohmann::ordered_json blocks_ = nlohmann::ordered_json::array();
  bool block_open_ = false;  // blocks_.back() still takes deltas
  int64_t output_tokens_ = 0;
  int64_t cached_tokens_ = 0;  // of input_tokens_, found in the prefix cache
  std::string stop_reason_ = "end_turn";
  std::optional<std::string> stop_sequence_;
  bool failed_ = false;  // an error event was written
};

}  // namespace infer::server
