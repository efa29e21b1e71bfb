// Vocabulary index, per-position precomputation and the per-request mask.
#include "infer/grammar/token_mask.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>

#include "infer/core/error.h"
#include "infer/grammar/gbnf.h"
#include "infer/grammar/grammar_error.h"

namespace infer::grammar {

namespace {

constexpr uint8_t kRegular = 0, kNever = 1, kEndToken = 2;

// kAcceptEscaped: accepted, but some stack also escaped into the unknown rest before the
// token's end (a walk over kUnknown only; callers that do not ask treat it as kAccept).
enum class Verdict : uint8_t { kAccept, kReject, kUncertain, kAcceptEscaped };

// Walks the tokens of `ranges` (sorted, disjoint rank ranges) from the stack set `start`,
// sharing the work of common prefixes (the states per depth of the previous token are kept) and
// skipping every token under a prefix that no stack survives. Calls emit(begin, end, verdict)
// for consecutive rank runs. With stacks over kUnknown (precomputation), a token is uncertain
// when some stack escaped into the unknown rest while bytes of the token remained. Stops (and
// returns false) once `steps` passes `max_steps`.
template <typename Emit>
bool WalkTokens(const VocabularyIndex& vocab, Stepper& stepper, const StackSet& start,
                const std::vector<RankRange>& ranges, std::vector<int32_t>& states,
                std::vector<uint8_t>& escaped, size_t& steps, Emit&& emit,
                size_t max_steps = SIZE_MAX) {
  const size_t max_len = vocab.MaxTokenBytes();
  if (states.size() < max_len + 1) states.resize(max_len + 1);
  if (escaped.size() < max_len + 1) escaped.resize(max_len + 1);
  stepper.TrimStates();
  states[0] = stepper.InternState(start);
  escaped[0] = start.escaped;
  // Only the tokens whose first byte some stack takes (the rest are rejected, unless the start
  // itself escaped): a literal's position visits one group of the 256, not all of them.
  std::vector<RankRange> first_byte_ranges;
  if (!start.escaped) {
    const ByteSet first = stepper.NextBytes(start);
    for (const RankRange range : ranges) {
      if (range.begin >= range.end) continue;
      // The first bytes within the range (ranks are sorted by bytes).
      const int lo = static_cast<uint8_t>(vocab.BytesOfRank(range.begin)[0]);
      const int hi = static_cast<uint8_t>(vocab.BytesOfRank(range.end - 1)[0]);
      for (int b = lo; b <= hi; ++b) {
        if (!first.Has(static_cast<uint8_t>(b))) continue;
        const int32_t begin = std::max(range.begin, vocab.FirstByteBegin(b));
        const int32_t end = std::min(range.end, vocab.FirstByteBegin(b + 1));
        if (begin < end) AppendRange(first_byte_ranges, begin, end);
      }
    }
  }
  const std::vector<RankRange>& walked = start.escaped ? ranges : first_byte_ranges;
  std::string_view prev;
  size_t valid = 0;  // states[0..valid] hold the states after prev's first bytes
  // The common prefix of a rank with the last one walked is the index's when it follows that one
  // directly or by PrefixEnd (every rank skipped shares more with it than the one reached).
  bool follows = false;
  for (const RankRange range : walked) {
    int32_t r = range.begin;
    follows = false;
    while (r < range.end) {
      if (steps > max_steps) return false;
      const std::string_view tok = vocab.BytesOfRank(r);
      const size_t len = tok.size();
      size_t k = 0;
      if (follows) {
        k = std::min(valid, vocab.CommonWithPrevious(r));
      } else {
        const size_t limit = std::min({valid, len, prev.size()});
        while (k < limit && prev[k] == tok[k]) ++k;
      }
      follows = true;
      while (k < len && (stepper.FlagsOf(states[k]) & Stepper::kAlive) != 0) {
        states[k + 1] = stepper.Next(states[k], static_cast<uint8_t>(tok[k]));
        escaped[k + 1] = static_cast<uint8_t>(
            escaped[k] | ((stepper.FlagsOf(states[k + 1]) & Stepper::kEscaped) != 0));
        ++steps;
        ++k;
      }
      valid = k;
      prev = tok;
      if (k == len) {
        Verdict v;
        if (stepper.FlagsOf(states[len]) != 0) {  // alive, complete or escaped
          v = len > 0 && escaped[len - 1] ? Verdict::kAcceptEscaped : Verdict::kAccept;
        } else {
          v = len > 0 && escaped[len - 1] ? Verdict::kUncertain : Verdict::kReject;
        }
        emit(r, r + 1, v);
        ++r;
        continue;
      }
      // No stack survives the first k bytes: every token under that prefix (all longer than k)
      // gets the same verdict.
      const int32_t end = std::min(range.end, vocab.PrefixEnd(r, k));
      emit(r, end, escaped[k] ? Verdict::kUncertain : Verdict::kReject);
      r = end;
    }
  }
  return true;
}

}  // namespace

VocabularyIndex::VocabularyIndex(Vocabulary vocabulary) : vocab_(std::move(vocabulary)) {
  num_ids_ = static_cast<int32_t>(vocab_.token_bytes.size());
  for (int32_t id : vocab_.special_ids) num_ids_ = std::max(num_ids_, id + 1);
  for (int32_t id : vocab_.end_ids) num_ids_ = std::max(num_ids_, id + 1);
  kind_.assign(static_cast<size_t>(num_ids_), kRegular);
  for (size_t id = 0; id < vocab_.token_bytes.size(); ++id) {
    if (vocab_.token_bytes[id].empty()) kind_[id] = kNever;
  }
  for (size_t id = vocab_.token_bytes.size(); id < kind_.size(); ++id) kind_[id] = kNever;
  for (int32_t id : vocab_.special_ids) {
    if (id >= 0) kind_[static_cast<size_t>(id)] = kNever;
  }
  for (int32_t id : vocab_.end_ids) {
    if (id >= 0) kind_[static_cast<size_t>(id)] = kEndToken;
  }
  for (int32_t id = 0; id < static_cast<int32_t>(vocab_.token_bytes.size()); ++id) {
    if (kind_[static_cast<size_t>(id)] == kRegular) ids_.push_back(id);
  }
  std::sort(ids_.begin(), ids_.end(), [&](int32_t a, int32_t b) {
    const std::string& x = vocab_.token_bytes[static_cast<size_t>(a)];
    const std::string& y = vocab_.token_bytes[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  offsets_.reserve(ids_.size() + 1);
  offsets_.push_back(0);
  for (int32_t id : ids_) {
    const std::string& bytes = vocab_.token_bytes[static_cast<size_t>(id)];
    blob_ += bytes;
    offsets_.push_back(static_cast<uint32_t>(blob_.size()));
    max_len_ = std::max(max_len_, bytes.size());
  }
  const size_t n = ids_.size();
  lcp_.assign(n, 0);
  for (size_t r = 1; r < n; ++r) {
    const std::string_view a = BytesOfRank(static_cast<int32_t>(r) - 1);
    const std::string_view b = BytesOfRank(static_cast<int32_t>(r));
    uint32_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    lcp_[r] = k;
  }
  first_begin_.assign(257, static_cast<int32_t>(n));
  for (size_t r = n; r-- > 0;) {
    const std::string_view bytes = BytesOfRank(static_cast<int32_t>(r));
    if (!bytes.empty()) first_begin_[static_cast<uint8_t>(bytes[0])] = static_cast<int32_t>(r);
  }
  for (int b = 255; b >= 0; --b)  // bytes no token starts with begin where the next one does
    first_begin_[static_cast<size_t>(b)] =
        std::min(first_begin_[static_cast<size_t>(b)], first_begin_[static_cast<size_t>(b) + 1]);
  length_begin_.assign(max_len_ + 2, 0);
  for (size_t r = 0; r < n; ++r) ++length_begin_[BytesOfRank(static_cast<int32_t>(r)).size() + 1];
  for (size_t len = 1; len < length_begin_.size(); ++len)
    length_begin_[len] += length_begin_[len - 1];
  by_length_.resize(n);
  {
    std::vector<uint32_t> fill(length_begin_.begin(), length_begin_.end() - 1);
    for (size_t r = 0; r < n; ++r)
      by_length_[fill[BytesOfRank(static_cast<int32_t>(r)).size()]++] = static_cast<int32_t>(r);
  }
  len_by_rank_.assign((n + 63) / 64 * 64, 0);
  block_max_len_.assign((n + 63) / 64, 0);
  id_words_ = (static_cast<size_t>(num_ids_) + 31) / 32;
  ids_up_to_len_.assign(kShortLengths * id_words_, 0);
  for (size_t r = 0; r < n; ++r) {
    const size_t len = BytesOfRank(static_cast<int32_t>(r)).size();
    len_by_rank_[r] = static_cast<uint8_t>(std::min<size_t>(len, kLongLength));
    block_max_len_[r / 64] = std::max(block_max_len_[r / 64], static_cast<uint32_t>(len));
    if (len < kShortLengths) {
      const auto id = static_cast<size_t>(ids_[r]);
      ids_up_to_len_[len * id_words_ + id / 32] |= 1u << (id % 32);
    }
  }
  for (size_t len = 1; len < kShortLengths; ++len) {
    for (size_t w = 0; w < id_words_; ++w)
      ids_up_to_len_[len * id_words_ + w] |= ids_up_to_len_[(len - 1) * id_words_ + w];
  }
  // The next smaller value, right to left with a stack of candidates.
  smaller_.assign(n, static_cast<int32_t>(n));
  std::vector<int32_t> stack;
  for (size_t r = n; r-- > 0;) {
    while (!stack.empty() && lcp_[static_cast<size_t>(stack.back())] >= lcp_[r]) stack.pop_back();
    if (!stack.empty()) smaller_[r] = stack.back();
    stack.push_back(static_cast<int32_t>(r));
  }
}

bool VocabularyIndex::IsEnd(int32_t id) const {
  return id >= 0 && id < num_ids_ && kind_[static_cast<size_t>(id)] == kEndToken;
}

bool VocabularyIndex::IsRegular(int32_t id) const {
  return id >= 0 && id < num_ids_ && kind_[static_cast<size_t>(id)] == kRegular;
}

CompiledGrammar::CompiledGrammar(const Grammar& grammar,
                                 std::shared_ptr<const VocabularyIndex> vocabulary)
    : vocab_(std::move(vocabulary)) {
  const auto t0 = std::chrono::steady_clock::now();
  const StepBudget budget(kMaxCompileStacks, "the compile");
  ValidateGrammar(grammar);
  flat_ = std::make_shared<const FlatGrammar>(grammar);
  const FlatGrammar& g = *flat_;
  const VocabularyIndex& vocab = *vocab_;
  FindRepetitionChains();
  const auto num_ranks = static_cast<int32_t>(vocab.NumRanks());
  // Positions with the same elements up to the end of their alternative accept the same
  // tokens; so do positions whose next K elements are all byte sets, K longer than any token.
  const size_t k_limit = vocab.MaxTokenBytes() + 1;
  std::map<std::vector<int32_t>, int32_t> by_key;
  mask_of_pos_.assign(g.op.size(), -1);
  StackPool pool;
  Stepper stepper(g, pool);
  std::vector<int32_t> states;
  std::vector<uint8_t> escaped;
  size_t steps = 0;
  // The work bound: past it, positions keep every token uncertain (correct, slower per token).
  constexpr size_t kMaxSteps = 50'000'000;
  const std::vector<RankRange> all{{0, num_ranks}};
  // Terminal positions inside repetitions whose canonical position is a terminal too: after the
  // others (their canonical ones among them), sharing its mask when every token it allows fits
  // in the repetitions left (as for context masks, see ComputeContextMask).
  std::vector<size_t> order, later;
  for (size_t p = 0; p < g.op.size(); ++p) {
    if (g.op[p] < 0) continue;
    const int32_t c = rep_canon_[p];
    const bool deferred =
        c >= 0 && static_cast<size_t>(c) != p && g.op[static_cast<size_t>(c)] == g.op[p];
    (deferred ? later : order).push_back(p);
  }
  order.insert(order.end(), later.begin(), later.end());
  for (const size_t p : order) {
    ++num_positions_;
    if (const int32_t c = rep_canon_[p];
        c >= 0 && static_cast<size_t>(c) != p && mask_of_pos_[static_cast<size_t>(c)] >= 0 &&
        static_cast<size_t>(rep_left_[p]) >=
            masks_[static_cast<size_t>(mask_of_pos_[static_cast<size_t>(c)])].max_open_len) {
      mask_of_pos_[p] = mask_of_pos_[static_cast<size_t>(c)];
      continue;
    }
    std::vector<int32_t> key;
    size_t q = p, run = 0;
    bool unique = false;
    while (true) {
      const int32_t op = g.op[q];
      key.push_back(op);
      if (op == FlatGrammar::kEnd) break;
      run = op >= 0 ? run + 1 : 0;
      if (run >= k_limit) {
        key.push_back(-1000);  // truncated: no token gets past here
        break;
      }
      if (key.size() > 4 * k_limit) {
        unique = true;
        break;
      }
      ++q;
    }
    if (!unique) {
      auto it = by_key.find(key);
      if (it != by_key.end()) {
        mask_of_pos_[p] = it->second;
        continue;
      }
    }
    PositionMask mask;
    std::vector<RankRange> accepted;
    if (steps > kMaxSteps) {
      mask.uncertain = all;
    } else {
      const StackSet start = stepper.AtPosition(static_cast<int32_t>(p));
      WalkTokens(vocab, stepper, start, all, states, escaped, steps,
                 [&](int32_t b, int32_t e, Verdict v) {
                   if (v == Verdict::kAccept || v == Verdict::kAcceptEscaped)
                     AppendRange(accepted, b, e);
                   if (v == Verdict::kUncertain) AppendRange(mask.uncertain, b, e);
                 });
    }
    for (RankRange r : mask.uncertain) num_uncertain_ += static_cast<size_t>(r.end - r.begin);
    mask = MakeMask(accepted, std::move(mask.uncertain));
    const auto index = static_cast<int32_t>(masks_.size());
    masks_.push_back(std::move(mask));
    mask_of_pos_[p] = index;
    if (!unique) by_key.emplace(std::move(key), index);
  }
  for (const PositionMask& mask : masks_) base_bytes_ += mask.bytes();
  compile_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

CompiledGrammar::PositionMask CompiledGrammar::MakeMask(const std::vector<RankRange>& accepted,
                                                        std::vector<RankRange> uncertain,
                                                        const PositionMask* parent) const {
  const VocabularyIndex& vocab = *vocab_;
  const size_t words = GrammarMatcher::BitmaskWords(vocab.NumIds());
  PositionMask mask;
  mask.parent = parent;
  mask.uncertain = std::move(uncertain);
  mask.accepted_ranks = accepted;
  mask.max_accepted_len = parent != nullptr ? parent->max_accepted_len : 0;
  for (RankRange r : accepted) {
    for (int32_t i = r.begin; i < r.end; ++i)
      mask.max_accepted_len = std::max(mask.max_accepted_len, vocab.BytesOfRank(i).size());
  }
  mask.max_open_len = mask.max_accepted_len;
  for (RankRange r : mask.uncertain) {
    for (int32_t i = r.begin; i < r.end; ++i)
      mask.max_open_len = std::max(mask.max_open_len, vocab.BytesOfRank(i).size());
  }
  size_t count = 0;
  for (RankRange r : accepted) count += static_cast<size_t>(r.end - r.begin);
  if (count > words) {
    mask.accepted_ranks.clear();  // the bits say it (and take less memory)
    mask.accepted_bits.assign(words, 0);
    for (RankRange r : accepted) {
      for (int32_t i = r.begin; i < r.end; ++i) {
        const auto id = static_cast<uint32_t>(vocab.IdOfRank(i));
        mask.accepted_bits[id >> 5] |= 1u << (id & 31);
      }
    }
  } else {
    for (RankRange r : accepted) {
      for (int32_t i = r.begin; i < r.end; ++i) mask.accepted_ids.push_back(vocab.IdOfRank(i));
    }
  }
  return mask;
}

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

std::shared_ptr<const CompiledGrammar::PositionMask> CompiledGrammar::ContextMask(
    const std::vector<int32_t>& chain) const {
  const std::string key(reinterpret_cast<const char*>(chain.data()),
                        chain.size() * sizeof(int32_t));
  {
    std::lock_guard lock(context_mutex_);
    auto it = context_masks_.find(key);
    if (it != context_masks_.end()) return it->second;
    // Bounded: a mask may hold a bitset of the vocabulary.
    if (context_bytes_ >= kMaxContextBytes || context_masks_.size() >= kMaxContextEntries)
      return nullptr;
  }
  // Computed outside the lock (two threads may both compute one key; the results are equal).
  bool owned = false;
  auto mask = ComputeContextMask(chain, owned);
  if (!mask) return nullptr;
  std::lock_guard lock(context_mutex_);
  const auto [it, inserted] = context_masks_.emplace(key, std::move(mask));
  if (inserted && owned) context_bytes_ += it->second->bytes();
  return it->second;
}

std::shared_ptr<const CompiledGrammar::PositionMask> CompiledGrammar::ComputeContextMask(
    const std::vector<int32_t>& chain, bool& owned) const {
  owned = false;
  // The top alone: the precomputed mask (masks_ outlives every context mask), for a terminal
  // position; a call position (the matcher's mask for all the starts of one rule) is walked.
  if (chain.size() == 1 && mask_of_pos_[static_cast<size_t>(chain[0])] >= 0)
    return {std::shared_ptr<const void>(), &MaskAt(chain[0])};
  // Positions inside bounded repetitions stand for the chain's largest rule, for tokens no
  // longer than the fewest repetitions left.
  const std::vector<int32_t> canon = CanonicalChain(chain);
  const int32_t left = RepetitionsLeft(chain);
  std::shared_ptr<const PositionMask> base;
  if (canon != chain) {
    base = ContextMask(canon);
    if (!base) return nullptr;
    if (static_cast<size_t>(left) >= base->max_open_len) return base;  // every token it allows fits
    // From the same chain with larger counts when one is known (a step of a few lengths).
    if (auto mask = LadderMask(chain, left, *base, /*only_from_known=*/true)) {
      owned = true;
      return mask;
    }
  }
  if (chain.size() == 1) {  // a call position: no shorter chain
    owned = true;
    if (base) return LadderMask(chain, left, *base, /*only_from_known=*/false);
    std::vector<RankRange> accepted, uncertain;
    WalkChain(chain, {{0, static_cast<int32_t>(vocab_->NumRanks())}}, accepted, uncertain);
    return std::make_shared<const PositionMask>(MakeMask(accepted, std::move(uncertain)));
  }
  // The chain one element shorter (one frame less, or the same frames over an unknown rest):
  // its accepted tokens are accepted here, its rejected ones rejected, and only its uncertain
  // ones are walked from this chain's stack. Inside bounded repetitions the walk gives up past
  // a bound (most tokens open), and the mask comes from the base instead.
  const std::vector<int32_t> shorter(chain.begin(), chain.end() - 1);
  std::shared_ptr<const PositionMask> parent = ContextMask(shorter);
  if (!parent) return nullptr;
  if (parent->uncertain.empty()) return parent;  // the shorter chain decides every token
  owned = true;
  // Inside bounded repetitions, when the shorter chain leaves many tokens uncertain (a string
  // character's tokens that close the string), the ladder from the base may walk fewer: most
  // tokens longer than the count left are decided by the x's they force. A ladder step costs a
  // pass over the vocabulary's bitsets (and, once per x, its forced counts), which a walk of
  // fewer than kLadderMinWalk ranks undercuts.
  constexpr size_t kLadderMinWalk = 1024;
  if (base) {
    size_t n_parent = 0;
    for (RankRange r : parent->uncertain) n_parent += static_cast<size_t>(r.end - r.begin);
    if (n_parent >= kLadderMinWalk) {
      if (auto mask = LadderMask(chain, left, *base, /*only_from_known=*/false, n_parent))
        return mask;
    }
  }
  std::vector<RankRange> accepted, uncertain;
  if (WalkChain(chain, parent->uncertain, accepted, uncertain,
                base ? static_cast<size_t>(vocab_->NumRanks()) / 16 : SIZE_MAX)) {
    return std::make_shared<const PositionMask>(
        MakeMask(accepted, std::move(uncertain), parent.get()));
  }
  return LadderMask(chain, left, *base, /*only_from_known=*/false);
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

std::shared_ptr<const CompiledGrammar::Forced> CompiledGrammar::ForcedRepetitions(
    const std::vector<int32_t>& chain, int32_t& allowed, bool& over_unknown) const {
  const FlatGrammar& g = *flat_;
  auto at = [&](size_t i) { return i < chain.size() ? chain[i] : kChainBottom; };
  auto op_at = [&](int32_t p) { return g.op[static_cast<size_t>(p)]; };
  // The position of x in its opt rule, the frame where the repetition's way out resumes, and the
  // x's left: x a byte set at the top itself (`x opt_{k-1}`, k left, this one included), or x a
  // rule called at s0 with the top inside it and s0 + 1 (the call of opt_{k-1}) the frame below.
  int32_t s0 = -1, out = -1;
  size_t out_at = 0;  // out's index in the chain
  const int32_t p0 = at(0), p1 = at(1);
  if (p0 < 0) return nullptr;
  bool at_call = false;  // the top is x's call itself (every way of x from its start)
  if (op_at(p0) >= 0 && rep_canon_[static_cast<size_t>(p0)] >= 0 &&
      run_canon_[static_cast<size_t>(p0)] < 0) {
    s0 = p0;
    out = p1;
    out_at = 1;
    allowed = rep_left_[static_cast<size_t>(p0)];  // a byte set: one byte per x
  } else if (FlatGrammar::IsRule(op_at(p0)) && rep_canon_[static_cast<size_t>(p0)] >= 0 &&
             run_canon_[static_cast<size_t>(p0)] < 0 &&
             rep_canon_[static_cast<size_t>(p0) + 1] >= 0 &&
             rep_left_[static_cast<size_t>(p0)] == rep_left_[static_cast<size_t>(p0) + 1] + 1) {
    s0 = p0;  // (x at least one byte, as below)
    out = p1;
    out_at = 1;
    at_call = true;
    allowed = rep_left_[static_cast<size_t>(p0)];
  } else if (p1 > 0 && rep_canon_[static_cast<size_t>(p1)] >= 0 &&
             run_canon_[static_cast<size_t>(p1)] < 0 && FlatGrammar::IsRule(op_at(p1)) &&
             FlatGrammar::IsRule(op_at(p1 - 1)) && rep_canon_[static_cast<size_t>(p1) - 1] >= 0 &&
             rep_left_[static_cast<size_t>(p1) - 1] == rep_left_[static_cast<size_t>(p1)] + 1) {
    // (x at least one byte: the left counts of the two positions differ by x's fewest bytes.)
    s0 = p1 - 1;
    out = at(2);
    out_at = 2;
    allowed = rep_left_[static_cast<size_t>(p1)] + 1;
  } else {
    return nullptr;
  }
  over_unknown = chain.size() <= out_at;
  if ((out < 0 && !over_unknown) || allowed >= kForcedCap) return nullptr;
  const int32_t x = op_at(s0);
  const auto walk_lock = LockWalker();
  StackPool& pool = *walker_->pool;
  Stepper& stepper = *walker_->stepper;
  stepper.TrimStates();
  // The bytes the way out may start with, through the chain's frames below where it may be
  // empty; it must not reach the unknown rest below the chain (then that rest decides).
  ByteSet way_out;
  if (!over_unknown) {
    const int32_t resume = InternChain(pool, chain, out_at);  // out over the frames below
    StackSet after;
    stepper.Close(&resume, 1, after);
    if (after.escaped || after.complete) return nullptr;
    way_out = stepper.NextBytes(after);
  }
  // x alone over an unknown rest: a stack popping into it is an x completed.
  ByteSet first;
  int32_t start = -1;
  if (x >= 0) {
    first = g.byte_sets[static_cast<size_t>(x)];
  } else {
    std::vector<int32_t> seeds;
    const int32_t rule = FlatGrammar::RuleOf(x);
    for (int32_t a = g.alt_begin[static_cast<size_t>(rule)];
         a < g.alt_begin[static_cast<size_t>(rule) + 1]; ++a)
      seeds.push_back(pool.Intern(g.alt_start[static_cast<size_t>(a)], StackPool::kUnknown));
    StackSet x_start;
    stepper.Close(seeds.data(), seeds.size(), x_start);
    if (x_start.escaped || x_start.complete) return nullptr;  // x may be empty
    // The top must be one of x's first positions, its frame the one after x (then its ways are
    // among x's from the start).
    bool found = at_call;
    for (const int32_t top : x_start.tops)
      found |= pool[top].pos == p0 && pool[top].parent == StackPool::kUnknown;
    if (!found) return nullptr;
    first = stepper.NextBytes(x_start);
    start = stepper.InternState(x_start);
  }
  for (size_t w = 0; w < first.bits.size(); ++w) {
    if ((first.bits[w] & way_out.bits[w]) != 0) return nullptr;  // the way out may take an x
  }
  {
    std::lock_guard lock(context_mutex_);
    auto it = forced_.find(x);
    if (it != forced_.end()) return it->second;
  }
  // Per rank: the x's its bytes force, parsed left to right; the parse stops at a byte x cannot
  // take, or where x may both end and go on (then the count so far stands: those x's were
  // forced). Ranks sharing a prefix share its parse (sorted by bytes).
  const VocabularyIndex& vocab = *vocab_;
  const auto num_ranks = static_cast<int32_t>(vocab.NumRanks());
  auto forced = std::make_shared<Forced>();
  forced->counts.assign((static_cast<size_t>(num_ranks) + 63) / 64 * 64, 0);
  const size_t max_len = vocab.MaxTokenBytes();
  std::vector<int32_t> state(max_len + 1, start);  // at each depth: the state inside x (start
  std::vector<uint8_t> count(max_len + 1, 0);      // at a boundary), the x's begun, stopped
  std::vector<uint8_t> stopped(max_len + 1, 0);
  size_t valid = 0;
  for (int32_t r = 0; r < num_ranks; ++r) {
    const std::string_view tok = vocab.BytesOfRank(r);
    size_t k = std::min(valid, vocab.CommonWithPrevious(r));
    while (k < tok.size() && stopped[k] == 0) {
      const auto b = static_cast<uint8_t>(tok[k]);
      uint8_t c = count[k];
      int32_t next = start;
      bool stop = false;
      if (x >= 0) {
        if (first.Has(b)) {
          c = static_cast<uint8_t>(std::min<int>(kForcedCap, c + 1));
        } else {
          stop = true;
        }
      } else {
        if (state[k] == start && first.Has(b))
          c = static_cast<uint8_t>(std::min<int>(kForcedCap, c + 1));
        const int32_t to = stepper.Next(state[k], b);
        const uint8_t f = stepper.FlagsOf(to);
        if ((f & Stepper::kAlive) != 0 && (f & Stepper::kEscaped) == 0) {
          next = to;  // inside x
        } else if ((f & Stepper::kAlive) == 0 && (f & Stepper::kEscaped) != 0) {
          next = start;  // x completed, and nothing else
        } else {
          stop = true;  // rejected, or x may end here or go on
        }
      }
      state[k + 1] = next;
      count[k + 1] = c;
      stopped[k + 1] = stop ? 1 : 0;
      ++k;
    }
    valid = k;
    const bool whole = k == tok.size() && stopped[k] == 0;
    forced->counts[static_cast<size_t>(r)] =
        static_cast<uint8_t>(count[k] | (whole ? kForcedWhole : 0));
    if (whole) forced->max_whole = std::max<size_t>(forced->max_whole, count[k]);
  }
  forced->id_words = GrammarMatcher::BitmaskWords(vocab.NumIds());
  const size_t id_words = forced->id_words;
  forced->whole_ids.assign((forced->max_whole + 1) * id_words, 0);
  for (int32_t r = 0; r < num_ranks; ++r) {
    const uint8_t f = forced->counts[static_cast<size_t>(r)];
    if ((f & kForcedWhole) == 0) continue;
    const auto id = static_cast<size_t>(vocab.IdOfRank(r));
    forced->whole_ids[(f & ~kForcedWhole) * id_words + id / 32] |= 1u << (id % 32);
  }
  for (size_t k = 1; k <= forced->max_whole; ++k) {
    for (size_t w = 0; w < id_words; ++w)
      forced->whole_ids[k * id_words + w] |= forced->whole_ids[(k - 1) * id_words + w];
  }
  std::lock_guard lock(context_mutex_);
  const auto [it, inserted] = forced_.emplace(x, std::move(forced));
  if (inserted)
    context_bytes_ += it->second->counts.size() + it->second->whole_ids.size() * sizeof(uint32_t);
  return it->second;
}

std::shared_ptr<const CompiledGrammar::PositionMask> CompiledGrammar::LadderMask(
    const std::vector<int32_t>& chain, int32_t left, const PositionMask& base, bool only_from_known,
    size_t max_walk) const {
  const VocabularyIndex& vocab = *vocab_;
  const auto num_ranks = static_cast<int32_t>(vocab.NumRanks());
  const size_t words = GrammarMatcher::BitmaskWords(vocab.NumIds());
  // The nearest chain above whose mask is known: one count larger at a time, in the repetitions
  // with the fewest left (so that a chain that differs from one seen before only there, such
  // as the next item's string in a bounded array, meets it).
  std::shared_ptr<const PositionMask> above;
  int32_t above_left = INT32_MAX;
  std::vector<int32_t> up = chain, one_up;
  size_t one_up_first = 0;  // the first frame the first step moved
  while (true) {
    int32_t fewest = INT32_MAX;
    for (const int32_t p : up) {
      if (p >= 0 && rep_up_[static_cast<size_t>(p)] >= 0 && run_canon_[static_cast<size_t>(p)] < 0)
        fewest = std::min(fewest, rep_left_[static_cast<size_t>(p)]);
    }
    bool moved = false;
    for (int32_t& p : up) {
      if (p >= 0 && rep_up_[static_cast<size_t>(p)] >= 0 &&
          run_canon_[static_cast<size_t>(p)] < 0 && rep_left_[static_cast<size_t>(p)] == fewest) {
        p = rep_up_[static_cast<size_t>(p)];
        moved = true;
      }
    }
    const int32_t up_left = RepetitionsLeft(up);
    if (!moved || static_cast<size_t>(up_left) >= base.max_open_len) break;
    if (one_up.empty()) {
      one_up = up;
      while (one_up_first < up.size() && up[one_up_first] == chain[one_up_first]) ++one_up_first;
    }
    const std::string key(reinterpret_cast<const char*>(up.data()), up.size() * sizeof(int32_t));
    std::lock_guard lock(context_mutex_);
    auto it = context_masks_.find(key);
    // (A mask shared from a shorter chain may stand for this one, its own `left` larger: then its
    // long tokens miss some lengths; it is skipped.)
    if (it != context_masks_.end() && it->second && it->second->ladder &&
        it->second->ladder_left <= up_left) {
      above = it->second;
      above_left = up_left;
      break;
    }
  }
  // None known, and the repetition with the fewest left is a frame below the top's: the chain
  // one count larger there, computed first (few tokens get that deep, so each such step walks
  // few).
  if (!above && only_from_known) return nullptr;
  if (!above && !one_up.empty() && one_up_first >= 2) {
    auto next = ContextMask(one_up);
    if (next && next->ladder && next->ladder_left <= RepetitionsLeft(one_up)) {
      above = std::move(next);
      up = one_up;
      above_left = RepetitionsLeft(up);
    }
  }
  const PositionMask& from = above ? *above : base;
  // The frames from the first one that differs from `from`'s chain down: a token whose walk
  // from the frames above it (their counts as large as can be) never reaches it keeps `from`'s
  // verdict, since smaller counts only remove ways (a way that reaches those frames here reaches
  // them at the larger counts too).
  size_t first_diff = 0;
  {
    const std::vector<int32_t> from_chain = above ? up : CanonicalChain(chain);
    while (first_diff < chain.size() && chain[first_diff] == from_chain[first_diff]) ++first_diff;
  }
  // Open in `from` and longer than `left`: its long ones, and those of lengths up to its own
  // count, whose verdict there is the base's. Word by word over 64 ranks: their lengths and the
  // x's they force are tables by rank.
  const size_t bit_words = static_cast<size_t>(num_ranks + 63) / 64;
  std::vector<uint64_t> open(bit_words, 0);
  auto mark = [](std::vector<uint64_t>& bits, int32_t r) {
    bits[static_cast<size_t>(r) >> 6] |= uint64_t{1} << (r & 63);
  };
  // Those that force more x's than the top's repetition has left are rejected without a walk
  // (uncertain where the chain ends at the repetition: every way reaches the unknown rest before
  // the token's end, and none stays inside); those made of forced x's alone, no more than it has
  // left, keep `from`'s verdict (the same ways, their counts within both bounds).
  int32_t allowed = 0;
  bool over_unknown = false;
  const auto forced = ForcedRepetitions(chain, allowed, over_unknown);
  std::vector<uint64_t> rejected(bit_words, 0), kept(bit_words, 0), escape(bit_words, 0);
  const std::vector<uint64_t>& open_base = *OpenRanks(base);
  const size_t last = std::min(vocab.MaxTokenBytes(), static_cast<size_t>(above_left));
  // Lengths in (left, last]: below kLongLength from the byte table, the few longer tokens one by
  // one.
  constexpr size_t kCapped = VocabularyIndex::kLongLength - 1;
  const auto lo = static_cast<uint8_t>(std::min(static_cast<size_t>(left), kCapped));
  const auto hi = static_cast<uint8_t>(std::min(last, kCapped));
  std::vector<uint64_t> long_in_range;
  if (vocab.MaxTokenBytes() >= VocabularyIndex::kLongLength) {
    long_in_range.assign(bit_words, 0);
    for (uint32_t i = vocab.LengthBegin(VocabularyIndex::kLongLength);
         i < vocab.LengthBegin(vocab.MaxTokenBytes() + 1); ++i) {
      const int32_t r = vocab.RanksByLength()[i];
      const size_t len = vocab.BytesOfRank(r).size();
      if (len > static_cast<size_t>(left) && len <= last) mark(long_in_range, r);
    }
  }
  const uint8_t* lengths = vocab.LengthsByRank();
  for (size_t w = 0; w < bit_words; ++w) {
    const uint8_t* len = lengths + w * 64;
    uint64_t in_range = BytesAbove(len, lo) & ~BytesAbove(len, hi);
    if (!long_in_range.empty()) in_range |= long_in_range[w];
    uint64_t cand = open_base[w] & in_range;
    if (above) cand |= above->open_long[w];
    if (cand == 0 || !forced) {
      open[w] = cand;
      continue;
    }
    const uint8_t* f = forced->counts.data() + w * 64;
    const uint64_t over = cand & BytesAbove(f, static_cast<uint8_t>(allowed), kForcedWhole - 1);
    (over_unknown ? escape : rejected)[w] = over;
    open[w] = over_unknown ? cand : cand & ~over;
    kept[w] = cand & ~over & BytesHighBit(f);
  }
  std::vector<uint64_t> walk_bits = open;
  for (size_t w = 0; w < bit_words; ++w) walk_bits[w] &= ~(kept[w] | escape[w]);
  if (first_diff > 0 && first_diff < chain.size()) {
    const std::vector<int32_t> prefix(chain.begin(),
                                      chain.begin() + static_cast<ptrdiff_t>(first_diff));
    const auto escaping = EscapingTokens(CanonicalChain(prefix));  // at their largest counts
    for (size_t w = 0; w < bit_words; ++w) walk_bits[w] &= (*escaping)[w];
  }
  if (max_walk != SIZE_MAX) {
    size_t n = 0;
    for (const uint64_t word : walk_bits) n += static_cast<size_t>(__builtin_popcountll(word));
    if (n > max_walk) return nullptr;
  }
  std::vector<RankRange> walk;
  RangesOf(walk_bits, walk);
  std::vector<RankRange> accepted, uncertain;
  if (!walk.empty()) WalkChain(chain, walk, accepted, uncertain);
  // Accepted: `from`'s, less the walked ones, the rejected ones and those made uncertain (every
  // other candidate keeps `from`'s verdict), then the walked ones accepted here. When they are
  // many (in a string, the tokens of string characters alone longer than the count left), from
  // the other side: `from`'s of at most `left` bytes (the base's verdict), and the candidates
  // that keep `from`'s verdict (every longer token `from` accepts is a candidate), the kept
  // ones among them word by word.
  auto mask = std::make_shared<PositionMask>();
  mask->ladder = true;
  mask->ladder_left = left;
  mask->accepted_bits.assign(words, 0);
  OrAccepted(from, mask->accepted_bits);
  auto id_of = [&](size_t w, uint64_t b) {
    return static_cast<uint32_t>(
        vocab.IdOfRank(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(b)))));
  };
  size_t num_dropped = 0, num_kept = 0;
  for (size_t w = 0; w < bit_words; ++w) {
    num_dropped +=
        static_cast<size_t>(__builtin_popcountll(walk_bits[w] | rejected[w] | escape[w]));
    num_kept +=
        static_cast<size_t>(__builtin_popcountll(open[w] & ~(walk_bits[w] | escape[w] | kept[w])));
  }
  if (num_dropped <= num_kept || static_cast<size_t>(left) >= VocabularyIndex::kShortLengths) {
    for (size_t w = 0; w < bit_words; ++w) {
      for (uint64_t b = walk_bits[w] | rejected[w] | escape[w]; b != 0; b &= b - 1) {
        const uint32_t id = id_of(w, b);
        mask->accepted_bits[id >> 5] &= ~(1u << (id & 31));
      }
    }
  } else {
    std::vector<uint32_t> keep;  // ids
    for (size_t w = 0; w < bit_words; ++w) {
      for (uint64_t b = open[w] & ~(walk_bits[w] | escape[w] | kept[w]); b != 0; b &= b - 1) {
        const uint32_t id = id_of(w, b);
        if (((mask->accepted_bits[id >> 5] >> (id & 31)) & 1u) != 0) keep.push_back(id);
      }
    }
    // The kept ones, word by word: every token of forced x's alone, no more than are left.
    const uint32_t* short_ids = vocab.IdsUpToLength(static_cast<size_t>(left));
    if (forced) {
      const uint32_t* whole = forced->WholeUpTo(static_cast<size_t>(allowed));
      for (size_t w = 0; w < words; ++w) mask->accepted_bits[w] &= short_ids[w] | whole[w];
    } else {
      for (size_t w = 0; w < words; ++w) mask->accepted_bits[w] &= short_ids[w];
    }
    for (const uint32_t id : keep) mask->accepted_bits[id >> 5] |= 1u << (id & 31);
  }
  auto set_accepted = [&](int32_t r) {
    const auto id = static_cast<uint32_t>(vocab.IdOfRank(r));
    mask->accepted_bits[id >> 5] |= 1u << (id & 31);
  };
  for (size_t w = 0; w < bit_words; ++w) open[w] &= ~walk_bits[w];  // kept as they are
  for (RankRange range : accepted) {
    for (int32_t r = range.begin; r < range.end; ++r) set_accepted(r);
    SetRange(open, range);
  }
  // Uncertain: `from`'s that were not walked, and the walked ones that are (word by word: a
  // mask derived from a call's own chain may leave most of the vocabulary uncertain).
  std::vector<uint64_t> unsure(bit_words, 0);
  for (RankRange range : from.uncertain) SetRange(unsure, range);
  for (size_t w = 0; w < bit_words; ++w) unsure[w] &= ~(walk_bits[w] | rejected[w]);
  for (RankRange range : uncertain) {
    SetRange(unsure, range);
    SetRange(open, range);
  }
  for (size_t w = 0; w < bit_words; ++w) unsure[w] |= escape[w];
  RangesOf(unsure, mask->uncertain);
  // The longest open token (every open token here is longer than `left`): only blocks of 64
  // ranks that hold a longer one than found so far are looked into.
  size_t max_open = 0;
  for (size_t w = 0; w < bit_words; ++w) {
    if (open[w] == 0 || vocab.BlockMaxLength(w) <= max_open) continue;
    for (uint64_t b = open[w]; b != 0; b &= b - 1) {
      const auto r = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(b)));
      max_open = std::max(max_open, vocab.BytesOfRank(r).size());
    }
  }
  mask->open_long = std::move(open);
  // Bounds, not exact: a token no longer than `left` is open here when the base leaves it open.
  mask->max_open_len = std::max(max_open, std::min(static_cast<size_t>(left), base.max_open_len));
  mask->max_accepted_len = mask->max_open_len;
  // Few accepted (numbers, keys): their ids take less memory than the bits. (The scan stops as
  // soon as they are many: a count of every word costs tens of microseconds on a 262k vocabulary,
  // once per count left.)
  bool few = true;
  for (size_t w = 0; w < words && few; ++w) {
    for (uint32_t b = mask->accepted_bits[w]; b != 0; b &= b - 1)
      mask->accepted_ids.push_back(
          static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(b))));
    few = mask->accepted_ids.size() <= words / 2;
  }
  if (few) {
    mask->accepted_bits.clear();
    mask->accepted_bits.shrink_to_fit();
  } else {
    mask->accepted_ids.clear();
    mask->accepted_ids.shrink_to_fit();
  }
  return mask;
}

