// A recursive-descent parser of the regex subset of regex.h into a small tree (sets of code
// points, sequences, alternatives, counted repetitions), then GBNF text written from the tree.
// Counted repetitions stay counted in the GBNF ({m,n}); their expanded size is what is capped.
#include "infer/grammar/regex_to_gbnf.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"

namespace infer {
namespace grammar {
namespace {

constexpr size_t kUnbounded = static_cast<size_t>(-1);
// {m,n} bounds beyond this are refused before anything multiplies them.
constexpr size_t kMaxCount = 100000;
// Group depth: the parser and the passes over its tree recurse once per level (json_schema_fuzz
// overflowed the stack with thousands of '(').
constexpr int kMaxGroupDepth = 256;

struct Node {
  enum class Kind { kSet, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  CodeSet set;                              // kSet
  std::vector<std::unique_ptr<Node>> kids;  // kSeq, kAlt; kRepeat: one
  size_t min = 0;                           // kRepeat
  size_t max = 0;                           // kRepeat; kUnbounded for * and +
};

using NodePtr = std::unique_ptr<Node>;

NodePtr MakeSet(CodeSet set) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kSet;
  node->set = Normalize(std::move(set));
  return node;
}

// The classes of both dialects (see regex.h for where they differ).
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

  // One top-level alternative with its anchors.
  struct Branch {
    NodePtr node;
    bool caret = false;
    bool dollar = false;
  };

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

// Sizes: the expanded number of character positions, and the length range of the language.
struct Measure {
  size_t expansion = 0;
  size_t min = 0;
  size_t max = 0;  // kUnbounded
};

size_t SatAdd(size_t a, size_t b) { return a > kUnbounded - b ? kUnbounded : a + b; }
size_t SatMul(size_t a, size_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kUnbounded / b ? kUnbounded : a * b;
}

Measure MeasureOf(const Node& node) {
  Measure m;
  switch (node.kind) {
    case Node::Kind::kSet:
      return {1, 1, 1};
    case Node::Kind::kSeq:
      for (const auto& kid : node.kids) {
        const Measure k = MeasureOf(*kid);
        m.expansion = SatAdd(m.expansion, k.expansion);
        m.min = SatAdd(m.min, k.min);
        m.max = SatAdd(m.max, k.max);
      }
      return m;
    case Node::Kind::kAlt:
      m.min = kUnbounded;
      for (const auto& kid : node.kids) {
        const Measure k = MeasureOf(*kid);
        m.expansion = SatAdd(m.expansion, k.expansion);
        m.min = std::min(m.min, k.min);
        m.max = std::max(m.max, k.max);
      }
      return m;
    case Node::Kind::kRepeat: {
      const Measure k = MeasureOf(*node.kids[0]);
      const size_t copies = node.max == kUnbounded ? std::max<size_t>(node.min, 1) : node.max;
      m.expansion = SatMul(k.expansion, std::max<size_t>(copies, 1));
      m.min = SatMul(k.min, node.min);
      m.max = node.max == kUnbounded ? (k.max == 0 ? 0 : kUnbounded) : SatMul(k.max, node.max);
      return m;
    }
  }
  return m;
}

// JSON's escape for one code point inside a string literal, or "" when it is written raw.
std::string JsonEscape(char32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      break;
  }
  if (cp < 0x20) return fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
  return "";
}

class Writer {
 public:
  explicit Writer(bool json) : json_(json) {}

  // A GBNF expression; `atomic` tells whether it can take a postfix operator as is.
  std::string Write(const Node& node, bool& atomic) {
    switch (node.kind) {
      case Node::Kind::kSet: {
        atomic = true;
        if (Subtract(node.set, {{0xD800, 0xDFFF}}).empty()) {
          throw GrammarError(
              "regex: a character class that matches nothing (surrogate code points are not "
              "characters)");
        }
        if (!json_) return GbnfClass(node.set);
        std::string expr = JsonStringChar(node.set);
        atomic = expr.find(" | ") == std::string::npos;
        return expr;
      }
      case Node::Kind::kSeq: {
        if (node.kids.empty()) {
          atomic = true;
          return "\"\"";
        }
        std::string out;
        std::string run;  // consecutive single code points, written as one literal
        auto flush = [&] {
          if (run.empty()) return;
          if (!out.empty()) out += ' ';
          out += GbnfLiteral(run);
          run.clear();
        };
        size_t parts = 0;
        bool last_atomic = true;
        for (const auto& kid : node.kids) {
          if (kid->kind == Node::Kind::kSet && kid->set.size() == 1 &&
              kid->set[0].lo == kid->set[0].hi &&
              !(kid->set[0].lo >= 0xD800 && kid->set[0].lo <= 0xDFFF)) {
            const char32_t cp = kid->set[0].lo;
            const std::string escaped = json_ ? JsonEscape(cp) : "";
            if (run.empty()) {
              ++parts;
              last_atomic = true;
            }
            run += escaped.empty() ? Utf8(cp) : escaped;
            continue;
          }
          flush();
          bool kid_atomic = false;
          std::string expr = Write(*kid, kid_atomic);
          if (!kid_atomic && kid->kind != Node::Kind::kSeq) expr = fmt::format("({})", expr);
          if (!out.empty()) out += ' ';
          out += expr;
          last_atomic = kid_atomic || kid->kind != Node::Kind::kSeq;
          ++parts;
        }
        flush();
        atomic = parts == 1 && last_atomic;
        return out;
      }
      case Node::Kind::kAlt: {
        std::string out;
        for (const auto& kid : node.kids) {
          bool kid_atomic = false;
          if (!out.empty()) out += " | ";
          out += Write(*kid, kid_atomic);
        }
        atomic = false;
        return out;
      }
      case Node::Kind::kRepeat: {
        bool kid_atomic = false;
        std::string inner = Write(*node.kids[0], kid_atomic);
        // A group holding a repetition, "(a+)+", keeps its parentheses: "a++" is not GBNF.
        if (!kid_atomic || node.kids[0]->kind == Node::Kind::kRepeat) inner = "(" + inner + ")";
        atomic = true;
        if (node.min == 0 && node.max == kUnbounded) return inner + "*";
        if (node.min == 1 && node.max == kUnbounded) return inner + "+";
        if (node.min == 0 && node.max == 1) return inner + "?";
        if (node.max == kUnbounded) return fmt::format("{}{{{},}}", inner, node.min);
        if (node.min == node.max) return fmt::format("{}{{{}}}", inner, node.min);
        return fmt::format("{}{{{},{}}}", inner, node.min, node.max);
      }
    }
    return "";
  }

