// Jinja2-compatible lexing: `-`/`+` whitespace control, lstrip_blocks for block and comment tags
// that start a line, trim_blocks after block/comment ends, raw blocks, Python string escapes.
#include "infer/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "infer/core/error.h"
#include "infer/tokenizer/utf8.h"

namespace infer::jinja {
namespace {

bool IsSpaceAscii(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Python str.rstrip() (Unicode whitespace).
std::string RStripUnicode(std::string_view text) {
  std::u32string cps = ToCodePoints(text);
  while (!cps.empty() && IsPythonSpace(cps.back())) cps.pop_back();
  return FromCodePoints(cps);
}

size_t SkipUnicodeSpace(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsPythonSpace(NextCodePoint(text, next))) break;
    pos = next;
  }
  return pos;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Jinja2 normalizes newlines and drops one trailing newline (keep_trailing_newline=False).
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        source_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        source_ += source[i];
      }
    }
    if (!source_.empty() && source_.back() == '\n') source_.pop_back();
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < source_.size()) {
      const size_t open = FindTagOpen(pos);
      if (open == std::string::npos) {
        Emit(TokenKind::kText, source_.substr(pos));
        break;
      }
      std::string text = source_.substr(pos, open - pos);
      const char tag = source_[open + 1];
      const char sign = open + 2 < source_.size() ? source_[open + 2] : '\0';
      if (sign == '-') {
        text = RStripUnicode(text);
      } else if (sign != '+' && tag != '{') {
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) &&
            text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.resize(l_pos);
      }
      if (!text.empty()) Emit(TokenKind::kText, text);
      size_t cursor = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (tag == '#') {
        const size_t close = source_.find("#}", cursor);
        INFER_CHECK(close != std::string::npos, "chat template line {}: unclosed comment",
                    LineAt(open));
        pos = close + 2;
        if (close > cursor && source_[close - 1] == '-') {
          pos = SkipUnicodeSpace(source_, pos);
        } else if (!(close > cursor && source_[close - 1] == '+') && pos < source_.size() &&
                   source_[pos] == '\n') {
          ++pos;
        }
      } else {
        pos = LexTag(tag == '{', open, cursor);
      }
      line_starting = pos > 0 && source_[pos - 1] == '\n';
    }
    tokens_.push_back({TokenKind::kEnd, "", LineAt(source_.size())});
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t pos) const {
    return 1 + static_cast<int>(std::count(source_.begin(), source_.begin() + pos, '\n'));
  }

  void Emit(TokenKind kind, std::string text, size_t at = std::string::npos) {
    tokens_.push_back({kind, std::move(text), at == std::string::npos ? 0 : LineAt(at)});
  }

  size_t FindTagOpen(size_t pos) const {
    while (true) {
      pos = source_.find('{', pos);
      if (pos == std::string::npos || pos + 1 >= source_.size()) return std::string::npos;
      const char next = source_[pos + 1];
      if (next == '{' || next == '%' || next == '#') return pos;
      ++pos;
    }
  }

  [[noreturn]] void Error(size_t at, const std::string& what) const {
    Fail("chat template line {}: {}", LineAt(at), what);
  }

  // Lexes the inside of {{ }} or {% %} from `cursor`; returns the position after the tag.
  size_t LexTag(bool variable, size_t open, size_t cursor) {
    Emit(variable ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", open);
    const size_t tag_start = tokens_.size();
    int depth = 0;
    size_t pos = cursor;
    while (true) {
      while (pos < source_.size() && IsSpaceAscii(source_[pos])) ++pos;
      if (pos >= source_.size()) Error(open, "unclosed tag");
      // Closing sequence (a '}' inside brackets belongs to a dict literal).
      if (depth == 0) {
        const std::string_view rest = std::string_view(source_).substr(pos);
        const std::string close = variable ? "}}" : "%}";
        for (const char* sign : {"-", "+", ""}) {
          if (!rest.starts_with(std::string(sign) + close)) continue;
          if (std::string_view(sign) == "+" && variable) continue;
          size_t after = pos + std::string_view(sign).size() + 2;
          if (std::string_view(sign) == "-") {
            after = SkipUnicodeSpace(source_, after);
          } else if (!variable && std::string_view(sign).empty() && after < source_.size() &&
                     source_[after] == '\n') {
            ++after;  // trim_blocks
          }
          Emit(variable ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", pos);
          if (!variable && tokens_.size() == tag_start + 2 && tokens_[tag_start].text == "raw" &&
              tokens_[tag_start].kind == TokenKind::kName) {
            return LexRaw(tag_start, after);
          }
          return after;
        }
      }
      const char c = source_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos;
        while (end < source_.size() &&
               (std::isalnum(static_cast<unsigned char>(source_[end])) || source_[end] == '_'))
          ++end;
        Emit(TokenKind::kName, source_.substr(pos, end - pos), pos);
        pos = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = LexNumber(pos);
      } else if (c == '\'' || c == '"') {
        pos = LexString(pos);
      } else {
        static constexpr std::string_view kOperators[] = {
            "//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "(",
            ")",  "[",  "]",  "{",  "}",  ".",  ",", ":", "|", "=", "<", ">"};
        bool matched = false;
        for (const std::string_view op : kOperators) {
          if (std::string_view(source_).substr(pos).starts_with(op)) {
            const std::string text(op);
            if (text == "(" || text == "[" || text == "{") ++depth;
            if (text == ")" || text == "]" || text == "}") --depth;
            Emit(TokenKind::kOperator, text, pos);
            pos += text.size();
            matched = true;
            break;
          }
        }
        if (!matched) Error(pos, fmt::format("unexpected character '{}'", c));
      }
    }
  }

  size_t LexRaw(size_t tag_start, size_t pos) {
    // Drop the raw tag's tokens; its body is text up to {% endraw %}.
    tokens_.resize(tag_start - 1);
    size_t search = pos;
    while (true) {
      const size_t open = source_.find("{%", search);
      if (open == std::string::npos) Error(pos, "unclosed raw block");
      size_t cursor = open + 2;
      const bool strip_before = cursor < source_.size() && source_[cursor] == '-';
      if (cursor < source_.size() && (source_[cursor] == '-' || source_[cursor] == '+')) ++cursor;
      while (cursor < source_.size() && IsSpaceAscii(source_[cursor])) ++cursor;
      if (std::string_view(source_).substr(cursor).starts_with("endraw")) {
        cursor += 6;
        while (cursor < source_.size() && IsSpaceAscii(source_[cursor])) ++cursor;
        const bool strip_after = cursor < source_.size() && source_[cursor] == '-';
        if (cursor < source_.size() && (source_[cursor] == '-' || source_[cursor] == '+')) ++cursor;
        if (!std::string_view(source_).substr(cursor).starts_with("%}")) Error(open, "bad endraw");
        std::string body = source_.substr(pos, open - pos);
        if (strip_before) body = RStripUnicode(body);
        if (!body.empty()) Emit(TokenKind::kText, body, pos);
        size_t after = cursor + 2;
        if (strip_after)
          after = SkipUnicodeSpace(source_, after);
        else if (after < source_.size() && source_[after] == '\n')
          ++after;
        return after;
      }
      search = open + 2;
    }
  }

  size_t LexNumber(size_t pos) {
    size_t end = pos;
    const auto digits = [&] {
      while (end < source_.size() &&
             (std::isdigit(static_cast<unsigned char>(source_[end])) || source_[end] == '_'))
        ++end;
    };
    digits();
    bool is_float = false;
    if (end + 1 < source_.size() && source_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(source_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      size_t exp = end + 1;
      if (exp < source_.size() && (source_[exp] == '+' || source_[exp] == '-')) ++exp;
      if (exp < source_.size() && std::isdigit(static_cast<unsigned char>(source_[exp]))) {
        is_float = true;
        end = exp;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i)
      if (source_[i] != '_') text += source_[i];
    Emit(is_float ? TokenKind::kFloat : TokenKind::kInteger, text, pos);
    return end;
  }

  size_t LexString(size_t pos) {
    const char quote = source_[pos];
    std::string value;
    size_t i = pos + 1;
    while (true) {
      if (i >= source_.size()) Error(pos, "unterminated string");
      const char c = source_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= source_.size()) Error(pos, "unterminated string");
      const char e = source_[i + 1];
      i += 2;
      const auto hex = [&](int count) {
        if (i + count > source_.size()) Error(pos, "bad escape");
        const HexDigits digits =
            ParseHexDigits(std::string_view(source_).substr(i, static_cast<size_t>(count)));
        if (digits.count != static_cast<size_t>(count)) Error(pos, "bad escape in string");
        const uint32_t cp = digits.value;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) Error(pos, "bad escape in string");
        i += count;
        AppendUtf8(value, cp);
      };
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '0':
          value += '\0';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:  // Python keeps unknown escapes verbatim
          value += '\\';
          value += e;
      }
    }
    Emit(TokenKind::kString, value, pos);
    return i + 1;
  }

  std::string source_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace infer::jinja
