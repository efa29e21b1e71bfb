#include "infer/engine/thinking_budget.h"

#include <algorithm>

#include "infer/tokenizer/tokenizer.h"

namespace infer {

std::optional<ThinkingTokens> ThinkingTokensOf(const Tokenizer& tokenizer) {
  const std::optional<int32_t> start = tokenizer.TokenToId("<think>");
  const std::optional<int32_t> end = tokenizer.TokenToId("</think>");
  if (!start || !end) return std::nullopt;
  ThinkingTokens tokens{.start = *start, .end = *end, .forced = {}};
  tokens.forced = tokenizer.Encode("\n", /*add_special_tokens=*/false);
  tokens.forced.push_back(*end);
  for (const int32_t id : tokenizer.Encode("\n\n", /*add_special_tokens=*/false)) {
    tokens.forced.push_back(id);
  }
  return tokens;
}

ThinkingBudget::ThinkingBudget(const ThinkingTokens& tokens, int64_t budget,
                               std::span<const int32_t> prompt)
    : tokens_(tokens), budget_(budget) {
  const auto last_start = std::find(prompt.rbegin(), prompt.rend(), tokens_.start);
  const auto last_end = std::find(prompt.rbegin(), prompt.rend(), tokens_.end);
  // Searching from the back, the start comes first when the block is still open.
  if (last_start != prompt.rend() && last_start < last_end) Enter();
}

void ThinkingBudget::Enter() {
  state_ = State::kInside;
  ForceIfSpent();
}

void ThinkingBudget::ForceIfSpent() {
  if (spent_ < budget_) return;
  state_ = State::kForcing;
  next_forced_ = 0;
  waited_ = 0;
}

std::optional<int32_t> ThinkingBudget::Forced() const {
  if (state_ != State::kForcing) return std::nullopt;
  return tokens_.forced[next_forced_];
}

bool ThinkingBudget::MayWait() const {
  constexpr int64_t kMostWaits = 3;
  return state_ == State::kForcing && next_forced_ == 0 && waited_ < kMostWaits;
}

void ThinkingBudget::Accept(int32_t token) {
  switch (state_) {
    case State::kOutside:
      if (token == tokens_.start) Enter();
      return;
    case State::kInside:
      if (token == tokens_.end) {
        state_ = State::kOutside;
        return;
      }
      ++spent_;
      ForceIfSpent();
      return;
    case State::kForcing:
      if (token == tokens_.forced[next_forced_]) {
        if (++next_forced_ == tokens_.forced.size()) state_ = State::kOutside;
      } else if (token == tokens_.end) {
        // Another constraint took precedence and the model closed the block itself.
        state_ = State::kOutside;
      } else {
        ++spent_;
        if (next_forced_ == 0) ++waited_;
      }
      return;
  }
}

}  // namespace infer
