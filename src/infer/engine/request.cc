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

}  // namespace infer
