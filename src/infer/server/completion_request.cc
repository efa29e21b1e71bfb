#include "infer/server/completion_request.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"

namespace infer::server {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void Reject(int status, const std::string& message) {
  throw RequestError(status, message);
}

std::variant<std::string, std::vector<int32_t>> ParsePrompt(const json& value) {
  if (value.is_string()) {
    auto text = value.get<std::string>();
    if (text.empty()) Reject(kBadRequest, "'prompt' must not be empty");
    return text;
  }
  if (!value.is_array()) {
    Reject(kBadRequest, "'prompt' must be a string or a list of token ids");
  }
  if (value.empty()) Reject(kBadRequest, "'prompt' must not be empty");
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (const json& item : value) {
    const auto id = JsonInteger(item);
    if (!id) Reject(kBadRequest, "'prompt' must be a string or a list of token ids");
    if (*id < 0 || *id > std::numeric_limits<int32_t>::max()) {
      Reject(kUnprocessable, fmt::format("prompt token id {} is outside the vocab", *id));
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

// model and prompt: required.
void ParseRequired(const json& root, const ModelNames& models, ChatRequest& request) {
  const auto model = root.find("model");
  if (model == root.end()) Reject(kBadRequest, "missing required field 'model'");
  if (!model->is_string()) Reject(kBadRequest, "'model' must be a string");
  request.model = model->get<std::string>();
  if (!models.Serves(request.model)) {
    Reject(kUnprocessable, fmt::format("model '{}' is not served here (this server serves '{}')",
                                       request.model, models.served()));
  }
  const auto prompt = root.find("prompt");
  if (prompt == root.end()) Reject(kBadRequest, "missing required field 'prompt'");
  request.prompts = {ParsePrompt(*prompt)};
}

// The optional fields: absent or null keeps the default.
void ParseOptional(Fields& fields, ChatRequest& request) {
  SamplingParams& params = request.params;
  if (const json* value = fields.Get("max_tokens")) {
    params.max_new_tokens = fields.Integer(*value, "max_tokens");
    if (params.max_new_tokens < 1) {
      Reject(kUnprocessable, fmt::format("max_tokens must be >= 1, got {}", params.max_new_tokens));
    }
  }
  for (const auto& [name, target] :
       {std::pair{"temperature", &params.temperature}, std::pair{"top_p", &params.top_p}}) {
    if (const json* value = fields.Get(name)) *target = fields.Number(*value, name);
  }
  if (const json* value = fields.Get("top_k")) {
    const int64_t top_k = fields.Integer(*value, "top_k");
    if (top_k < -1)
      Reject(kUnprocessable, fmt::format("top_k must be >= 1, or 0 / -1 for off, got {}", top_k));
    if (top_k >= 1) params.top_k = top_k;
  }
  if (const json* value = fields.Get("repetition_penalty")) {
    params.repetition_penalty = fields.Number(*value, "repetition_penalty");
  }
  if (const json* value = fields.Get("stream")) request.stream = fields.Boolean(*value, "stream");
  if (const json* value = fields.Get("stop")) params.stop = fields.Stop(*value);
  if (const json* value = fields.Get("seed")) {
    const int64_t seed = fields.Integer(*value, "seed");
    if (seed < 0) Reject(kUnprocessable, fmt::format("seed must be >= 0, got {}", seed));
    params.seed = static_cast<uint64_t>(seed);
  }
  if (const json* value = fields.Get("priority")) {
    const int64_t priority = fields.Integer(*value, "priority");
    if (priority < -(int64_t{1} << 31) || priority >= (int64_t{1} << 31)) {
      Reject(kUnprocessable, fmt::format("priority must fit 32 bits, got {}", priority));
    }
    request.priority = priority;
  }
}

}  // namespace

ChatRequest ParseCompletionRequest(std::string_view body, const ModelNames& models) {
  const json root = ParseJsonObject(body);
  static const char* const kFields[] = {
      "model",  "prompt", "max_tokens", "temperature", "top_p", "top_k", "repetition_penalty",
      "stream", "stop",   "seed",       "priority"};
  // The first unknown name in sorted order is the one named.
  const nlohmann::json sorted(root);
  for (const auto& [key, value] : sorted.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields)) {
      Reject(kUnprocessable, fmt::format("unknown field '{}'", key));
    }
  }
  ChatRequest request;
  request.endpoint = ChatEndpoint::kCompletions;
  request.stream = true;
  ParseRequired(root, models, request);
  Fields fields(root, /*name_param=*/false);
  ParseOptional(fields, request);
  try {
    request.params.Validate();
  } catch (const Error& e) {
    Reject(kUnprocessable, e.what());
  }
  request.max_tokens = request.params.max_new_tokens;
  return request;
}

}  // namespace infer::server
