// Normalizer implementations; Unicode forms come from utf8proc.
#include "infer/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <vector>

#include "infer/core/error.h"
#include "infer/tokenizer/pcre_pattern.h"
#include "infer/tokenizer/utf8.h"

namespace infer {
namespace {

bool IsAscii(const std::string& text) {
  for (char c : text)
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  return true;
}

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void Normalize(std::string& text) const override {
    if (IsAscii(text)) return;  // every form leaves ASCII unchanged
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t length =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &result,
                     static_cast<utf8proc_option_t>(options_ | UTF8PROC_STABLE));
    INFER_CHECK(length >= 0, "Unicode normalization failed: {}", utf8proc_errmsg(length));
    text.assign(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
    free(result);
  }

 private:
  int options_;
};

class Lowercase : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
      const char32_t cp = NextCodePoint(text, pos);
      if (cp == 0x130) {  // Rust's full mapping: 'İ' -> "i\u0307"
        out.append("i\xCC\x87");
        continue;
      }
      AppendUtf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    text = std::move(out);
  }
};

// Replace: literal or regex pattern -> content, all non-overlapping occurrences.
class Replace : public Normalizer {
 public:
  explicit Replace(const nlohmann::json& config) : replacer_(config, "Replace normalizer") {}
  void Normalize(std::string& text) const override { replacer_.ReplaceAll(text); }

 private:
  PatternReplacer replacer_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::string prefix_;
};

// Rust's char::is_whitespace (Unicode White_Space).
bool IsUnicodeWhitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string& text) const override {
    std::u32string cps = ToCodePoints(text);
    size_t begin = 0, end = cps.size();
    if (left_)
      while (begin < end && IsUnicodeWhitespace(cps[begin])) ++begin;
    if (right_)
      while (end > begin && IsUnicodeWhitespace(cps[end - 1])) --end;
    text = FromCodePoints(std::u32string_view(cps).substr(begin, end - begin));
  }

 private:
  bool left_, right_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void Normalize(std::string& text) const override {
    for (const auto& step : steps_) step->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> CreateNormalizer(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  INFER_CHECK(config.is_object() && config.contains("type"), "normalizer: missing \"type\"");
  const std::string type = config["type"].get<std::string>();
  try {
    if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE);
    if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE);
    if (type == "NFKC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    if (type == "NFKD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    if (type == "Lowercase") return std::make_unique<Lowercase>();
    if (type == "Replace") return std::make_unique<Replace>(config);
    if (type == "Prepend")
      return std::make_unique<Prepend>(config.at("prepend").get<std::string>());
    if (type == "Strip")
      return std::make_unique<Strip>(config.value("strip_left", true),
                                     config.value("strip_right", true));
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Normalizer>> steps;
      for (const auto& step : config.at("normalizers"))
        if (auto normalizer = CreateNormalizer(step)) steps.push_back(std::move(normalizer));
      return std::make_unique<Sequence>(std::move(steps));
    }
  } catch (const nlohmann::json::exception& e) {
    Fail("normalizer {}: {}", type, e.what());
  }
  Fail("normalizer type '{}' is not supported", type);
}

}  // namespace infer