 private:
  bool json_;
};

}  // namespace

std::string JsonStringChar(const CodeSet& set) {
  // The specials of a JSON string: control characters, '"' and '\'.
  const CodeSet specials = Normalize({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
  const CodeSet plain = Subtract(set, specials);
  std::vector<std::string> parts;
  if (!Subtract(plain, {{0xD800, 0xDFFF}}).empty()) parts.push_back(GbnfClass(plain));
  // All control characters (the common case: a negated class, `.`, \S): \u00XX for each and
  // the short escapes JSON writers prefer; otherwise one escape per character.
  const bool all_controls = Subtract({{0, 0x1F}}, set).empty();
  if (all_controls) {
    parts.push_back("\"\\\\u00\" [01] [0-9a-fA-F]");
    parts.push_back("\"\\\\\" [bfnrt]");
  }
  for (const CodeRange& r : set) {
    for (char32_t cp = r.lo; cp <= r.hi && cp <= 0x5C; ++cp) {
      if (cp < 0x20 && all_controls) continue;
      if (Contains(specials, cp)) parts.push_back(GbnfLiteral(JsonEscape(cp)));
    }
  }
  if (parts.empty()) throw GrammarError("regex: a character class that matches nothing");
  std::string out;
  for (const std::string& part : parts) {
    if (!out.empty()) out += " | ";
    out += part;
  }
  return out;
}

CompiledRegex CompileRegex(std::string_view pattern, const RegexOptions& options,
                           GbnfRules& rules) {
  Parser parser(pattern);
  std::vector<Parser::Branch> branches = parser.ParseTop();
  Writer writer(options.json_string);
  // What an unanchored side may add: any character (a JSON string's, escaped, in JSON mode).
  const CodeSet any = Complement({});
  std::string pad;
  if (options.json_string) {
    pad += '(';  // an alternation
    pad += JsonStringChar(any);
    pad += ')';
  } else {
    pad += GbnfClass(any);
  }
  pad += '*';
  CompiledRegex out;
  out.min_length = kUnbounded;
  size_t max = 0;
  size_t expansion = 0;
  std::string expr;
  for (const Parser::Branch& branch : branches) {
    const Measure m = MeasureOf(*branch.node);
    expansion = SatAdd(expansion, m.expansion);
    if (expansion > options.max_expansion) {
      throw GrammarError(fmt::format(
          "regex: expands to more than {} characters once its counted repetitions are written "
          "out",
          options.max_expansion));
    }
    bool atomic = false;
    std::string body = writer.Write(*branch.node, atomic);
    if (branch.node->kind == Node::Kind::kAlt) body = fmt::format("({})", body);
    size_t branch_max = m.max;
    if (options.search && !branch.caret) {
      body = fmt::format("{} {}", pad, body);
      branch_max = kUnbounded;
    }
    if (options.search && !branch.dollar) {
      body += " " + pad;
      branch_max = kUnbounded;
    }
    out.min_length = std::min(out.min_length, m.min);
    max = std::max(max, branch_max);
    if (!expr.empty()) expr += " | ";
    expr += body;
  }
  rules.Charge(expr.size());
  out.expression = branches.size() > 1 ? "(" + expr + ")" : expr;
  if (max != kUnbounded) out.max_length = max;
  return out;
}

}  // namespace grammar

std::string RegexToGbnf(std::string_view pattern) {
  grammar::GbnfRules rules(1 << 20);
  const grammar::CompiledRegex compiled = grammar::CompileRegex(pattern, {}, rules);
  return rules.Render(compiled.expression);
}

}  // namespace infer
