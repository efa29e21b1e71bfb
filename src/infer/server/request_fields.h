// What every protocol's request parser shares (the seed format's POST /v1/completions, OpenAI's
// chat and completions): the error a refused request throws, the JSON body as an object, and one
// reader of its fields with the same type checks and wordings for all.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer::server {

constexpr int kBadRequest = 400;
constexpr int kNotFound = 404;
constexpr int kUnprocessable = 422;

// A request the server refuses, with its HTTP status and (optionally) the field at fault.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message, std::string param = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string param_;
};

// An integer, or a float with an integral value (as pydantic's lax mode takes 16.0 for 16);
// values beyond int64 saturate.
std::optional<int64_t> JsonInteger(const nlohmann::ordered_json& value);

// The body as a JSON object, its keys in the order given (a schema's properties, a tool's
// parameters and a call's arguments keep it); RequestError(400) when it is not valid JSON or not
// an object. Each request's body is parsed once, here.
nlohmann::ordered_json ParseJsonObject(std::string_view body);

// OpenAI's reasoning efforts (chat's reasoning_effort, Responses' reasoning.effort): none,
// minimal, low, medium, high, xhigh. "none" turns Qwen3's enable_thinking off, any other on.
bool IsReasoningEffort(std::string_view effort);
// "'<field>' must be none, minimal, low, medium, high or xhigh".
std::string ReasoningEffortError(std::string_view field);

// Reads a request's fields. Type errors are RequestError(400) "'name' must be ..."; OpenAI's
// routes name the field in the error's "param" (`name_param`), the seed protocol's do not.
class Fields {
 public:
  Fields(const nlohmann::ordered_json& root, bool name_param)
      : root_(root), name_param_(name_param) {}

  // The field's value, or null when absent or null (the default then applies). Records the name
  // as known.
  const nlohmann::ordered_json* Get(const char* name);
  // The names in the body that no Get() asked for, sorted.
  std::vector<std::string> Unknown() const;

  int64_t Integer(const nlohmann::ordered_json& value, const char* name) const;
  double Number(const nlohmann::ordered_json& value, const char* name) const;
  bool Boolean(const nlohmann::ordered_json& value, const char* name) const;
  // A stop field: a string or a list of strings.
  std::vector<std::string> Stop(const nlohmann::ordered_json& value) const;

  // Throws RequestError(status, message), naming `name` as the param where this protocol does.
  [[noreturn]] void Reject(const std::string& message, const char* name,
                           int status = kBadRequest) const;

 private:
  const nlohmann::ordered_json& root_;
  const bool name_param_;
  std::vector<std::string> known_;
};

}  // namespace infer::server
