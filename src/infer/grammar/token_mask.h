// Token masks for constrained decoding: which vocabulary tokens the grammar allows next.
// VocabularyIndex (once per model vocabulary): the tokens sorted by their bytes, so tokens that
// share a prefix are contiguous and a prefix the grammar rejects skips all of them at once.
// CompiledGrammar (once per grammar x vocabulary, const, shared across requests and threads):
// as XGrammar does (arXiv 2411.15100), per terminal position of the grammar, the tokens a stack
// with that top accepts or rejects whatever lies below it (context-independent), and the
// uncertain rest as ranges of sorted ranks; at run time only the uncertain ones are walked
// against the real stacks. GrammarMatcher (per request, cheap): the mask, token acceptance,
// rollback, termination and the jump-forward string.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infer/grammar/grammar.h"
#include "infer/grammar/pushdown_matcher.h"
#include "infer/grammar/rank_bits.h"

namespace infer::grammar {

struct Vocabulary {
  std::vector<std::string> token_bytes;  // per id, raw bytes; empty = never allowed
  std::vector<int32_t> special_ids;      // never allowed
  std::vector<int32_t> end_ids;          // allowed only when the grammar is complete
};

class VocabularyIndex {
 public:
  explicit VocabularyIndex(Vocabulary vocabulary);
  const Vocabulary& vocabulary() const { return vocab_; }
  // One past the largest id that can ever be allowed.
  int32_t NumIds() const { return num_ids_; }
  size_t NumRanks() const { return ids_.size(); }
  int32_t IdOfRank(int32_t rank) const { return ids_[static_cast<size_t>(rank)]; }
  std::string_view BytesOfRank(int32_t rank) const {
    return std::string_view(blob_).substr(
        offsets_[static_cast<size_t>(rank)],
        offsets_[static_cast<size_t>(rank) + 1] - offsets_[static_cast<size_t>(rank)]);
  }
  size_t MaxTokenBytes() const { return max_len_; }
  // Every rank, by length, then by rank: those of `len` bytes are
  // [LengthBegin(len), LengthBegin(len + 1)) of RanksByLength() (len up to MaxTokenBytes()).
  const std::vector<int32_t>& RanksByLength() const { return by_length_; }
  uint32_t LengthBegin(size_t len) const { return length_begin_[len]; }
  // The first rank after `rank` whose bytes do not start with the first `k` bytes of `rank`'s.
  int32_t PrefixEnd(int32_t rank, size_t k) const {
    if (k == 0) return static_cast<int32_t>(ids_.size());
    int32_t next = rank + 1;
    while (next < static_cast<int32_t>(ids_.size()) && lcp_[static_cast<size_t>(next)] >= k)
      next = smaller_[static_cast<size_t>(next)];
    return next;
  }
  // The first rank whose first byte is `b` or larger (b in 0..256; sorted by bytes, so the
  // tokens starting with b are [FirstByteBegin(b), FirstByteBegin(b + 1))).
  int32_t FirstByteBegin(int b) const { return first_begin_[static_cast<size_t>(b)]; }
  // The length of the common prefix of ranks `rank` - 1 and `rank` (0 for rank 0).
  size_t CommonWithPrevious(int32_t rank) const { return lcp_[static_cast<size_t>(rank)]; }
  bool IsEnd(int32_t id) const;
  // False for out-of-range, empty, special and end ids.
  bool IsRegular(int32_t id) const;
  // Per rank, its length in bytes capped at kLongLength (tokens that long are few: take their
  // lengths from BytesOfRank); padded with zeros to a multiple of 64 ranks, so that a word of a
  // bitset by rank reads 64 of them.
  static constexpr uint8_t kLongLength = 255;
  const uint8_t* LengthsByRank() const { return len_by_rank_.data(); }
  // The longest token among ranks [64 w, 64 w + 64).
  size_t BlockMaxLength(size_t w) const { return block_max_len_[w]; }
  // The regular ids of at most `len` bytes as a bitmask by id (words of 32 ids), for
  // len < kShortLengths.
  static constexpr size_t kShortLengths = 64;
  const uint32_t* IdsUpToLength(size_t len) const {
    return ids_up_to_len_.data() + len * id_words_;
  }

