// Jinja filters, tests and Python str/dict methods used by the chat-template interpreter.
#pragma once

#include <string>

#include "infer/tokenizer/jinja/value.h"

namespace infer::jinja {

class Builtins {
 public:
  static Value Filter(const std::string& name, const Value& input, const ValueList& args,
                      const ValueDict& kwargs);
  static bool Test(const std::string& name, const Value& input, const ValueList& args);
  // Whether Filter / Test implement `name` (the parser refuses the others).
  static bool HasFilter(const std::string& name);
  static bool HasTest(const std::string& name);
  // obj.name(args): Python methods of str and dict. Throws for anything else.
  static Value Method(const Value& object, const std::string& name, const ValueList& args,
                      const ValueDict& kwargs);
  // Python `item in container`.
  static bool Contains(const Value& container, const Value& item);
  // Jinja's environment.getattr / getitem (Undefined when missing; error on Undefined objects).
  static Value GetAttr(const Value& object, const std::string& name);
  static Value GetItem(const Value& object, const Value& key);
  // Python iteration: list items, dict keys, string characters; Undefined iterates as empty.
  static ValueList Iterate(const Value& value);
};

// Throws the error Jinja raises when an Undefined value is used (attribute, arithmetic, ...).
[[noreturn]] void FailUndefined(const Value& undefined);

}  // namespace infer::jinja
