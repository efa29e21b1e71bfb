#include "infer/engine/request.h"

namespace infer {

std::string_view RequestStateName(RequestState state) {
  switch (state) {
    case RequestState::kWaiting:
      return "waiting";
    case RequestState::kPrefill:
      return "prefill";
    case RequestState::kDecode:
      return "decode";
    case RequestState::kFinished:
      return "finished";
    case RequestState::kFailed:
      return "failed";
  }
  return "failed";
}

StepOutput OutputOf(const Request& request) {
  StepOutput output;
  output.request_id = request.request_id;
  output.prompt_tokens = request.num_prompt_tokens();
  output.completion_tokens = request.num_generated_tokens();
  output.cached_tokens = request.num_cached_prompt_tokens;
  return output;
}

StepOutput ErrorOutputOf(const Request& request, const std::string& message) {
  StepOutput output = OutputOf(request);
  output.finished = true;
  output.error = message;
  return output;
}

}  // namespace infer