 private:
  Vocabulary vocab_;
  int32_t num_ids_ = 0;
  std::vector<int32_t> ids_;  // rank -> id, regular tokens sorted by bytes
  std::string blob_;
  std::vector<uint32_t> offsets_;
  // Per rank: its common prefix with the rank before, and the first later rank with a shorter
  // one (every rank between shares at least as long a prefix with its predecessor), so that the
  // end of a prefix's tokens is a few jumps (PrefixEnd), not a binary search of string compares.
  std::vector<uint32_t> lcp_;
  std::vector<int32_t> smaller_;
  std::vector<int32_t> first_begin_;  // 257 entries
  std::vector<uint8_t> kind_;         // per id: 0 regular, 1 never, 2 end
  size_t max_len_ = 0;
  std::vector<int32_t> by_length_;
  std::vector<uint32_t> length_begin_;  // max_len_ + 2 entries
  std::vector<uint8_t> len_by_rank_;
  std::vector<uint32_t> block_max_len_;
  size_t id_words_ = 0;
  std::vector<uint32_t> ids_up_to_len_;  // kShortLengths bitmasks of id_words_ words
};

class CompiledGrammar {
 public:
  // StepBudget of a compile (GrammarError past it): the tests' and grammar_bench's grammars stay
  // below 35,000 stacks.
  static constexpr size_t kMaxCompileStacks = size_t{1} << 23;
  // Throws GrammarError (from the grammar checks).
  CompiledGrammar(const Grammar& grammar, std::shared_ptr<const VocabularyIndex> vocabulary);
  static std::shared_ptr<const CompiledGrammar> FromGbnf(
      std::string_view gbnf, std::shared_ptr<const VocabularyIndex> vocabulary);

  const FlatGrammar& flat() const { return *flat_; }
  std::shared_ptr<const FlatGrammar> flat_ptr() const { return flat_; }
  const VocabularyIndex& vocabulary() const { return *vocab_; }
  double compile_ms() const { return compile_ms_; }
  // Statistics: terminal positions, distinct precomputed ones, uncertain ranks in total.
  size_t num_positions() const { return num_positions_; }
  size_t num_masks() const { return masks_.size(); }
  size_t num_uncertain() const { return num_uncertain_; }