void CompiledGrammar::OrAccepted(const PositionMask& mask, std::span<uint32_t> bits) {
  for (const PositionMask* m = &mask; m != nullptr; m = m->parent) {
    if (!m->accepted_bits.empty()) {
      const size_t n = std::min(bits.size(), m->accepted_bits.size());
      for (size_t w = 0; w < n; ++w) bits[w] |= m->accepted_bits[w];
    } else {
      for (const int32_t id : m->accepted_ids) {
        if (static_cast<size_t>(id) < bits.size() * 32)
          bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
      }
    }
  }
}

size_t CompiledGrammar::num_context_masks() const {
  std::lock_guard lock(context_mutex_);
  return context_masks_.size();
}

size_t CompiledGrammar::MemoryBytes() const {
  std::lock_guard lock(context_mutex_);
  return base_bytes_ + context_bytes_;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::FromGbnf(
    std::string_view gbnf, std::shared_ptr<const VocabularyIndex> vocabulary) {
  return std::make_shared<const CompiledGrammar>(ParseGbnf(gbnf), std::move(vocabulary));
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> compiled)
    : compiled_(std::move(compiled)), bytes_(compiled_->flat_ptr()) {}

void GrammarMatcher::WalkUncertain(std::vector<int32_t>& accepted_ids) {
  const VocabularyIndex& vocab = compiled_->vocabulary();
  size_t steps = 0;
  WalkTokens(vocab, bytes_.stepper(), bytes_.state(), ranges_, depth_states_, escaped_, steps,
             [&](int32_t b, int32_t e, Verdict v) {
               if (v != Verdict::kAccept && v != Verdict::kAcceptEscaped) return;
               for (int32_t i = b; i < e; ++i) accepted_ids.push_back(vocab.IdOfRank(i));
             });
}

const CompiledGrammar::PositionMask* GrammarMatcher::ContextMaskOf(int32_t node) {
  auto found = top_masks_.find(node);
  if (found == top_masks_.end()) {
    const StackPool& pool = bytes_.pool();
    chain_.clear();
    int32_t n = node;
    while (n >= 0 && chain_.size() <= CompiledGrammar::kContextDepth) {
      chain_.push_back(pool[n].pos);
      n = pool[n].parent;
    }
    if (n == StackPool::kBottom) chain_.push_back(CompiledGrammar::kChainBottom);
    found = top_masks_.emplace(node, compiled_->ContextMask(chain_)).first;
  }
  return found->second.get();
}

void GrammarMatcher::FillNextTokenBitmask(std::span<uint32_t> bitmask) {
  const StepBudget budget(kMaxStepStacks, "one step");
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  if (terminated_) return;
  const VocabularyIndex& vocab = compiled_->vocabulary();
  const size_t limit_ids =
      std::min<size_t>(bitmask.size() * 32, static_cast<size_t>(vocab.NumIds()));
  auto set = [&](int32_t id) {
    if (static_cast<size_t>(id) < limit_ids)
      bitmask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  };
  const StackSet& state = bytes_.state();
  ranges_.clear();
  // Tops that are every start of one rule called at the same place (a string's character: one
  // per way it may begin) take one mask, the call's: the same tokens, one computation.
  StackPool& pool = bytes_.pool();
  const FlatGrammar& g = *compiled_->flat_ptr();
  // (Sorted sets and binary searches throughout: a state may hold tens of thousands of tops,
  // and a linear search per top made one mask take seconds, gbnf_fuzz.)
  frames_.clear();
  covered_.clear();
  for (const int32_t top : state.tops) {
    if (pool[top].parent >= 0) frames_.push_back(pool[top].parent);
  }
  std::sort(frames_.begin(), frames_.end());
  frames_.erase(std::unique(frames_.begin(), frames_.end()), frames_.end());
  auto in_state = [&](int32_t node) {
    return std::binary_search(state.tops.begin(), state.tops.end(), node);
  };
  for (const int32_t frame : frames_) {
    auto group = groups_.find(frame);
    if (group == groups_.end()) {
      // The frame returns after a call at its position - 1; the tops that call makes.
      std::vector<int32_t> tops;
      int32_t call = -1;
      const int32_t at = pool[frame].pos - 1;
      if (at >= 0 && FlatGrammar::IsRule(g.op[static_cast<size_t>(at)])) {
        call = pool.Intern(at, pool[frame].parent);
        StackSet closed;
        bytes_.stepper().Close(&call, 1, closed);
        bool ok = !closed.complete && closed.tops.size() >= 2;
        for (const int32_t t : closed.tops) ok = ok && pool[t].parent == frame;
        if (ok) tops = std::move(closed.tops);
      }
      group =
          groups_.emplace(frame, std::make_pair(tops.empty() ? -1 : call, std::move(tops))).first;
    }
    const auto& [call, tops] = group->second;
    if (call < 0 || !std::all_of(tops.begin(), tops.end(), in_state)) continue;
    const CompiledGrammar::PositionMask* mask = ContextMaskOf(call);
    if (mask == nullptr) continue;  // (past the bound: the tops' own masks)
    CompiledGrammar::OrAccepted(*mask, bitmask);
    ranges_.insert(ranges_.end(), mask->uncertain.begin(), mask->uncertain.end());
    covered_.insert(covered_.end(), tops.begin(), tops.end());
  }
  std::sort(covered_.begin(), covered_.end());
  for (int32_t top : state.tops) {
    // (Another top over a grouped frame, inside x say, is not covered: it keeps its own mask.)
    if (std::binary_search(covered_.begin(), covered_.end(), top)) continue;
    const CompiledGrammar::PositionMask* own = ContextMaskOf(top);
    const auto& mask = own != nullptr ? *own : compiled_->MaskAt(pool[top].pos);
    CompiledGrammar::OrAccepted(mask, bitmask);
    ranges_.insert(ranges_.end(), mask.uncertain.begin(), mask.uncertain.end());
  }
  if (!ranges_.empty()) {
    std::sort(ranges_.begin(), ranges_.end(),
              [](RankRange a, RankRange b) { return a.begin < b.begin; });
    size_t out = 0;
    for (size_t i = 1; i < ranges_.size(); ++i) {
      if (ranges_[i].begin <= ranges_[out].end) {
        ranges_[out].end = std::max(ranges_[out].end, ranges_[i].end);
      } else {
        ranges_[++out] = ranges_[i];
      }
    }
    ranges_.resize(out + 1);
    std::string key(reinterpret_cast<const char*>(state.tops.data()),
                    state.tops.size() * sizeof(int32_t));
    key.push_back(state.complete ? '1' : '0');
    auto it = state_cache_.find(key);
    if (it == state_cache_.end()) {
      if (state_cache_.size() >= 4096) state_cache_.clear();
      std::vector<int32_t> ids;
      WalkUncertain(ids);
      it = state_cache_.emplace(std::move(key), std::move(ids)).first;
    }
    for (int32_t id : it->second) set(id);
  }
  if (state.complete) {
    for (int32_t id : vocab.vocabulary().end_ids) set(id);
  }
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  const StepBudget budget(kMaxStepStacks, "one step");
  if (terminated_) return false;
  const VocabularyIndex& vocab = compiled_->vocabulary();
  if (vocab.IsEnd(id)) {
    if (!bytes_.IsComplete()) return false;
    bytes_.Checkpoint();
    terminated_history_.push_back(terminated_);
    terminated_ = true;
    return true;
  }
  if (!vocab.IsRegular(id)) return false;
  bytes_.Checkpoint();
  if (!bytes_.AcceptString(vocab.vocabulary().token_bytes[static_cast<size_t>(id)])) {
    bytes_.Rollback(1);
    return false;
  }
  terminated_history_.push_back(terminated_);
  return true;
}

bool GrammarMatcher::AcceptString(std::string_view bytes) {
  const StepBudget budget(kMaxStepStacks, "one step");
  if (terminated_) return false;
  return bytes_.AcceptString(bytes);
}

void GrammarMatcher::Rollback(int num_tokens) {
  INFER_CHECK(num_tokens >= 0 && static_cast<size_t>(num_tokens) <= terminated_history_.size(),
              "grammar matcher: cannot roll back {} tokens, {} were accepted", num_tokens,
              terminated_history_.size());
  if (num_tokens == 0) return;
  bytes_.Rollback(num_tokens);
  terminated_ = terminated_history_[terminated_history_.size() - static_cast<size_t>(num_tokens)];
  terminated_history_.resize(terminated_history_.size() - static_cast<size_t>(num_tokens));
}

std::string GrammarMatcher::JumpForwardString() {
  const StepBudget budget(kMaxStepStacks, "one step");
  std::string out;
  if (terminated_) return out;
  StackSet state = bytes_.state();
  StackSet next;
  constexpr size_t kMaxJump = 4096;
  while (!state.complete && out.size() < kMaxJump) {
    const ByteSet next_bytes = bytes_.stepper().NextBytes(state);
    if (next_bytes.Count() != 1) break;
    int b = 0;
    while (!next_bytes.Has(static_cast<uint8_t>(b))) ++b;
    out.push_back(static_cast<char>(b));
    bytes_.stepper().Advance(state, static_cast<uint8_t>(b), next);
    std::swap(state, next);
  }
  return out;
}

}  // namespace infer::grammar
