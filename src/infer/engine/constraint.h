// A constraint on which tokens a request may sample next (structured output: the grammar
// engine's matcher behind this interface, engine/structured.h). The runner asks it for the mask
// before each draw and advances it with the token drawn; pure, so the engine's handling of
// constrained requests is tested with a stand-in (tests/unit/engine).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace infer {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets bit (i % 32) of mask[i / 32] exactly when token i may come next, over the model's
  // whole vocabulary (mask holds ceil(vocab / 32) words, zeroed by the caller); the
  // end-of-generation ids only where the output may end.
  virtual void FillMask(std::span<uint32_t> mask) = 0;
  // Advances past `token`; false if the token was not allowed (nothing changes then).
  virtual bool Accept(int32_t token) = 0;
  // Nothing but the end of generation may follow: the output is complete.
  virtual bool Finished() const = 0;
  // Jump-forward: the tokens of the text every continuation must start with, that text
  // tokenized alone by the model's tokenizer (empty when the next token is a real choice, or
  // the output may end here). Not accepted yet: the runner Accepts each in turn.
  virtual std::vector<int32_t> ForcedTokens() { return {}; }
};

}  // namespace infer