  struct PositionMask {
    std::vector<uint32_t> accepted_bits;    // by id, when many tokens are accepted
    std::vector<int32_t> accepted_ids;      // else the ids
    std::vector<RankRange> uncertain;       // sorted, disjoint
    std::vector<RankRange> accepted_ranks;  // the accepted ones as ranks (to derive masks from),
                                            // only without accepted_bits
    size_t max_open_len = 0;                // the longest token accepted (here or by a parent)
                                            // or uncertain
    size_t max_accepted_len = 0;            // the longest token accepted (here or by a parent)
    // A context mask computed from the mask of its chain one element shorter (the parent, which
    // outlives it): the parent's accepted tokens are accepted here too, and only the parent's
    // uncertain ones were walked (the accepted ones of this level are the fields above). Null
    // for precomputed masks and standalone ones.
    const PositionMask* parent = nullptr;
    // A mask inside bounded repetitions, derived from the same chain with larger counts (see
    // LadderMask): its accepted tokens are all here (bits or ids), and `open_long` holds the ranks
    // it accepts or leaves uncertain that are longer than its count left (bits by rank).
    bool ladder = false;
    int32_t ladder_left = 0;
    std::vector<uint64_t> open_long;
    size_t bytes() const {
      return accepted_bits.size() * 4 + accepted_ids.size() * 4 + open_long.size() * 8 +
             (uncertain.size() + accepted_ranks.size()) * sizeof(RankRange) + sizeof(*this);
    }
  };
  // ORs into `bits` (by id) the tokens `mask` accepts: its own and those of the shorter chains it
  // was computed from (ids past the span are left out).
  static void OrAccepted(const PositionMask& mask, std::span<uint32_t> bits);
  // The precomputed mask of a terminal position.
  const PositionMask& MaskAt(int32_t pos) const {
    return masks_[static_cast<size_t>(mask_of_pos_[static_cast<size_t>(pos)])];
  }
  // The mask of a stack whose first return positions are known: `chain` is the top position,
  // then the positions of up to kContextDepth frames below it, then kChainBottom when the stack
  // ends there (then the mask is exact). Far fewer tokens stay uncertain than with the top
  // alone (a token that closes a string and goes on with `",` is decided by the frames below).
  // Computed on first use, level by level (each chain from the chain one element shorter,
  // walking only the tokens that one left uncertain, so a chain whose shorter chain decides
  // every token shares its mask; inside bounded repetitions, from the same chain with larger
  // counts, see LadderMask), then shared by every matcher (thread-safe); null when the bound on
  // these masks is reached (the caller uses MaskAt).
  static constexpr int kContextDepth = 6;
  static constexpr int32_t kChainBottom = -1;
  // Masks inside bounded repetitions are one per count left, so the bounds are generous: at most
  // kMaxContextBytes of masks (and the ladder's tables: open tokens, forced counts, escaping
  // tokens) and kMaxContextEntries chains per compiled grammar.
  static constexpr size_t kMaxContextBytes = size_t{48} << 20;
  static constexpr size_t kMaxContextEntries = size_t{1} << 17;
  std::shared_ptr<const PositionMask> ContextMask(const std::vector<int32_t>& chain) const;
  size_t num_context_masks() const;
  // The bytes of its masks: the precomputed ones and the context masks computed so far (these
  // grow with use, up to kMaxContextBytes).
  size_t MemoryBytes() const;

