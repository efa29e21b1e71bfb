// The body of POST /v1/completions in the seed format (sse.h), read into the ChatRequest every
// protocol gives the handlers (a completion of one prompt): the JSON is checked field by field,
// with the HTTP status the client gets for each kind of mistake (400 malformed, 422 well-formed
// but invalid or unsupported).
#pragma once

#include <string_view>

#include "infer/server/chat/chat_request.h"

namespace infer::server {

// Fields (all others are rejected with 422, as pydantic's extra="forbid"):
//   model (string, required, one `models` serves), prompt (non-empty string or non-empty
//   list of token ids, required), max_tokens (int, 128), temperature (number, 1.0), top_p
//   (number, 1.0), top_k (int or null; 0 and -1 mean off, as in vLLM), repetition_penalty
//   (number, 1.0), stream (bool; accepted, the response always streams), stop (string, list of
//   strings or null), seed (int >= 0 or null), priority (int, 0; lower runs first under the
//   priority policy). null for an optional field means its default. The request is a
//   completion (ChatEndpoint::kCompletions) of its one prompt, with max_tokens always set.
// Throws RequestError: 400 for a body that is not a JSON object, a missing required field, a
// wrong type or an empty prompt; 422 for an unknown field, another model, or an out-of-range
// value.
ChatRequest ParseCompletionRequest(std::string_view body, const ModelNames& models);

}  // namespace infer::server
