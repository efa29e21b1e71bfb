// OpenAI's API on the engine, the responses: `chat.completion` / `text_completion` objects
// assembled from the engine's StepOutputs, or their streamed chunks (`data: {...}` lines closed
// by `data: [DONE]`), and OpenAI's error shape. Pure: no sockets.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/output.h"
#include "infer/server/openai_request.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer::server {

// {"error": {"message", "type", "param", "code"}}: OpenAI's error shape.
nlohmann::ordered_json OpenAiErrorJson(int status, std::string_view message,
                                       std::string_view param = {});

// Splits generated text into reasoning and content as vLLM's Qwen3 reasoning parser does: text
// between <think> and </think> is reasoning, the tags themselves are dropped, the rest is
// content. Fed incrementally (the tags may be split across pieces).
class ReasoningSplitter {
 public:
  struct Parts {
    std::string reasoning;
    std::string content;
  };
  Parts Feed(std::string_view text);
  // Whatever was held back as a possible start of a tag.
  Parts Finish();

 private:
  enum class State { kBefore, kThinking, kAfter };
  Parts Drain(bool final);
  State state_ = State::kBefore;
  std::string pending_;
};

// One response under assembly: the choices' text, ids, logprobs and finish reasons, fed with
// every StepOutput of the request's engine requests (choice i's engine request id is
// ChoiceRequestId(base, i)).
class OpenAiResponse {
 public:
  struct PromptInfo {
    std::vector<int32_t> ids;
    std::string text;  // for echo
  };
  // `prompts`: each prompt's ids (choices [p*n, (p+1)*n) belong to prompt p). `tokenizer` may be
  // null (token strings of logprobs are then empty). `reasoning`: split <think> text (chat).
  OpenAiResponse(const OpenAiRequest& request, std::string id, std::string model, int64_t created,
                 std::vector<PromptInfo> prompts, const Tokenizer* tokenizer, bool reasoning);

  static std::string ChoiceRequestId(std::string_view base, int64_t choice);
  int64_t num_choices() const { return static_cast<int64_t>(choices_.size()); }
  const std::string& id() const { return id_; }
  bool finished() const { return num_finished_ == choices_.size(); }
  // The first error of a failed choice, if any.
  const std::optional<std::string>& error() const { return error_; }

  // Streaming: the chunks that open the stream (chat: each choice's role delta; completions
  // with echo: the prompt texts).
  std::string StreamStart();
  // Records `output`; when streaming, returns the SSE lines it becomes (possibly none).
  std::string Add(const StepOutput& output);
  // The same as chunk objects (a failed choice's chunk is OpenAI's error object): what another
  // protocol translates its stream from.
  std::vector<nlohmann::ordered_json> AddChunks(const StepOutput& output);
  // Streaming: the usage chunk (when asked) and `data: [DONE]`; call once all choices ended.
  std::string StreamEnd();
  // Non-streaming: the whole response object.
  nlohmann::ordered_json Final() const;
  // {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details.cached_tokens,
  // completion_tokens_details.reasoning_tokens} so far.
  nlohmann::ordered_json Usage() const;

 private:
  struct Choice {
    std::string text;
    std::string reasoning;
    std::vector<int32_t> token_ids;
    std::vector<TokenLogprobs> logprobs;
    std::optional<FinishReason> finish_reason;
    ReasoningSplitter splitter;
    bool finished = false;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;     // prompt tokens its request found in the prefix cache
    int64_t reasoning_tokens = 0;  // steps whose text went to the reasoning alone
    size_t streamed = 0;           // with tools: how much of `text` was sent as content
  };
  nlohmann::ordered_json ChunkBase() const;
  // `output`'s text, split into reasoning and content when the response splits them.
  ReasoningSplitter::Parts SplitText(Choice& choice, const StepOutput& output);
  // The streamed chunk of one choice's new text, logprobs and token id.
  nlohmann::ordered_json DeltaChunk(size_t index, const StepOutput& output,
                                    const ReasoningSplitter::Parts& text,
                                    std::span<const TokenLogprobs> new_logprobs,
                                    size_t text_offset) const;
  nlohmann::ordered_json LogprobsJson(std::span<const TokenLogprobs> logprobs,
                                      size_t text_offset) const;
  // The end of a choice whose reply may hold tool calls: its text parsed, as one delta.
  nlohmann::ordered_json ToolReplyChunk(size_t index, const Choice& choice) const;
  std::string TokenText(int32_t id) const;
  static std::string DataLine(const nlohmann::ordered_json& chunk);

  const OpenAiEndpoint endpoint_;
  const std::string id_;
  const std::string model_;
  const int64_t created_;
  const int64_t n_;
  const bool stream_;
  const bool include_usage_;
  const bool echo_;
  const bool return_token_ids_;
  const bool want_logprobs_;
  const bool reasoning_;
  // Chat with tools (tool_choice not none): replies are parsed into tool_calls.
  const std::optional<ToolsRequest> tools_;
  const ToolCallFormat tool_format_;
  std::vector<PromptInfo> prompts_;
  const Tokenizer* tokenizer_;
  std::vector<Choice> choices_;
  std::map<std::string, size_t, std::less<>> choice_of_request_;
  size_t num_finished_ = 0;
  std::optional<std::string> error_;
};

}  // namespace infer::server
