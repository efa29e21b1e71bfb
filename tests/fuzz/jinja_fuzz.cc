// libFuzzer target for the Jinja engine that renders chat templates (a template is code from a
// stranger's tokenizer_config.json): the input is a template, optionally followed by a line
// "\n#json\n" and a JSON context (messages, tools, any keyword), rendered through ChatTemplate
// exactly as the CLI and the server render it. infer::Error is an expected outcome (a syntax
// error, a type error, the work budget); a crash, a sanitizer report, a hang (libFuzzer's
// -timeout) or memory beyond -rss_limit_mb is a finding.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/tokenizer/chat_template.h"
#include "infer/tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (!infer::IsValidUtf8(input)) return 0;
  constexpr std::string_view kSeparator = "\n#json\n";
  const size_t split = input.find(kSeparator);
  const std::string_view source = input.substr(0, split);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "hi"}}});
  nlohmann::ordered_json options = {{"add_generation_prompt", true}};
  if (split != std::string_view::npos) {
    const auto context = nlohmann::ordered_json::parse(input.substr(split + kSeparator.size()),
                                                       nullptr, /*allow_exceptions=*/false);
    if (context.is_object()) {
      if (context.contains("messages")) messages = context["messages"];
      for (const auto& [key, value] : context.items()) {
        if (key != "messages") options[key] = value;
      }
    } else if (context.is_array()) {
      messages = context;
    }
  }
  try {
    const infer::ChatTemplate chat_template(
        source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", nullptr}});
    chat_template.Render(messages, options);
  } catch (const infer::Error&) {
  }
  return 0;
}
