// The body of POST /v1/completions in the seed format (sse.h) and its validation: the JSON is
// checked field by field into a prompt and SamplingParams, with the HTTP status the client gets
// for each kind of mistake (400 malformed, 422 well-formed but invalid or unsupported).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/sampling_params.h"
#include "infer/server/request_fields.h"

namespace infer::server {

struct CompletionRequest {
  std::string model;
  std::variant<std::string, std::vector<int32_t>> prompt;
  SamplingParams params;  // max_tokens -> max_new_tokens; validated
  bool stream = true;     // accepted; the response always streams
  int64_t priority = 0;   // lower runs first under --scheduling-policy priority (as vLLM)
};

// Fields (all others are rejected with 422, as pydantic's extra="forbid"):
//   model (string, required, must equal `served_model`), prompt (non-empty string or non-empty
//   list of token ids, required), max_tokens (int, 128), temperature (number, 1.0), top_p
//   (number, 1.0), top_k (int or null; 0 and -1 mean off, as in vLLM), repetition_penalty
//   (number, 1.0), stream (bool), stop (string, list of strings or null), seed (int >= 0 or
//   null), priority (int, 0; lower runs first under the priority policy). null for an optional
//   field means its default.
// Throws RequestError: 400 for a body that is not a JSON object, a missing required field, a
// wrong type or an empty prompt; 422 for an unknown field, another model, or an out-of-range
// value.
CompletionRequest ParseCompletionRequest(std::string_view body, std::string_view served_model);

}  // namespace infer::server
