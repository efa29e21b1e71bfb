#include "infer/engine/stop_checker.h"

namespace infer {

std::optional<FinishReason> CheckStop(Request& request, const SampledToken& token) {
  const SamplingParams& params = request.sampling_params;
  std::optional<FinishReason> reason;
  if (token.is_eos && !params.ignore_eos) {
    reason = FinishReason::kEos;
  } else if (request.text.Add(token.id)) {
    reason = FinishReason::kStop;
  } else if (token.completes_grammar) {
    reason = FinishReason::kStop;
  } else if (request.num_generated_tokens() >= params.max_new_tokens) {
    reason = FinishReason::kLength;
  }
  if (reason && request.text.Finish() && reason == FinishReason::kLength) {
    reason = FinishReason::kStop;
  }
  return reason;
}

}  // namespace infer
