// A recursive-descent parser of the regex subset of regex_to_gbnf.h into the tree of
// regex_tree.h.
#include "infer/grammar/regex_tree.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"

namespace infer::grammar {
namespace {

// {m,n} bounds beyond this are refused before anything multiplies them.
constexpr size_t kMaxCount = 100000;
// Group depth: the parser and the passes over its tree recurse once per level (json_schema_fuzz
// overflowed the stack with thousands of '(').
constexpr int kMaxGroupDepth = 256;

NodePtr MakeSet(CodeSet set) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kSet;
  node->set = Normalize(std::move(set));
  return node;
}

// The classes of both dialects (see regex_to_gbnf.h for where they differ).
CodeSet DigitSet() { return {{'0', '9'}}; }
CodeSet WordSet() { return Normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
// Whitespace to ECMAScript and to Python's str.isspace() alike.
CodeSet SpaceSet() {
  return Normalize({{'\t', '\r'},
                    {' ', ' '},
                    {0xA0, 0xA0},
                    {0x1680, 0x1680},
                    {0x2000, 0x200A},
                    {0x2028, 0x2029},
                    {0x202F, 0x202F},
                    {0x205F, 0x205F},
                    {0x3000, 0x3000}});
}
// What either dialect calls whitespace: \S must exclude all of it.
CodeSet AnySpaceSet() { return Union(SpaceSet(), {{0x1C, 0x1F}, {0x85, 0x85}, {0xFEFF, 0xFEFF}}); }
CodeSet DotSet() { return Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

class Parser {
 public:
  explicit Parser(std::string_view pattern) : src_(pattern) {}

  using Branch = RegexBranch;

  std::vector<Branch> ParseTop() {
    std::vector<Branch> branches;
    while (true) {
      Branch branch;
      if (Peek() == '^') {
        branch.caret = true;
        ++pos_;
      }
      branch.node = ParseSeq(/*top=*/true);
      if (pos_ < src_.size() && src_[pos_] == '$') {
        branch.dollar = true;
        ++pos_;
      }
      branches.push_back(std::move(branch));
      if (pos_ >= src_.size()) break;
      if (src_[pos_] == '|') {
        ++pos_;
        continue;
      }
      if (src_[pos_] == ')') Fail(pos_, "unbalanced ')'");
      if (src_[pos_] == '$') Fail(pos_, "'$' is supported only at the end of the pattern");
      Fail(pos_, "unexpected character");
    }
    return branches;
  }

 private:
  [[noreturn]] void Fail(size_t at, std::string_view what) const {
    throw GrammarError(fmt::format("regex offset {}: {}", at, what));
  }

  int Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? static_cast<unsigned char>(src_[pos_ + ahead]) : -1;
  }

  // The next code point of the pattern (UTF-8).
  char32_t NextCodePoint() {
    const auto lead = static_cast<unsigned char>(src_[pos_]);
    int extra = 0;
    char32_t cp = lead;
    if (lead >= 0xF0) {
      extra = 3;
      cp = lead & 0x07;
    } else if (lead >= 0xE0) {
      extra = 2;
      cp = lead & 0x0F;
    } else if (lead >= 0xC0) {
      extra = 1;
      cp = lead & 0x1F;
    } else if (lead >= 0x80) {
      Fail(pos_, "invalid UTF-8");
    }
    const size_t start = pos_++;
    for (int i = 0; i < extra; ++i) {
      if (pos_ >= src_.size() || (static_cast<unsigned char>(src_[pos_]) & 0xC0) != 0x80)
        Fail(start, "invalid UTF-8");
      cp = (cp << 6) | (static_cast<unsigned char>(src_[pos_++]) & 0x3F);
    }
    if (cp > kMaxCodePoint) Fail(start, "invalid UTF-8");
    return cp;
  }

  NodePtr ParseAlt() {
    auto alt = std::make_unique<Node>();
    alt->kind = Node::Kind::kAlt;
    alt->kids.push_back(ParseSeq(/*top=*/false));
    while (Peek() == '|') {
      ++pos_;
      alt->kids.push_back(ParseSeq(/*top=*/false));
    }
    if (alt->kids.size() == 1) return std::move(alt->kids[0]);
    return alt;
  }

  // A sequence up to '|', ')' or the end; at the top level also up to a final '$'.
  NodePtr ParseSeq(bool top) {
    auto seq = std::make_unique<Node>();
    seq->kind = Node::Kind::kSeq;
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == '|' || c == ')') break;
      if (c == '$') {
        if (top && pos_ + 1 == src_.size()) break;
        if (top && pos_ + 1 < src_.size() && src_[pos_ + 1] == '|') break;
        Fail(pos_, "'$' is supported only at the end of the pattern");
      }
      if (c == '^') Fail(pos_, "'^' is supported only at the start of the pattern");
      NodePtr atom = ParseAtom();
      seq->kids.push_back(ParseQuantifier(std::move(atom)));
    }
    if (seq->kids.size() == 1) return std::move(seq->kids[0]);
    return seq;
  }

