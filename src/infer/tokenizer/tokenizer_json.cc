// Hand-written scanner for the two big sections of tokenizer.json; everything else is parsed
// by nlohmann from the raw value spans the scanner finds.
#include "infer/tokenizer/tokenizer_json.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "infer/core/error.h"
#include "infer/tokenizer/utf8.h"

namespace infer {
namespace {

class Scanner {
 public:
  Scanner(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  [[noreturn]] void Error(const char* what) const {
    Fail("{}: invalid JSON at byte {}: {}", source_, pos_, what);
  }

  void SkipWhitespace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }

  char Peek() {
    SkipWhitespace();
    if (pos_ >= text_.size()) Error("unexpected end of input");
    return text_[pos_];
  }

  void Expect(char c) {
    if (Peek() != c) Error("unexpected character");
    ++pos_;
  }

  // True and consumes `c` when it is next.
  bool Accept(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  void ParseString(std::string& out) {
    Expect('"');
    out.clear();
    while (true) {
      const size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\\') {
        if (static_cast<uint8_t>(text_[pos_]) < 0x20) Error("control character in string");
        ++pos_;
      }
      out.append(text_.substr(start, pos_ - start));
      if (pos_ >= text_.size()) Error("unterminated string");
      if (text_[pos_] == '"') {
        ++pos_;
        if (!IsValidUtf8(out)) Error("invalid UTF-8 in string");
        return;
      }
      ++pos_;  // backslash
      if (pos_ >= text_.size()) Error("unterminated escape");
      const char escape = text_[pos_++];
      switch (escape) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          char32_t cp = ParseHex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos_ + 2 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
              Error("unpaired surrogate");
            pos_ += 2;
            const char32_t low = ParseHex4();
            if (low < 0xDC00 || low > 0xDFFF) Error("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            Error("unpaired surrogate");
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          Error("bad escape");
      }
    }
  }

  int64_t ParseInteger() {
    SkipWhitespace();
    const bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') Error("expected integer");
    int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      value = value * 10 + (text_[pos_++] - '0');
      if (value > (int64_t{1} << 40)) Error("integer too large");
    }
    return negative ? -value : value;
  }

  // Skips one value and returns its raw text (for nlohmann).
  std::string_view SkipValue() {
    SkipWhitespace();
    const size_t start = pos_;
    SkipValueAt();
    return text_.substr(start, pos_ - start);
  }

  bool AtEnd() {
    SkipWhitespace();
    return pos_ >= text_.size();
  }

 private:
  char32_t ParseHex4() {
    if (pos_ + 4 > text_.size()) Error("short \\u escape");
    const HexDigits hex = ParseHexDigits(text_.substr(pos_, 4));
    pos_ += hex.count == 4 ? 4 : hex.count + 1;  // an error names the byte after the bad digit
    if (hex.count < 4) Error("bad \\u escape");
    return hex.value;
  }

  void SkipValueAt() {
    const char c = Peek();
    if (c == '"') {
      ++pos_;
      while (pos_ < text_.size() && text_[pos_] != '"') pos_ += text_[pos_] == '\\' ? 2 : 1;
      if (pos_ >= text_.size()) Error("unterminated string");
      ++pos_;
    } else if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (Accept(close)) return;
      do {
        if (c == '{') {
          SkipValueAt();
          Expect(':');
        }
        SkipValueAt();
      } while (Accept(','));
      Expect(close);
    } else {
      const size_t start = pos_;
      while (pos_ < text_.size() && std::strchr(",}] \n\r\t", text_[pos_]) == nullptr) ++pos_;
      if (pos_ == start) Error("expected a value");
    }
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
};

nlohmann::json ParseSpan(std::string_view span, const std::string& source) {
  try {
    return nlohmann::json::parse(span);
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: invalid JSON: {}", source, e.what());
  }
}

void ParseVocab(Scanner& scanner, TokenizerJson& out) {
  scanner.Expect('{');
  if (scanner.Accept('}')) return;
  std::string token;
  do {
    scanner.ParseString(token);
    scanner.Expect(':');
    const int64_t id = scanner.ParseInteger();
    if (id < 0 || id > INT32_MAX) scanner.Error("token id out of range");
    out.vocab.emplace_back(token, static_cast<int32_t>(id));
  } while (scanner.Accept(','));
  scanner.Expect('}');
}

void ParseMerges(Scanner& scanner, TokenizerJson& out, const std::string& source) {
  scanner.Expect('[');
  if (scanner.Accept(']')) return;
  std::string left, right;
  do {
    if (scanner.Peek() == '"') {
      scanner.ParseString(left);
      const size_t space = left.find(' ');
      INFER_CHECK(space != std::string::npos && left.find(' ', space + 1) == std::string::npos,
                  "{}: merge '{}' is not two space-separated tokens", source, left);
      right = left.substr(space + 1);
      left.resize(space);
    } else {
      scanner.Expect('[');
      scanner.ParseString(left);
      scanner.Expect(',');
      scanner.ParseString(right);
      scanner.Expect(']');
    }
    out.merges.emplace_back(left, right);
  } while (scanner.Accept(','));
  scanner.Expect(']');
}

}  // namespace

TokenizerJson ParseTokenizerJson(std::string_view text, const std::string& source) {
  TokenizerJson out;
  out.config = nlohmann::json::object();
  Scanner scanner(text, source);
  scanner.Expect('{');
  std::string key;
  if (!scanner.Accept('}')) {
    do {
      scanner.ParseString(key);
      scanner.Expect(':');
      if (key == "model" && scanner.Peek() == '{') {
        nlohmann::json model = nlohmann::json::object();
        scanner.Expect('{');
        std::string model_key;
        if (!scanner.Accept('}')) {
          do {
            scanner.ParseString(model_key);
            scanner.Expect(':');
            if (model_key == "vocab" && scanner.Peek() == '{') {
              ParseVocab(scanner, out);
            } else if (model_key == "merges" && scanner.Peek() == '[') {
              ParseMerges(scanner, out, source);
            } else {
              model[model_key] = ParseSpan(scanner.SkipValue(), source);
            }
          } while (scanner.Accept(','));
          scanner.Expect('}');
        }
        out.config["model"] = std::move(model);
      } else {
        out.config[key] = ParseSpan(scanner.SkipValue(), source);
      }
    } while (scanner.Accept(','));
    scanner.Expect('}');
  }
  if (!scanner.AtEnd()) scanner.Error("trailing characters");
  return out;
}

TokenizerJson ReadTokenizerJson(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  INFER_CHECK(file.good(), "cannot open {}", path);
  std::string text;
  file.seekg(0, std::ios::end);
  const std::streamoff size = file.tellg();
  INFER_CHECK(size >= 0, "cannot read {}", path);
  text.resize(static_cast<size_t>(size));
  file.seekg(0);
  file.read(text.data(), size);
  INFER_CHECK(file.good(), "cannot read {}", path);
  return ParseTokenizerJson(text, path);
}

}  // namespace infer
