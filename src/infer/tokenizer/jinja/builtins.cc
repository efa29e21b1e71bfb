// Jinja tests, attribute/item lookup, iteration, `in`, and the Python str/dict methods that chat
// templates call.
#include "infer/tokenizer/jinja/builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <set>

#include "infer/core/error.h"
#include "infer/tokenizer/jinja/strings.h"
#include "infer/tokenizer/utf8.h"

namespace infer::jinja {

namespace {

// The tests Test implements (a template naming another fails to parse).
const std::set<std::string>& TestNames() {
  static const std::set<std::string> kTests = {
      "boolean", "callable", "defined",  "divisibleby", "eq",   "equalto",   "even",
      "false",   "float",    "ge",       "gt",          "in",   "integer",   "iterable",
      "le",      "lower",    "lt",       "mapping",     "ne",   "none",      "number",
      "odd",     "sameas",   "sequence", "string",      "true", "undefined", "upper",
      "==",      "!=",       "<",        "<=",          ">",    ">="};
  return kTests;
}

}  // namespace

[[noreturn]] void FailUndefined(const Value& undefined) {
  Fail("'{}' is undefined", undefined.UndefinedName());
}

ValueList Builtins::Iterate(const Value& value) {
  if (value.IsUndefined()) return {};
  if (value.IsList()) return value.AsList();
  if (value.IsDict()) {
    ValueList keys;
    for (const auto& [key, item] : value.AsDict()) keys.emplace_back(key);
    return keys;
  }
  if (value.IsString()) {
    ValueList chars;
    const std::string& text = value.AsString();
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t start = pos;
      NextCodePoint(text, pos);
      chars.emplace_back(text.substr(start, pos - start));
    }
    return chars;
  }
  Fail("'{}' object is not iterable", value.TypeName());
}

Value Builtins::GetAttr(const Value& object, const std::string& name) {
  if (object.IsUndefined()) FailUndefined(object);
  if (object.IsDict()) {
    if (const Value* found = object.Find(name)) return *found;
    return Value::MakeUndefined(name);
  }
  if (object.IsNamespace()) {
    for (const auto& [key, value] : object.AsNamespace().attributes)
      if (key == name) return value;
  }
  return Value::MakeUndefined(name);
}

Value Builtins::GetItem(const Value& object, const Value& key) {
  if (object.IsUndefined()) FailUndefined(object);
  if (object.IsDict()) {
    if (key.IsString()) {
      if (const Value* found = object.Find(key.AsString())) return *found;
      return Value::MakeUndefined(key.AsString());
    }
    return Value::MakeUndefined(key.Str());
  }
  if ((object.IsList() || object.IsString()) && (key.IsInt() || key.IsBool())) {
    int64_t index = RequireInt(key, "index");
    if (object.IsList()) {
      const ValueList& list = object.AsList();
      const int64_t size = static_cast<int64_t>(list.size());
      if (index < 0) index += size;
      if (index < 0 || index >= size) return Value::MakeUndefined(fmt::format("[{}]", key.Str()));
      return list[index];
    }
    const std::u32string cps = ToCodePoints(object.AsString());
    const int64_t size = static_cast<int64_t>(cps.size());
    if (index < 0) index += size;
    if (index < 0 || index >= size) return Value::MakeUndefined(fmt::format("[{}]", key.Str()));
    return Value(FromCodePoints(std::u32string(1, cps[index])));
  }
  if (key.IsString()) return GetAttr(object, key.AsString());
  return Value::MakeUndefined(key.Str());
}

bool Builtins::Contains(const Value& container, const Value& item) {
  if (container.IsUndefined()) return false;
  if (container.IsString()) {
    INFER_CHECK(item.IsString(), "'in <string>' requires string as left operand, not {}",
                item.TypeName());
    return container.AsString().find(item.AsString()) != std::string::npos;
  }
  if (container.IsList()) {
    for (const Value& element : container.AsList())
      if (Equals(element, item)) return true;
    return false;
  }
  if (container.IsDict()) return item.IsString() && container.Find(item.AsString()) != nullptr;
  Fail("argument of type '{}' is not iterable", container.TypeName());
}

