// Lexer and parser for the Jinja subset of chat templates, configured as transformers configures
// Jinja2 (trim_blocks, lstrip_blocks, no trailing newline kept). Unsupported syntax fails here.
#pragma once

#include <string_view>

#include "infer/tokenizer/jinja/ast.h"

namespace infer::jinja {

// Throws infer::Error ("chat template line N: ...") for syntax it does not support.
NodeList Parse(std::string_view source);

}  // namespace infer::jinja
