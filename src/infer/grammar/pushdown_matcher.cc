// Pushdown matcher over bytes: flattening, hash-consed stacks, closure and stepping.
#include "infer/grammar/pushdown_matcher.h"

#include <algorithm>

#include "infer/core/error.h"
#include "infer/grammar/grammar_error.h"

namespace infer::grammar {

FlatGrammar::FlatGrammar(const Grammar& grammar)
    : byte_sets(grammar.byte_sets), root(grammar.root) {
  const size_t n = grammar.rules.size();
  alt_begin.reserve(n + 1);
  for (const Rule& rule : grammar.rules) {
    alt_begin.push_back(static_cast<int32_t>(alt_start.size()));
    for (const Sequence& seq : rule.alternatives) {
      alt_start.push_back(static_cast<int32_t>(op.size()));
      for (const Element& e : seq)
        op.push_back(e.kind == Element::Kind::kBytes ? e.index : -e.index - 2);
      op.push_back(kEnd);
    }
  }
  alt_begin.push_back(static_cast<int32_t>(alt_start.size()));
}

StackPool::StackPool() {
  slots_.assign(1024, -1);
  shift_ = 64 - 10;
}

namespace {
inline uint64_t Key(int32_t pos, int32_t parent) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
}
inline uint64_t Mix(uint64_t key) { return key * 0x9E3779B97F4A7C15ull; }
}  // namespace

void StackPool::Grow() {
  std::vector<int32_t> old = std::move(slots_);
  slots_.assign(old.size() * 2, -1);
  --shift_;
  const size_t mask = slots_.size() - 1;
  for (int32_t id : old) {
    if (id < 0) continue;
    size_t i = Mix(Key(nodes_[id].pos, nodes_[id].parent)) >> shift_;
    while (slots_[i] >= 0) i = (i + 1) & mask;
    slots_[i] = id;
  }
}

int32_t StackPool::Intern(int32_t pos, int32_t parent) {
  const uint64_t key = Key(pos, parent);
  const size_t mask = slots_.size() - 1;
  size_t i = Mix(key) >> shift_;
  while (true) {
    const int32_t id = slots_[i];
    if (id < 0) break;
    if (nodes_[id].pos == pos && nodes_[id].parent == parent) return id;
    i = (i + 1) & mask;
  }
  const auto id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pos, parent});
  slots_[i] = id;
  if (nodes_.size() * 2 > slots_.size()) Grow();
  return id;
}

namespace {
thread_local size_t t_budget_left = 0;
thread_local size_t t_budget_max = 0;
thread_local bool t_budget_open = false;
thread_local const char* t_budget_what = "";
}  // namespace

StepBudget::StepBudget(size_t max_stacks, const char* what) : outermost_(!t_budget_open) {
  if (!outermost_) return;
  t_budget_open = true;
  t_budget_what = what;
  t_budget_left = max_stacks;
  t_budget_max = max_stacks;
}

StepBudget::~StepBudget() {
  if (!outermost_) return;
  t_budget_open = false;
}

void StepBudget::Charge(size_t stacks) {
  if (!t_budget_open) return;
  if (stacks > t_budget_left) {
    t_budget_left = 0;
    throw GrammarError(fmt::format(
        "grammar: {} visits more than {} parse stacks (nested repetitions such as (x*)* "
        "multiply them); simplify the grammar",
        t_budget_what, t_budget_max));
  }
  t_budget_left -= stacks;
}

void Stepper::Close(const int32_t* seeds, size_t n, StackSet& out) {
  out.tops.clear();
  out.complete = false;
  out.escaped = false;
  if (++generation_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    generation_ = 1;
  }
  work_.assign(seeds, seeds + n);
  size_t visited = 0;
  while (!work_.empty()) {
    const int32_t id = work_.back();
    work_.pop_back();
    if (static_cast<size_t>(id) >= stamp_.size()) stamp_.resize(pool_.size() + 1024, 0);
    if (stamp_[id] == generation_) continue;
    stamp_[id] = generation_;
    if (++visited > kMaxClosure) {
      throw GrammarError(fmt::format(
          "grammar: one step reaches more than {} parse stacks (nested repetitions such as "
          "(x*)* multiply them); simplify the grammar",
          kMaxClosure));
    }
    const StackPool::Node node = pool_[id];
    const int32_t op = g_.op[node.pos];
    if (op >= 0) {
      out.tops.push_back(id);
    } else if (op == FlatGrammar::kEnd) {
      if (node.parent >= 0) {
        work_.push_back(node.parent);
      } else if (node.parent == StackPool::kBottom) {
        out.complete = true;
      } else {
        out.escaped = true;
      }
    } else {
      // A call: the return frame, unless the call is the alternative's last element.
      const int32_t rule = FlatGrammar::RuleOf(op);
      const int32_t ret = g_.op[node.pos + 1] == FlatGrammar::kEnd
                              ? node.parent
                              : pool_.Intern(node.pos + 1, node.parent);
      for (int32_t a = g_.alt_begin[rule]; a < g_.alt_begin[rule + 1]; ++a)
        work_.push_back(pool_.Intern(g_.alt_start[a], ret));
    }
  }
  std::sort(out.tops.begin(), out.tops.end());
  StepBudget::Charge(visited);
}

