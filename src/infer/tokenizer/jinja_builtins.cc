// Filters (Jinja 3.1 semantics, tojson as transformers overrides it), tests, and the Python
// str/dict methods that chat templates call.
#include "infer/tokenizer/jinja_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>

#include "infer/core/error.h"
#include "infer/tokenizer/utf8.h"

namespace infer::jinja {
namespace {

// Positional-or-keyword argument `index`/`name`, or `fallback`.
Value Arg(const ValueList& args, const ValueDict& kwargs, size_t index, const char* name,
          Value fallback = Value()) {
  for (const auto& [key, value] : kwargs)
    if (key == name) return value;
  return index < args.size() ? args[index] : fallback;
}

const std::string& RequireString(const Value& value, const char* what) {
  if (value.IsUndefined()) FailUndefined(value);
  INFER_CHECK(value.IsString(), "{} expects a string, got {}", what, value.TypeName());
  return value.AsString();
}

int64_t RequireInt(const Value& value, const char* what) {
  if (value.IsBool()) return value.AsBool();
  INFER_CHECK(value.IsInt(), "{} expects an integer, got {}", what, value.TypeName());
  return value.AsInt();
}

std::string MapCase(const std::string& text, bool upper) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto cp = static_cast<utf8proc_int32_t>(NextCodePoint(text, pos));
    AppendUtf8(out, static_cast<char32_t>(upper ? utf8proc_toupper(cp) : utf8proc_tolower(cp)));
  }
  return out;
}

bool IsCased(char32_t cp) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT;
}

std::string Title(const std::string& text) {
  std::string out;
  bool previous_cased = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = NextCodePoint(text, pos);
    const auto c = static_cast<utf8proc_int32_t>(cp);
    AppendUtf8(out,
               static_cast<char32_t>(previous_cased ? utf8proc_tolower(c) : utf8proc_totitle(c)));
    previous_cased = IsCased(cp);
  }
  return out;
}

std::string Capitalize(const std::string& text) {
  std::string out;
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    const auto c = static_cast<utf8proc_int32_t>(NextCodePoint(text, pos));
    AppendUtf8(out, static_cast<char32_t>(first ? utf8proc_totitle(c) : utf8proc_tolower(c)));
    first = false;
  }
  return out;
}

// Python str.strip / lstrip / rstrip with optional `chars`.
std::string Strip(const std::string& text, const Value& chars, bool left, bool right) {
  std::u32string cps = ToCodePoints(text);
  std::u32string set;
  const bool whitespace = chars.IsNone() || chars.IsUndefined();
  if (!whitespace) set = ToCodePoints(RequireString(chars, "strip"));
  const auto strip = [&](char32_t cp) {
    return whitespace ? IsPythonSpace(cp) : set.find(cp) != std::u32string::npos;
  };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strip(cps[begin])) ++begin;
  if (right)
    while (end > begin && strip(cps[end - 1])) --end;
  return FromCodePoints(std::u32string_view(cps).substr(begin, end - begin));
}

ValueList Split(const std::string& text, const Value& separator, int64_t max_split) {
  ValueList parts;
  if (separator.IsNone() || separator.IsUndefined()) {
    // Runs of whitespace; leading/trailing whitespace ignored.
    const std::u32string cps = ToCodePoints(text);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        size_t end = cps.size();
        while (end > i && IsPythonSpace(cps[end - 1])) --end;
        parts.emplace_back(FromCodePoints(std::u32string_view(cps).substr(i, end - i)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !IsPythonSpace(cps[j])) ++j;
      parts.emplace_back(FromCodePoints(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  const std::string& sep = RequireString(separator, "split");
  INFER_CHECK(!sep.empty(), "empty separator");
  size_t start = 0;
  while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
    const size_t at = text.find(sep, start);
    if (at == std::string::npos) break;
    parts.emplace_back(text.substr(start, at - start));
    start = at + sep.size();
  }
  parts.emplace_back(text.substr(start));
  return parts;
}

std::string Replace(const std::string& text, const std::string& old_text,
                    const std::string& new_text, int64_t count) {
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  if (old_text.empty()) {
    // Python inserts `new` between every character (and at both ends).
    const std::u32string cps = ToCodePoints(text);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(out, cps[i]);
    }
    return out;
  }
  while (count < 0 || done < count) {
    const size_t at = text.find(old_text, start);
    if (at == std::string::npos) break;
    out.append(text, start, at - start);
    out += new_text;
    start = at + old_text.size();
    ++done;
  }
  out.append(text, start);
  return out;
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
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

Value Builtins::Filter(const std::string& name, const Value& v, const ValueList& args,
                       const ValueDict& kwargs) {
  const auto arg = [&](size_t i, const char* key, Value fallback = Value()) {
    return Arg(args, kwargs, i, key, std::move(fallback));
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
      const Value fallback = arg(99, "default", Value());
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
    const Value fallback = arg(0, "default", Value(int64_t{0}));
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
    const Value fallback = arg(0, "default", Value(0.0));
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

Value Builtins::Method(const Value& object, const std::string& name, const ValueList& args,
                       const ValueDict& kwargs) {
  const auto arg = [&](size_t i, const char* key, Value fallback = Value()) {
    return Arg(args, kwargs, i, key, std::move(fallback));
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

}  // namespace infer::jinja
