// libFuzzer target for the JSON schema compiler (a schema is input from any client of the
// server): the input is parsed as JSON and compiled with JsonSchemaToGbnf, as the server does
// for response_format and structured_outputs. infer::Error (GrammarError: a refused keyword, a
// bad $ref, a limit) is an expected outcome; any other exception, a crash, a sanitizer report, a
// hang (libFuzzer's -timeout) or memory beyond -rss_limit_mb is a finding.
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/grammar/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto schema = nlohmann::ordered_json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  try {
    infer::JsonSchemaToGbnf(schema);
  } catch (const infer::Error&) {
  }
  return 0;
}
