// Python's binary arithmetic and slicing on template Values, as Jinja2 evaluates them: + (numbers,
// strings, lists), - * / // % ** (a string or list times an integer repeats it), and
// object[start:stop:step] on lists and strings. Throws infer::Error as Python raises TypeError;
// a repetition over kMaxValueBytes is refused (templates are untrusted code).
#pragma once

#include <cstddef>
#include <string>

#include "infer/tokenizer/jinja/value.h"

namespace infer::jinja {

// The largest string or list repetition a template may build.
inline constexpr size_t kMaxValueBytes = size_t{16} << 20;

Value Arithmetic(const std::string& op, const Value& a, const Value& b);
// Python slice semantics on lists and (code points of) strings; None or Undefined bounds and step
// take their defaults.
Value SliceValue(const Value& object, const Value& start_value, const Value& stop_value,
                 const Value& step_value);

}  // namespace infer::jinja
