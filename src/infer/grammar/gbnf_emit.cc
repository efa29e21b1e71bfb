// Code point sets, GBNF escaping and the size-capped rule table of the GBNF writers.
#include "infer/grammar/gbnf_emit.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"

namespace infer::grammar {

CodeSet Normalize(CodeSet set) {
  std::sort(set.begin(), set.end(),
            [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  CodeSet out;
  for (const CodeRange& r : set) {
    if (r.lo > r.hi) continue;
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodeSet Complement(const CodeSet& set) {
  CodeSet out;
  char32_t next = 0;
  for (const CodeRange& r : Normalize(set)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

CodeSet Union(const CodeSet& a, const CodeSet& b) {
  CodeSet all = a;
  all.insert(all.end(), b.begin(), b.end());
  return Normalize(std::move(all));
}

CodeSet Subtract(const CodeSet& a, const CodeSet& b) { return Complement(Union(Complement(a), b)); }

bool Contains(const CodeSet& set, char32_t cp) {
  return std::any_of(set.begin(), set.end(),
                     [cp](const CodeRange& r) { return r.lo <= cp && cp <= r.hi; });
}

size_t CountOf(const CodeSet& set) {
  size_t n = 0;
  for (const CodeRange& r : set) n += static_cast<size_t>(r.hi - r.lo) + 1;
  return n;
}

std::string Utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string GbnfLiteral(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        // Bytes >= 0x80 stay raw: the parser decodes the literal as UTF-8 into code points.
        if (byte < 0x20 || byte == 0x7F) {
          out += fmt::format("\\x{:02X}", byte);
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

namespace {

// One code point inside [...]: escapes for the class syntax, \uHHHH for the rest of the BMP
// (readable, and the same code point whatever the file's encoding), raw UTF-8 above it.
std::string ClassChar(char32_t cp) {
  switch (cp) {
    case '\\':
      return "\\\\";
    // Only the escapes every GBNF parser knows (llama.cpp's set): class punctuation as \xHH.
    case ']':
      return "\\x5D";
    case '[':
      return "\\x5B";
    case '^':
      return "\\x5E";
    case '-':
      return "\\x2D";
    case '"':
      return "\\\"";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  if (cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", static_cast<unsigned>(cp));
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", static_cast<unsigned>(cp));
  return Utf8(cp);
}

std::string ClassBody(const CodeSet& set) {
  std::string out;
  for (const CodeRange& r : set) {
    out += ClassChar(r.lo);
    if (r.hi == r.lo) continue;
    if (r.hi > r.lo + 1) out += '-';
    out += ClassChar(r.hi);
  }
  return out;
}

const CodeSet kSurrogates = {{0xD800, 0xDFFF}};

}  // namespace

std::string GbnfClass(const CodeSet& set) {
  const CodeSet chars = Subtract(set, kSurrogates);
  if (chars.empty()) throw GrammarError("internal: an empty character class");
  if (chars.back().hi == kMaxCodePoint) {
    const CodeSet excluded = Subtract(Complement(chars), kSurrogates);
    if (excluded.empty()) return ".";
    // Appends, not operator+ chains: GCC 12's -Wrestrict misfires on "lit" + string + "lit".
    std::string out = "[^";
    out += ClassBody(excluded);
    out += ']';
    return out;
  }
  if (chars.size() == 1 && chars[0].lo == chars[0].hi) return GbnfLiteral(Utf8(chars[0].lo));
  std::string out = "[";
  out += ClassBody(chars);
  out += ']';
  return out;
}

std::string GbnfRules::UniqueName(std::string_view hint) {
  // Rule names are [a-zA-Z0-9-]+; other characters of a hint (a schema's property names) become
  // '-', and a numeric suffix makes the name unique.
  std::string base;
  for (const char c : hint) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (ok) {
      base += c;
    } else if (!base.empty() && base.back() != '-') {
      base += '-';
    }
    if (base.size() >= 40) break;
  }
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.empty()) base.push_back('r');
  if (base == "root") base.append("-r");  // "root" is the start rule's name
  std::string name = base;
  // The next suffix to try per base: many hints share a base (long property names cut at 40
  // characters), and probing from 2 each time would be quadratic in their number.
  int& next = next_suffix_[base];
  if (next < 2) next = 2;
  while (index_.count(name) != 0) name = fmt::format("{}-{}", base, next++);
  return name;
}

void GbnfRules::Charge(size_t bytes) {
  bytes_ += bytes;
  if (bytes_ > max_bytes_) {
    throw GrammarError(
        fmt::format("the grammar would exceed {} bytes (the limit of a compiled schema, regex or "
                    "choice list)",
                    max_bytes_));
  }
}

std::string GbnfRules::Add(std::string_view hint, const std::string& body) {
  if (const auto it = by_body_.find(body); it != by_body_.end()) return it->second;
  std::string name = UniqueName(hint);
  Charge(name.size() + body.size() + 6);
  index_[name] = rules_.size();
  rules_.emplace_back(name, body);
  by_body_[body] = name;
  return name;
}

std::string GbnfRules::Reserve(std::string_view hint) {
  std::string name = UniqueName(hint);
  Charge(name.size() + 6);
  index_[name] = rules_.size();
  rules_.emplace_back(name, std::string());
  return name;
}

void GbnfRules::Define(const std::string& name, const std::string& body) {
  Charge(body.size());
  rules_[index_.at(name)].second = body;
}

std::string GbnfRules::Render(const std::string& root_body, std::string_view start) const {
  std::string out = fmt::format("{} ::= {}\n", start, root_body);
  for (const auto& [name, body] : rules_) {
    out += name;
    out += " ::= ";
    out += body;
    out += '\n';
  }
  return out;
}

std::string Seq(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const std::string_view part : parts) {
    if (part.empty()) continue;
    if (!out.empty()) out += ' ';
    out += part;
  }
  return out;
}

std::string Group(std::string_view inner, std::string_view suffix) {
  std::string out;
  out += '(';
  out += inner;
  out += ')';
  out += suffix;
  return out;
}

std::string DigitClass(char lo, char hi) {
  if (lo == hi) return GbnfLiteral(std::string(1, lo));
  if (lo == '0' && hi == '9') return "[0-9]";
  return fmt::format("[{}-{}]", lo, hi);
}

std::string Repeat(const std::string& atom, size_t min, std::optional<size_t> max) {
  if (max && *max == 0) return "\"\"";
  if (!max) {
    if (min == 0) return atom + "*";
    if (min == 1) return atom + "+";
    return fmt::format("{}{{{},}}", atom, min);
  }
  if (min == 0 && *max == 1) return atom + "?";
  if (min == 1 && *max == 1) return atom;
  if (min == *max) return fmt::format("{}{{{}}}", atom, min);
  return fmt::format("{}{{{},{}}}", atom, min, *max);
}

std::string Alternatives(const std::vector<std::string>& parts) {
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += " | ";
    out += parts[i];
  }
  return out + ")";
}

}  // namespace infer::grammar
