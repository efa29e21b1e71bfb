// Python semantics for jinja::Value: truthiness, str/repr, ==/<, json.dumps.
#include "infer/tokenizer/jinja/value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "infer/core/error.h"
#include "infer/tokenizer/utf8.h"

namespace infer::jinja {

double Value::ToDouble() const {
  if (IsBool()) return AsBool() ? 1.0 : 0.0;
  if (IsInt()) return static_cast<double>(AsInt());
  if (IsFloat()) return AsFloat();
  Fail("expected a number, got {}", TypeName());
}

std::string Value::TypeName() const {
  if (IsUndefined()) return "Undefined";
  if (IsNone()) return "NoneType";
  if (IsBool()) return "bool";
  if (IsInt()) return "int";
  if (IsFloat()) return "float";
  if (IsString()) return "str";
  if (IsList()) return "list";
  if (IsDict()) return "dict";
  if (IsNamespace()) return "Namespace";
  return "function";
}

bool Value::Truthy() const {
  if (IsUndefined() || IsNone()) return false;
  if (IsBool()) return AsBool();
  if (IsInt()) return AsInt() != 0;
  if (IsFloat()) return AsFloat() != 0.0;
  if (IsString()) return !AsString().empty();
  if (IsList()) return !AsList().empty();
  if (IsDict()) return !AsDict().empty();
  return true;
}

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: positional for 1e-4 <= |x| < 1e16.
  char buffer[64];
  auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  const size_t e = scientific.find('e');
  std::string mantissa = scientific.substr(0, e);
  const int exponent = std::stoi(scientific.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out.append(digits);
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out.append(digits);
      out.append(exponent + 1 - digits.size(), '0');
      out.append(".0");
    } else {
      out.append(digits, 0, exponent + 1);
      out.push_back('.');
      out.append(digits, exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1);
  }
  out += exponent < 0 ? "e-" : "e+";
  const int magnitude = std::abs(exponent);
  if (magnitude < 10) out += "0";
  out += std::to_string(magnitude);
  return out;
}

namespace {

bool IsPrintable(char32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string StringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    const char32_t cp = NextCodePoint(s, pos);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!IsPrintable(cp)) {
      out += cp < 0x100     ? fmt::format("\\x{:02x}", static_cast<uint32_t>(cp))
             : cp < 0x10000 ? fmt::format("\\u{:04x}", static_cast<uint32_t>(cp))
                            : fmt::format("\\U{:08x}", static_cast<uint32_t>(cp));
    } else {
      AppendUtf8(out, cp);
    }
  }
  out += quote;
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<uint8_t>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

void AppendJson(const Value& value, int indent, int depth, const std::string& item_separator,
                const std::string& key_separator, bool sort_keys, std::string& out) {
  const auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  if (value.IsNone()) {
    out += "null";
  } else if (value.IsBool()) {
    out += value.AsBool() ? "true" : "false";
  } else if (value.IsInt()) {
    out += std::to_string(value.AsInt());
  } else if (value.IsFloat()) {
    const double v = value.AsFloat();
    out += std::isnan(v)   ? "NaN"
           : std::isinf(v) ? (v > 0 ? "Infinity" : "-Infinity")
                           : PythonFloatRepr(v);
  } else if (value.IsString()) {
    out += JsonString(value.AsString());
  } else if (value.IsList()) {
    const ValueList& list = value.AsList();
    if (list.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < list.size(); ++i) {
      if (i > 0) out += item_separator;
      if (indent >= 0) newline(depth + 1);
      AppendJson(list[i], indent, depth + 1, item_separator, key_separator, sort_keys, out);
    }
    if (indent >= 0) newline(depth);
    out += ']';
  } else if (value.IsDict()) {
    ValueDict dict = value.AsDict();
    if (dict.empty()) {
      out += "{}";
      return;
    }
    if (sort_keys)
      std::stable_sort(dict.begin(), dict.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    out += '{';
    for (size_t i = 0; i < dict.size(); ++i) {
      if (i > 0) out += item_separator;
      if (indent >= 0) newline(depth + 1);
      out += JsonString(dict[i].first);
      out += key_separator;
      AppendJson(dict[i].second, indent, depth + 1, item_separator, key_separator, sort_keys, out);
    }
    if (indent >= 0) newline(depth);
    out += '}';
  } else {
    Fail("Object of type {} is not JSON serializable", value.TypeName());
  }
}

}  // namespace

