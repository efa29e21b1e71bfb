// Jinja 3.1 filters for chat templates (tojson as transformers overrides it).
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "infer/core/error.h"
#include "infer/tokenizer/jinja/builtins.h"
#include "infer/tokenizer/jinja/strings.h"
#include "infer/tokenizer/utf8.h"

namespace infer::jinja {
namespace {

// The filters Filter implements (a template naming another fails to parse).
const std::set<std::string>& FilterNames() {
  static const std::set<std::string> kFilters = {
      "abs",    "attr",       "capitalize", "count",    "d",       "default", "dictsort",
      "e",      "escape",     "first",      "float",    "indent",  "int",     "items",
      "join",   "last",       "length",     "list",     "lower",   "map",     "max",
      "min",    "reject",     "rejectattr", "replace",  "reverse", "round",   "safe",
      "select", "selectattr", "sort",       "string",   "sum",     "title",   "tojson",
      "trim",   "unique",     "upper",      "wordcount"};
  return kFilters;
}

int64_t Length(const Value& value) {
  if (value.IsUndefined()) return 0;
  if (value.IsString()) return static_cast<int64_t>(CountCodePoints(value.AsString()));
  if (value.IsList()) return static_cast<int64_t>(value.AsList().size());
  if (value.IsDict()) return static_cast<int64_t>(value.AsDict().size());
  Fail("object of type '{}' has no len()", value.TypeName());
}

// Sort key for sort/dictsort/unique: case-folded strings unless case_sensitive.
Value SortKey(const Value& value, bool case_sensitive) {
  if (!case_sensitive && value.IsString()) return Value(MapCase(value.AsString(), false));
  return value;
}

Value AttributePath(const Value& item, const Value& attribute) {
  if (attribute.IsInt()) return Builtins::GetItem(item, attribute);
  Value current = item;
  const std::string& path = RequireString(attribute, "attribute");
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool numeric =
        !part.empty() && part.size() < 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    current = numeric ? Builtins::GetItem(current, Value(int64_t{std::stoll(part)}))
                      : Builtins::GetItem(current, Value(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

ValueList SelectOrReject(const Value& input, const ValueList& args, bool select,
                         bool by_attribute) {
  ValueList out;
  const size_t first_test_arg = by_attribute ? 1 : 0;
  INFER_CHECK(!by_attribute || !args.empty(), "selectattr/rejectattr need an attribute");
  for (const Value& item : Builtins::Iterate(input)) {
    const Value subject = by_attribute ? AttributePath(item, args[0]) : item;
    bool passed;
    if (args.size() <= first_test_arg) {
      passed = subject.Truthy();
    } else {
      const std::string& test = RequireString(args[first_test_arg], "select");
      passed =
          Builtins::Test(test, subject, ValueList(args.begin() + first_test_arg + 1, args.end()));
    }
    if (passed == select) out.push_back(item);
  }
  return out;
}

std::string JsonWithOptions(const Value& input, const ValueList& args, const ValueDict& kwargs) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  const bool ensure_ascii = Arg(args, kwargs, 0, "ensure_ascii", Value(false)).Truthy();
  const Value indent_value = Arg(args, kwargs, 1, "indent", Value(None{}));
  const Value separators = Arg(args, kwargs, 2, "separators", Value(None{}));
  const bool sort_keys = Arg(args, kwargs, 3, "sort_keys", Value(false)).Truthy();
  int indent = -1;
  if (!indent_value.IsNone()) indent = static_cast<int>(RequireInt(indent_value, "tojson indent"));
  std::string item_separator = indent >= 0 ? "," : ", ";
  std::string key_separator = ": ";
  if (!separators.IsNone()) {
    INFER_CHECK(separators.IsList() && separators.AsList().size() == 2,
                "tojson separators must be a pair");
    item_separator = RequireString(separators.AsList()[0], "separators");
    key_separator = RequireString(separators.AsList()[1], "separators");
  }
  std::string json = ToJson(input, indent, item_separator, key_separator, sort_keys);
  if (!ensure_ascii) return json;
  std::string ascii;
  size_t pos = 0;
  while (pos < json.size()) {
    const char32_t cp = NextCodePoint(json, pos);
    if (cp < 0x80) {
      ascii += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      ascii += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      const uint32_t v = cp - 0x10000;
      ascii += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    }
  }
  return ascii;
}

std::string Indent(std::string text, const Value& width, bool first, bool blank) {
  const std::string indention =
      width.IsString() ? width.AsString() : std::string(RequireInt(width, "indent"), ' ');
  text += "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out.append("\n").append(indention);
      out.append(lines[i]);
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out.push_back('\n');
      if (!lines[i].empty()) out.append(indention);
      out.append(lines[i]);
    }
  }
  return first ? indention + out : out;
}

}  // namespace

Value Builtins::Filter(const std::string& name, const Value& v, const ValueList& args,
                       const ValueDict& kwargs) {
  const auto arg = [&](size_t i, const char* key, const Value& fallback = Value()) {
    return Arg(args, kwargs, i, key, fallback);
  };
  if (name == "safe") return v;
  if (name == "string") return Value(v.Str());
  if (name == "e" || name == "escape") return Value(HtmlEscape(v.Str()));
  if (name == "trim") return Value(Strip(v.Str(), arg(0, "chars", Value(None{})), true, true));
  if (name == "upper") return Value(MapCase(v.Str(), true));
  if (name == "lower") return Value(MapCase(v.Str(), false));
  if (name == "title") return Value(Title(v.Str()));
  if (name == "capitalize") return Value(Capitalize(v.Str()));
  if (name == "length" || name == "count") return Value(Length(v));
  if (name == "tojson") return Value(JsonWithOptions(v, args, kwargs));
  if (name == "wordcount")
    return Value(static_cast<int64_t>(Split(v.Str(), Value(None{}), -1).size()));
  if (name == "default" || name == "d") {
    const bool boolean = arg(1, "boolean", Value(false)).Truthy();
    if (v.IsUndefined() || (boolean && !v.Truthy())) return arg(0, "default_value", Value(""));
    return v;
  }
  if (name == "join") {
    const std::string separator = arg(0, "d", Value("")).Str();
    const Value attribute = arg(1, "attribute", Value(None{}));
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(v)) {
      if (!first) out += separator;
      first = false;
      out += (attribute.IsNone() ? item : AttributePath(item, attribute)).Str();
    }
    return Value(out);
  }
  if (name == "first") {
    ValueList items = Iterate(v);
    return items.empty() ? Value::MakeUndefined("first") : items.front();
  }
  if (name == "last") {
    ValueList items = Iterate(v);
    return items.empty() ? Value::MakeUndefined("last") : items.back();
  }
  if (name == "list") return Value(Iterate(v));
  if (name == "reverse") {
    if (v.IsString()) {
      std::u32string cps = ToCodePoints(v.AsString());
      std::reverse(cps.begin(), cps.end());
      return Value(FromCodePoints(cps));
    }
    ValueList items = Iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "items") {
    if (v.IsUndefined()) return Value(ValueList{});
    INFER_CHECK(v.IsDict(), "items filter expects a mapping, got {}", v.TypeName());
    ValueList items;
    for (const auto& [key, item] : v.AsDict())
      items.push_back(Value::MakeTuple(ValueList{Value(key), item}));
    return Value(std::move(items));
  }
  if (name == "dictsort") {
    INFER_CHECK(v.IsDict(), "dictsort expects a mapping, got {}", v.TypeName());
    const bool case_sensitive = arg(0, "case_sensitive", Value(false)).Truthy();
    const std::string by = arg(1, "by", Value("key")).Str();
    const bool reverse = arg(2, "reverse", Value(false)).Truthy();
    ValueDict dict = v.AsDict();
    std::stable_sort(dict.begin(), dict.end(), [&](const auto& a, const auto& b) {
      const Value ka = by == "value" ? a.second : Value(a.first);
      const Value kb = by == "value" ? b.second : Value(b.first);
      const int c = Compare(SortKey(ka, case_sensitive), SortKey(kb, case_sensitive));
      return reverse ? c > 0 : c < 0;
    });
    ValueList items;
    for (auto& [key, item] : dict) items.push_back(Value::MakeTuple(ValueList{Value(key), item}));
    return Value(std::move(items));
  }
  if (name == "sort") {
    const bool reverse = arg(0, "reverse", Value(false)).Truthy();
    const bool case_sensitive = arg(1, "case_sensitive", Value(false)).Truthy();
    const Value attribute = arg(2, "attribute", Value(None{}));
    ValueList items = Iterate(v);
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const Value ka = attribute.IsNone() ? a : AttributePath(a, attribute);
      const Value kb = attribute.IsNone() ? b : AttributePath(b, attribute);
      const int c = Compare(SortKey(ka, case_sensitive), SortKey(kb, case_sensitive));
      return reverse ? c > 0 : c < 0;
    });
    return Value(std::move(items));
  }
  if (name == "unique") {
    const bool case_sensitive = arg(0, "case_sensitive", Value(false)).Truthy();
    const Value attribute = arg(1, "attribute", Value(None{}));
    ValueList out, seen;
    for (const Value& item : Iterate(v)) {
      const Value key =
          SortKey(attribute.IsNone() ? item : AttributePath(item, attribute), case_sensitive);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value(std::move(out));
  }
  if (name == "map") {
    ValueList out;
    const Value attribute = arg(99, "attribute", Value(None{}));
    if (!attribute.IsNone()) {
      Value fallback = arg(99, "default", Value());
      for (const Value& item : Iterate(v)) {
        Value mapped = AttributePath(item, attribute);
        out.push_back(mapped.IsUndefined() && !fallback.IsUndefined() ? fallback : mapped);
      }
    } else {
      INFER_CHECK(!args.empty(), "map needs a filter name or attribute=");
      const std::string& filter = RequireString(args[0], "map");
      const ValueList rest(args.begin() + 1, args.end());
      for (const Value& item : Iterate(v)) out.push_back(Filter(filter, item, rest, {}));
    }
    return Value(std::move(out));
  }
  if (name == "select") return Value(SelectOrReject(v, args, true, false));
  if (name == "reject") return Value(SelectOrReject(v, args, false, false));
  if (name == "selectattr") return Value(SelectOrReject(v, args, true, true));
  if (name == "rejectattr") return Value(SelectOrReject(v, args, false, true));
  if (name == "attr") return GetAttr(v, RequireString(arg(0, "name"), "attr"));
  if (name == "int") {
    Value fallback = arg(0, "default", Value(int64_t{0}));
    if (v.IsInt()) return v;
    if (v.IsBool()) return Value(int64_t{v.AsBool()});
    if (v.IsFloat()) return Value(static_cast<int64_t>(v.AsFloat()));
    if (v.IsString()) {
      try {
        size_t used = 0;
        const std::string text = Strip(v.AsString(), Value(None{}), true, true);
        const int64_t parsed = std::stoll(text, &used);
        if (used == text.size()) return Value(parsed);
        const double as_float = std::stod(text, &used);
        if (used == text.size()) return Value(static_cast<int64_t>(as_float));
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "float") {
    Value fallback = arg(0, "default", Value(0.0));
    if (v.IsNumber()) return Value(v.ToDouble());
    if (v.IsString()) {
      try {
        size_t used = 0;
        const std::string text = Strip(v.AsString(), Value(None{}), true, true);
        const double parsed = std::stod(text, &used);
        if (used == text.size()) return Value(parsed);
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "abs") {
    if (v.IsInt()) {
      INFER_CHECK(v.AsInt() != INT64_MIN, "integer overflow");
      return Value(v.AsInt() < 0 ? -v.AsInt() : v.AsInt());
    }
    return Value(std::fabs(v.ToDouble()));
  }
  if (name == "round") {
    const int64_t precision = RequireInt(arg(0, "precision", Value(int64_t{0})), "round");
    const std::string method = arg(1, "method", Value("common")).Str();
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.ToDouble() * scale;
    double rounded = method == "ceil"    ? std::ceil(x)
                     : method == "floor" ? std::floor(x)
                                         : std::round(x);
    return Value(rounded / scale);
  }
  if (name == "replace") {
    const int64_t count = RequireInt(arg(2, "count", Value(int64_t{-1})).IsNone()
                                         ? Value(int64_t{-1})
                                         : arg(2, "count", Value(int64_t{-1})),
                                     "replace");
    return Value(Replace(v.Str(), arg(0, "old").Str(), arg(1, "new").Str(), count));
  }
  if (name == "indent")
    return Value(Indent(v.Str(), arg(0, "width", Value(int64_t{4})),
                        arg(1, "first", Value(false)).Truthy(),
                        arg(2, "blank", Value(false)).Truthy()));
  if (name == "sum") {
    const Value attribute = arg(0, "attribute", Value(None{}));
    Value total = arg(1, "start", Value(int64_t{0}));
    for (const Value& item : Iterate(v)) {
      const Value x = attribute.IsNone() ? item : AttributePath(item, attribute);
      if (total.IsInt() && (x.IsInt() || x.IsBool())) {
        int64_t sum = 0;
        INFER_CHECK(!__builtin_add_overflow(total.AsInt(), RequireInt(x, "sum"), &sum),
                    "integer overflow");
        total = Value(sum);
      } else
        total = Value(total.ToDouble() + x.ToDouble());
    }
    return total;
  }
  if (name == "min" || name == "max") {
    const bool case_sensitive = arg(0, "case_sensitive", Value(false)).Truthy();
    const Value attribute = arg(1, "attribute", Value(None{}));
    ValueList items = Iterate(v);
    if (items.empty()) return Value::MakeUndefined(name);
    Value best = items[0];
    for (const Value& item : items) {
      const Value a =
          SortKey(attribute.IsNone() ? item : AttributePath(item, attribute), case_sensitive);
      const Value b =
          SortKey(attribute.IsNone() ? best : AttributePath(best, attribute), case_sensitive);
      const int c = Compare(a, b);
      if ((name == "min" && c < 0) || (name == "max" && c > 0)) best = item;
    }
    return best;
  }
  Fail("filter '{}' is not supported", name);
}

bool Builtins::HasFilter(const std::string& name) { return FilterNames().contains(name); }

}  // namespace infer::jinja
