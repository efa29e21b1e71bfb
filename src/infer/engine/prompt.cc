#include "infer/engine/prompt.h"

#include <fmt/format.h>

namespace infer {

std::vector<int32_t> EncodePrompt(const Prompt& prompt, const Tokenizer* tokenizer,
                                  const ChatTemplate* chat_template, std::mutex* render_mutex) {
  if (const auto* ids = std::get_if<std::vector<int32_t>>(&prompt)) return *ids;
  const auto* text = std::get_if<std::string>(&prompt);
  if (tokenizer == nullptr) {
    throw RequestRejected(
        fmt::format("{} need a tokenizer (the model folder has no tokenizer.json)",
                    text != nullptr ? "string prompts" : "chat messages"),
        /*about_prompt=*/true);
  }
  if (text != nullptr) return tokenizer->Encode(*text, /*add_special_tokens=*/true);
  const auto& chat = std::get<ChatPrompt>(prompt);
  if (chat_template == nullptr) {
    throw RequestRejected(
        "this model has no chat template (tokenizer_config.json chat_template or "
        "chat_template.jinja)",
        /*about_prompt=*/true);
  }
  nlohmann::ordered_json variables = chat.variables;
  variables["add_generation_prompt"] = chat.add_generation_prompt;
  std::string rendered;
  try {
    std::unique_lock<std::mutex> lock;
    if (render_mutex != nullptr) lock = std::unique_lock(*render_mutex);
    rendered = chat_template->Render(chat.messages, variables);
  } catch (const Error& e) {
    throw RequestRejected(fmt::format("the chat template failed: {}", e.what()),
                          /*about_prompt=*/true);
  }
  // The template writes BOS itself.
  return tokenizer->Encode(rendered, chat.add_special_tokens);
}

}  // namespace infer
