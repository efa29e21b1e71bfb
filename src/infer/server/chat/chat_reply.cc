#include "infer/server/chat/chat_reply.h"

#include <algorithm>

#include <fmt/format.h>

namespace infer::server {

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

ChatFinish FinishOf(std::optional<FinishReason> reason) {
  return reason == FinishReason::kLength ? ChatFinish::kLength : ChatFinish::kStop;
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

// ChatReply ---------------------------------------------------------------------------------

ChatReply::ChatReply(const ChatRequest& request, std::string id, std::vector<PromptInfo> prompts,
                     bool reasoning)
    : id_(std::move(id)),
      reasoning_(reasoning && request.endpoint == ChatEndpoint::kChatCompletions),
      tools_(request.endpoint == ChatEndpoint::kChatCompletions && request.tools &&
                     request.tools->choice.mode != ToolChoice::Mode::kNone
                 ? request.tools
                 : std::nullopt),
      tool_format_(request.tool_format),
      prompts_(std::move(prompts)),
      choices_(prompts_.size() * static_cast<size_t>(request.n)) {
  for (size_t i = 0; i < choices_.size(); ++i) {
    choice_of_request_.emplace(ChoiceRequestId(id_, static_cast<int64_t>(i)), i);
    if (request.echo) choices_[i].text = prompts_[i / static_cast<size_t>(request.n)].text;
  }
}

ChatFinish ChatReply::Choice::finish() const {
  return tools && !tools->calls.empty() ? ChatFinish::kToolCalls : FinishOf(finish_reason);
}

std::string ChatReply::ChoiceRequestId(std::string_view base, int64_t choice) {
  return fmt::format("{}-{}", base, choice);
}

ChatUsage ChatReply::Usage() const {
  ChatUsage usage;
  for (const PromptInfo& prompt : prompts_) usage.prompt_tokens += std::ssize(prompt.ids);
  for (const Choice& choice : choices_) {
    usage.completion_tokens += choice.completion_tokens;
    usage.reasoning_tokens += choice.reasoning_tokens;
  }
  const size_t per_prompt = prompts_.empty() ? 0 : choices_.size() / prompts_.size();
  for (size_t p = 0; p < prompts_.size() && per_prompt > 0; ++p) {
    int64_t cached = choices_[p * per_prompt].cached_tokens;
    for (size_t c = p * per_prompt; c < (p + 1) * per_prompt; ++c) {
      cached = std::min(cached, choices_[c].cached_tokens);
    }
    usage.cached_tokens += cached;
  }
  return usage;
}

ReasoningSplitter::Parts ChatReply::SplitText(Choice& choice, const StepOutput& output) {
  if (!reasoning_) return {{}, output.text_delta};
  ReasoningSplitter::Parts parts = choice.splitter.Feed(output.text_delta);
  if (output.finished) {
    ReasoningSplitter::Parts rest = choice.splitter.Finish();
    parts.reasoning += rest.reasoning;
    parts.content += rest.content;
  }
  return parts;
}

std::vector<ChatDelta> ChatReply::Add(const StepOutput& output) {
  const auto found = choice_of_request_.find(output.request_id);
  if (found == choice_of_request_.end()) return {};
  const size_t index = found->second;
  Choice& choice = choices_[index];
  if (choice.finished) return {};
  const size_t text_offset = choice.text.size();
  ReasoningSplitter::Parts text = SplitText(choice, output);
  const bool sampled = output.token_id && !output.error;
  if (sampled && !text.reasoning.empty() && text.content.empty()) ++choice.reasoning_tokens;
  choice.text += text.content;
  choice.reasoning += text.reasoning;
  if (sampled) choice.token_ids.push_back(*output.token_id);
  if (output.logprobs && !output.error) choice.logprobs.push_back(*output.logprobs);
  choice.completion_tokens = output.completion_tokens;
  choice.cached_tokens = output.cached_tokens;
  if (output.finished) {
    choice.finished = true;
    choice.finish_reason = output.finish_reason;
    ++num_finished_;
    if (output.error && !error_) error_ = output.error;
  }
  if (output.error) {
    ChatDelta failed{.choice = index, .finished = true, .error = output.error};
    return {std::move(failed)};
  }
  if (tools_) return ToolDeltas(index, choice, output, std::move(text), text_offset);
  ChatDelta delta{.choice = index,
                  .reasoning = std::move(text.reasoning),
                  .content = std::move(text.content),
                  .logprobs = output.logprobs,
                  .token_id = output.token_id,
                  .text_offset = text_offset,
                  .finished = output.finished,
                  .finish = FinishOf(output.finish_reason),
                  .stop_string = output.stop_string};
  return {std::move(delta)};
}

std::vector<ChatDelta> ChatReply::ToolDeltas(size_t index, Choice& choice, const StepOutput& output,
                                             ReasoningSplitter::Parts text, size_t text_offset) {
  // The reply may hold a call: text that cannot be part of one goes out as content; from where
  // a call may start it is held, and given when the choice ends, parsed into its calls (or as
  // the rest of the content). Reasoning goes out as usual; logprobs do not.
  const size_t safe =
      output.finished ? choice.streamed : StreamableToolText(choice.text, tool_format_);
  std::string now =
      safe > choice.streamed ? choice.text.substr(choice.streamed, safe - choice.streamed) : "";
  choice.streamed = std::max(choice.streamed, safe);
  std::vector<ChatDelta> deltas;
  if (!text.reasoning.empty() || !now.empty()) {
    deltas.push_back({.choice = index,
                      .reasoning = std::move(text.reasoning),
                      .content = std::move(now),
                      .token_id = output.token_id,
                      .text_offset = text_offset});
  }
  if (!output.finished) return deltas;
  choice.tools = ParseToolCalls(choice.text, tool_format_, *tools_);
  ChatDelta end{.choice = index,
                .finished = true,
                .finish = choice.finish(),
                .stop_string = output.stop_string};
  if (choice.tools->calls.empty()) {
    if (choice.streamed < choice.text.size()) end.content = choice.text.substr(choice.streamed);
  } else {
    end.tool_calls = choice.tools->calls;  // the text before the first call went out already
  }
  deltas.push_back(std::move(end));
  return deltas;
}

}  // namespace infer::server
