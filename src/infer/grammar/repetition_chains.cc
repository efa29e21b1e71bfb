// CompiledGrammar's repetition chains: the grammar's counted repetitions found once, and the
// walks, canonical forms and token sets of a chain of them.
#include "infer/grammar/token_mask.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>

#include "infer/core/error.h"
#include "infer/grammar/gbnf.h"
#include "infer/grammar/grammar_error.h"
#include "infer/grammar/token_walk.h"

namespace infer::grammar {

void CompiledGrammar::FindRepetitionChains() {
  const FlatGrammar& g = *flat_;
  const auto num_rules = static_cast<int32_t>(g.alt_begin.size()) - 1;
  // Per rule: its count k (0 = not such a rule; -1 = not yet known) and a rule one larger.
  std::vector<int32_t> count(static_cast<size_t>(num_rules), -1),
      parent(static_cast<size_t>(num_rules), -1);
  auto shape = [&](int32_t r, int32_t& x, int32_t& child) {
    if (g.alt_begin[r + 1] - g.alt_begin[r] != 2) return false;
    const int32_t s0 = g.alt_start[g.alt_begin[r]], s1 = g.alt_start[g.alt_begin[r] + 1];
    if (g.op[s1] != FlatGrammar::kEnd || g.op[s0] == FlatGrammar::kEnd) return false;
    x = g.op[s0];
    if (g.op[s0 + 1] == FlatGrammar::kEnd) {
      child = -1;
      return true;
    }
    if (!FlatGrammar::IsRule(g.op[s0 + 1]) || g.op[s0 + 2] != FlatGrammar::kEnd) return false;
    child = FlatGrammar::RuleOf(g.op[s0 + 1]);
    return child != r;
  };
  std::vector<int32_t> path, on_path(static_cast<size_t>(num_rules), -1);
  for (int32_t r = 0; r < num_rules; ++r) {
    // Down the chain to a rule whose count is known or decided, then the counts back up.
    path.clear();
    int32_t cur = r, base = 0;
    while (true) {
      const auto c = static_cast<size_t>(cur);
      if (count[c] >= 0) {
        base = count[c];
        break;
      }
      if (on_path[c] == r) {  // a cycle
        base = 0;
        break;
      }
      int32_t x, child, cx, cc;
      if (!shape(cur, x, child)) {
        base = count[c] = 0;
        break;
      }
      if (child < 0) {
        base = count[c] = 1;
        break;
      }
      if (!shape(child, cx, cc) || cx != x) {
        base = count[c] = 0;
        break;
      }
      on_path[c] = r;
      path.push_back(cur);
      cur = child;
    }
    for (size_t i = path.size(); i-- > 0;) {
      base = base > 0 ? base + 1 : 0;
      count[static_cast<size_t>(path[i])] = base;
    }
  }
  for (int32_t r = 0; r < num_rules; ++r) {
    int32_t x, child;
    if (count[static_cast<size_t>(r)] >= 2 && shape(r, x, child) &&
        parent[static_cast<size_t>(child)] < 0)
      parent[static_cast<size_t>(child)] = r;
  }
  // The fewest bytes of each rule (a fixed point; nullable rules 0).
  constexpr int64_t kInf = int64_t{1} << 40;
  std::vector<int64_t> min_len(static_cast<size_t>(num_rules), kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < num_rules; ++r) {
      for (int32_t a = g.alt_begin[r]; a < g.alt_begin[r + 1]; ++a) {
        int64_t len = 0;
        for (int32_t p = g.alt_start[a]; g.op[p] != FlatGrammar::kEnd; ++p)
          len =
              std::min(kInf, len + (FlatGrammar::IsRule(g.op[p])
                                        ? min_len[static_cast<size_t>(FlatGrammar::RuleOf(g.op[p]))]
                                        : 1));
        if (len < min_len[static_cast<size_t>(r)]) {
          min_len[static_cast<size_t>(r)] = len;
          changed = true;
        }
      }
    }
  }
  rep_canon_.assign(g.op.size(), -1);
  rep_left_.assign(g.op.size(), INT32_MAX);
  std::vector<int32_t> top(static_cast<size_t>(num_rules), -1);
  for (int32_t r = 0; r < num_rules; ++r) {
    const int32_t k = count[static_cast<size_t>(r)];
    if (k <= 0) continue;
    // Up to the chain's top; every rule passed on the way shares it (without remembering that,
    // a chain of n rules made from x{0,n} took n^2 / 2 steps: 80 s for n = 80300, gbnf_fuzz).
    int32_t t = r;
    path.clear();
    while (parent[static_cast<size_t>(t)] >= 0 && top[static_cast<size_t>(t)] < 0) {
      path.push_back(t);
      t = parent[static_cast<size_t>(t)];
    }
    if (top[static_cast<size_t>(t)] >= 0) t = top[static_cast<size_t>(t)];
    for (const int32_t passed : path) top[static_cast<size_t>(passed)] = t;
    top[static_cast<size_t>(r)] = t;
    const int32_t s0 = g.alt_start[g.alt_begin[r]], t0 = g.alt_start[g.alt_begin[t]];
    // Going past the chain's end from here takes every x left, each at least `unit` bytes, then
    // one byte more: tokens no longer than left * unit cannot tell this rule from the largest.
    const int32_t xop = g.op[static_cast<size_t>(s0)];
    const int64_t unit = std::max<int64_t>(
        1, FlatGrammar::IsRule(xop)
               ? std::min<int64_t>(min_len[static_cast<size_t>(FlatGrammar::RuleOf(xop))], 1 << 20)
               : 1);
    auto bytes = [&](int64_t units) {
      return static_cast<int32_t>(std::min<int64_t>(INT32_MAX, units * unit));
    };
    rep_canon_[static_cast<size_t>(s0)] = t0;
    rep_left_[static_cast<size_t>(s0)] = bytes(k);
    if (k >= 2) {
      rep_canon_[static_cast<size_t>(s0) + 1] = t0 + 1;
      rep_left_[static_cast<size_t>(s0) + 1] = bytes(k - 1);
    }
  }
  rep_up_.assign(g.op.size(), -1);
  for (int32_t r = 0; r < num_rules; ++r) {
    const int32_t up = parent[static_cast<size_t>(r)];
    if (count[static_cast<size_t>(r)] <= 0 || up < 0) continue;
    const int32_t s0 = g.alt_start[g.alt_begin[r]], u0 = g.alt_start[g.alt_begin[up]];
    rep_up_[static_cast<size_t>(s0)] = u0;
    if (count[static_cast<size_t>(r)] >= 2) rep_up_[static_cast<size_t>(s0) + 1] = u0 + 1;
  }
  // Fixed runs: x{m} (the parser writes m copies of x in a row, as for minLength) at the copy
  // with j copies left (that one included) stands for the run's first copy when no token of the
  // vocabulary has more than j * unit bytes: neither can get past its copies with so few bytes
  // (no way out of a run before its end), and both follow the same x's until then. (Unlike the
  // chains above, a shorter run's language is not within a longer one's, so the verdicts must be
  // equal for every token.)
  run_canon_.assign(g.op.size(), -1);
  const size_t max_token = vocab_->MaxTokenBytes();
  for (const int32_t start : g.alt_start) {
    int32_t p = start;
    while (g.op[static_cast<size_t>(p)] != FlatGrammar::kEnd) {
      const int32_t op = g.op[static_cast<size_t>(p)];
      int32_t end = p + 1;
      while (g.op[static_cast<size_t>(end)] == op) ++end;
      if (end - p >= 2) {
        const int64_t unit = std::max<int64_t>(
            1,
            FlatGrammar::IsRule(op)
                ? std::min<int64_t>(min_len[static_cast<size_t>(FlatGrammar::RuleOf(op))], 1 << 20)
                : 1);
        for (int32_t q = p + 1; q < end; ++q) {
          if (static_cast<size_t>(std::min<int64_t>(INT32_MAX, (end - q) * unit)) >= max_token)
            run_canon_[static_cast<size_t>(q)] = p;
        }
      }
      p = end;
    }
  }
}

