// Test code only: a small, independent GBNF recognizer (llama.cpp's syntax: literals with
// \n \r \t \\ \" \xHH \uHHHH escapes, classes, negated classes, `.`, groups, `| * + ?`,
// {m} {m,} {m,n}, # comments) over Unicode code points, used to check the converters' output
// without the production matcher. The grammar is rewritten into plain BNF (a nonterminal per
// group and repetition) and recognized with an Earley parser, which takes any context-free
// grammar (ambiguous, nullable, recursive) and advances one code point at a time, so the same
// object also draws random strings of the grammar's language (a random walk over the terminals
// allowed next).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace infer::testing_gbnf {

struct Terminal {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  bool negated = false;
  bool Matches(char32_t cp) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges) in = in || (lo <= cp && cp <= hi);
    return in != negated;
  }
};

// A symbol: >= 0 a nonterminal, < 0 the terminal -1 - symbol.
using Symbol = int;

inline std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    char32_t cp = len == 1   ? lead
                  : len == 2 ? (lead & 0x1F)
                  : len == 3 ? (lead & 0x0F)
                             : (lead & 0x07);
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= s.size()) throw std::runtime_error("bad UTF-8");
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    out += cp;
    i += len;
  }
  return out;
}

inline std::string EncodeUtf8(char32_t cp) {
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

class Grammar {
 public:
  explicit Grammar(std::string_view text) : src_(DecodeUtf8(text)) {
    SkipSpace(true);
    while (pos_ < src_.size()) {
      const std::string name = Name();
      SkipSpace(false);
      Expect(U"::=");
      SkipSpace(true);
      const int nt = NonterminalOf(name);
      defined_.insert(nt);
      for (auto& alt : Alternatives()) productions_.push_back({nt, std::move(alt)});
      SkipSpace(true);
    }
    for (const auto& [name, id] : names_) {
      if (defined_.count(id) == 0) throw std::runtime_error("undefined rule " + name);
    }
    if (names_.count("root") == 0) throw std::runtime_error("no root rule");
    root_ = names_["root"];
    ComputeNullable();
    by_lhs_.resize(nonterminals_);
    for (size_t p = 0; p < productions_.size(); ++p) by_lhs_[productions_[p].lhs].push_back(p);
  }

  // An Earley parse in progress.
  class Parse {
   public:
    explicit Parse(const Grammar& g) : g_(g) {
      charts_.emplace_back();
      for (const size_t p : g_.by_lhs_[g_.root_]) Add(0, {p, 0, 0});
      Close(0);
    }
    bool Advance(char32_t cp) {
      const size_t i = charts_.size() - 1;
      charts_.emplace_back();
      for (size_t k = 0; k < charts_[i].items.size(); ++k) {
        const Item item = charts_[i].items[k];
        const auto& rhs = g_.productions_[item.prod].rhs;
        if (item.dot < rhs.size() && rhs[item.dot] < 0 &&
            g_.terminals_[-1 - rhs[item.dot]].Matches(cp)) {
          Add(i + 1, {item.prod, item.dot + 1, item.origin});
        }
      }
      Close(i + 1);
      return !charts_.back().items.empty();
    }
    bool Complete() const {
      for (const Item& item : charts_.back().items) {
        if (item.origin == 0 && g_.productions_[item.prod].lhs == g_.root_ &&
            item.dot == g_.productions_[item.prod].rhs.size())
          return true;
      }
      return false;
    }
    // Terminals allowed next (indices into the grammar's terminals, distinct).
    std::vector<int> Next() const {
      std::set<int> out;
      for (const Item& item : charts_.back().items) {
        const auto& rhs = g_.productions_[item.prod].rhs;
        if (item.dot < rhs.size() && rhs[item.dot] < 0) out.insert(-1 - rhs[item.dot]);
      }
      return {out.begin(), out.end()};
    }
    bool Dead() const { return charts_.back().items.empty(); }

   private:
    struct Item {
      size_t prod;
      size_t dot;
      size_t origin;
      bool operator<(const Item& o) const {
        return std::tie(prod, dot, origin) < std::tie(o.prod, o.dot, o.origin);
      }
    };
    struct Chart {
      std::vector<Item> items;
      std::set<Item> seen;
    };
    void Add(size_t i, const Item& item) {
      if (charts_[i].seen.insert(item).second) charts_[i].items.push_back(item);
    }
    void Close(size_t i) {
      for (size_t k = 0; k < charts_[i].items.size(); ++k) {
        const Item item = charts_[i].items[k];
        const auto& prod = g_.productions_[item.prod];
        if (item.dot < prod.rhs.size()) {
          const Symbol next = prod.rhs[item.dot];
          if (next < 0) continue;
          for (const size_t p : g_.by_lhs_[next]) Add(i, {p, 0, i});
          if (g_.nullable_[next]) Add(i, {item.prod, item.dot + 1, item.origin});
        } else {
          // Complete: advance every item of the origin's chart waiting for this nonterminal.
          const size_t origin = item.origin;
          for (size_t w = 0; w < charts_[origin].items.size(); ++w) {
            const Item waiting = charts_[origin].items[w];
            const auto& rhs = g_.productions_[waiting.prod].rhs;
            if (waiting.dot < rhs.size() && rhs[waiting.dot] == prod.lhs) {
              Add(i, {waiting.prod, waiting.dot + 1, waiting.origin});
            }
          }
        }
      }
    }
    const Grammar& g_;
    std::vector<Chart> charts_;
  };

  bool Accepts(std::string_view text) const {
    Parse parse(*this);
    for (const char32_t cp : DecodeUtf8(text)) {
      if (!parse.Advance(cp)) return false;
    }
    return parse.Complete();
  }

  // A random string of the language: at each step, uniformly one of the terminals allowed next
  // or (when the prefix is complete) the end; within a terminal, a code point from a palette
  // (printable ASCII and a few multi-byte characters). Empty when max_chars is reached first.
  std::optional<std::string> Sample(std::mt19937& rng, size_t max_chars) const {
    static const std::u32string kPalette = [] {
      std::u32string p;
      for (char32_t c = 0x20; c < 0x7F; ++c) p += c;
      p += U"\u00e9\u4e2d\U0001F600\u00a0";
      return p;
    }();
    Parse parse(*this);
    std::string out;
    for (size_t n = 0; n < max_chars; ++n) {
      const std::vector<int> next = parse.Next();
      const bool can_stop = parse.Complete();
      const size_t choices = next.size() + (can_stop ? 1 : 0);
      if (choices == 0) return std::nullopt;
      const size_t pick = std::uniform_int_distribution<size_t>(0, choices - 1)(rng);
      if (pick == next.size()) return out;
      const Terminal& t = terminals_[next[pick]];
      std::vector<char32_t> options;
      for (const char32_t c : kPalette) {
        if (t.Matches(c)) options.push_back(c);
      }
      if (options.empty()) {
        for (const auto& [lo, hi] : t.ranges) {
          if (!t.negated) options.push_back(lo), options.push_back(hi);
        }
        if (options.empty()) throw std::runtime_error("cannot sample a terminal");
      }
      const char32_t cp =
          options[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)];
      if (!parse.Advance(cp)) throw std::runtime_error("sampled a dead end");
      out += EncodeUtf8(cp);
    }
    return std::nullopt;
  }

 private:
  struct Production {
    int lhs;
    std::vector<Symbol> rhs;
  };

  [[noreturn]] void Fail(const std::string& what) const {
    throw std::runtime_error("GBNF at " + std::to_string(pos_) + ": " + what);
  }

  void SkipSpace(bool newlines) {
    while (pos_ < src_.size()) {
      const char32_t c = src_[pos_];
      if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  void Expect(std::u32string_view what) {
    if (src_.compare(pos_, what.size(), what) != 0) Fail("expected ::=");
    pos_ += what.size();
  }

  static bool IsNameChar(char32_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  std::string Name() {
    std::string name;
    while (pos_ < src_.size() && IsNameChar(src_[pos_])) name += static_cast<char>(src_[pos_++]);
    if (name.empty()) Fail("expected a rule name");
    return name;
  }

  int NonterminalOf(const std::string& name) {
    const auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    names_[name] = nonterminals_;
    return nonterminals_++;
  }

  int Fresh() {
    defined_.insert(nonterminals_);
    return nonterminals_++;
  }

  Symbol AddTerminal(Terminal t) {
    terminals_.push_back(std::move(t));
    return -static_cast<int>(terminals_.size());
  }

  char32_t Escaped() {
    const char32_t c = src_[pos_++];
    if (c != '\\') return c;
    if (pos_ >= src_.size()) Fail("dangling escape");
    const char32_t e = src_[pos_++];
    auto hex = [&](int n) {
      char32_t v = 0;
      for (int i = 0; i < n; ++i) {
        if (pos_ >= src_.size()) Fail("short hex escape");
        const char32_t h = src_[pos_++];
        int d = -1;
        if (h >= '0' && h <= '9') d = static_cast<int>(h - '0');
        if (h >= 'a' && h <= 'f') d = static_cast<int>(h - 'a' + 10);
        if (h >= 'A' && h <= 'F') d = static_cast<int>(h - 'A' + 10);
        if (d < 0) Fail("bad hex escape");
        v = v * 16 + static_cast<char32_t>(d);
      }
      return v;
    };
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
        return '\\';
      case '"':
        return '"';
      case '[':
        return '[';
      case ']':
        return ']';
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      default:
        Fail("unknown escape");
    }
  }

  // Alternatives of sequences of symbols, up to ')' or the end of the rule.
  std::vector<std::vector<Symbol>> Alternatives() {
    std::vector<std::vector<Symbol>> alts(1);
    while (true) {
      SkipSpace(false);
      if (pos_ >= src_.size()) break;
      const char32_t c = src_[pos_];
      if (c == '\n' || c == '\r') {
        // A rule continues on the next line only inside parentheses or after '|'.
        if (depth_ > 0 || (alts.back().empty() && alts.size() > 1)) {
          SkipSpace(true);
          continue;
        }
        break;
      }
      if (c == ')') break;
      if (c == '|') {
        ++pos_;
        alts.emplace_back();
        SkipSpace(true);
        continue;
      }
      std::vector<Symbol> atom = Atom();
      Postfix(atom);
      alts.back().insert(alts.back().end(), atom.begin(), atom.end());
    }
    return alts;
  }

  std::vector<Symbol> Atom() {
    const char32_t c = src_[pos_];
    if (c == '"') {
      ++pos_;
      std::vector<Symbol> seq;
      while (true) {
        if (pos_ >= src_.size()) Fail("unclosed literal");
        if (src_[pos_] == '"') {
          ++pos_;
          break;
        }
        const char32_t cp = Escaped();
        seq.push_back(AddTerminal({{{cp, cp}}, false}));
      }
      return seq;
    }
    if (c == '[') {
      ++pos_;
      Terminal t;
      if (pos_ < src_.size() && src_[pos_] == '^') {
        t.negated = true;
        ++pos_;
      }
      while (true) {
        if (pos_ >= src_.size()) Fail("unclosed class");
        if (src_[pos_] == ']') {
          ++pos_;
          break;
        }
        const char32_t lo = Escaped();
        char32_t hi = lo;
        if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
          ++pos_;
          hi = Escaped();
        }
        t.ranges.emplace_back(lo, hi);
      }
      return {AddTerminal(std::move(t))};
    }
    if (c == '.') {
      ++pos_;
      return {AddTerminal({{}, true})};
    }
    if (c == '(') {
      ++pos_;
      ++depth_;
      SkipSpace(true);
      const int nt = Fresh();
      for (auto& alt : Alternatives()) productions_.push_back({nt, std::move(alt)});
      if (pos_ >= src_.size() || src_[pos_] != ')') Fail("unclosed group");
      ++pos_;
      --depth_;
      return {nt};
    }
    if (IsNameChar(c)) return {NonterminalOf(Name())};
    Fail("unexpected character");
  }

  // A nonterminal for a sequence of symbols.
  int Wrap(const std::vector<Symbol>& seq) {
    if (seq.size() == 1 && seq[0] >= 0) return seq[0];
    const int nt = Fresh();
    productions_.push_back({nt, seq});
    return nt;
  }

  void Postfix(std::vector<Symbol>& atom) {
    if (pos_ >= src_.size()) return;
    size_t min = 1;
    long max = 1;  // -1: unbounded
    const char32_t c = src_[pos_];
    if (c == '*') {
      min = 0, max = -1, ++pos_;
    } else if (c == '+') {
      min = 1, max = -1, ++pos_;
    } else if (c == '?') {
      min = 0, max = 1, ++pos_;
    } else if (c == '{') {
      ++pos_;
      auto number = [&] {
        size_t v = 0;
        const size_t start = pos_;
        while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9')
          v = v * 10 + (src_[pos_++] - '0');
        if (pos_ == start) Fail("expected a number");
        return v;
      };
      SkipSpace(false);
      min = number();
      SkipSpace(false);
      max = static_cast<long>(min);
      if (src_[pos_] == ',') {
        ++pos_;
        SkipSpace(false);
        max = src_[pos_] == '}' ? -1 : static_cast<long>(number());
        SkipSpace(false);
      }
      if (src_[pos_] != '}') Fail("expected }");
      ++pos_;
    } else {
      return;
    }
    const int x = Wrap(atom);
    std::vector<Symbol> out(min, x);
    if (max < 0) {
      const int star = Fresh();  // star ::= | x star
      productions_.push_back({star, {}});
      productions_.push_back({star, {x, star}});
      out.push_back(star);
    } else if (static_cast<size_t>(max) > min) {
      int opt = -1;  // opt_k ::= | x opt_{k-1}
      for (size_t k = 0; k < static_cast<size_t>(max) - min; ++k) {
        const int next = Fresh();
        productions_.push_back({next, {}});
        productions_.push_back(
            {next, opt < 0 ? std::vector<Symbol>{x} : std::vector<Symbol>{x, opt}});
        opt = next;
      }
      out.push_back(opt);
    }
    atom = out;
  }

  void ComputeNullable() {
    nullable_.assign(nonterminals_, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (const Production& p : productions_) {
        if (nullable_[p.lhs]) continue;
        bool all = true;
        for (const Symbol s : p.rhs) all = all && s >= 0 && nullable_[s];
        if (all) nullable_[p.lhs] = true, changed = true;
      }
    }
  }

  std::u32string src_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::map<std::string, int> names_;
  std::set<int> defined_;
  int nonterminals_ = 0;
  int root_ = 0;
  std::vector<Production> productions_;
  std::vector<Terminal> terminals_;
  std::vector<bool> nullable_;
  std::vector<std::vector<size_t>> by_lhs_;
};

}  // namespace infer::testing_gbnf
