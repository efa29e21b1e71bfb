// The reply every protocol is encoded from: the choices of one request (its engine requests),
// assembled from the engine's StepOutputs into what was generated (reasoning split from the
// content, tool calls parsed from the reply, logprobs, finish reasons, usage), and given to the
// protocol's encoder step by step as ChatDeltas. OpenAI's chat and completions, Anthropic's
// Messages and OpenAI's Responses each write their bytes from these; none reads another's JSON.
// Pure: no engine, no sockets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infer/engine/output.h"
#include "infer/server/chat/chat_request.h"
#include "infer/server/tool_calls.h"

namespace infer::server {

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

// How a choice ended: as the engine ended it (EOS, a stop string or the grammar's end: kStop;
// max tokens: kLength), or with a reply that called tools.
enum class ChatFinish { kStop, kLength, kToolCalls };

// What one step brought to one choice. A reply that may call tools holds back its text from
// where a call may start; its last delta then carries the calls (or the rest of the text).
struct ChatDelta {
  size_t choice = 0;
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;       // with the end of a reply that called tools
  std::optional<TokenLogprobs> logprobs;  // the step's token, when the request asked for them
  std::optional<int32_t> token_id;        // the step's token (none for a reply's tool end)
  size_t text_offset = 0;                 // bytes of the choice's text before this delta
  bool finished = false;
  ChatFinish finish = ChatFinish::kStop;   // with finished
  std::optional<std::string> stop_string;  // with finished: the stop string the engine cut before
  std::optional<std::string> error;        // the choice failed (it is finished)
};

// Token counts of the whole reply.
struct ChatUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;     // per prompt, the prompt tokens every choice found cached
  int64_t reasoning_tokens = 0;  // steps whose text went to the reasoning alone
};

class ChatReply {
 public:
  struct PromptInfo {
    std::vector<int32_t> ids;
    std::string text;  // for echo
  };
  struct Choice {
    std::string text;  // the content (with echo, after the prompt's text)
    std::string reasoning;
    std::vector<int32_t> token_ids;
    std::vector<TokenLogprobs> logprobs;
    std::optional<FinishReason> finish_reason;
    std::optional<ParsedReply> tools;  // a reply that may call tools, parsed once it ended
    bool finished = false;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;
    int64_t reasoning_tokens = 0;
    // How it ended (once finished): kToolCalls when its reply called tools.
    ChatFinish finish() const;
    // Internal: the reasoning split, and how much of `text` went out as content.
    ReasoningSplitter splitter;
    size_t streamed = 0;
  };

  // `prompts`: each prompt's ids (choices [p*n, (p+1)*n) belong to prompt p). `reasoning`: split
  // <think> text (chat only). Tools apply to a chat whose tool_choice is not none.
  ChatReply(const ChatRequest& request, std::string id, std::vector<PromptInfo> prompts,
            bool reasoning);

  // Choice i's engine request id.
  static std::string ChoiceRequestId(std::string_view base, int64_t choice);
  const std::string& id() const { return id_; }
  int64_t num_choices() const { return static_cast<int64_t>(choices_.size()); }
  const std::vector<Choice>& choices() const { return choices_; }
  const std::vector<PromptInfo>& prompts() const { return prompts_; }
  bool calls_tools() const { return tools_.has_value(); }
  bool splits_reasoning() const { return reasoning_; }
  bool finished() const { return num_finished_ == choices_.size(); }
  // The first error of a failed choice, if any.
  const std::optional<std::string>& error() const { return error_; }
  ChatUsage Usage() const;

  // Records `output` (of one of this reply's engine requests; others are ignored) and returns
  // what it brought, as deltas of its choice (possibly none).
  std::vector<ChatDelta> Add(const StepOutput& output);

 private:
  ReasoningSplitter::Parts SplitText(Choice& choice, const StepOutput& output);
  std::vector<ChatDelta> ToolDeltas(size_t index, Choice& choice, const StepOutput& output,
                                    ReasoningSplitter::Parts text, size_t text_offset);

  const std::string id_;
  const bool reasoning_;
  const std::optional<ToolsRequest> tools_;
  const ToolCallFormat tool_format_;
  std::vector<PromptInfo> prompts_;
  std::vector<Choice> choices_;
  std::map<std::string, size_t, std::less<>> choice_of_request_;
  size_t num_finished_ = 0;
  std::optional<std::string> error_;
};

}  // namespace infer::server