  // Reads {m}, {m,} or {m,n} at pos_; false (pos_ unchanged) when it is not one, in which case
  // both dialects read '{' as a literal.
  bool ReadCounts(size_t& min, size_t& max) {
    size_t p = pos_ + 1;
    auto read_number = [&](size_t& out) {
      const size_t start = p;
      out = 0;
      while (p < src_.size() && src_[p] >= '0' && src_[p] <= '9') {
        out = std::min(out * 10 + static_cast<size_t>(src_[p] - '0'), kMaxCount + 1);
        ++p;
      }
      return p > start;
    };
    if (!read_number(min)) return false;
    max = min;
    if (p < src_.size() && src_[p] == ',') {
      ++p;
      if (!read_number(max)) max = kUnbounded;
    }
    if (p >= src_.size() || src_[p] != '}') return false;
    if (min > kMaxCount || (max != kUnbounded && max > kMaxCount))
      Fail(pos_, fmt::format("repetition count above {}", kMaxCount));
    if (max < min) Fail(pos_, "repetition {m,n} with m > n");
    pos_ = p + 1;
    return true;
  }

  NodePtr ParseQuantifier(NodePtr atom) {
    size_t min = 0;
    size_t max = 0;
    const int c = Peek();
    if (c == '*') {
      min = 0, max = kUnbounded, ++pos_;
    } else if (c == '+') {
      min = 1, max = kUnbounded, ++pos_;
    } else if (c == '?') {
      min = 0, max = 1, ++pos_;
    } else if (c == '{' && ReadCounts(min, max)) {
    } else {
      return atom;
    }
    if (Peek() == '?') {
      ++pos_;  // lazy: the same language
    } else if (Peek() == '+') {
      Fail(pos_, "possessive quantifiers are not supported");
    }
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' || (Peek() == '{' && [&] {
          size_t a = 0;
          size_t b = 0;
          const size_t save = pos_;
          const bool counts = ReadCounts(a, b);
          pos_ = save;
          return counts;
        }())) {
      Fail(pos_, "a quantifier cannot follow a quantifier");
    }
    auto rep = std::make_unique<Node>();
    rep->kind = Node::Kind::kRepeat;
    rep->min = min;
    rep->max = max;
    rep->kids.push_back(std::move(atom));
    return rep;
  }

  NodePtr ParseAtom() {
    const size_t at = pos_;
    const char c = src_[pos_];
    switch (c) {
      case '(':
        return ParseGroup();
      case '[':
        return ParseClass();
      case '.':
        ++pos_;
        return MakeSet(DotSet());
      case '\\':
        return ParseEscape(/*in_class=*/false);
      case '*':
      case '+':
      case '?':
        Fail(at, "nothing to repeat");
      case '{': {
        size_t a = 0;
        size_t b = 0;
        if (ReadCounts(a, b)) Fail(at, "nothing to repeat");
        ++pos_;
        return MakeSet({{'{', '{'}});
      }
      default:
        break;
    }
    const char32_t cp = NextCodePoint();
    return MakeSet({{cp, cp}});
  }

  NodePtr ParseGroup() {
    const size_t at = pos_;
    ++pos_;  // '('
    if (Peek() == '?') {
      const int kind = Peek(1);
      if (kind == ':') {
        pos_ += 2;
      } else if (kind == 'P' && Peek(2) == '<') {
        SkipGroupName(pos_ + 3);
      } else if (kind == '<' && Peek(2) != '=' && Peek(2) != '!') {
        SkipGroupName(pos_ + 2);
      } else if (kind == '=' || kind == '!' || kind == '<') {
        Fail(at, "lookaround assertions are not supported");
      } else if (kind == 'P' && Peek(2) == '=') {
        Fail(at, "backreferences are not supported");
      } else {
        Fail(at, "this group syntax (inline flags, conditionals, atomic groups) is not supported");
      }
    }
    if (++depth_ > kMaxGroupDepth)
      Fail(at, fmt::format("groups nested deeper than {}", kMaxGroupDepth));
    NodePtr inner = ParseAlt();
    if (Peek() != ')') Fail(at, "unclosed '('");
    ++pos_;
    --depth_;
    return inner;
  }

  void SkipGroupName(size_t name_at) {
    size_t p = name_at;
    while (p < src_.size() && src_[p] != '>') ++p;
    if (p >= src_.size() || p == name_at) Fail(pos_ - 1, "bad group name");
    pos_ = p + 1;
  }

  unsigned ReadHex(size_t digits, size_t at) {
    unsigned value = 0;
    for (size_t i = 0; i < digits; ++i) {
      const int h = Peek();
      int v = -1;
      if (h >= '0' && h <= '9') v = h - '0';
      if (h >= 'a' && h <= 'f') v = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') v = h - 'A' + 10;
      if (v < 0) Fail(at, "bad hexadecimal escape");
      value = value * 16 + static_cast<unsigned>(v);
      ++pos_;
    }
    return value;
  }

  // An escape at pos_ ('\'): a set of code points (one code point for literal escapes).
  CodeSet ParseEscapeSet(bool in_class, bool& is_class_escape) {
    const size_t at = pos_;
    ++pos_;
    if (pos_ >= src_.size()) Fail(at, "the pattern ends in '\\'");
    const char c = src_[pos_];
    is_class_escape = false;
    auto one = [](char32_t cp) { return CodeSet{{cp, cp}}; };
    switch (c) {
      case 'd':
        ++pos_;
        is_class_escape = true;
        return DigitSet();
      case 'D':
        ++pos_;
        is_class_escape = true;
        return Complement(DigitSet());
      case 'w':
        ++pos_;
        is_class_escape = true;
        return WordSet();
      case 'W':
        ++pos_;
        is_class_escape = true;
        return Complement(WordSet());
      case 's':
        ++pos_;
        is_class_escape = true;
        return SpaceSet();
      case 'S':
        ++pos_;
        is_class_escape = true;
        return Complement(AnySpaceSet());
      case 'n':
        ++pos_;
        return one('\n');
      case 't':
        ++pos_;
        return one('\t');
      case 'r':
        ++pos_;
        return one('\r');
      case 'f':
        ++pos_;
        return one('\f');
      case 'v':
        ++pos_;
        return one('\v');
      case 'x':
        ++pos_;
        return one(ReadHex(2, at));
      case 'u': {
        ++pos_;
        if (Peek() == '{') Fail(at, "\\u{...} escapes are not supported (use \\uHHHH)");
        return one(ReadHex(4, at));
      }
      case '0':
        ++pos_;
        if (Peek() >= '0' && Peek() <= '9') Fail(at, "octal escapes are not supported");
        return one(0);
      case 'b':
        if (in_class) {
          ++pos_;
          return one('\b');
        }
        Fail(at, "word boundaries (\\b) are not supported");
      case 'B':
        Fail(at, "word boundaries (\\B) are not supported");
      case 'A':
      case 'Z':
      case 'z':
        Fail(at, "anchors other than '^' and '$' are not supported");
      case 'k':
        Fail(at, "backreferences are not supported");
      case 'p':
      case 'P':
        Fail(at, "Unicode property escapes are not supported");
      case 'c':
        Fail(at, "control escapes (\\cX) are not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') Fail(at, "backreferences are not supported");
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80 || std::isalnum(byte) != 0) {
      Fail(at, fmt::format("unknown escape '\\{}'", c));
    }
    ++pos_;
    return one(byte);  // escaped punctuation: itself
  }

  NodePtr ParseEscape(bool in_class) {
    bool is_class = false;
    return MakeSet(ParseEscapeSet(in_class, is_class));
  }

  NodePtr ParseClass() {
    const size_t at = pos_;
    ++pos_;  // '['
    bool negate = false;
    if (Peek() == '^') {
      negate = true;
      ++pos_;
    }
    // ECMAScript reads "[]" as the empty class and "[^]" as any character; Python reads the ']'
    // as a literal. Refused rather than guessed.
    if (Peek() == ']')
      Fail(pos_,
           "a ']' first in a class means different things in Python and ECMAScript; escape it");
    CodeSet set;
    while (true) {
      if (pos_ >= src_.size()) Fail(at, "unclosed '['");
      if (src_[pos_] == ']') {
        ++pos_;
        break;
      }
      if (src_[pos_] == '[' && (Peek(1) == ':' || Peek(1) == '=' || Peek(1) == '.'))
        Fail(pos_, "POSIX classes are not supported");
      const size_t item_at = pos_;
      bool is_class = false;
      CodeSet lo = ClassAtom(is_class);
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != -1) {
        ++pos_;
        bool hi_class = false;
        const CodeSet hi = ClassAtom(hi_class);
        if (is_class || hi_class) Fail(item_at, "a range with a class escape as an end");
        if (hi[0].lo < lo[0].lo) Fail(item_at, "a range out of order");
        set.push_back({lo[0].lo, hi[0].lo});
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    set = Normalize(std::move(set));
    if (negate) set = Complement(set);
    return MakeSet(std::move(set));
  }

  CodeSet ClassAtom(bool& is_class) {
    is_class = false;
    if (src_[pos_] == '\\') return ParseEscapeSet(/*in_class=*/true, is_class);
    const char32_t cp = NextCodePoint();
    return {{cp, cp}};
  }

  std::string_view src_;
  size_t pos_ = 0;
  int depth_ = 0;  // groups open at pos_
};

}  // namespace

std::vector<RegexBranch> ParseRegex(std::string_view pattern) { return Parser(pattern).ParseTop(); }

}  // namespace infer::grammar
