// OpenAI's API on the engine, the responses: `chat.completion` / `text_completion` objects
// assembled from the engine's StepOutputs, or their streamed chunks (`data: {...}` lines closed
// by `data: [DONE]`), and OpenAI's error shape. Pure: no sockets.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/output.h"
#include "infer/server/chat/chat_reply.h"
#include "infer/server/openai_request.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer::server {

// {"error": {"message", "type", "param", "code"}}: OpenAI's error shape.
nlohmann::ordered_json OpenAiErrorJson(int status, std::string_view message,
                                       std::string_view param = {});

// OpenAI's encoding of one reply (chat_reply.h), fed with every StepOutput of the request's
// engine requests (choice i's engine request id is ChoiceRequestId(base, i)): its chunks when
// streaming, its whole object when not.
class OpenAiResponse {
 public:
  using PromptInfo = ChatReply::PromptInfo;
  // `prompts`: each prompt's ids (choices [p*n, (p+1)*n) belong to prompt p). `tokenizer` may be
  // null (token strings of logprobs are then empty). `reasoning`: split <think> text (chat).
  OpenAiResponse(const ChatRequest& request, std::string id, std::string model, int64_t created,
                 std::vector<PromptInfo> prompts, const Tokenizer* tokenizer, bool reasoning);
  // The encoding of `reply`, made for `request`.
  OpenAiResponse(const ChatRequest& request, std::shared_ptr<ChatReply> reply, std::string model,
                 int64_t created, const Tokenizer* tokenizer);

  static std::string ChoiceRequestId(std::string_view base, int64_t choice) {
    return ChatReply::ChoiceRequestId(base, choice);
  }
  int64_t num_choices() const { return reply_->num_choices(); }
  const std::string& id() const { return reply_->id(); }
  bool finished() const { return reply_->finished(); }
  // The first error of a failed choice, if any.
  const std::optional<std::string>& error() const { return reply_->error(); }

  // Streaming: the chunks that open the stream (chat: each choice's role delta; completions
  // with echo: the prompt texts).
  std::string StreamStart();
  // Records `output`; when streaming, returns the SSE lines it becomes (possibly none).
  std::string Add(const StepOutput& output);
  // Streaming: the usage chunk (when asked) and `data: [DONE]`; call once all choices ended.
  std::string StreamEnd();
  // Non-streaming: the whole response object.
  nlohmann::ordered_json Final() const;
  // {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details.cached_tokens,
  // completion_tokens_details.reasoning_tokens} so far.
  nlohmann::ordered_json Usage() const;

 private:
  nlohmann::ordered_json ChunkBase() const;
  // The streamed chunk of one delta, or null when it brings nothing a client sees.
  nlohmann::ordered_json DeltaChunk(const ChatDelta& delta) const;
  nlohmann::ordered_json LogprobsJson(std::span<const TokenLogprobs> logprobs,
                                      size_t text_offset) const;
  std::string TokenText(int32_t id) const;
  static std::string DataLine(const nlohmann::ordered_json& chunk);

  const ChatEndpoint endpoint_;
  const std::string model_;
  const int64_t created_;
  const int64_t n_;
  const bool stream_;
  const bool include_usage_;
  const bool echo_;
  const bool return_token_ids_;
  const bool want_logprobs_;
  const Tokenizer* tokenizer_;
  std::shared_ptr<ChatReply> reply_;
};

}  // namespace infer::server
