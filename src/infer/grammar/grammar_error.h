// The error of the grammar engine: a schema, regex, choice list or GBNF grammar that cannot be
// compiled. The message says where (a JSON pointer into the schema such as
// "/properties/age/minimum", or "line 3, column 7" of a grammar, or an offset into a regex) and
// what, in one line; the server answers it as HTTP 400.
#pragma once

#include <string>

#include "infer/core/error.h"

namespace infer {

class GrammarError : public Error {
 public:
  explicit GrammarError(const std::string& message) : Error(message) {}
};

}  // namespace infer