int32_t CompiledGrammar::InternChain(StackPool& pool, const std::vector<int32_t>& chain,
                                     size_t first) {
  int32_t parent = StackPool::kUnknown;
  size_t n = chain.size();
  if (n > 0 && chain[n - 1] == kChainBottom) {
    parent = StackPool::kBottom;
    --n;
  }
  for (size_t i = n; i-- > first + 1;) parent = pool.Intern(chain[i], parent);
  return pool.Intern(chain[first], parent);
}

bool CompiledGrammar::WalkChain(const std::vector<int32_t>& chain,
                                const std::vector<RankRange>& ranges,
                                std::vector<RankRange>& accepted, std::vector<RankRange>& uncertain,
                                size_t max_steps) const {
  return WalkChainVerdicts(
      chain, ranges,
      [&](int32_t b, int32_t e, uint8_t v) {
        const auto verdict = static_cast<Verdict>(v);
        if (verdict == Verdict::kAccept || verdict == Verdict::kAcceptEscaped)
          AppendRange(accepted, b, e);
        if (verdict == Verdict::kUncertain) AppendRange(uncertain, b, e);
      },
      max_steps);
}

std::unique_lock<std::mutex> CompiledGrammar::LockWalker() const {
  std::unique_lock lock(walker_->mutex);
  if (walker_->pool == nullptr || walker_->pool->size() > Walker::kMaxNodes) {
    walker_->stepper.reset();
    walker_->pool = std::make_unique<StackPool>();
    walker_->stepper = std::make_unique<Stepper>(*flat_, *walker_->pool);
  }
  return lock;
}

