// Renders a parsed chat template (see parser.h) against a set of global variables, with
// Jinja2's semantics as transformers configures it (Undefined prints as "", sandboxed, no I/O).
#pragma once

#include <string>
#include <string_view>

#include "infer/core/error.h"
#include "infer/tokenizer/jinja/ast.h"
#include "infer/tokenizer/jinja/value.h"

namespace infer::jinja {

// A parsed template: parse once, render many times (Render is const and thread-safe).
class Template {
 public:
  // Throws infer::Error for syntax errors and unsupported features.
  explicit Template(std::string_view source);
  // Throws infer::Error for runtime errors; raise_exception(msg) throws TemplateException(msg).
  std::string Render(const ValueDict& globals) const;

 private:
  NodeList program_;
};

// raise_exception(message) from inside a template: what() is the message itself.
class TemplateException : public Error {
 public:
  using Error::Error;
};

}  // namespace infer::jinja