namespace {
uint64_t HashState(const StackSet& s) {
  uint64_t hash = 0xcbf29ce484222325ull ^ ((s.complete ? 1u : 0u) | (s.escaped ? 2u : 0u));
  for (const int32_t x : s.tops) hash = (hash ^ static_cast<uint32_t>(x)) * 0x100000001b3ull;
  return hash ^ (hash >> 29);
}
}  // namespace

int32_t Stepper::InternState(const StackSet& s) {
  const uint64_t hash = HashState(s);
  if (2 * (states_.size() + 1) > state_slots_.size()) {  // grow (load at most 1/2)
    state_slots_.assign(std::max<size_t>(1024, state_slots_.size() * 2), -1);
    const size_t mask = state_slots_.size() - 1;
    for (size_t id = 0; id < states_.size(); ++id) {
      size_t i = state_hashes_[id] & mask;
      while (state_slots_[i] >= 0) i = (i + 1) & mask;
      state_slots_[i] = static_cast<int32_t>(id);
    }
  }
  const size_t mask = state_slots_.size() - 1;
  size_t i = hash & mask;
  for (; state_slots_[i] >= 0; i = (i + 1) & mask) {
    const auto id = static_cast<size_t>(state_slots_[i]);
    if (state_hashes_[id] == hash && states_[id] == s) return state_slots_[i];
  }
  state_slots_[i] = static_cast<int32_t>(states_.size());
  states_.push_back(s);
  flags_.push_back(static_cast<uint8_t>((s.tops.empty() ? 0 : kAlive) | (s.escaped ? kEscaped : 0) |
                                        (s.complete ? kComplete : 0)));
  state_hashes_.push_back(hash);
  if (states_.size() <= kEdgeStates) edges_.resize(states_.size() * 256, -1);
  return state_slots_[i];
}

int32_t Stepper::NextSlow(int32_t state, uint8_t b) {
  const size_t edge = static_cast<size_t>(state) * 256 + b;
  Advance(states_[static_cast<size_t>(state)], b, next_);
  const int32_t to = InternState(next_);
  // Past kEdgeStates (a walk may meet more states before TrimStates), steps are not cached.
  if (edge < edges_.size() && to < kEdgeStates) edges_[edge] = static_cast<int16_t>(to);
  return to;
}

void Stepper::TrimStates() {
  if (states_.size() < kMaxStates) return;
  states_.clear();
  flags_.clear();
  state_hashes_.clear();
  state_slots_.clear();
  edges_.clear();
}

void Stepper::Advance(const StackSet& in, uint8_t b, StackSet& out) {
  seeds_.clear();
  for (int32_t id : in.tops) {
    const StackPool::Node node = pool_[id];
    if (g_.byte_sets[g_.op[node.pos]].Has(b))
      seeds_.push_back(pool_.Intern(node.pos + 1, node.parent));
  }
  Close(seeds_.data(), seeds_.size(), out);
}

StackSet Stepper::Start(int32_t parent) {
  StackSet out;
  std::vector<int32_t> seeds;
  for (int32_t a = g_.alt_begin[g_.root]; a < g_.alt_begin[g_.root + 1]; ++a)
    seeds.push_back(pool_.Intern(g_.alt_start[a], parent));
  Close(seeds.data(), seeds.size(), out);
  return out;
}

StackSet Stepper::AtPosition(int32_t pos) {
  StackSet out;
  const int32_t seed = pool_.Intern(pos, StackPool::kUnknown);
  Close(&seed, 1, out);
  return out;
}

ByteSet Stepper::NextBytes(const StackSet& s) const {
  ByteSet out;
  for (int32_t id : s.tops) {
    const ByteSet& set = g_.byte_sets[g_.op[pool_[id].pos]];
    for (int w = 0; w < 4; ++w) out.bits[w] |= set.bits[w];
  }
  return out;
}

ByteMatcher::ByteMatcher(std::shared_ptr<const FlatGrammar> grammar)
    : grammar_(std::move(grammar)), stepper_(*grammar_, pool_) {
  state_ = stepper_.Start(StackPool::kBottom);
}

bool ByteMatcher::AcceptByte(uint8_t b) {
  stepper_.Advance(state_, b, next_);
  if (next_.tops.empty() && !next_.complete) return false;
  std::swap(state_, next_);
  return true;
}

bool ByteMatcher::AcceptString(std::string_view bytes) {
  StackSet saved = state_;
  for (char c : bytes) {
    if (!AcceptByte(static_cast<uint8_t>(c))) {
      state_ = std::move(saved);
      return false;
    }
  }
  return true;
}

void ByteMatcher::Rollback(int n) {
  INFER_CHECK(n >= 0 && static_cast<size_t>(n) <= history_.size(),
              "grammar matcher: cannot roll back {} steps, {} are kept", n, history_.size());
  if (n == 0) return;
  state_ = std::move(history_[history_.size() - static_cast<size_t>(n)]);
  history_.resize(history_.size() - static_cast<size_t>(n));
}

}  // namespace infer::grammar
