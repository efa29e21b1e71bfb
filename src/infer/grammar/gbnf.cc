// GBNF parser: text -> byte-level grammar IR (grammar.h; its checks are grammar.cc's).
// The parser is recursive descent with an explicit nesting limit, so hostile input (100k open
// parentheses) is an error, not a native stack overflow; repetitions are expanded into helper
// rules under an element budget, so `x{1000}{1000}{1000}` stays small (each level references
// the one below) and anything that would really blow up is refused before it is built.
#include "infer/grammar/gbnf.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"

namespace infer::grammar {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodeRange {
  uint32_t lo, hi;
};

// One UTF-8 byte sequence pattern: per position a byte range.
struct ByteRangeSeq {
  int len = 0;
  std::array<std::pair<uint8_t, uint8_t>, 4> ranges{};
};

int Utf8Len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void EncodeUtf8(uint32_t cp, uint8_t* out) {
  switch (Utf8Len(cp)) {
    case 1:
      out[0] = static_cast<uint8_t>(cp);
      break;
    case 2:
      out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    case 3:
      out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    default:
      out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

// Splits a code point range (no surrogates inside) into UTF-8 byte range sequences, the way
// regex engines compile Unicode classes: first by encoded length, then until every continuation
// byte position spans a full 6-bit block or shares all higher bits.
void SplitUtf8(CodeRange range, std::vector<ByteRangeSeq>& out) {
  std::vector<CodeRange> work{range};
  while (!work.empty()) {
    CodeRange r = work.back();
    work.pop_back();
    if (r.lo > r.hi) continue;
    bool split = false;
    for (uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (r.lo <= boundary && r.hi > boundary) {
        work.push_back({boundary + 1, r.hi});
        work.push_back({r.lo, boundary});
        split = true;
        break;
      }
    }
    if (split) continue;
    const int len = Utf8Len(r.lo);
    for (int i = 1; i < len && !split; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((r.lo & ~m) != (r.hi & ~m)) {
        if ((r.lo & m) != 0) {
          work.push_back({(r.lo | m) + 1, r.hi});
          work.push_back({r.lo, r.lo | m});
          split = true;
        } else if ((r.hi & m) != m) {
          work.push_back({r.hi & ~m, r.hi});
          work.push_back({r.lo, (r.hi & ~m) - 1});
          split = true;
        }
      }
    }
    if (split) continue;
    uint8_t a[4], b[4];
    EncodeUtf8(r.lo, a);
    EncodeUtf8(r.hi, b);
    ByteRangeSeq seq;
    seq.len = len;
    for (int i = 0; i < len; ++i) seq.ranges[i] = {a[i], b[i]};
    out.push_back(seq);
  }
}

// Sorted, merged ranges minus the surrogates; negated when asked.
std::vector<CodeRange> Normalize(std::vector<CodeRange> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end(), [](auto x, auto y) { return x.lo < y.lo; });
  std::vector<CodeRange> merged;
  for (CodeRange r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  if (negate) {
    std::vector<CodeRange> comp;
    uint32_t next = 0;
    for (CodeRange r : merged) {
      if (r.lo > next) comp.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
    merged = std::move(comp);
  }
  std::vector<CodeRange> out;
  for (CodeRange r : merged) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
  }
  return out;
}

class Parser {
 public:
  Parser(std::string_view text, const GbnfLimits& limits) : text_(text), limits_(limits) {}

  Grammar Parse() {
    SkipSpace();
    while (!AtEnd()) {
      const size_t name_pos = pos_;
      const std::string name = ParseName();
      SkipSpace();
      if (text_.substr(pos_, 3) != "::=") Error(pos_, "expected '::=' after rule name '{}'", name);
      pos_ += 3;
      const int32_t id = RuleId(name, name_pos);
      if (defined_[id]) Error(name_pos, "rule '{}' is defined twice", name);
      defined_[id] = true;
      auto alternatives = ParseAlternatives(0, name);
      g_.rules[id].alternatives = std::move(alternatives);
      SkipSpace();
    }
    for (size_t i = 0; i < g_.rules.size(); ++i) {
      if (!defined_[i]) Error(first_use_[i], "undefined rule '{}'", g_.rules[i].name);
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) throw GrammarError("grammar has no rule named 'root'");
    g_.root = root->second;
    ValidateGrammar(g_);
    return std::move(g_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void Error(size_t at, fmt::format_string<Args...> format, Args&&... args) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<uint8_t>(text_[i]) & 0xC0) != 0x80) {
        ++column;
      }
    }
    throw GrammarError(fmt::format("grammar line {}, column {}: {}", line, column,
                                   fmt::format(format, std::forward<Args>(args)...)));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  // Whitespace, newlines and # comments.
  void SkipSpace() {
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
    if (pos_ == start) {
      if (AtEnd()) Error(pos_, "expected a rule name, found the end of the grammar");
      Error(pos_, "expected a rule name, found '{}'", text_[pos_]);
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  // After the newline-free start of a line: is this `name ::=`, the start of the next rule?
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && IsNameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() &&
           (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r'))
      ++p;
    return text_.substr(p, 3) == "::=";
  }

  int32_t RuleId(const std::string& name, size_t at) {
    auto [it, inserted] = ids_.emplace(name, static_cast<int32_t>(g_.rules.size()));
    if (inserted) {
      g_.rules.push_back(Rule{name, {}});
      defined_.push_back(false);
      first_use_.push_back(at);
    }
    return it->second;
  }

  int32_t NewHelper(const std::string& base, std::vector<Sequence> alternatives) {
    const auto id = static_cast<int32_t>(g_.rules.size());
    g_.rules.push_back(Rule{fmt::format("{}/{}", base, ++helper_count_), std::move(alternatives)});
    defined_.push_back(true);
    first_use_.push_back(0);
    return id;
  }

  void Spend(size_t elements) {
    used_ += elements;
    if (used_ > limits_.max_elements)
      Error(pos_, "the grammar expands beyond {} elements", limits_.max_elements);
  }

  Element Bytes(const ByteSet& set) {
    auto [it, inserted] = set_ids_.emplace(set.bits, static_cast<int32_t>(g_.byte_sets.size()));
    if (inserted) g_.byte_sets.push_back(set);
    return Element{Element::Kind::kBytes, it->second};
  }
  static Element RuleRef(int32_t id) { return Element{Element::Kind::kRule, id}; }

  std::vector<Sequence> ParseAlternatives(int depth, const std::string& rule_name) {
    std::vector<Sequence> alternatives;
    alternatives.push_back(ParseSequence(depth, rule_name));
    while (Peek() == '|') {
      ++pos_;
      alternatives.push_back(ParseSequence(depth, rule_name));
    }
    return alternatives;
  }

  Sequence ParseSequence(int depth, const std::string& rule_name) {
    Sequence seq;
    while (true) {
      SkipSpace();
      if (AtEnd() || Peek() == '|' || Peek() == ')') break;
      if (depth == 0 && AtRuleStart()) break;
      Sequence atom = ParseAtom(depth, rule_name);
      // Stacked *, + and ? are one repetition: x** is x*, x++ x+, x?? x?, any two others x*.
      // (As nested rules, each level doubled the parse stacks of a step.)
      char stacked = 0;
      while (true) {
        SkipSpace();
        const char c = Peek();
        if (c == '*' || c == '+' || c == '?') {
          stacked = stacked == 0 || stacked == c ? c : '*';
          ++pos_;
          continue;
        }
        if (stacked != 0) {
          atom = Repeat(std::move(atom), stacked == '+' ? 1 : 0, stacked == '?' ? 1 : 0,
                        stacked != '?', rule_name);
          stacked = 0;
        }
        if (c != '{') break;
        atom = ParseBoundedRepetition(std::move(atom), rule_name);
      }
      seq.insert(seq.end(), atom.begin(), atom.end());
    }
    return seq;
  }

  uint32_t ParseNumber() {
    const size_t start = pos_;
    uint64_t n = 0;
    while (!AtEnd() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      n = n * 10 + static_cast<uint64_t>(text_[pos_] - '0');
      if (n > limits_.max_repetition)
        Error(start, "repetition count above the limit of {}", limits_.max_repetition);
      ++pos_;
    }
    if (pos_ == start) Error(pos_, "expected a number in the repetition");
    return static_cast<uint32_t>(n);
  }

  // x{m}, x{m,}, x{m,n}, x{,n}.
  Sequence ParseBoundedRepetition(Sequence atom, const std::string& rule_name) {
    const size_t at = pos_++;
    uint32_t min = 0, max = 0;
    bool unbounded = false;
    SkipSpace();
    if (Peek() != ',') min = ParseNumber();
    SkipSpace();
    if (Peek() == ',') {
      ++pos_;
      SkipSpace();
      if (Peek() == '}') {
        unbounded = true;
      } else {
        max = ParseNumber();
        if (max < min) Error(at, "repetition {{{},{}}} has max below min", min, max);
      }
    } else {
      max = min;
    }
    SkipSpace();
    if (Peek() != '}') Error(pos_, "expected '}}' to close the repetition");
    ++pos_;
    return Repeat(std::move(atom), min, max, unbounded, rule_name);
  }

  // `atom` from `min` to `max` times (no upper bound when `unbounded`).
  Sequence Repeat(Sequence atom, uint32_t min, uint32_t max, bool unbounded,
                  const std::string& rule_name) {
    // The repeated thing as one element.
    Element x;
    if (atom.size() == 1) {
      x = atom[0];
    } else {
      Spend(atom.size());
      x = RuleRef(NewHelper(rule_name, {std::move(atom)}));
    }
    const uint64_t optional = unbounded ? 0 : max - min;
    Spend(min + 2 * optional + 3);
    Sequence out(min, x);
    if (unbounded) {
      // star ::= x star | ""  (right recursion: the matcher's tail calls keep the stack flat)
      const int32_t star = NewHelper(rule_name, {});
      g_.rules[star].alternatives = {{x, RuleRef(star)}, {}};
      out.push_back(RuleRef(star));
    } else if (optional > 0) {
      // opt_k ::= x opt_{k-1} | ""  (at most k more), opt_1 ::= x | "". One chain per x,
      // extended as needed: repetitions of the same thing share their rules (two strings'
      // characters, {0,20} and {1,40}), so the token masks computed for one serve the others.
      std::vector<int32_t>& chain = opt_chains_[{static_cast<int>(x.kind), x.index}];
      if (chain.empty()) chain.push_back(NewHelper(rule_name, {{x}, {}}));
      while (chain.size() < optional)
        chain.push_back(NewHelper(rule_name, {{x, RuleRef(chain.back())}, {}}));
      out.push_back(RuleRef(chain[optional - 1]));
    }
    return out;
  }

  // One code point of a literal or class, escapes decoded.
  uint32_t ParseChar(bool in_class) {
    const size_t at = pos_;
    if (AtEnd()) Error(at, "{}", in_class ? "unterminated character class" : "unterminated string");
    const auto c = static_cast<uint8_t>(text_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (AtEnd()) Error(at, "unterminated escape");
      const char e = text_[pos_++];
      auto hex = [&](int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          if (AtEnd()) Error(at, "truncated \\{} escape", e);
          const char h = text_[pos_];
          int d;
          if (h >= '0' && h <= '9')
            d = h - '0';
          else if (h >= 'a' && h <= 'f')
            d = h - 'a' + 10;
          else if (h >= 'A' && h <= 'F')
            d = h - 'A' + 10;
          else
            Error(pos_, "bad hex digit '{}' in \\{} escape", h, e);
          v = v * 16 + static_cast<uint32_t>(d);
          ++pos_;
        }
        if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
          Error(at, "escape \\{} is not a Unicode scalar value", e);
        return v;
      };
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '0':
          return 0;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '.':
        case '|':
        case '(':
        case ')':
        case '*':
        case '+':
        case '?':
        case '{':
        case '}':
          return static_cast<uint8_t>(e);
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        default:
          Error(at, "unknown escape '\\{}'", e);
      }
    }
    if (c < 0x80) {
      ++pos_;
      return c;
    }
    // A UTF-8 sequence of the grammar text itself.
    const int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len == 0 || c > 0xF4 || pos_ + len > text_.size())
      Error(at, "invalid UTF-8 in the grammar");
    uint32_t cp = c & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto cc = static_cast<uint8_t>(text_[pos_ + i]);
      if ((cc & 0xC0) != 0x80) Error(at, "invalid UTF-8 in the grammar");
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (Utf8Len(cp) != len || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      Error(at, "invalid UTF-8 in the grammar");
    pos_ += len;
    return cp;
  }

  // Code point ranges -> one element: a byte set when every character is one byte, else a
  // helper rule of the UTF-8 byte-range sequences.
  Sequence ClassElement(const std::vector<CodeRange>& ranges, const std::string& rule_name) {
    std::vector<ByteRangeSeq> seqs;
    for (CodeRange r : ranges) SplitUtf8(r, seqs);
    ByteSet single;
    bool has_single = false;
    std::vector<Sequence> alternatives;
    for (const ByteRangeSeq& s : seqs) {
      if (s.len == 1) {
        single.AddRange(s.ranges[0].first, s.ranges[0].second);
        has_single = true;
        continue;
      }
      Sequence seq;
      for (int i = 0; i < s.len; ++i) {
        ByteSet b;
        b.AddRange(s.ranges[i].first, s.ranges[i].second);
        seq.push_back(Bytes(b));
      }
      alternatives.push_back(std::move(seq));
    }
    if (alternatives.empty()) return {Bytes(single)};  // possibly empty: matches nothing
    if (has_single) alternatives.insert(alternatives.begin(), Sequence{Bytes(single)});
    size_t n = 0;
    for (const auto& a : alternatives) n += a.size();
    Spend(n);
    return {RuleRef(NewHelper(rule_name, std::move(alternatives)))};
  }

  Sequence ParseAtom(int depth, const std::string& rule_name) {
    const size_t at = pos_;
    const char c = Peek();
    if (c == '"') {
      ++pos_;
      Sequence seq;
      while (true) {
        if (AtEnd()) Error(at, "unterminated string");
        if (Peek() == '"') {
          ++pos_;
          break;
        }
        uint8_t bytes[4];
        const uint32_t cp = ParseChar(false);
        EncodeUtf8(cp, bytes);
        for (int i = 0; i < Utf8Len(cp); ++i) {
          ByteSet set;
          set.Add(bytes[i]);
          seq.push_back(Bytes(set));
        }
      }
      Spend(seq.size());
      return seq;
    }
    if (c == '[') {
      ++pos_;
      bool negate = false;
      if (Peek() == '^') {
        negate = true;
        ++pos_;
      }
      std::vector<CodeRange> ranges;
      while (true) {
        if (AtEnd()) Error(at, "unterminated character class");
        if (Peek() == ']') {
          ++pos_;
          break;
        }
        const size_t item_at = pos_;
        const uint32_t lo = ParseChar(true);
        uint32_t hi = lo;
        if (Peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
          ++pos_;
          hi = ParseChar(true);
          if (hi < lo) Error(item_at, "character range is out of order");
        }
        ranges.push_back({lo, hi});
      }
      return ClassElement(Normalize(std::move(ranges), negate), rule_name);
    }
    if (c == '.') {
      ++pos_;
      if (any_char_ < 0) {
        any_char_ = ClassElement(Normalize({{0, kMaxCodePoint}}, false), "any-char")[0].index;
      }
      return {RuleRef(any_char_)};
    }
    if (c == '(') {
      if (depth + 1 > limits_.max_nesting)
        Error(at, "parentheses nested deeper than {}", limits_.max_nesting);
      ++pos_;
      auto alternatives = ParseAlternatives(depth + 1, rule_name);
      if (Peek() != ')') Error(at, "unclosed '('");
      ++pos_;
      if (alternatives.size() == 1) return std::move(alternatives[0]);
      return {RuleRef(NewHelper(rule_name, std::move(alternatives)))};
    }
    if (IsNameChar(c)) {
      const std::string name = ParseName();
      Spend(1);
      return {RuleRef(RuleId(name, at))};
    }
    if (c == ':' && text_.substr(pos_, 3) == "::=") Error(at, "'::=' without a rule name");
    if (static_cast<uint8_t>(c) < 0x20 || static_cast<uint8_t>(c) >= 0x7F)
      Error(at, "unexpected byte \\x{:02X}", static_cast<uint8_t>(c));
    Error(at, "unexpected '{}'", c);
  }

  std::string_view text_;
  GbnfLimits limits_;
  size_t pos_ = 0;
  size_t used_ = 0;
  int helper_count_ = 0;
  int32_t any_char_ = -1;
  Grammar g_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::map<std::array<uint64_t, 4>, int32_t> set_ids_;
  std::map<std::pair<int, int32_t>, std::vector<int32_t>> opt_chains_;  // per repeated element
};

}  // namespace

Grammar ParseGbnf(std::string_view text, const GbnfLimits& limits) {
  return Parser(text, limits).Parse();
}

}  // namespace infer::grammar