 private:
  PositionMask MakeMask(const std::vector<RankRange>& accepted, std::vector<RankRange> uncertain,
                        const PositionMask* parent = nullptr) const;
  // Bounded repetitions: a rule `opt_k ::= x opt_{k-1} | ""` (`opt_1 ::= x | ""`), as the
  // parser emits for x{m,n}, is x repeated at most k times. A token of L bytes consumes at most
  // L non-empty x's, so inside opt_k it gets the same verdict as inside opt_K (K >= k, the
  // largest rule of the chain) whenever L <= k. Per position of such a rule: the position of
  // the chain's largest rule it stands for, and how many x's may still come from there
  // (INT32_MAX elsewhere).
  void FindRepetitionChains();
  std::vector<int32_t> rep_canon_;
  std::vector<int32_t> rep_left_;  // in bytes: x's left times the fewest bytes of one x (>= 1)
  // Per position inside a fixed run of copies (x x x ... x): the run's first copy when the
  // copies left are more than any token can get past (then every verdict is the same), else -1.
  std::vector<int32_t> run_canon_;
  // The stack a chain describes from its element `first` down (over kBottom when the chain ends
  // with kChainBottom, else over kUnknown), interned in `pool`.
  static int32_t InternChain(StackPool& pool, const std::vector<int32_t>& chain, size_t first);
  // The walk of the tokens of `ranges` from the stack a chain describes; false when it gave up
  // past `max_steps` byte steps (then `accepted` and `uncertain` are partial).
  bool WalkChain(const std::vector<int32_t>& chain, const std::vector<RankRange>& ranges,
                 std::vector<RankRange>& accepted, std::vector<RankRange>& uncertain,
                 size_t max_steps = SIZE_MAX) const;
  std::shared_ptr<const PositionMask> ComputeContextMask(const std::vector<int32_t>& chain,
                                                         bool& owned) const;
  // Per position inside a bounded repetition: the same position in the rule one count larger
  // (-1 in the largest rule and elsewhere).
  std::vector<int32_t> rep_up_;
  // The chain with every position inside a fixed run or a bounded repetition replaced by the one
  // it stands for (see FindRepetitionChains).
  std::vector<int32_t> CanonicalChain(const std::vector<int32_t>& chain) const;
  // The fewest bytes left in the chain's bounded repetitions below their largest rule (INT32_MAX
  // when none): a token no longer than that gets the canonical chain's verdict.
  int32_t RepetitionsLeft(const std::vector<int32_t>& chain) const;
  // A chain inside bounded repetitions with `left` bytes left, below the longest token its
  // canonical chain (`base`) leaves open: the mask of the nearest chain with larger counts
  // (computed before, or the base), less what its tokens longer than `left` fail here. Every
  // repetition's language holds the smaller counts', so a token rejected above is rejected here;
  // one no longer than `left` has the base's verdict; only the others are walked: the ones
  // open above that are longer than `left` (a step of one count walks the tokens of one length).
  // With `only_from_known`, null unless such a chain's mask is known already; null too when it
  // would walk more than `max_walk` tokens.
  std::shared_ptr<const PositionMask> LadderMask(const std::vector<int32_t>& chain, int32_t left,
                                                 const PositionMask& base, bool only_from_known,
                                                 size_t max_walk = SIZE_MAX) const;
  // Forced repetitions. Inside x{0,k} (an opt chain) whose way out (through the chain's frames
  // below) is a terminal T that no x starts with, a token whose bytes begin k + 1 x's one after
  // the other, each x parsed from its bytes alone (no byte where x may end or go on), dies at
  // this count whatever lies below: every way takes those x's, and after the k-th only T may
  // come. Where the chain ends at the repetition (`over_unknown`: its way out is the unknown
  // rest), such a token is uncertain instead. For a chain whose top begins
  // such an x: the x's it may still take (this one included) and, per rank, how many x's the
  // token's bytes force (capped at kForcedCap), plus kForcedWhole when every byte of the token
  // is in them (it never leaves the repetition); computed once per x. Null when the chain is not
  // so.
  static constexpr uint8_t kForcedCap = 127;
  static constexpr uint8_t kForcedWhole = 128;
  // With `over_unknown`, the chain ends at the repetition (its way out is the unknown rest).
  struct Forced {
    std::vector<uint8_t> counts;  // per rank, padded with zeros to whole words of 64 ranks
    // The ids whose bytes are all forced x's, at most k of them, per k up to the most any has
    // (bitmasks by id of `id_words` words): a ladder keeps their verdicts word by word.
    size_t id_words = 0, max_whole = 0;
    std::vector<uint32_t> whole_ids;
    const uint32_t* WholeUpTo(size_t k) const {
      return whole_ids.data() + std::min(k, max_whole) * id_words;
    }
  };
  std::shared_ptr<const Forced> ForcedRepetitions(const std::vector<int32_t>& chain,
                                                  int32_t& allowed, bool& over_unknown) const;
  mutable std::unordered_map<int32_t, std::shared_ptr<const Forced>> forced_;
  // The ranks a mask accepts or leaves uncertain, as bits by rank; computed once per mask.
  std::shared_ptr<const std::vector<uint64_t>> OpenRanks(const PositionMask& base) const;
  // The ranks whose walk from `prefix` (over an unknown rest) reaches that rest before their
  // last byte, as bits; computed once per prefix.
  std::shared_ptr<const std::vector<uint64_t>> EscapingTokens(
      const std::vector<int32_t>& prefix) const;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> escaping_;
  template <typename Emit>  // emit(begin, end, verdict) per rank run
  bool WalkChainVerdicts(const std::vector<int32_t>& chain, const std::vector<RankRange>& ranges,
                         Emit&& emit, size_t max_steps = SIZE_MAX) const;
  mutable std::unordered_map<const PositionMask*, std::shared_ptr<const std::vector<uint64_t>>>
      open_ranks_;
  // The context walks' pool and stepper, kept from walk to walk (renewed past kMaxNodes).
  struct Walker {
    static constexpr size_t kMaxNodes = size_t{1} << 20;
    std::mutex mutex;
    std::unique_ptr<StackPool> pool;
    std::unique_ptr<Stepper> stepper;
    std::vector<int32_t> states;
    std::vector<uint8_t> escaped;
  };
  std::unique_ptr<Walker> walker_ = std::make_unique<Walker>();
  // Holds the walker's lock, its pool renewed first when past kMaxNodes.
  std::unique_lock<std::mutex> LockWalker() const;
  std::shared_ptr<const FlatGrammar> flat_;
  std::shared_ptr<const VocabularyIndex> vocab_;
  std::vector<int32_t> mask_of_pos_;
  std::vector<PositionMask> masks_;
  size_t num_positions_ = 0;
  size_t num_uncertain_ = 0;
  size_t base_bytes_ = 0;  // of masks_
  double compile_ms_ = 0;
  mutable std::mutex context_mutex_;
  mutable std::unordered_map<std::string, std::shared_ptr<const PositionMask>> context_masks_;
  mutable size_t context_bytes_ = 0;  // of the distinct masks among them (others share one)
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> compiled);
  // StepBudget of one mask, token or string: the JSON and schema grammars of the tests and of
  // grammar_bench stay below 75,000 stacks.
  static constexpr size_t kMaxStepStacks = size_t{1} << 22;