bool Builtins::Test(const std::string& name, const Value& v, const ValueList& args) {
  const auto arg = [&](size_t i) -> const Value& {
    INFER_CHECK(i < args.size(), "test '{}' needs an argument", name);
    return args[i];
  };
  if (name == "defined") return !v.IsUndefined();
  if (name == "undefined") return v.IsUndefined();
  if (name == "none") return v.IsNone();
  if (name == "boolean") return v.IsBool();
  if (name == "true") return v.IsBool() && v.AsBool();
  if (name == "false") return v.IsBool() && !v.AsBool();
  if (name == "integer") return v.IsInt();
  if (name == "float") return v.IsFloat();
  if (name == "number") return v.IsNumber();
  if (name == "string") return v.IsString();
  if (name == "mapping") return v.IsDict();
  if (name == "iterable") return v.IsList() || v.IsDict() || v.IsString() || v.IsUndefined();
  if (name == "sequence") return v.IsList() || v.IsDict() || v.IsString() || v.IsUndefined();
  if (name == "callable") return v.IsFunction();
  if (name == "odd") return RequireInt(v, "odd") % 2 != 0;
  if (name == "even") return RequireInt(v, "even") % 2 == 0;
  if (name == "divisibleby") {
    const int64_t divisor = RequireInt(arg(0), "divisibleby");
    INFER_CHECK(divisor != 0, "integer division or modulo by zero");
    return RequireInt(v, "divisibleby") % divisor == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, arg(0));
  if (name == "ne" || name == "!=") return !Equals(v, arg(0));
  if (name == "lt" || name == "<") return Compare(v, arg(0)) < 0;
  if (name == "le" || name == "<=") return Compare(v, arg(0)) <= 0;
  if (name == "gt" || name == ">") return Compare(v, arg(0)) > 0;
  if (name == "ge" || name == ">=") return Compare(v, arg(0)) >= 0;
  if (name == "in") return Contains(arg(0), v);
  if (name == "lower") return v.IsString() && MapCase(v.AsString(), false) == v.AsString();
  if (name == "upper") return v.IsString() && MapCase(v.AsString(), true) == v.AsString();
  if (name == "sameas") {
    const Value& other = arg(0);
    if (v.IsNone() || other.IsNone()) return v.IsNone() && other.IsNone();
    if (v.IsBool() || other.IsBool())
      return v.IsBool() && other.IsBool() && v.AsBool() == other.AsBool();
    return Equals(v, other) && v.TypeName() == other.TypeName();
  }
  Fail("test '{}' is not supported", name);
}

