// Test helper of the server's response tests: one engine StepOutput.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "infer/engine/output.h"

namespace infer::testing {

inline StepOutput Output(const std::string& id, int32_t token, const std::string& text,
                         int64_t completion_tokens,
                         std::optional<FinishReason> finish = std::nullopt) {
  StepOutput output;
  output.request_id = id;
  output.token_id = token;
  output.text_delta = text;
  output.completion_tokens = completion_tokens;
  output.finished = finish.has_value();
  output.finish_reason = finish;
  return output;
}

}  // namespace infer::testing
