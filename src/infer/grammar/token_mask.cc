// CompiledGrammar: the per-position precomputation of which tokens a grammar state accepts,
// and the masks of a context (a chain of repetitions) built on it.
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

}  // namespace infer::grammar