Value Builtins::Method(const Value& object, const std::string& name, const ValueList& args,
                       const ValueDict& kwargs) {
  const auto arg = [&](size_t i, const char* key, const Value& fallback = Value()) {
    return Arg(args, kwargs, i, key, fallback);
  };
  if (object.IsUndefined()) FailUndefined(object);
  if (object.IsString()) {
    const std::string& s = object.AsString();
    if (name == "startswith" || name == "endswith") {
      const Value affix = arg(0, "prefix");
      ValueList options = affix.IsList() ? affix.AsList() : ValueList{affix};
      for (const Value& option : options) {
        const std::string& text = RequireString(option, name.c_str());
        if (name == "startswith" ? s.starts_with(text) : s.ends_with(text)) return Value(true);
      }
      return Value(false);
    }
    if (name == "split")
      return Value(Split(s, arg(0, "sep", Value(None{})),
                         RequireInt(arg(1, "maxsplit", Value(int64_t{-1})), "split")));
    if (name == "rsplit") {
      const int64_t max_split = RequireInt(arg(1, "maxsplit", Value(int64_t{-1})), "rsplit");
      if (max_split < 0) return Value(Split(s, arg(0, "sep", Value(None{})), -1));
      const std::string& sep = RequireString(arg(0, "sep"), "rsplit");
      INFER_CHECK(!sep.empty(), "empty separator");
      ValueList parts;
      size_t end = s.size();
      while (static_cast<int64_t>(parts.size()) < max_split) {
        if (end < sep.size()) break;
        const size_t at = s.rfind(sep, end - sep.size());
        if (at == std::string::npos) break;
        parts.insert(parts.begin(), Value(s.substr(at + sep.size(), end - at - sep.size())));
        end = at;
      }
      parts.insert(parts.begin(), Value(s.substr(0, end)));
      return Value(std::move(parts));
    }
    if (name == "strip") return Value(Strip(s, arg(0, "chars", Value(None{})), true, true));
    if (name == "lstrip") return Value(Strip(s, arg(0, "chars", Value(None{})), true, false));
    if (name == "rstrip") return Value(Strip(s, arg(0, "chars", Value(None{})), false, true));
    if (name == "upper") return Value(MapCase(s, true));
    if (name == "lower") return Value(MapCase(s, false));
    if (name == "title") return Value(Title(s));
    if (name == "capitalize") return Value(Capitalize(s));
    if (name == "replace")
      return Value(Replace(s, RequireString(arg(0, "old"), "replace"),
                           RequireString(arg(1, "new"), "replace"),
                           RequireInt(arg(2, "count", Value(int64_t{-1})), "replace")));
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
        name == "count") {
      const std::string& sub = RequireString(arg(0, "sub"), name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(CountCodePoints(s) + 1));
        int64_t count = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
          ++count;
        return Value(count);
      }
      const size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
      INFER_CHECK(at != std::string::npos || name == "find" || name == "rfind",
                  "substring not found");
      return Value(at == std::string::npos
                       ? int64_t{-1}
                       : static_cast<int64_t>(CountCodePoints(s.substr(0, at))));
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& item : Iterate(arg(0, "iterable"))) {
        if (!first) out += s;
        first = false;
        out += RequireString(item, "join");
      }
      return Value(out);
    }
    if (name == "splitlines") {
      ValueList lines;
      size_t start = 0;
      while (start < s.size()) {
        size_t end = s.find('\n', start);
        if (end == std::string::npos) end = s.size();
        std::string line = s.substr(start, end - start);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        lines.emplace_back(line);
        start = end + 1;
      }
      return Value(std::move(lines));
    }
    const auto all_of = [&](auto predicate) {
      if (s.empty()) return Value(false);
      size_t pos = 0;
      while (pos < s.size())
        if (!predicate(NextCodePoint(s, pos))) return Value(false);
      return Value(true);
    };
    const auto category = [](char32_t cp) {
      return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    };
    if (name == "isspace") return all_of([](char32_t cp) { return IsPythonSpace(cp); });
    if (name == "isdigit")
      return all_of([&](char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND; });
    if (name == "isalpha")
      return all_of([&](char32_t cp) {
        return category(cp) >= UTF8PROC_CATEGORY_LU && category(cp) <= UTF8PROC_CATEGORY_LO;
      });
    if (name == "isalnum")
      return all_of([&](char32_t cp) {
        return (category(cp) >= UTF8PROC_CATEGORY_LU && category(cp) <= UTF8PROC_CATEGORY_LO) ||
               (category(cp) >= UTF8PROC_CATEGORY_ND && category(cp) <= UTF8PROC_CATEGORY_NO);
      });
    if (name == "isupper") return Value(MapCase(s, true) == s && MapCase(s, false) != s);
    if (name == "islower") return Value(MapCase(s, false) == s && MapCase(s, true) != s);
  }
  if (object.IsDict()) {
    if (name == "items") return Filter("items", object, {}, {});
    if (name == "keys") return Value(Iterate(object));
    if (name == "values") {
      ValueList values;
      for (const auto& [key, value] : object.AsDict()) values.push_back(value);
      return Value(std::move(values));
    }
    if (name == "get") {
      const Value key = arg(0, "key");
      if (key.IsString())
        if (const Value* found = object.Find(key.AsString())) return *found;
      return arg(1, "default", Value(None{}));
    }
  }
  Fail("'{}' object has no supported method '{}'", object.TypeName(), name);
}

bool Builtins::HasTest(const std::string& name) { return TestNames().contains(name); }

}  // namespace infer::jinja