  // Words of a bitmask over `vocab_size` ids.
  static size_t BitmaskWords(int64_t vocab_size) {
    return static_cast<size_t>((vocab_size + 31) / 32);
  }
  // Bit i set = token i allowed next. The span covers the model's whole vocabulary (it may be
  // larger than the tokenizer's; extra ids are never allowed). After termination nothing is.
  void FillNextTokenBitmask(std::span<uint32_t> bitmask);
  // False (state unchanged) when the token is not allowed.
  bool AcceptToken(int32_t id);
  // Accepts raw bytes (e.g. a jump-forward string); all or nothing; not a rollback step.
  bool AcceptString(std::string_view bytes);
  // Undoes the last `num_tokens` accepted tokens (end tokens included).
  void Rollback(int num_tokens);
  bool IsTerminated() const { return terminated_; }
  bool IsComplete() const { return bytes_.IsComplete(); }
  bool CanContinue() const { return bytes_.CanContinue(); }
  // The bytes every continuation must start with (empty if none or if the grammar may end).
  std::string JumpForwardString();
  size_t NumAcceptedTokens() const { return terminated_history_.size(); }

 private:
  void WalkUncertain(std::vector<int32_t>& accepted_ids);
  // The context mask of the stack from `node` (a top, or a call's node), cached per node; null
  // past the compiled grammar's bound on context masks.
  const CompiledGrammar::PositionMask* ContextMaskOf(int32_t node);

  std::shared_ptr<const CompiledGrammar> compiled_;
  ByteMatcher bytes_;
  bool terminated_ = false;
  std::vector<bool> terminated_history_;
  std::vector<RankRange> ranges_;
  std::vector<int32_t> depth_states_;  // interned states per depth of a walk
  std::vector<uint8_t> escaped_;
  // Uncertain tokens the real stacks accept, by state (stack tops), reused when a state recurs
  // (inside a string the state is the same token after token).
  std::unordered_map<std::string, std::vector<int32_t>> state_cache_;
  // Per stack-top node: its context mask (node ids are this matcher's, so the map is too).
  std::unordered_map<int32_t, std::shared_ptr<const CompiledGrammar::PositionMask>> top_masks_;
  std::vector<int32_t> chain_;
  // Per frame node: the node of the call it returns from and the tops that call makes (all of
  // them; -1 and none when that is not so); this step's frames whose tops took one mask, and
  // those tops.
  std::unordered_map<int32_t, std::pair<int32_t, std::vector<int32_t>>> groups_;
  std::vector<int32_t> frames_, covered_;
};

}  // namespace infer::grammar
