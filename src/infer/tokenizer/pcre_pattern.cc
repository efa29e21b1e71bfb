// PCRE2 wrapper: JIT-compiled, one thread-local match block and JIT stack per thread.
#include "infer/tokenizer/pcre_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "infer/core/error.h"

namespace infer {
namespace {

// Oniguruma's \s (Unicode White_Space); PCRE2's UCP \s also matches U+180E.
constexpr std::string_view kSpaceClassBody =
    "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}"
    "\\x{3000}";

struct MatchScratch {
  pcre2_match_data* match_data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
  MatchScratch() {
    match_data = pcre2_match_data_create(1, nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

MatchScratch& Scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

std::string Regex::Translate(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      INFER_CHECK(i + 1 < pattern.size(), "regex '{}': trailing backslash", pattern);
      const char escaped = pattern[++i];
      if (escaped == 's') {
        out += in_class ? std::string(kSpaceClassBody) : fmt::format("[{}]", kSpaceClassBody);
      } else if (escaped == 'S') {
        INFER_CHECK(!in_class, "regex '{}': \\S inside a character class is not supported",
                    pattern);
        out += fmt::format("[^{}]", kSpaceClassBody);
      } else if (escaped == 'h' || escaped == 'H') {
        Fail("regex '{}': \\h (Oniguruma hex digit) is not supported", pattern);
      } else {
        out += c;
        out += escaped;
      }
      continue;
    }
    if (in_class) {
      if (c == '[') {
        INFER_CHECK(i + 1 < pattern.size() && pattern[i + 1] == ':',
                    "regex '{}': nested character classes are not supported", pattern);
        const size_t close = pattern.find(":]", i + 2);
        INFER_CHECK(close != std::string_view::npos, "regex '{}': bad POSIX class", pattern);
        out.append(pattern.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    out += c;
  }
  INFER_CHECK(!in_class, "regex '{}': unterminated character class", pattern);
  return out;
}

Regex::Regex(std::string_view oniguruma_pattern) : pattern_(oniguruma_pattern) {
  const std::string translated = Translate(oniguruma_pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    Fail("regex '{}': {} at offset {}", pattern_, reinterpret_cast<const char*>(message),
         error_offset);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT fails
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  MatchScratch& scratch = Scratch();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               scratch.match_data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      Fail("regex '{}': match failed: {}", pattern_, reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data);
    const size_t match_start = ovector[0];
    const size_t match_end = ovector[1];
    matches.emplace_back(match_start, match_end);
    if (match_end > match_start) {
      start = match_end;
    } else {
      // Empty match: step over one whole character.
      if (match_end >= text.size()) return;
      start = match_end + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

std::string RegexEscape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ ").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

PatternReplacer::PatternReplacer(const nlohmann::json& config, std::string_view owner) {
  const auto& pattern = config.at("pattern");
  content_ = config.at("content").get<std::string>();
  if (pattern.contains("String")) {
    literal_ = pattern["String"].get<std::string>();
  } else if (pattern.contains("Regex")) {
    regex_ = std::make_unique<Regex>(pattern["Regex"].get<std::string>());
  } else {
    Fail("{}: pattern must be String or Regex", owner);
  }
}

void PatternReplacer::ReplaceAll(std::string& text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  if (regex_) {
    regex_->FindAll(text, matches);
  } else if (!literal_.empty()) {
    for (size_t at = text.find(literal_); at != std::string::npos;
         at = text.find(literal_, at + literal_.size())) {
      matches.emplace_back(at, at + literal_.size());
    }
  }
  if (matches.empty()) return;
  std::string out;
  out.reserve(text.size());
  size_t previous = 0;
  for (auto [start, end] : matches) {
    out.append(text, previous, start - previous);
    out.append(content_);
    previous = end;
  }
  out.append(text, previous);
  text = std::move(out);
}

}  // namespace infer
