#include "infer/tokenizer/jinja/operators.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "infer/core/error.h"
#include "infer/tokenizer/jinja/builtins.h"
#include "infer/tokenizer/utf8.h"

namespace infer::jinja {
namespace {

// The bytes a value holds directly (strings, and the strings of a list's or dict's items).
size_t ShallowBytes(const Value& value) {
  if (value.IsString()) return value.AsString().size();
  size_t bytes = 0;
  if (value.IsList()) {
    for (const Value& item : value.AsList())
      bytes += 16 + (item.IsString() ? item.AsString().size() : 0);
  } else if (value.IsDict()) {
    for (const auto& [key, item] : value.AsDict()) {
      bytes += 16 + key.size() + (item.IsString() ? item.AsString().size() : 0);
    }
  }
  return bytes;
}

}  // namespace

Value Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.IsUndefined()) FailUndefined(a);
  if (b.IsUndefined()) FailUndefined(b);
  const bool both_ints = (a.IsInt() || a.IsBool()) && (b.IsInt() || b.IsBool());
  const auto as_int = [](const Value& v) { return v.IsBool() ? int64_t{v.AsBool()} : v.AsInt(); };
  if (op == "+") {
    if (a.IsString() && b.IsString()) return Value(a.AsString() + b.AsString());
    if (a.IsList() && b.IsList()) {
      ValueList joined = a.AsList();
      joined.insert(joined.end(), b.AsList().begin(), b.AsList().end());
      return Value(std::move(joined));
    }
  }
  if (op == "*") {
    const Value* sequence =
        a.IsString() || a.IsList() ? &a : (b.IsString() || b.IsList() ? &b : nullptr);
    const Value* count = sequence == &a ? &b : &a;
    if (sequence != nullptr && (count->IsInt() || count->IsBool())) {
      const int64_t n = std::max<int64_t>(0, as_int(*count));
      const auto unit = static_cast<int64_t>(std::max<size_t>(1, ShallowBytes(*sequence)));
      INFER_CHECK(n <= static_cast<int64_t>(kMaxValueBytes) &&
                      n * unit <= static_cast<int64_t>(kMaxValueBytes),
                  "chat template: sequence repetition too large ({} x {} bytes; the limit is {} "
                  "bytes)",
                  n, unit, kMaxValueBytes);
      if (sequence->IsString()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += sequence->AsString();
        return Value(out);
      }
      ValueList out;
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), sequence->AsList().begin(), sequence->AsList().end());
      return Value(std::move(out));
    }
  }
  if (!a.IsNumber() || !b.IsNumber())
    Fail("unsupported operand type(s) for {}: '{}' and '{}'", op, a.TypeName(), b.TypeName());
  if (both_ints) {
    const int64_t x = as_int(a), y = as_int(b);
    int64_t result = 0;
    // Python integers do not overflow; ours are 64-bit, so overflow is an error, not UB.
    if (op == "+") {
      INFER_CHECK(!__builtin_add_overflow(x, y, &result), "integer overflow");
      return Value(result);
    }
    if (op == "-") {
      INFER_CHECK(!__builtin_sub_overflow(x, y, &result), "integer overflow");
      return Value(result);
    }
    if (op == "*") {
      INFER_CHECK(!__builtin_mul_overflow(x, y, &result), "integer overflow");
      return Value(result);
    }
    if (op == "/") {
      INFER_CHECK(y != 0, "division by zero");
      return Value(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//" || op == "%") {
      INFER_CHECK(y != 0, "integer division or modulo by zero");
      INFER_CHECK(!(x == INT64_MIN && y == -1), "integer overflow");
      int64_t quotient = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --quotient;
      return op == "//" ? Value(quotient) : Value(x - quotient * y);
    }
    if (op == "**") {
      if (y >= 0) {
        if (x == 0 || x == 1) return Value(y == 0 ? int64_t{1} : x);
        if (x == -1) return Value(y % 2 == 0 ? int64_t{1} : int64_t{-1});
        int64_t power = 1;  // |x| >= 2: overflows within 63 steps
        for (int64_t i = 0; i < y; ++i)
          INFER_CHECK(!__builtin_mul_overflow(power, x, &power), "integer overflow");
        return Value(power);
      }
      return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
    }
  }
  const double x = a.ToDouble(), y = b.ToDouble();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "/") {
    INFER_CHECK(y != 0, "float division by zero");
    return Value(x / y);
  }
  if (op == "//" || op == "%") {
    INFER_CHECK(y != 0, "float modulo");
    const double quotient = std::floor(x / y);
    return op == "//" ? Value(quotient) : Value(x - quotient * y);
  }
  if (op == "**") return Value(std::pow(x, y));
  Fail("unsupported operator {}", op);
}

Value SliceValue(const Value& object, const Value& start_value, const Value& stop_value,
                 const Value& step_value) {
  if (object.IsUndefined()) FailUndefined(object);
  const auto optional_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.IsNone() || v.IsUndefined()) return std::nullopt;
    INFER_CHECK(v.IsInt(), "slice {} must be an integer", what);
    return v.AsInt();
  };
  const int64_t step = optional_int(step_value, "step").value_or(1);
  INFER_CHECK(step != 0, "slice step cannot be zero");
  std::u32string chars;
  const bool is_string = object.IsString();
  if (is_string) chars = ToCodePoints(object.AsString());
  INFER_CHECK(is_string || object.IsList(), "'{}' object is not subscriptable", object.TypeName());
  const int64_t length =
      is_string ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(object.AsList().size());
  const auto clamp = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index;
    if (i < 0) i += length;
    if (step > 0) return std::clamp<int64_t>(i, 0, length);
    return std::clamp<int64_t>(i, -1, length - 1);
  };
  const int64_t start = clamp(optional_int(start_value, "start"), step > 0 ? 0 : length - 1);
  const int64_t stop = clamp(optional_int(stop_value, "stop"), step > 0 ? length : -1);
  std::u32string out_chars;
  ValueList out_items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (is_string)
      out_chars.push_back(chars[i]);
    else
      out_items.push_back(object.AsList()[i]);
  }
  return is_string ? Value(FromCodePoints(out_chars)) : Value(std::move(out_items));
}

}  // namespace infer::jinja
