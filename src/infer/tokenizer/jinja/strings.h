// Python str operations for the chat-template interpreter (str.strip/split/replace/upper/...
// with Python's Unicode whitespace and casing), plus argument helpers shared by the builtins.
#pragma once

#include <string>

#include "infer/tokenizer/jinja/value.h"

namespace infer::jinja {

// Positional-or-keyword argument `index`/`name` of a call, or `fallback`.
Value Arg(const ValueList& args, const ValueDict& kwargs, size_t index, const char* name,
          const Value& fallback = Value());
const std::string& RequireString(const Value& value, const char* what);
int64_t RequireInt(const Value& value, const char* what);

std::string MapCase(const std::string& text, bool upper);
std::string Title(const std::string& text);
std::string Capitalize(const std::string& text);
// str.strip/lstrip/rstrip; `chars` None/Undefined means Python whitespace.
std::string Strip(const std::string& text, const Value& chars, bool left, bool right);
// str.split(sep, maxsplit); `separator` None/Undefined splits on whitespace runs.
ValueList Split(const std::string& text, const Value& separator, int64_t max_split);
std::string Replace(const std::string& text, const std::string& old_text,
                    const std::string& new_text, int64_t count);
std::string HtmlEscape(const std::string& text);

}  // namespace infer::jinja
