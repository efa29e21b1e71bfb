// GrammarMatcher: one request's position in a compiled grammar, its token masks, accepting,
// rolling back and jump-forward.
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
