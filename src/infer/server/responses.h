// OpenAI's Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}): a parser from
// its JSON, with the conversation of its previous_response_id, to the ChatRequest the handlers
// serve (chat/chat_request.h), and an encoder from the reply's deltas (chat/chat_reply.h) to the
// Responses output items and named events. Stored responses live in a bounded in-memory store.
// Pure: no engine, no sockets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/sampling_params.h"
#include "infer/server/chat/chat_reply.h"
#include "infer/server/chat/chat_request.h"
#include "infer/server/stream.h"

namespace infer::server {

// A stored response: the object GET returns, and the conversation it ends (its input items,
// those of the responses before it, and its output items), which a later request continues with
// previous_response_id.
struct StoredResponse {
  nlohmann::ordered_json response;
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
};

// Stored responses by id, at most `max_entries` of them and `max_bytes` of their JSON text; the
// oldest are evicted to make room. Thread-safe.
class ResponseStore {
 public:
  ResponseStore(size_t max_entries, size_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // Stores `entry` under its response's id (a stored one with that id is replaced), evicting
  // the oldest until both limits hold. False (nothing stored) when the entry alone is over
  // max_bytes, or the store holds no entries.
  bool Put(StoredResponse entry);
  // The stored response, or null.
  std::shared_ptr<const StoredResponse> Get(const std::string& id) const;
  // Whether it was there.
  bool Erase(const std::string& id);
  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::shared_ptr<const StoredResponse> value;
    size_t bytes = 0;
    std::list<std::string>::iterator order;
  };
  void EraseLocked(const std::string& id);

  const size_t max_entries_;
  const size_t max_bytes_;
  mutable std::mutex mutex_;
  std::list<std::string> order_;  // oldest first
  std::unordered_map<std::string, Entry> entries_;
  size_t bytes_ = 0;
};

// A new response id: "resp_" and 32 random hex digits.
std::string NewResponseId();

// A Responses request: the chat it asks for, and what its response object echoes and stores.
struct ResponsesRequest {
  // The chat (streamed to the encoder; how the reply is sent is `stream`'s).
  ChatRequest chat;
  // The conversation so far as Responses items: previous_response_id's, then this input.
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  // The request's settings the response object echoes (instructions, max_output_tokens,
  // parallel_tool_calls, previous_response_id, reasoning, store, text, tool_choice, tools,
  // truncation, user, metadata; temperature and top_p are the handler's, once defaults apply).
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
  bool stream = false;
  bool store = true;
};

// A Responses body as the chat it asks for: `instructions` as the system message; `input` (a
// string, or items: messages with string or input_text / output_text content, developer as
// system, function_call as the assistant's tool calls, function_call_output as tool turns;
// reasoning items are dropped) after the conversation of `previous_response_id` (looked up in
// `store`: an unknown id is RequestError(404)); function tools; tool_choice;
// parallel_tool_calls; text.format (json_schema, json_object, text) as the structured output;
// reasoning.effort as Qwen3's enable_thinking ("none": off); max_output_tokens, temperature,
// top_p over `defaults`; model (when given, one `models` serves: 404 for another). Throws
// RequestError(400) for what this server cannot do (built-in tools, background, conversation,
// prompt templates, include, truncation "auto", images and files, ...). Fields this server does
// not know are the chat's ignored_fields.
ResponsesRequest ParseResponsesRequest(std::string_view body, const ResponseStore& store,
                                       const ModelNames& models, const SamplingParams& defaults);

// The Responses encoding of a one-choice reply (chat_reply.h): its output items (reasoning from the
// reasoning split, message with output_text, function_call from the parsed tool calls), status
// (completed, or incomplete at max_output_tokens) and usage. As a StreamEncoder it writes the
// Responses events (response.created, response.in_progress, the items' added / delta / done events,
// response.completed or response.incomplete; a failure mid-stream is an `error` event and
// response.failed); Final() is the whole response object. Once it ends, a response asked to be
// stored goes into `store` (may be null) with its conversation.
class ResponsesReply final : public StreamEncoder {
 public:
  ResponsesReply(std::shared_ptr<ChatReply> reply, std::string id, std::string model,
                 int64_t created_at, int64_t input_tokens, ResponsesRequest request,
                 ResponseStore* store);

  std::string Start() override;
  std::string Add(const StepOutput& output) override;
  bool finished() const override { return reply_->finished(); }
  std::string End() override;

  // The response object (once finished: the whole of it).
  nlohmann::ordered_json Final() const;

 private:
  enum class Open { kNone, kReasoning, kMessage };
  std::string Translate(const ChatDelta& delta);
  // Appends to the open item of `kind`, opening it first.
  std::string AppendText(Open kind, const std::string& text);
  std::string CloseItem(const std::string& status);
  std::string Event(const std::string& type, const nlohmann::ordered_json& data);
  std::string NewItemId(std::string_view prefix);
  nlohmann::ordered_json Response(const std::string& status) const;

  std::shared_ptr<ChatReply> reply_;
  const std::string id_;
  const std::string model_;
  const int64_t created_at_;
  const int64_t input_tokens_;
  const ResponsesRequest request_;
  ResponseStore* store_;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  Open open_ = Open::kNone;  // output_.back() still takes deltas
  int64_t sequence_number_ = 0;
  int64_t next_item_ = 0;
  int64_t output_tokens_ = 0;
  bool incomplete_ = false;  // ended at max_output_tokens
  std::optional<std::string> error_;
};

}  // namespace infer::server
