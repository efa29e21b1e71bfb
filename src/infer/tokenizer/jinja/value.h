// Values of the Jinja-subset interpreter that renders chat templates: Python's data model
// (None, bool, int, float, str, list, dict, namespace, undefined) with Python's printing rules.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer::jinja {

class Value;
using ValueList = std::vector<Value>;
// Insertion-ordered like a Python dict; chat-template dicts are small, so lookups are linear.
using ValueDict = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(const ValueList& args, const ValueDict& kwargs)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};
struct Namespace {
  ValueDict attributes;
};

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string,
                               std::shared_ptr<const ValueList>, std::shared_ptr<const ValueDict>,
                               std::shared_ptr<Namespace>, std::shared_ptr<const Function>>;

  Value() : storage_(Undefined{}) {}
  Value(None) : storage_(None{}) {}
  Value(bool b) : storage_(b) {}
  Value(int v) : storage_(static_cast<int64_t>(v)) {}
  Value(int64_t v) : storage_(v) {}
  Value(double v) : storage_(v) {}
  Value(std::string s) : storage_(std::move(s)) {}
  Value(const char* s) : storage_(std::string(s)) {}
  Value(ValueList list) : storage_(std::make_shared<const ValueList>(std::move(list))) {}
  Value(ValueDict dict) : storage_(std::make_shared<const ValueDict>(std::move(dict))) {}
  Value(std::shared_ptr<Namespace> ns) : storage_(std::move(ns)) {}
  Value(Function fn) : storage_(std::make_shared<const Function>(std::move(fn))) {}
  static Value MakeUndefined(std::string name) {
    return Value(Storage(Undefined{std::move(name)}));
  }
  // A Python tuple: a list that prints with parentheses.
  static Value MakeTuple(ValueList items) {
    Value value(std::move(items));
    value.is_tuple_ = true;
    return value;
  }

  bool IsUndefined() const { return std::holds_alternative<Undefined>(storage_); }
  bool IsNone() const { return std::holds_alternative<None>(storage_); }
  bool IsBool() const { return std::holds_alternative<bool>(storage_); }
  bool IsInt() const { return std::holds_alternative<int64_t>(storage_); }
  bool IsFloat() const { return std::holds_alternative<double>(storage_); }
  bool IsNumber() const { return IsInt() || IsFloat() || IsBool(); }
  bool IsString() const { return std::holds_alternative<std::string>(storage_); }
  bool IsList() const { return std::holds_alternative<std::shared_ptr<const ValueList>>(storage_); }
  bool IsDict() const { return std::holds_alternative<std::shared_ptr<const ValueDict>>(storage_); }
  bool IsNamespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(storage_); }
  bool IsFunction() const {
    return std::holds_alternative<std::shared_ptr<const Function>>(storage_);
  }

  bool AsBool() const { return std::get<bool>(storage_); }
  int64_t AsInt() const { return std::get<int64_t>(storage_); }
  double AsFloat() const { return std::get<double>(storage_); }
  // Numbers (bool, int, float) as double.
  double ToDouble() const;
  const std::string& AsString() const { return std::get<std::string>(storage_); }
  const ValueList& AsList() const { return *std::get<std::shared_ptr<const ValueList>>(storage_); }
  const ValueDict& AsDict() const { return *std::get<std::shared_ptr<const ValueDict>>(storage_); }
  Namespace& AsNamespace() const { return *std::get<std::shared_ptr<Namespace>>(storage_); }
  const Function& AsFunction() const {
    return *std::get<std::shared_ptr<const Function>>(storage_);
  }
  const std::string& UndefinedName() const { return std::get<Undefined>(storage_).name; }

  // Python's type name, for error messages.
  std::string TypeName() const;
  // Python truthiness.
  bool Truthy() const;
  // Python str(): what {{ value }} prints. Undefined prints as "".
  std::string Str() const;
  // Python repr().
  std::string Repr() const;
  // Dict lookup; nullptr when absent or not a dict.
  const Value* Find(const std::string& key) const;

  static Value FromJson(const nlohmann::ordered_json& json);

 private:
  explicit Value(Storage storage) : storage_(std::move(storage)) {}
  Storage storage_;
  bool is_tuple_ = false;
};

// Python ==.
bool Equals(const Value& a, const Value& b);
// Python <: -1/0/1; throws for unorderable types.
int Compare(const Value& a, const Value& b);

// Python json.dumps(value, ensure_ascii=False, indent, separators, sort_keys) as transformers'
// tojson filter calls it. indent < 0 means None.
std::string ToJson(const Value& value, int indent, const std::string& item_separator,
                   const std::string& key_separator, bool sort_keys);

// Python float.__repr__.
std::string PythonFloatRepr(double value);

}  // namespace infer::jinja
