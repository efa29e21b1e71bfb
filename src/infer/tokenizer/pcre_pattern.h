// PCRE2 (JIT, UTF+UCP) regexes for tokenizer.json patterns, which Hugging Face compiles with
// Oniguruma: patterns are translated so that \s means Oniguruma's whitespace set.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer {

class Regex {
 public:
  // Throws infer::Error for a pattern PCRE2 rejects or one using unsupported syntax.
  explicit Regex(std::string_view oniguruma_pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [start, end) byte ranges of all non-overlapping matches, left to right, like
  // Onig's find_iter. `text` must be valid UTF-8.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

  // Oniguruma -> PCRE2 translation (exposed for tests).
  static std::string Translate(std::string_view oniguruma_pattern);

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Escapes `literal` so that it matches itself.
std::string RegexEscape(std::string_view literal);

// tokenizer.json's Replace step (normalizer and decoder alike): every non-overlapping match
// of `pattern` ({"String": s} or {"Regex": r}) becomes `content`.
class PatternReplacer {
 public:
  // `config` holds "pattern" and "content"; `owner` names the step in errors.
  PatternReplacer(const nlohmann::json& config, std::string_view owner);
  void ReplaceAll(std::string& text) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

}  // namespace infer