template <typename Emit>
bool CompiledGrammar::WalkChainVerdicts(const std::vector<int32_t>& chain,
                                        const std::vector<RankRange>& ranges, Emit&& emit,
                                        size_t max_steps) const {
  // One pool and stepper for every walk (one at a time): chains that differ only in the counts
  // of a repetition meet the same stacks a few bytes in, so their steps are table lookups.
  const auto lock = LockWalker();
  StackPool& pool = *walker_->pool;
  Stepper& stepper = *walker_->stepper;
  const int32_t top = InternChain(pool, chain, 0);
  StackSet start;
  stepper.Close(&top, 1, start);
  size_t steps = 0;
  return WalkTokens(
      *vocab_, stepper, start, ranges, walker_->states, walker_->escaped, steps,
      [&](int32_t b, int32_t e, Verdict v) { emit(b, e, static_cast<uint8_t>(v)); }, max_steps);
}

std::vector<int32_t> CompiledGrammar::CanonicalChain(const std::vector<int32_t>& chain) const {
  std::vector<int32_t> canon = chain;
  for (int32_t& p : canon) {
    if (p < 0) continue;
    const auto i = static_cast<size_t>(p);
    if (run_canon_[i] >= 0) {
      p = run_canon_[i];  // the same verdict for every token
    } else if (rep_canon_[i] >= 0) {
      p = rep_canon_[i];
    }
  }
  return canon;
}

int32_t CompiledGrammar::RepetitionsLeft(const std::vector<int32_t>& chain) const {
  int32_t left = INT32_MAX;
  for (const int32_t p : chain) {
    // (A position in its chain's largest rule is the canonical chain's own: it bounds nothing.)
    if (p >= 0 && run_canon_[static_cast<size_t>(p)] < 0 && rep_canon_[static_cast<size_t>(p)] != p)
      left = std::min(left, rep_left_[static_cast<size_t>(p)]);
  }
  return left;
}

std::shared_ptr<const std::vector<uint64_t>> CompiledGrammar::OpenRanks(
    const PositionMask& base) const {
  {
    std::lock_guard lock(context_mutex_);
    auto it = open_ranks_.find(&base);
    if (it != open_ranks_.end()) return it->second;
  }
  const VocabularyIndex& vocab = *vocab_;
  std::vector<uint32_t> accepted(GrammarMatcher::BitmaskWords(vocab.NumIds()), 0);
  OrAccepted(base, accepted);
  auto bits = std::make_shared<std::vector<uint64_t>>((vocab.NumRanks() + 63) / 64, 0);
  for (RankRange range : base.uncertain) SetRange(*bits, range);
  for (size_t r = 0; r < vocab.NumRanks(); ++r) {
    const auto id = static_cast<uint32_t>(vocab.IdOfRank(static_cast<int32_t>(r)));
    if (((accepted[id >> 5] >> (id & 31)) & 1u) != 0) (*bits)[r >> 6] |= uint64_t{1} << (r & 63);
  }
  std::lock_guard lock(context_mutex_);
  const auto [it, inserted] = open_ranks_.emplace(&base, std::move(bits));
  if (inserted) context_bytes_ += it->second->size() * sizeof(uint64_t);
  return it->second;
}

std::shared_ptr<const std::vector<uint64_t>> CompiledGrammar::EscapingTokens(
    const std::vector<int32_t>& prefix) const {
  std::string key(reinterpret_cast<const char*>(prefix.data()), prefix.size() * sizeof(int32_t));
  {
    std::lock_guard lock(context_mutex_);
    auto it = escaping_.find(key);
    if (it != escaping_.end()) return it->second;
  }
  const auto num_ranks = static_cast<int32_t>(vocab_->NumRanks());
  auto bits = std::make_shared<std::vector<uint64_t>>(static_cast<size_t>(num_ranks + 63) / 64, 0);
  WalkChainVerdicts(prefix, {{0, num_ranks}}, [&](int32_t b, int32_t e, uint8_t v) {
    const auto verdict = static_cast<Verdict>(v);
    if (verdict != Verdict::kUncertain && verdict != Verdict::kAcceptEscaped) return;
    SetRange(*bits, {b, e});
  });
  std::lock_guard lock(context_mutex_);
  const auto [it, inserted] = escaping_.emplace(std::move(key), std::move(bits));
  if (inserted) context_bytes_ += it->second->size() * sizeof(uint64_t);
  return it->second;
}

}  // namespace infer::grammar
