// libFuzzer target: the POST /v1/completions body parser on arbitrary bytes must either accept
// (and then the sampling params are valid, and the request is one prompt with its max_tokens) or
// throw RequestError with 400 or 422; nothing else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "infer/server/completion_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    const infer::server::ChatRequest request = infer::server::ParseCompletionRequest(body, "m");
    request.params.Validate();  // must not throw for an accepted request
    if (request.model != "m" || request.prompts.size() != 1 || !request.max_tokens) std::abort();
  } catch (const infer::server::RequestError& e) {
    if (e.status() != 400 && e.status() != 422) std::abort();
  }
  return 0;
}
