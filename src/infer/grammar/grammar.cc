#include "infer/grammar/grammar.h"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"

namespace infer::grammar {

int ByteSet::Count() const {
  int n = 0;
  for (uint64_t w : bits) n += std::popcount(w);
  return n;
}

size_t Grammar::NumElements() const {
  size_t n = 0;
  for (const Rule& rule : rules) {
    for (const Sequence& seq : rule.alternatives) n += seq.size();
  }
  return n;
}

namespace {

std::string ByteSetText(const ByteSet& set) {
  if (set.Count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (set.Has(static_cast<uint8_t>(b))) {
        if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') return fmt::format("\"{}\"", char(b));
        return fmt::format("\"\\x{:02X}\"", b);
      }
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!set.Has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && set.Has(static_cast<uint8_t>(e + 1))) ++e;
    auto one = [](int c) {
      if (c >= 0x20 && c < 0x7f && c != ']' && c != '\\' && c != '-' && c != '^')
        return std::string(1, char(c));
      return fmt::format("\\x{:02X}", c);
    };
    out += one(b);
    if (e > b) {
      out += '-';
      out += one(e);
    }
    b = e + 1;
  }
  out += ']';
  return out;
}

}  // namespace

std::string Grammar::ToString() const {
  std::string out;
  for (const Rule& rule : rules) {
    out += rule.name;
    out += " ::=";
    for (size_t a = 0; a < rule.alternatives.size(); ++a) {
      if (a > 0) out += " |";
      if (rule.alternatives[a].empty()) out += " \"\"";
      for (const Element& e : rule.alternatives[a]) {
        out += ' ';
        out +=
            e.kind == Element::Kind::kRule ? rules[e.index].name : ByteSetText(byte_sets[e.index]);
      }
    }
    out += '\n';
  }
  return out;
}

void ValidateGrammar(const Grammar& g) {
  const auto n = static_cast<int32_t>(g.rules.size());
  if (g.root < 0 || g.root >= n) throw GrammarError("grammar has no root rule");
  for (const Rule& rule : g.rules) {
    for (const Sequence& seq : rule.alternatives) {
      for (const Element& e : seq) {
        const bool ok = e.kind == Element::Kind::kRule
                            ? e.index >= 0 && e.index < n
                            : e.index >= 0 && e.index < static_cast<int32_t>(g.byte_sets.size());
        if (!ok)
          throw GrammarError(fmt::format("rule '{}' references a missing element", rule.name));
      }
    }
  }
  // Nullable rules, by a worklist (linear in the grammar size).
  std::vector<bool> nullable(n, false);
  std::vector<int32_t> alt_rule;              // per alternative: its rule
  std::vector<int32_t> remaining;             // per alternative: refs not yet nullable
  std::vector<std::vector<int32_t>> uses(n);  // per rule: alternatives referencing it
  std::vector<int32_t> queue;
  for (int32_t r = 0; r < n; ++r) {
    for (const Sequence& seq : g.rules[r].alternatives) {
      const auto alt = static_cast<int32_t>(alt_rule.size());
      alt_rule.push_back(r);
      int32_t count = 0;
      bool has_bytes = false;
      for (const Element& e : seq) {
        if (e.kind == Element::Kind::kBytes) {
          has_bytes = true;
        } else {
          ++count;
        }
      }
      if (has_bytes) count = -1;  // never nullable
      remaining.push_back(count);
      if (!has_bytes) {
        for (const Element& e : seq) uses[e.index].push_back(alt);
      }
      if (count == 0 && !nullable[r]) {
        nullable[r] = true;
        queue.push_back(r);
      }
    }
  }
  while (!queue.empty()) {
    const int32_t r = queue.back();
    queue.pop_back();
    for (int32_t alt : uses[r]) {
      if (--remaining[alt] == 0 && !nullable[alt_rule[alt]]) {
        nullable[alt_rule[alt]] = true;
        queue.push_back(alt_rule[alt]);
      }
    }
  }
  // Edges A -> B where B can start A (after a nullable prefix); `tail` when B is the last
  // element. A cycle through at least one non-tail edge makes the matcher's closure grow the
  // stack forever (left recursion); a cycle of tail calls only is harmless (the matcher does
  // tail calls), so `star ::= x star | ""` with a nullable x is accepted.
  struct Edge {
    int32_t to;
    bool tail;
  };
  std::vector<std::vector<Edge>> edges(n);
  for (int32_t r = 0; r < n; ++r) {
    for (const Sequence& seq : g.rules[r].alternatives) {
      for (size_t i = 0; i < seq.size(); ++i) {
        const Element& e = seq[i];
        if (e.kind == Element::Kind::kBytes) break;
        edges[r].push_back({e.index, i + 1 == seq.size()});
        if (!nullable[e.index]) break;
      }
    }
  }
  // Iterative Tarjan SCC (no native recursion: deep helper chains are normal).
  std::vector<int32_t> index(n, -1), low(n, 0), scc(n, -1), stack;
  std::vector<bool> on_stack(n, false);
  std::vector<std::pair<int32_t, size_t>> call;
  int32_t counter = 0, scc_count = 0;
  for (int32_t start = 0; start < n; ++start) {
    if (index[start] >= 0) continue;
    call.push_back({start, 0});
    index[start] = low[start] = counter++;
    stack.push_back(start);
    on_stack[start] = true;
    while (!call.empty()) {
      auto& [v, next] = call.back();
      if (next < edges[v].size()) {
        const int32_t w = edges[v][next++].to;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = true;
          call.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const int32_t done = v;
      if (low[done] == index[done]) {
        while (true) {
          const int32_t w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          scc[w] = scc_count;
          if (w == done) break;
        }
        ++scc_count;
      }
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
    }
  }
  auto user_name = [&](int32_t r) {
    const std::string& name = g.rules[r].name;
    const size_t slash = name.find('/');
    return slash == std::string::npos ? name : name.substr(0, slash);
  };
  for (int32_t r = 0; r < n; ++r) {
    for (const Edge& e : edges[r]) {
      if (!e.tail && scc[e.to] == scc[r]) {
        throw GrammarError(fmt::format(
            "rule '{}' is left-recursive: it can reach itself through '{}' before matching "
            "any text",
            user_name(r), user_name(e.to)));
      }
    }
  }
}

}  // namespace infer::grammar
