// CompiledGrammar's masks for bounded repetitions: the repetitions a token would force, and
// the ladder of masks by repetitions left.
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

}  // namespace infer::grammar
