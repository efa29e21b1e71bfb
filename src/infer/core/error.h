// The one error type of infer: a message that says what was wrong and where.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace infer {

// Thrown for every user-facing failure (bad file, bad config, bad argument).
// The message is one line and names the file, tensor, key or field involved.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace infer

// INFER_CHECK(cond, "fmt", args...): throws infer::Error with the formatted message.
#define INFER_CHECK(cond, ...)    \
  do {                            \
    if (!(cond)) {                \
      ::infer::Fail(__VA_ARGS__); \
    }                             \
  } while (0)
