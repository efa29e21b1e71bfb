#include "infer/server/completion_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"

namespace infer::server {
namespace {

using nlohmann::json;

constexpr int kBadRequest = 400;
constexpr int kUnprocessable = 422;

[[noreturn]] void Reject(int status, const std::string& message) {
  throw RequestError(status, message);
}

}  // namespace

std::optional<int64_t> JsonInteger(const json& value) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::numeric_limits<int64_t>::max();  // out of every range below
    }
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    const double number = value.get<double>();
    if (std::isfinite(number) && std::floor(number) == number && std::abs(number) < 9.0e18) {
      return static_cast<int64_t>(number);
    }
  }
  return std::nullopt;
}

namespace {

int64_t IntegerField(const json& value, const char* name) {
  const auto integer = JsonInteger(value);
  if (!integer) Reject(kBadRequest, fmt::format("'{}' must be an integer", name));
  return *integer;
}

double NumberField(const json& value, const char* name) {
  if (!value.is_number()) Reject(kBadRequest, fmt::format("'{}' must be a number", name));
  return value.get<double>();
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

}  // namespace

std::vector<std::string> ParseStopField(const json& value) {
  if (value.is_string()) return {value.get<std::string>()};
  const char* const wrong_type = "'stop' must be a string, a list of strings or null";
  if (!value.is_array()) Reject(kBadRequest, wrong_type);
  std::vector<std::string> stop;
  for (const json& item : value) {
    if (!item.is_string()) Reject(kBadRequest, wrong_type);
    stop.push_back(item.get<std::string>());
  }
  return stop;
}

CompletionRequest ParseCompletionRequest(std::string_view body, std::string_view served_model) {
  const json root = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) Reject(kBadRequest, "the request body is not valid JSON");
  if (!root.is_object()) Reject(kBadRequest, "the request body must be a JSON object");

  static const char* const kFields[] = {
      "model",  "prompt", "max_tokens", "temperature", "top_p", "top_k", "repetition_penalty",
      "stream", "stop",   "seed",       "priority"};
  for (const auto& [key, value] : root.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields)) {
      Reject(kUnprocessable, fmt::format("unknown field '{}'", key));
    }
  }

  CompletionRequest request;
  const auto model = root.find("model");
  if (model == root.end()) Reject(kBadRequest, "missing required field 'model'");
  if (!model->is_string()) Reject(kBadRequest, "'model' must be a string");
  request.model = model->get<std::string>();
  if (request.model != served_model) {
    Reject(kUnprocessable, fmt::format("model '{}' is not served here (this server serves '{}')",
                                       request.model, served_model));
  }

  const auto prompt = root.find("prompt");
  if (prompt == root.end()) Reject(kBadRequest, "missing required field 'prompt'");
  request.prompt = ParsePrompt(*prompt);

  // Optional fields: absent or null keeps the default.
  const auto field = [&](const char* name) -> const json* {
    const auto it = root.find(name);
    return it == root.end() || it->is_null() ? nullptr : &*it;
  };
  SamplingParams& params = request.params;
  if (const json* value = field("max_tokens")) {
    params.max_new_tokens = IntegerField(*value, "max_tokens");
    if (params.max_new_tokens < 1) {
      Reject(kUnprocessable, fmt::format("max_tokens must be >= 1, got {}", params.max_new_tokens));
    }
  }
  if (const json* value = field("temperature")) {
    params.temperature = NumberField(*value, "temperature");
  }
  if (const json* value = field("top_p")) params.top_p = NumberField(*value, "top_p");
  if (const json* value = field("top_k")) {
    const int64_t top_k = IntegerField(*value, "top_k");
    if (top_k < -1)
      Reject(kUnprocessable, fmt::format("top_k must be >= 1, or 0 / -1 for off, got {}", top_k));
    if (top_k >= 1) params.top_k = top_k;
  }
  if (const json* value = field("repetition_penalty")) {
    params.repetition_penalty = NumberField(*value, "repetition_penalty");
  }
  if (const json* value = field("stream")) {
    if (!value->is_boolean()) Reject(kBadRequest, "'stream' must be a boolean");
    request.stream = value->get<bool>();
  }
  if (const json* value = field("stop")) params.stop = ParseStopField(*value);
  if (const json* value = field("seed")) {
    const int64_t seed = IntegerField(*value, "seed");
    if (seed < 0) Reject(kUnprocessable, fmt::format("seed must be >= 0, got {}", seed));
    params.seed = static_cast<uint64_t>(seed);
  }
  if (const json* value = field("priority")) {
    const int64_t priority = IntegerField(*value, "priority");
    if (priority < -(int64_t{1} << 31) || priority >= (int64_t{1} << 31)) {
      Reject(kUnprocessable, fmt::format("priority must fit 32 bits, got {}", priority));
    }
    request.priority = priority;
  }
  try {
    params.Validate();
  } catch (const Error& e) {
    Reject(kUnprocessable, e.what());
  }
  return request;
}

}  // namespace infer::server
