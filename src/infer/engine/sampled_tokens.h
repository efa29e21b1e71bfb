// What the token pipeline drew for one request in a step (token_pipeline.h), for the scheduler's
// Update (scheduler.h), which appends the tokens, checks each for a stop and takes the next
// draft. The pipeline only draws: it changes what follows the draws (the request's sampler,
// constraint and thinking budget), never the request's tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "infer/engine/sampler.h"

namespace infer {

struct SampledToken {
  int32_t id = 0;
  bool is_eos = false;  // one of the model's end-of-generation ids
  // The request's grammar allows only the end after this token (its state runs ahead of the
  // appended tokens while a step's tokens are drawn, so this is taken at the draw).
  bool completes_grammar = false;
  std::optional<TokenLogprobs> logprobs;  // when the request asked for them (drawn tokens only)
};

struct SampledTokens {
  // In order: each draw's token, then the tokens the grammar forced after it (jump-forward).
  // Tokens after the one that ends the request (a stop the pipeline cannot see, such as a stop
  // string) are drawn as the request would have drawn them and are dropped by Update.
  std::vector<SampledToken> tokens;
  // The leading tokens that confirm the draft the step computed (their KV is kept); the rest of
  // the draft is rejected.
  int64_t num_accepted_draft = 0;
  // The n-gram draft proposed to follow these tokens, for the next step (empty: none).
  std::vector<int32_t> next_draft;
  // The request fails after `tokens` (structured output: the grammar refused or left no token).
  std::optional<std::string> error;
};

}  // namespace infer
