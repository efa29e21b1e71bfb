// What a client asks the model to continue (text, token ids, or a chat for the model's template),
// its encoding into token ids, and the front door's refusal (Engine::PreparePrompt checks every
// request with one set of messages).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/tokenizer/chat_template.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer {

// A conversation for the model's chat template: the messages ({role, content}), the template's
// extra variables (chat_template_kwargs, e.g. enable_thinking) and add_generation_prompt.
// add_special_tokens: the tokenizer adds its special tokens (BOS) to the rendered text too; off
// by default, since the template writes BOS itself (vLLM's /tokenize can ask for it).
struct ChatPrompt {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  bool add_special_tokens = false;
};

// Text (encoded with the tokenizer's special tokens, e.g. BOS), token ids, or a chat (rendered by
// the chat template, which writes BOS itself).
using Prompt = std::variant<std::string, std::vector<int32_t>, ChatPrompt>;

// A request the front door refuses. `about_prompt`: the prompt is at fault (it cannot be
// encoded, is empty, has ids outside the vocab, or is too long), not its sampling params.
class RequestRejected : public Error {
 public:
  RequestRejected(const std::string& message, bool about_prompt)
      : Error(message), about_prompt_(about_prompt) {}
  bool about_prompt() const { return about_prompt_; }

 private:
  bool about_prompt_;
};

// The prompt's ids. `tokenizer` and `chat_template` may be null (then text, or chats, are
// refused); `render_mutex` (may be null) is held while the template renders. Throws
// RequestRejected when the prompt cannot be encoded.
std::vector<int32_t> EncodePrompt(const Prompt& prompt, const Tokenizer* tokenizer,
                                  const ChatTemplate* chat_template,
                                  std::mutex* render_mutex = nullptr);

}  // namespace infer
