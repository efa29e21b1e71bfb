// The walk of a vocabulary's tokens from a grammar state that the token-mask files share
// (token_mask.cc, repetition_chains.cc, repetition_ladder.cc, vocabulary_index.cc): not part of
// the grammar engine's interface.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "infer/grammar/token_mask.h"

namespace infer::grammar {

// A token's kind in VocabularyIndex::kind_.
inline constexpr uint8_t kRegular = 0, kNever = 1, kEndToken = 2;

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

}  // namespace infer::grammar
