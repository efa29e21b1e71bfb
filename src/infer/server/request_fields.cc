#include "infer/server/request_fields.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include <fmt/format.h>

namespace infer::server {

using json = nlohmann::ordered_json;

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
constexpr std::string_view kReasoningEfforts[] = {"none",   "minimal", "low",
                                                  "medium", "high",    "xhigh"};
}  // namespace

bool IsReasoningEffort(std::string_view effort) {
  return std::find(std::begin(kReasoningEfforts), std::end(kReasoningEfforts), effort) !=
         std::end(kReasoningEfforts);
}

std::string ReasoningEffortError(std::string_view field) {
  return fmt::format("'{}' must be none, minimal, low, medium, high or xhigh", field);
}

json ParseJsonObject(std::string_view body) {
  json root = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) throw RequestError(kBadRequest, "the request body is not valid JSON");
  if (!root.is_object()) throw RequestError(kBadRequest, "the request body must be a JSON object");
  return root;
}

const json* Fields::Get(const char* name) {
  known_.emplace_back(name);
  const auto it = root_.find(name);
  return it == root_.end() || it->is_null() ? nullptr : &*it;
}

std::vector<std::string> Fields::Unknown() const {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : root_.items()) {
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) unknown.push_back(key);
  }
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

void Fields::Reject(const std::string& message, const char* name, int status) const {
  throw RequestError(status, message, name_param_ && name != nullptr ? name : "");
}

int64_t Fields::Integer(const json& value, const char* name) const {
  const auto integer = JsonInteger(value);
  if (!integer) Reject(fmt::format("'{}' must be an integer", name), name);
  return *integer;
}

double Fields::Number(const json& value, const char* name) const {
  if (!value.is_number()) Reject(fmt::format("'{}' must be a number", name), name);
  return value.get<double>();
}

bool Fields::Boolean(const json& value, const char* name) const {
  if (!value.is_boolean()) Reject(fmt::format("'{}' must be a boolean", name), name);
  return value.get<bool>();
}

std::vector<std::string> Fields::Stop(const json& value) const {
  if (value.is_string()) return {value.get<std::string>()};
  const char* const wrong_type = "'stop' must be a string, a list of strings or null";
  if (!value.is_array()) Reject(wrong_type, nullptr);
  std::vector<std::string> stop;
  for (const json& item : value) {
    if (!item.is_string()) Reject(wrong_type, nullptr);
    stop.push_back(item.get<std::string>());
  }
  return stop;
}

}  // namespace infer::server
