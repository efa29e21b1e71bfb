// Python str semantics on UTF-8 strings (code points, Python's whitespace, utf8proc casing).
#include "infer/tokenizer/jinja/strings.h"

#include <utf8proc.h>

#include "infer/core/error.h"
#include "infer/tokenizer/jinja/builtins.h"
#include "infer/tokenizer/utf8.h"

namespace infer::jinja {

Value Arg(const ValueList& args, const ValueDict& kwargs, size_t index, const char* name,
          const Value& fallback) {
  for (const auto& [key, value] : kwargs)
    if (key == name) return value;
  return index < args.size() ? args[index] : fallback;
}

const std::string& RequireString(const Value& value, const char* what) {
  if (value.IsUndefined()) FailUndefined(value);
  INFER_CHECK(value.IsString(), "{} expects a string, got {}", what, value.TypeName());
  return value.AsString();
}

int64_t RequireInt(const Value& value, const char* what) {
  if (value.IsBool()) return value.AsBool();
  INFER_CHECK(value.IsInt(), "{} expects an integer, got {}", what, value.TypeName());
  return value.AsInt();
}

std::string MapCase(const std::string& text, bool upper) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto cp = static_cast<utf8proc_int32_t>(NextCodePoint(text, pos));
    AppendUtf8(out, static_cast<char32_t>(upper ? utf8proc_toupper(cp) : utf8proc_tolower(cp)));
  }
  return out;
}

static bool IsCased(char32_t cp) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT;
}

std::string Title(const std::string& text) {
  std::string out;
  bool previous_cased = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = NextCodePoint(text, pos);
    const auto c = static_cast<utf8proc_int32_t>(cp);
    AppendUtf8(out,
               static_cast<char32_t>(previous_cased ? utf8proc_tolower(c) : utf8proc_totitle(c)));
    previous_cased = IsCased(cp);
  }
  return out;
}

std::string Capitalize(const std::string& text) {
  std::string out;
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    const auto c = static_cast<utf8proc_int32_t>(NextCodePoint(text, pos));
    AppendUtf8(out, static_cast<char32_t>(first ? utf8proc_totitle(c) : utf8proc_tolower(c)));
    first = false;
  }
  return out;
}

// Python str.strip / lstrip / rstrip with optional `chars`.
std::string Strip(const std::string& text, const Value& chars, bool left, bool right) {
  std::u32string cps = ToCodePoints(text);
  std::u32string set;
  const bool whitespace = chars.IsNone() || chars.IsUndefined();
  if (!whitespace) set = ToCodePoints(RequireString(chars, "strip"));
  const auto strip = [&](char32_t cp) {
    return whitespace ? IsPythonSpace(cp) : set.find(cp) != std::u32string::npos;
  };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strip(cps[begin])) ++begin;
  if (right)
    while (end > begin && strip(cps[end - 1])) --end;
  return FromCodePoints(std::u32string_view(cps).substr(begin, end - begin));
}

ValueList Split(const std::string& text, const Value& separator, int64_t max_split) {
  ValueList parts;
  if (separator.IsNone() || separator.IsUndefined()) {
    // Runs of whitespace; leading/trailing whitespace ignored.
    const std::u32string cps = ToCodePoints(text);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        size_t end = cps.size();
        while (end > i && IsPythonSpace(cps[end - 1])) --end;
        parts.emplace_back(FromCodePoints(std::u32string_view(cps).substr(i, end - i)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !IsPythonSpace(cps[j])) ++j;
      parts.emplace_back(FromCodePoints(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  const std::string& sep = RequireString(separator, "split");
  INFER_CHECK(!sep.empty(), "empty separator");
  size_t start = 0;
  while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
    const size_t at = text.find(sep, start);
    if (at == std::string::npos) break;
    parts.emplace_back(text.substr(start, at - start));
    start = at + sep.size();
  }
  parts.emplace_back(text.substr(start));
  return parts;
}

std::string Replace(const std::string& text, const std::string& old_text,
                    const std::string& new_text, int64_t count) {
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  if (old_text.empty()) {
    // Python inserts `new` between every character (and at both ends).
    const std::u32string cps = ToCodePoints(text);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(out, cps[i]);
    }
    return out;
  }
  while (count < 0 || done < count) {
    const size_t at = text.find(old_text, start);
    if (at == std::string::npos) break;
    out.append(text, start, at - start);
    out += new_text;
    start = at + old_text.size();
    ++done;
  }
  out.append(text, start);
  return out;
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace infer::jinja
