// A bound on how long a request thinks (vLLM's thinking_token_budget, llama.cpp's
// --reasoning-budget, Anthropic's thinking.budget_tokens): the tokens generated inside the
// model's reasoning block (<think> ... </think> for Qwen3) are counted, and once the budget is
// spent the block's end is forced, token by token, as the model itself closes it. Pure: it follows
// the tokens it is given, so it is tested without a model, and a preempted request (which keeps
// its generated tokens) needs no rollback.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace infer {

class Tokenizer;

// The ids that open and close a model's reasoning block, and what is forced when a budget runs
// out (it contains `end`).
struct ThinkingTokens {
  int32_t start = -1;
  int32_t end = -1;
  std::vector<int32_t> forced;
};

// From the vocabulary: <think> and </think> when it has both (Qwen3), with the forced end
// "\n</think>\n\n" as Qwen3's template writes an empty block; none otherwise (a model without
// the tags never thinks, so a budget has nothing to bound).
std::optional<ThinkingTokens> ThinkingTokensOf(const Tokenizer& tokenizer);

class ThinkingBudget {
 public:
  // `budget` >= 0 tokens in all of the request's reasoning blocks together. A prompt that ends
  // inside an open block (a template that opens it for the model) starts the count at once.
  ThinkingBudget(const ThinkingTokens& tokens, int64_t budget, std::span<const int32_t> prompt);

  // The token the next draw must take: the next of the forced end once the budget is spent.
  std::optional<int32_t> Forced() const;
  // The forced end may wait a draw: it has not begun, and it has waited fewer than 3 draws (a
  // UTF-8 character has at most 4 bytes). The runner waits while the text ends inside a
  // character, so that the cut does not split it (as llama.cpp's budget waits).
  bool MayWait() const;
  // Follows a generated token (drawn or forced).
  void Accept(int32_t token);

  int64_t spent() const { return spent_; }

 private:
  enum class State { kOutside, kInside, kForcing };

  void Enter();         // a block opens
  void ForceIfSpent();  // inside a block: the forced end begins once the budget is spent

  const ThinkingTokens& tokens_;
  int64_t budget_;
  int64_t spent_ = 0;       // tokens generated inside reasoning blocks, the forced ones excluded
  size_t next_forced_ = 0;  // kForcing: how much of tokens_.forced is taken
  int64_t waited_ = 0;      // kForcing: draws taken before the forced end began
  State state_ = State::kOutside;
};

}  // namespace infer
