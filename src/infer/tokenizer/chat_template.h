// A model's chat template (tokenizer_config.json "chat_template" or chat_template.jinja), rendered
// with the context transformers' apply_chat_template builds.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace infer {
namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // `special_tokens`: {"bos_token": "...", ...} (strings only) exposed to the template.
  ChatTemplate(std::string_view source, nlohmann::ordered_json special_tokens);
  ~ChatTemplate();

  // DIR/chat_template.jinja if present, else tokenizer_config.json's "chat_template" (a string,
  // or a list of {name, template} of which "default" is used). One-line error when neither.
  static std::unique_ptr<ChatTemplate> FromModelDir(const std::filesystem::path& dir);

  // Context: messages, tools (null when absent), documents=null, add_generation_prompt (false
  // when absent), the special tokens, then every entry of `options` (template variables).
  // Throws jinja::TemplateException for raise_exception and infer::Error for other failures.
  std::string Render(const nlohmann::ordered_json& messages,
                     const nlohmann::ordered_json& options) const;
  // The template's text (what it teaches, e.g. its tool-call format, is read from it).
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::unique_ptr<jinja::Template> template_;
  nlohmann::ordered_json special_tokens_;
};

}  // namespace infer
