#include "infer/engine/output.h"

#include <numeric>

namespace infer {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "length";
}

double GenerationTiming::decode_time_s() const {
  return std::accumulate(decode_times_s.begin(), decode_times_s.end(), 0.0);
}

}  // namespace infer
