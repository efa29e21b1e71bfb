// The structured-output fields of OpenAI's routes, in every dialect clients send: OpenAI's
// response_format (json_object, json_schema), vLLM's structured_outputs {json, regex, choice,
// grammar, json_object} and its older guided_json / guided_regex / guided_choice /
// guided_grammar, llama.cpp's json_schema and grammar. At most one may be given. Pure: the spec
// is compiled (and a bad schema refused, saying where) by the engine's front door.
#pragma once

#include <optional>
#include <string_view>

#include "infer/grammar/structured_output.h"
#include "infer/server/request_fields.h"

namespace infer::server {

// The request's structured output, if it asks for one (a schema keeps the body's key order).
// Throws RequestError(400) for a malformed field or for two of them
// at once.
std::optional<StructuredOutput> ParseStructuredOutput(Fields& fields);

}  // namespace infer::server