std::string Value::Str() const {
  if (IsUndefined()) return "";
  if (IsString()) return AsString();
  if (IsNone()) return "None";
  if (IsBool()) return AsBool() ? "True" : "False";
  if (IsInt()) return std::to_string(AsInt());
  if (IsFloat()) return PythonFloatRepr(AsFloat());
  return Repr();
}

std::string Value::Repr() const {
  if (IsString()) return StringRepr(AsString());
  if (IsList()) {
    std::string out = is_tuple_ ? "(" : "[";
    const ValueList& list = AsList();
    for (size_t i = 0; i < list.size(); ++i) {
      if (i > 0) out.append(", ");
      out.append(list[i].Repr());
    }
    if (is_tuple_ && list.size() == 1) out.push_back(',');
    out.push_back(is_tuple_ ? ')' : ']');
    return out;
  }
  if (IsDict()) {
    std::string out = "{";
    const ValueDict& dict = AsDict();
    for (size_t i = 0; i < dict.size(); ++i) {
      if (i > 0) out.append(", ");
      out.append(StringRepr(dict[i].first)).append(": ").append(dict[i].second.Repr());
    }
    return out + "}";
  }
  if (IsNamespace()) return "<Namespace>";
  if (IsFunction()) return "<function>";
  if (IsUndefined()) return "Undefined";
  return Str();
}

const Value* Value::Find(const std::string& key) const {
  if (!IsDict()) return nullptr;
  for (const auto& [k, v] : AsDict())
    if (k == key) return &v;
  return nullptr;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(None{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList list;
      for (const auto& item : json) list.push_back(FromJson(item));
      return Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict;
      for (const auto& [key, item] : json.items()) dict.emplace_back(key, FromJson(item));
      return Value(std::move(dict));
    }
    default:
      Fail("unsupported JSON value in chat template input");
  }
}

bool Equals(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) return a.ToDouble() == b.ToDouble();
    const int64_t x = a.IsBool() ? a.AsBool() : a.AsInt();
    const int64_t y = b.IsBool() ? b.AsBool() : b.AsInt();
    return x == y;
  }
  if (a.IsString() && b.IsString()) return a.AsString() == b.AsString();
  if (a.IsNone() && b.IsNone()) return true;
  if (a.IsUndefined() && b.IsUndefined()) return true;
  if (a.IsList() && b.IsList()) {
    const ValueList &x = a.AsList(), &y = b.AsList();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!Equals(x[i], y[i])) return false;
    return true;
  }
  if (a.IsDict() && b.IsDict()) {
    const ValueDict &x = a.AsDict(), &y = b.AsDict();
    if (x.size() != y.size()) return false;
    for (const auto& [key, value] : x) {
      const Value* other = b.Find(key);
      if (other == nullptr || !Equals(value, *other)) return false;
    }
    return true;
  }
  if (a.IsNamespace() && b.IsNamespace()) return &a.AsNamespace() == &b.AsNamespace();
  return false;
}

int Compare(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    const double x = a.ToDouble(), y = b.ToDouble();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.IsString() && b.IsString()) {
    const int c = a.AsString().compare(b.AsString());  // UTF-8 order is code-point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.IsList() && b.IsList()) {
    const ValueList &x = a.AsList(), &y = b.AsList();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (!Equals(x[i], y[i])) return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  Fail("'<' not supported between instances of '{}' and '{}'", a.TypeName(), b.TypeName());
}

std::string ToJson(const Value& value, int indent, const std::string& item_separator,
                   const std::string& key_separator, bool sort_keys) {
  std::string out;
  AppendJson(value, indent, 0, item_separator, key_separator, sort_keys, out);
  return out;
}

}  // namespace infer::jinja
