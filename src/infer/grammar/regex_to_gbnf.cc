// GBNF text written from a regex's tree (regex_tree.h). Counted repetitions stay counted in the
// GBNF ({m,n}); their expanded size is what is capped.
#include "infer/grammar/regex_to_gbnf.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"
#include "infer/grammar/regex_tree.h"

namespace infer {
namespace grammar {
namespace {

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
  const std::vector<RegexBranch> branches = ParseRegex(pattern);
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
  for (const RegexBranch& branch : branches) {
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
