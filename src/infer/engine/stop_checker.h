// The stop checker of the engine step: whether a request ends with the token just appended to
// it, and why. Pure over the request's state (no model).
#pragma once

#include <cstdint>
#include <optional>

#include "infer/engine/output.h"
#include "infer/engine/request.h"
#include "infer/engine/sampled_tokens.h"

namespace infer {

// `token` was just appended to `request`. In this order: EOS (unless ignore_eos); a stop string
// the token completes in the output text; a grammar that allows only the end after it (the step
// spends no draw on EOS); max_tokens. The token goes into request.text here (not after an EOS
// that ends the request), and an ending request's text is finished: a stop string found in the
// text it held back makes a max_tokens end a stop.
std::optional<FinishReason> CheckStop(Request& request, const SampledToken& token);

}  // namespace infer
