// The JSON Schema compiler: one pass over the schema that writes GBNF rules. Subschemas become
// rules shared by identical bodies; each $ref target becomes one rule, reserved before its body
// is compiled so that recursion refers to it by name. Keywords are checked against three lists
// (annotations, supported, everything else refused) before any is used.
#include "infer/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "infer/grammar/gbnf_emit.h"
#include "infer/grammar/grammar_error.h"
#include "infer/grammar/regex_to_gbnf.h"

namespace infer {
namespace {

using grammar::GbnfLiteral;
using grammar::GbnfRules;
using Json = nlohmann::ordered_json;

// Keywords that never change which instances validate.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",      "description", "examples",  "default",  "$schema",       "$id",   "$comment",
    "deprecated", "readOnly",    "writeOnly", "nullable", "discriminator", "$defs", "definitions"};

const std::set<std::string, std::less<>> kSupported = {"type",
                                                       "properties",
                                                       "required",
                                                       "additionalProperties",
                                                       "items",
                                                       "prefixItems",
                                                       "additionalItems",
                                                       "minItems",
                                                       "maxItems",
                                                       "enum",
                                                       "const",
                                                       "anyOf",
                                                       "oneOf",
                                                       "allOf",
                                                       "$ref",
                                                       "minLength",
                                                       "maxLength",
                                                       "pattern",
                                                       "format",
                                                       "minimum",
                                                       "maximum",
                                                       "exclusiveMinimum",
                                                       "exclusiveMaximum"};

std::string PointerToken(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Child(const std::string& pointer, std::string_view key) {
  return pointer + "/" + PointerToken(key);
}

std::string Where(const std::string& pointer) { return pointer.empty() ? "/" : pointer; }

[[noreturn]] void Refuse(const std::string& pointer, std::string_view what) {
  throw GrammarError(fmt::format("JSON schema {}: {}", Where(pointer), what));
}

std::string DumpJson(const Json& value) {
  try {
    return value.dump();
  } catch (const nlohmann::json::exception&) {
    throw GrammarError("JSON schema: a value is not valid UTF-8");
  }
}

// ---- Decimal numbers, exact: the bounds of integer and number ranges. ----

// |value| as digits: `whole` without leading zeros ("0" for zero), `frac` without trailing ones.
struct Decimal {
  bool negative = false;
  std::string whole = "0";
  std::string frac;

  bool IsZero() const { return whole == "0" && frac.empty(); }
};

Decimal MakeDecimal(bool negative, std::string whole, std::string frac) {
  const size_t first = whole.find_first_not_of('0');
  whole = first == std::string::npos ? "0" : whole.substr(first);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  Decimal d{negative, whole, frac};
  if (d.IsZero()) d.negative = false;
  return d;
}

// The shortest decimal text that reads back as the double (what the client wrote, as a rule).
Decimal DecimalFromText(std::string_view text) {
  bool negative = false;
  if (!text.empty() && text[0] == '-') {
    negative = true;
    text.remove_prefix(1);
  }
  std::string digits;
  long point = -1;
  long exponent = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') {
      point = static_cast<long>(digits.size());
    } else {
      digits += text[i];
    }
  }
  if (point < 0) point = static_cast<long>(digits.size());
  if (i < text.size()) exponent = std::stol(std::string(text.substr(i + 1)));
  point += exponent;
  if (point <= 0) return MakeDecimal(negative, "0", std::string(-point, '0') + digits);
  if (point >= static_cast<long>(digits.size())) {
    return MakeDecimal(negative, digits + std::string(point - digits.size(), '0'), "");
  }
  return MakeDecimal(negative, digits.substr(0, point), digits.substr(point));
}

Decimal DecimalFromJson(const Json& value, const std::string& pointer) {
  if (value.is_number_unsigned())
    return MakeDecimal(false, std::to_string(value.get<uint64_t>()), "");
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    const uint64_t magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    return MakeDecimal(v < 0, std::to_string(magnitude), "");
  }
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (!std::isfinite(v)) Refuse(pointer, "not a finite number");
    return DecimalFromText(fmt::format("{}", v));
  }
  Refuse(pointer, "must be a number");
}

// Compares magnitudes.
int CompareMagnitude(const Decimal& a, const Decimal& b) {
  if (a.whole.size() != b.whole.size()) return a.whole.size() < b.whole.size() ? -1 : 1;
  if (const int c = a.whole.compare(b.whole); c != 0) return c < 0 ? -1 : 1;
  const int c = a.frac.compare(b.frac);  // no trailing zeros: plain string order is numeric
  return c == 0 ? 0 : (c < 0 ? -1 : 1);
}

int Compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = CompareMagnitude(a, b);
  return a.negative ? -c : c;
}

// Digit strings of non-negative integers.
std::string Increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}

std::string DecrementPositive(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  const size_t first = s.find_first_not_of('0');
  return first == std::string::npos ? "0" : s.substr(first);
}

bool LessDigits(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

// An integer as (negative, magnitude digits).
struct Int {
  bool negative = false;
  std::string digits = "0";
};

Int IntAdd1(const Int& v) {
  if (!v.negative) return {false, Increment(v.digits)};
  const std::string m = DecrementPositive(v.digits);
  return {m != "0", m};
}

Int IntSub1(const Int& v) {
  if (v.negative) return {true, Increment(v.digits)};
  if (v.digits == "0") return {true, "1"};
  return {false, DecrementPositive(v.digits)};
}

Int Floor(const Decimal& d) {
  if (d.frac.empty()) return {d.negative, d.whole};
  if (d.negative) return {true, Increment(d.whole)};
  return {false, d.whole};
}

Int Ceil(const Decimal& d) {
  if (d.frac.empty()) return {d.negative, d.whole};
  if (d.negative) return {d.whole != "0", d.whole};
  return {false, Increment(d.whole)};
}

bool IntLess(const Int& a, const Int& b) {
  if (a.negative != b.negative) return a.negative;
  return a.negative ? LessDigits(b.digits, a.digits) : LessDigits(a.digits, b.digits);
}

// GBNF text by appending, not by operator+ chains (GCC 12's -Wrestrict misfires on those).
// Seq joins the non-empty parts with spaces; Group wraps in parentheses with a suffix.
std::string Seq(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const std::string_view part : parts) {
    if (part.empty()) continue;
    if (!out.empty()) out += ' ';
    out += part;
  }
  return out;
}

std::string Group(std::string_view inner, std::string_view suffix) {
  std::string out;
  out += '(';
  out += inner;
  out += ')';
  out += suffix;
  return out;
}

std::string DigitClass(char lo, char hi) {
  if (lo == hi) return GbnfLiteral(std::string(1, lo));
  if (lo == '0' && hi == '9') return "[0-9]";
  return fmt::format("[{}-{}]", lo, hi);
}

std::string Repeat(const std::string& atom, size_t min, std::optional<size_t> max) {
  if (max && *max == 0) return "\"\"";
  if (!max) {
    if (min == 0) return atom + "*";
    if (min == 1) return atom + "+";
    return fmt::format("{}{{{},}}", atom, min);
  }
  if (min == 0 && *max == 1) return atom + "?";
  if (min == 1 && *max == 1) return atom;
  if (min == *max) return fmt::format("{}{{{}}}", atom, min);
  return fmt::format("{}{{{},{}}}", atom, min, *max);
}

std::string Alternatives(const std::vector<std::string>& parts) {
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += " | ";
    out += parts[i];
  }
  return out + ")";
}

// Integers of exactly a.size() digits in [a, b] (a.size() == b.size(), a <= b).
std::string SameLengthRange(const std::string& a, const std::string& b) {
  if (a.empty()) return "\"\"";
  if (a == b) return GbnfLiteral(a);
  const size_t rest = a.size() - 1;
  if (a[0] == b[0]) {
    return GbnfLiteral(a.substr(0, 1)) + " " + SameLengthRange(a.substr(1), b.substr(1));
  }
  const bool low_full = a.find_first_not_of('0', 1) == std::string::npos;
  const bool high_full = b.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> parts;
  if (!low_full) {
    parts.push_back(GbnfLiteral(a.substr(0, 1)) + " " +
                    SameLengthRange(a.substr(1), std::string(rest, '9')));
  }
  const char first = low_full ? a[0] : static_cast<char>(a[0] + 1);
  const char last = high_full ? b[0] : static_cast<char>(b[0] - 1);
  if (first <= last) {
    parts.push_back(Seq({DigitClass(first, last), rest > 0 ? Repeat("[0-9]", rest, rest) : ""}));
  }
  if (!high_full) {
    parts.push_back(GbnfLiteral(b.substr(0, 1)) + " " +
                    SameLengthRange(std::string(rest, '0'), b.substr(1)));
  }
  return Alternatives(parts);
}

// Non-negative integers in [a, b], written without leading zeros.
std::string UnsignedRange(const std::string& a, const std::string& b) {
  if (a.size() == b.size()) return SameLengthRange(a, b);
  std::vector<std::string> parts;
  parts.push_back(SameLengthRange(a, std::string(a.size(), '9')));
  if (b.size() > a.size() + 1) {
    parts.push_back("[1-9] " + Repeat("[0-9]", a.size(), b.size() - 2));
  }
  std::string power(b.size(), '0');
  power[0] = '1';
  parts.push_back(SameLengthRange(power, b));
  return Alternatives(parts);
}

// One end of a number range.
struct Bound {
  Decimal value;
  bool exclusive = false;
};

enum class FracMode { kNone, kInclusive, kExclusive };

// ---- The compiler. ----

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options), rules_(options.max_grammar_bytes) {}

  std::string Run() {
    const std::string body = Compile(root_, "", "root-value");
    const std::string ws = Ws();
    return rules_.Render(ws.empty() ? body : ws + " " + body + " " + ws, options_.start_rule);
  }

 private:
  // ---- Whitespace and punctuation. ----
  bool Flexible() const { return options_.whitespace == JsonSchemaOptions::Whitespace::kFlexible; }
  std::string Ws() {
    if (!Flexible()) return "";
    if (options_.max_whitespace == 0) return "";
    return rules_.Add("ws", Repeat("[ \\t\\n]", 0, options_.max_whitespace));
  }
  std::string After() {
    switch (options_.whitespace) {
      case JsonSchemaOptions::Whitespace::kCompact:
        return "";
      case JsonSchemaOptions::Whitespace::kSingleSpace:
        return fmt::format(" {}", rules_.Add("sp", "\" \"?"));
      case JsonSchemaOptions::Whitespace::kFlexible:
        return Ws().empty() ? "" : fmt::format(" {}", Ws());
    }
    return "";
  }
  std::string Before() { return Flexible() && !Ws().empty() ? Ws() + " " : ""; }
  std::string Comma() { return Before() + "\",\"" + After(); }
  std::string Colon() { return Before() + "\":\"" + After(); }
  std::string Open(char c) {
    const std::string ws = Flexible() ? Ws() : "";
    return ws.empty() ? GbnfLiteral(std::string(1, c))
                      : fmt::format("{} {}", GbnfLiteral(std::string(1, c)), ws);
  }
  std::string Close(char c) { return Before() + GbnfLiteral(std::string(1, c)); }

  // ---- Shared rules. ----
  std::string StringChar() {
    const std::string hex = rules_.Add("hex", "[0-9a-fA-F]");
    // \u escapes of surrogates are left out: a pair would be one character to a validator but
    // two to the grammar's length count.
    const std::string u =
        fmt::format("\"u\" ([0-9a-cA-Ce-fE-F] {0} {0} {0} | [dD] [0-7] {0} {0})", hex);
    return rules_.Add("char",
                      fmt::format("[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | {})", u));
  }
  std::string AnyString() {
    return rules_.Add("string", "\"\\\"\" " + StringChar() + "* \"\\\"\"");
  }
  std::string AnyNumber() {
    const std::string integer = fmt::format("\"-\"? (\"0\" | [1-9] {})",
                                            Repeat("[0-9]", 0, options_.max_integer_digits - 1));
    return rules_.Add(
        "number",
        fmt::format("{} (\".\" {})? ([eE] [-+]? {})?", integer,
                    Repeat("[0-9]", 1, options_.max_fraction_digits),
                    Repeat("[0-9]", 1, std::max<size_t>(options_.max_exponent_digits, 1))));
  }
  std::string Scalar() {
    return rules_.Add("scalar",
                      AnyString() + " | " + AnyNumber() + " | \"true\" | \"false\" | \"null\"");
  }
  // An object whose values are `value`.
  std::string AnyObjectOf(const std::string& value) {
    const std::string member = AnyString() + " " + Colon() + " " + value;
    return Open('{') + " (" + member + " (" + Comma() + " " + member + ")*)? " + Close('}');
  }
  // Any JSON value nested at most `depth` levels.
  std::string AnyValue(size_t depth) {
    if (depth == 0) return Scalar();
    const std::string inner = AnyValue(depth - 1);
    const std::string array =
        Open('[') + " (" + inner + " (" + Comma() + " " + inner + ")*)? " + Close(']');
    return rules_.Add(fmt::format("value-{}", depth),
                      Scalar() + " | " + AnyObjectOf(inner) + " | " + array);
  }
  std::string AnyValue() { return AnyValue(options_.max_any_depth); }
  std::string AnyObject() {
    return rules_.Add(
        "object",
        AnyObjectOf(AnyValue(options_.max_any_depth > 0 ? options_.max_any_depth - 1 : 0)));
  }

  // ---- Keyword checks. ----
  void CheckKeywords(const Json& schema, const std::string& pointer) {
    for (const auto& [key, value] : schema.items()) {
      if (kAnnotations.count(key) != 0 || kSupported.count(key) != 0) continue;
      Refuse(Child(pointer, key), fmt::format("the keyword '{}' is not supported", key));
    }
  }

  static bool HasConstraints(const Json& schema) {
    for (const auto& [key, value] : schema.items()) {
      if (kAnnotations.count(key) == 0) return true;
    }
    return false;
  }

  size_t Count(const Json& schema, const char* key, const std::string& pointer) {
    const auto it = schema.find(key);
    if (it == schema.end()) return 0;
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0) &&
        !(it->is_number_float() && it->get<double>() >= 0 &&
          std::floor(it->get<double>()) == it->get<double>())) {
      Refuse(Child(pointer, key), "must be a non-negative integer");
    }
    const double v = it->get<double>();
    if (v > static_cast<double>(options_.max_repetition)) {
      Refuse(Child(pointer, key),
             fmt::format("{} is above the limit of {}", key, options_.max_repetition));
    }
    return static_cast<size_t>(v);
  }

  std::optional<size_t> MaxCount(const Json& schema, const char* key, const std::string& pointer) {
    if (!schema.contains(key)) return std::nullopt;
    return Count(schema, key, pointer);
  }

  // ---- $ref. ----
  // The schema a "#..." reference points to, and its JSON pointer.
  std::pair<const Json*, std::string> Resolve(const std::string& ref, const std::string& pointer) {
    const std::string where = Child(pointer, "$ref");
    if (ref.empty() || ref[0] != '#') {
      Refuse(where, fmt::format("only references into the schema itself ('#...') are supported, "
                                "not '{}'",
                                ref));
    }
    // The fragment is URI-encoded: %XX first, then the JSON pointer's ~1 and ~0.
    std::string fragment;
    for (size_t i = 1; i < ref.size(); ++i) {
      if (ref[i] == '%' && i + 2 < ref.size() &&
          std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
        fragment += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        fragment += ref[i];
      }
    }
    const Json* node = &root_;
    std::string resolved;
    if (fragment.empty()) return {node, resolved};
    if (fragment[0] != '/')
      Refuse(where, fmt::format("'{}' is not a JSON pointer (anchors are not supported)", ref));
    size_t start = 1;
    while (true) {
      const size_t slash = fragment.find('/', start);
      const std::string raw =
          fragment.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      std::string token;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '~' && i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
          token += raw[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          token += raw[i];
        }
      }
      if (node->is_object() && node->contains(token)) {
        node = &(*node)[token];
      } else if (node->is_array() && !token.empty() &&
                 token.find_first_not_of("0123456789") == std::string::npos && token.size() < 10 &&
                 std::stoul(token) < node->size()) {
        node = &(*node)[std::stoul(token)];
      } else {
        Refuse(where, fmt::format("'{}' does not resolve", ref));
      }
      resolved = Child(resolved, token);
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    return {node, resolved};
  }

  std::string RefRule(const std::string& ref, const std::string& pointer) {
    auto [target, target_pointer] = Resolve(ref, pointer);
    if (head_open_.count(target_pointer) != 0) {
      Refuse(Child(pointer, "$ref"),
             fmt::format("'{}' refers back to itself before any object or array (a circular "
                         "reference that no instance can end)",
                         ref));
    }
    if (const auto it = ref_rules_.find(target_pointer); it != ref_rules_.end()) return it->second;
    const size_t slash = target_pointer.rfind('/');
    const std::string hint = target_pointer.empty() ? "root-ref" : target_pointer.substr(slash + 1);
    std::string name = rules_.Reserve(hint);
    ref_rules_[target_pointer] = name;
    head_open_.insert(target_pointer);
    const std::string body = Compile(*target, target_pointer, hint);
    head_open_.erase(target_pointer);
    rules_.Define(name, body);
    return name;
  }

  // ---- allOf and siblings: merged into one schema. ----

  // `schema` with its $ref and allOf merged in, so none remain at its top.
  Json Flatten(const Json& schema, const std::string& pointer, size_t depth) {
    if (depth > options_.max_depth) Refuse(pointer, "nested too deeply ($ref and allOf)");
    if (schema.is_boolean()) return schema.get<bool>() ? Json::object() : Json(false);
    if (!schema.is_object()) Refuse(pointer, "a schema must be an object or a boolean");
    CheckKeywords(schema, pointer);
    Json out = Json::object();
    for (const auto& [key, value] : schema.items()) {
      if (key != "$ref" && key != "allOf" && kAnnotations.count(key) == 0) out[key] = value;
    }
    if (const auto it = schema.find("$ref"); it != schema.end()) {
      if (!it->is_string()) Refuse(Child(pointer, "$ref"), "must be a string");
      auto [target, target_pointer] = Resolve(it->get<std::string>(), pointer);
      out = Merge(out, Flatten(*target, target_pointer, depth + 1), pointer);
    }
    if (const auto it = schema.find("allOf"); it != schema.end()) {
      const std::string all_pointer = Child(pointer, "allOf");
      if (!it->is_array() || it->empty()) Refuse(all_pointer, "must be a non-empty array");
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string item_pointer = Child(all_pointer, std::to_string(i));
        out = Merge(out, Flatten((*it)[i], item_pointer, depth + 1), item_pointer);
      }
    }
    return out;
  }

  // Both schemas must hold: the keywords of each, with those both have combined.
  static Json Merge(const Json& a, const Json& b, const std::string& pointer) {
    if (a.is_boolean() || b.is_boolean()) return Json(false);  // only `false` stays boolean
    Json out = a;
    for (const auto& [key, value] : b.items()) {
      if (!out.contains(key)) {
        out[key] = value;
        continue;
      }
      Json& mine = out[key];
      if (mine == value) continue;
      if (key == "properties" && mine.is_object() && value.is_object()) {
        for (const auto& [name, sub] : value.items()) {
          if (!mine.contains(name)) {
            mine[name] = sub;
          } else if (mine[name] != sub) {
            mine[name] = Json{{"allOf", Json::array({mine[name], sub})}};
          }
        }
      } else if (key == "required" && mine.is_array() && value.is_array()) {
        for (const Json& name : value) {
          if (std::find(mine.begin(), mine.end(), name) == mine.end()) mine.push_back(name);
        }
      } else if (key == "type") {
        auto as_list = [](const Json& t) { return t.is_array() ? t : Json::array({t}); };
        Json both = Json::array();
        for (const Json& t : as_list(mine)) {
          for (const Json& u : as_list(value)) {
            if (t == u)
              both.push_back(t);
            else if (t == "integer" && u == "number")
              both.push_back(t);
            else if (t == "number" && u == "integer")
              both.push_back(u);
          }
        }
        if (both.empty()) Refuse(pointer, "allOf: the branches' types have nothing in common");
        mine = both;
      } else if ((key == "minLength" || key == "minItems" || key == "minimum" ||
                  key == "exclusiveMinimum") &&
                 mine.is_number() && value.is_number()) {
        if (value > mine) mine = value;
      } else if ((key == "maxLength" || key == "maxItems" || key == "maximum" ||
                  key == "exclusiveMaximum") &&
                 mine.is_number() && value.is_number()) {
        if (value < mine) mine = value;
      } else {
        Refuse(Child(pointer, key),
               fmt::format("allOf: cannot combine two different '{}' keywords", key));
      }
    }
    // additionalProperties of one branch would also judge the other branch's properties.
    for (const Json* side : {&a, &b}) {
      const Json* other = side == &a ? &b : &a;
      const auto ap = side->find("additionalProperties");
      if (ap == side->end() || *ap == true) continue;
      const Json mine = side->value("properties", Json::object());
      const Json theirs = other->value("properties", Json::object());  // outlives the loop
      for (const auto& [name, sub] : theirs.items()) {
        if (!mine.contains(name)) {
          Refuse(Child(pointer, "additionalProperties"),
                 fmt::format("allOf: the property '{}' of one branch is excluded by the "
                             "additionalProperties of another",
                             name));
        }
      }
    }
    return out;
  }

  // ---- The dispatch. ----
  std::string Compile(const Json& schema, const std::string& pointer, std::string_view hint) {
    if (++depth_ > options_.max_depth)
      Refuse(pointer, fmt::format("nested more than {} levels deep", options_.max_depth));
    std::string out = CompileInner(schema, pointer, hint);
    --depth_;
    return out;
  }

  std::string CompileInner(const Json& schema, const std::string& pointer, std::string_view hint) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) Refuse(pointer, "the schema is false: no value is valid");
      return AnyValue();
    }
    if (!schema.is_object()) Refuse(pointer, "a schema must be an object or a boolean");
    CheckKeywords(schema, pointer);
    // A $ref or allOf with nothing else that constrains: the referenced rule as is.
    Json rest = Json::object();
    for (const auto& [key, value] : schema.items()) {
      if (kAnnotations.count(key) == 0 && key != "$ref" && key != "allOf") rest[key] = value;
    }
    if (schema.contains("$ref") && !schema.contains("allOf") && rest.empty()) {
      if (!schema["$ref"].is_string()) Refuse(Child(pointer, "$ref"), "must be a string");
      return RefRule(schema["$ref"].get<std::string>(), pointer);
    }
    if (schema.contains("allOf") && !schema.contains("$ref") && rest.empty() &&
        schema["allOf"].is_array() && schema["allOf"].size() == 1) {
      return Compile(schema["allOf"][0], Child(Child(pointer, "allOf"), "0"), hint);
    }
    if (schema.contains("$ref") || schema.contains("allOf")) {
      const Json flat = Flatten(schema, pointer, 0);
      if (flat.is_boolean()) Refuse(pointer, "allOf: no value is valid");
      return Compile(flat, pointer, hint);
    }
    if (schema.contains("anyOf") || schema.contains("oneOf"))
      return CompileAnyOf(schema, pointer, hint);
    if (schema.contains("enum") || schema.contains("const")) return CompileEnum(schema, pointer);
    return CompileTypes(schema, pointer, hint);
  }

  std::string CompileAnyOf(const Json& schema, const std::string& pointer, std::string_view hint) {
    if (schema.contains("anyOf") && schema.contains("oneOf")) {
      Refuse(Child(pointer, "oneOf"), "anyOf and oneOf in one schema are not supported");
    }
    const char* key = schema.contains("anyOf") ? "anyOf" : "oneOf";
    const std::string list_pointer = Child(pointer, key);
    const Json& list = schema[key];
    if (!list.is_array() || list.empty()) Refuse(list_pointer, "must be a non-empty array");
    Json siblings = Json::object();
    for (const auto& [k, value] : schema.items()) {
      if (k != key && kAnnotations.count(k) == 0) siblings[k] = value;
    }
    std::vector<std::string> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string branch_pointer = Child(list_pointer, std::to_string(i));
      if (list[i].is_boolean() && !list[i].get<bool>()) continue;
      std::string part;
      if (siblings.empty()) {
        part = Compile(list[i], branch_pointer, hint);
      } else {
        // The siblings hold for every branch: each branch merged with them.
        const Json flat = Merge(siblings, Flatten(list[i], branch_pointer, 0), branch_pointer);
        if (flat.is_boolean()) continue;
        part = Compile(flat, branch_pointer, hint);
      }
      if (std::find(parts.begin(), parts.end(), part) == parts.end()) parts.push_back(part);
    }
    if (parts.empty()) Refuse(list_pointer, "no branch accepts any value");
    std::string body;
    for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
    return parts.size() == 1 ? parts[0] : rules_.Add(std::string(hint), body);
  }

  static bool HasType(const Json& value, const std::string& type) {
    if (type == "null") return value.is_null();
    if (type == "boolean") return value.is_boolean();
    if (type == "string") return value.is_string();
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    if (type == "number") return value.is_number();
    if (type == "integer") {
      return value.is_number_integer() ||
             (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>());
    }
    return false;
  }

  std::string CompileEnum(const Json& schema, const std::string& pointer) {
    std::vector<Json> values;
    if (schema.contains("enum")) {
      const Json& list = schema["enum"];
      if (!list.is_array()) Refuse(Child(pointer, "enum"), "must be an array");
      if (list.size() > options_.max_enum) {
        Refuse(Child(pointer, "enum"),
               fmt::format("{} values, more than the limit of {}", list.size(), options_.max_enum));
      }
      values.assign(list.begin(), list.end());
    }
    if (schema.contains("const")) {
      const Json& c = schema["const"];
      if (schema.contains("enum")) {
        const bool in = std::find(values.begin(), values.end(), c) != values.end();
        values.clear();
        if (in) values.push_back(c);
      } else {
        values.push_back(c);
      }
    }
    std::vector<std::string> types;
    for (const auto& [key, value] : schema.items()) {
      if (key == "enum" || key == "const" || kAnnotations.count(key) != 0) continue;
      if (key != "type") {
        Refuse(Child(pointer, key),
               fmt::format("'{}' together with enum or const is not supported", key));
      }
      for (const Json& t : value.is_array() ? value : Json::array({value})) {
        if (!t.is_string()) Refuse(Child(pointer, "type"), "must be a string or a list of strings");
        types.push_back(t.get<std::string>());
      }
    }
    std::vector<std::string> parts;
    for (const Json& value : values) {
      if (!types.empty() && std::none_of(types.begin(), types.end(),
                                         [&](const std::string& t) { return HasType(value, t); }))
        continue;
      const std::string literal = GbnfLiteral(DumpJson(value));
      rules_.Charge(literal.size());
      if (std::find(parts.begin(), parts.end(), literal) == parts.end()) parts.push_back(literal);
    }
    if (parts.empty()) Refuse(pointer, "no value of the enum or const is valid");
    std::string body;
    for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
    return parts.size() == 1 ? body : rules_.Add("enum", body);
  }

  std::string CompileTypes(const Json& schema, const std::string& pointer, std::string_view hint) {
    std::vector<std::string> types;
    if (const auto it = schema.find("type"); it != schema.end()) {
      for (const Json& t : it->is_array() ? *it : Json::array({*it})) {
        if (!t.is_string()) Refuse(Child(pointer, "type"), "must be a string or a list of strings");
        const std::string name = t.get<std::string>();
        static const std::set<std::string, std::less<>> kTypes = {
            "null", "boolean", "object", "array", "number", "integer", "string", "json_object"};
        if (kTypes.count(name) == 0)
          Refuse(Child(pointer, "type"), fmt::format("unknown type '{}'", name));
        if (std::find(types.begin(), types.end(), name) == types.end()) types.push_back(name);
      }
      if (types.empty()) Refuse(Child(pointer, "type"), "an empty list of types");
    } else {
      // No type: the types the keywords are about (a subset of the instances: see the header).
      auto has = [&](std::initializer_list<const char*> keys) {
        return std::any_of(keys.begin(), keys.end(),
                           [&](const char* k) { return schema.contains(k); });
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "prefixItems", "additionalItems", "minItems", "maxItems"}))
        types.push_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
        types.push_back("number");
      if (types.empty()) return AnyValue();
    }
    const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
    std::vector<std::string> parts;
    for (const std::string& type : types) {
      if (type == "null") {
        parts.push_back("\"null\"");
      } else if (type == "boolean") {
        parts.push_back("(\"true\" | \"false\")");
      } else if (type == "string") {
        parts.push_back(CompileString(schema, pointer));
      } else if (type == "integer") {
        if (!has_number) parts.push_back(CompileNumber(schema, pointer, /*integer=*/true));
      } else if (type == "number") {
        parts.push_back(CompileNumber(schema, pointer, /*integer=*/false));
      } else if (type == "object") {
        parts.push_back(CompileObject(schema, pointer, hint));
      } else if (type == "array") {
        parts.push_back(CompileArray(schema, pointer, hint));
      } else if (type == "json_object") {
        parts.push_back(AnyObject());
      }
    }
    std::string body;
    for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
    return rules_.Add(std::string(hint), body);
  }

  // ---- Strings. ----
  std::string Format(const std::string& format, const std::string& pointer, size_t& min_len,
                     size_t& max_len) {
    if (format == "date" || format == "date-time") {
      // Exact calendar: days per month, 29 February in leap years only, years 0001-9999.
      const std::string mult4 = "(\"0\" [48] | [2468] [048] | [13579] [26])";
      const std::string year = rules_.Add(
          "year",
          "\"000\" [1-9] | \"00\" [1-9] [0-9] | \"0\" [1-9] [0-9] [0-9] | [1-9] [0-9] [0-9] [0-9]");
      const std::string leap =
          rules_.Add("leap-year", fmt::format("[0-9] [0-9] {0} | {0} \"00\"", mult4));
      std::string date = rules_.Add(
          "date", year +
                      " \"-\" (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" "
                      "[01]) | " +
                      year +
                      " \"-\" (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | " +
                      year + " \"-02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]) | " + leap +
                      " \"-02-29\"");
      if (format == "date") {
        min_len = max_len = 10;
        return date;
      }
      min_len = 20;
      max_len = 35;
      return rules_.Add("date-time", date + " \"T\" " + Time());
    }
    if (format == "time") {
      min_len = 9;
      max_len = 24;
      return Time();
    }
    if (format == "uuid") {
      min_len = max_len = 36;
      const std::string hex = rules_.Add("hex", "[0-9a-fA-F]");
      return rules_.Add(
          "uuid",
          fmt::format("{0}{{8}} \"-\" {0}{{4}} \"-\" {0}{{4}} \"-\" {0}{{4}} \"-\" {0}{{12}}",
                      hex));
    }
    if (format == "email") {
      // A strict subset of what email validators and the patterns clients send with this
      // format accept (zod's, HTML's): dot-separated atoms without a leading, trailing or double
      // dot, an '@', labels that start with a letter or digit, and a top-level domain of 2-6
      // letters. Sized to `max_len` when the schema bounds the length (as .email().max(n)).
      const size_t budget = max_len == 0 ? 108 : max_len;
      if (budget < 8) {
        Refuse(Child(pointer, "maxLength"), "an email of at most 7 characters cannot be written");
      }
      min_len = 6;
      if (budget >= 108) {
        max_len = 108;
        return rules_.Add("email",
                          "[a-zA-Z0-9_+\\x2D]{1,16} (\".\" [a-zA-Z0-9_+\\x2D]{1,16}){0,2} \"@\" "
                          "([a-zA-Z0-9] [a-zA-Z0-9\\x2D]{0,14} \".\"){1,3} [a-zA-Z]{2,6}");
      }
      // local@label.tld within the budget: tld 2-3 letters, the rest shared.
      const size_t rest = budget - 5;  // '@', '.', a 3-letter tld
      const size_t local = std::max<size_t>(1, rest / 2);
      const size_t label = rest - local;  // >= 1
      max_len = local + 1 + label + 1 + 3;
      return rules_.Add("email", fmt::format("[a-zA-Z0-9_+\\x2D]{{1,{}}} \"@\" [a-zA-Z0-9] "
                                             "[a-zA-Z0-9\\x2D]{{0,{}}} \".\" [a-zA-Z]{{2,3}}",
                                             local, label - 1));
    }
    Refuse(Child(pointer, "format"), fmt::format("the format '{}' is not supported", format));
  }

  // RFC 3339 full-time, as JSON Schema's "time" (an offset is required).
  std::string Time() {
    return rules_.Add(
        "time",
        "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
        "(\"Z\" | [+\\x2D] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])");
  }

  std::string CompileString(const Json& schema, const std::string& pointer) {
    const size_t min = Count(schema, "minLength", pointer);
    const std::optional<size_t> max = MaxCount(schema, "maxLength", pointer);
    if (max && *max < min) Refuse(Child(pointer, "maxLength"), "maxLength is below minLength");
    const std::string quote = "\"\\\"\"";
    // A pattern beside a format (zod writes both for .email()): the pattern when it compiles
    // and implies the length bounds (every validator checks it); else the format, whose
    // grammars are strict subsets of what such patterns describe (zod 3's email pattern needs
    // lookaheads, which a grammar lacks; zod 4's has no length bound for .max(n)).
    bool use_format = schema.contains("format");
    if (use_format && schema.contains("pattern")) {
      try {
        grammar::GbnfRules scratch(options_.max_grammar_bytes);
        grammar::RegexOptions probe;
        probe.search = true;
        probe.json_string = true;
        const grammar::CompiledRegex compiled = grammar::CompileRegex(
            schema["pattern"].is_string() ? schema["pattern"].get<std::string>() : "(", probe,
            scratch);
        use_format = min > compiled.min_length ||
                     (max && (!compiled.max_length || *compiled.max_length > *max));
      } catch (const GrammarError&) {
      }
    }
    if (const auto it = schema.find("format"); use_format && it != schema.end()) {
      if (!it->is_string()) Refuse(Child(pointer, "format"), "must be a string");
      size_t fmin = 0;
      size_t fmax = max.value_or(0);  // in: the schema's bound (formats that can fit it do)
      const std::string body = Format(it->get<std::string>(), pointer, fmin, fmax);
      if (min > fmin || (max && *max < fmax)) {
        Refuse(Child(pointer, schema.contains("maxLength") ? "maxLength" : "minLength"),
               "minLength/maxLength together with a format they would cut is not supported");
      }
      return quote + " " + body + " " + quote;
    }
    if (const auto it = schema.find("pattern"); it != schema.end()) {
      if (!it->is_string()) Refuse(Child(pointer, "pattern"), "must be a string");
      grammar::RegexOptions regex_options;
      regex_options.search = true;
      regex_options.json_string = true;
      grammar::CompiledRegex compiled;
      try {
        compiled = grammar::CompileRegex(it->get<std::string>(), regex_options, rules_);
      } catch (const GrammarError& e) {
        throw GrammarError(fmt::format("JSON schema {}: {}", Child(pointer, "pattern"), e.what()));
      }
      if (min > compiled.min_length ||
          (max && (!compiled.max_length || *compiled.max_length > *max))) {
        Refuse(Child(pointer, schema.contains("maxLength") ? "maxLength" : "minLength"),
               "minLength/maxLength together with a pattern that does not imply them is not "
               "supported (anchor the pattern and bound its repetitions instead)");
      }
      return quote + " " + rules_.Add("pattern", compiled.expression) + " " + quote;
    }
    if (min == 0 && !max) return AnyString();
    return quote + " " + Repeat(StringChar(), min, max) + " " + quote;
  }

  // ---- Numbers. ----
  std::optional<Bound> ReadBound(const Json& schema, const std::string& pointer, bool lower) {
    const char* inclusive_key = lower ? "minimum" : "maximum";
    const char* exclusive_key = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    std::optional<Bound> bound;
    auto tighten = [&](const Bound& b) {
      if (!bound) {
        bound = b;
        return;
      }
      const int c = Compare(b.value, bound->value);
      if ((lower && c > 0) || (!lower && c < 0) || (c == 0 && b.exclusive)) bound = b;
    };
    bool draft4_exclusive = false;
    if (const auto it = schema.find(exclusive_key); it != schema.end()) {
      if (it->is_boolean()) {
        draft4_exclusive = it->get<bool>();
      } else {
        tighten({DecimalFromJson(*it, Child(pointer, exclusive_key)), true});
      }
    }
    if (const auto it = schema.find(inclusive_key); it != schema.end()) {
      tighten({DecimalFromJson(*it, Child(pointer, inclusive_key)), draft4_exclusive});
    }
    return bound;
  }

  std::string CompileNumber(const Json& schema, const std::string& pointer, bool integer) {
    const std::optional<Bound> lo = ReadBound(schema, pointer, true);
    const std::optional<Bound> hi = ReadBound(schema, pointer, false);
    const std::string where =
        Child(pointer, schema.contains("maximum") ? "maximum" : "exclusiveMaximum");
    if (integer) {
      if (!lo && !hi) {
        return rules_.Add("integer",
                          fmt::format("\"-\"? (\"0\" | [1-9] {})",
                                      Repeat("[0-9]", 0, options_.max_integer_digits - 1)));
      }
      std::optional<Int> low;
      std::optional<Int> high;
      if (lo) low = lo->exclusive ? IntAdd1(Floor(lo->value)) : Ceil(lo->value);
      if (hi) high = hi->exclusive ? IntSub1(Ceil(hi->value)) : Floor(hi->value);
      if (low && high && IntLess(*high, *low)) Refuse(where, "no integer lies within the bounds");
      return rules_.Add("integer", IntegerRange(low, high));
    }
    if (!lo && !hi) return AnyNumber();
    if (lo && hi) {
      const int c = Compare(lo->value, hi->value);
      if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive))) {
        Refuse(where, "no number lies within the bounds");
      }
    }
    std::vector<std::string> parts;
    // x < 0, written as '-' and its magnitude.
    if (!lo || lo->value.negative) {
      Bound mlo{Decimal{}, true};  // magnitude > 0
      if (hi && hi->value.negative)
        mlo = {Decimal{false, hi->value.whole, hi->value.frac}, hi->exclusive};
      std::optional<Bound> mhi;
      if (lo) mhi = Bound{Decimal{false, lo->value.whole, lo->value.frac}, lo->exclusive};
      if (auto m = MagnitudeRange(mlo, mhi, lo ? &lo->value : nullptr, hi ? &hi->value : nullptr)) {
        parts.push_back("\"-\" " + *m);
      }
    }
    // x >= 0.
    if (!hi || !hi->value.negative) {
      Bound nlo{Decimal{}, false};
      if (lo && !lo->value.negative) nlo = *lo;
      if (auto m = MagnitudeRange(nlo, hi, lo ? &lo->value : nullptr, hi ? &hi->value : nullptr)) {
        parts.push_back(*m);
      }
    }
    if (parts.empty()) Refuse(where, "no number lies within the bounds");
    std::string body;
    for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
    return rules_.Add("number", body);
  }

  // The digit count of the unbounded side of a range: enough for the other bound.
  size_t CapDigits(const Decimal* a, const Decimal* b) const {
    size_t digits = options_.max_integer_digits;
    for (const Decimal* d : {a, b}) {
      if (d != nullptr) digits = std::max(digits, d->whole.size());
    }
    return digits;
  }

  std::string IntegerRange(const std::optional<Int>& low, const std::optional<Int>& high) {
    const size_t cap_digits = std::max({options_.max_integer_digits, low ? low->digits.size() : 0,
                                        high ? high->digits.size() : 0});
    const std::string cap(cap_digits, '9');
    std::vector<std::string> parts;
    // Negative part: magnitudes in [m_lo, m_hi].
    if (!low || low->negative) {
      const std::string m_hi = low ? low->digits : cap;
      const std::string m_lo = (high && high->negative) ? high->digits : "1";
      if (!LessDigits(m_hi, m_lo)) parts.push_back("\"-\" " + UnsignedRange(m_lo, m_hi));
    }
    if (!high || !high->negative) {
      const std::string n_lo = (low && !low->negative) ? low->digits : "0";
      const std::string n_hi = high ? high->digits : cap;
      if (!LessDigits(n_hi, n_lo)) parts.push_back(UnsignedRange(n_lo, n_hi));
    }
    std::string body;
    for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
    return body;
  }

  // The fraction digits after position i of a number whose integer part equals the bounds'
  // (`low`/`high`: the bounds' fraction digits, tight while the digits so far equal them).
  std::optional<std::string> FracDigits(size_t i, const std::string& low, FracMode low_mode,
                                        bool low_tight, const std::string& high, FracMode high_mode,
                                        bool high_tight, bool need_digit) {
    const size_t budget = options_.max_fraction_digits;
    if (low_tight && i >= low.size() && low_mode == FracMode::kInclusive) low_tight = false;
    if (!low_tight && !high_tight) {
      if (i >= budget) return need_digit ? std::nullopt : std::optional<std::string>("\"\"");
      return Repeat("[0-9]", need_digit ? 1 : 0, budget - i);
    }
    if (!low_tight && high_tight && i >= high.size() && high_mode == FracMode::kInclusive) {
      // Equal to the upper bound so far, which has no digits left: only zeros may follow.
      if (i >= budget) return need_digit ? std::nullopt : std::optional<std::string>("\"\"");
      return Repeat("\"0\"", need_digit ? 1 : 0, budget - i);
    }
    bool can_stop = !need_digit;
    if (low_tight) can_stop = false;  // equal so far to a bound with digits left, or exclusive
    if (high_tight && high_mode == FracMode::kExclusive && i >= high.size()) can_stop = false;
    std::vector<std::string> parts;
    if (can_stop) parts.emplace_back("\"\"");
    if (i < budget) {
      const char low_digit = low_tight ? (i < low.size() ? low[i] : '0') : '0';
      const char high_digit = high_tight ? (i < high.size() ? high[i] : '0') : '9';
      for (char d = low_digit; d <= high_digit;) {
        const bool tight_lo = low_tight && d == low_digit;
        const bool tight_hi = high_tight && d == high_digit;
        char end = d;
        if (!tight_lo && !tight_hi) {
          end = high_tight ? static_cast<char>(high_digit - 1) : high_digit;
        }
        const auto rest = FracDigits(i + 1, low, low_mode, tight_lo, high, high_mode, tight_hi,
                                     /*need_digit=*/false);
        if (rest) {
          const std::string digit = DigitClass(d, end);
          parts.push_back(*rest == "\"\"" ? digit : digit + " " + *rest);
        }
        d = static_cast<char>(end + 1);
      }
    }
    if (parts.empty()) return std::nullopt;
    return Alternatives(parts);
  }

  // The fraction part ("" or '.' and digits) of a number whose integer part equals the bounds'.
  std::optional<std::string> Fraction(const std::string& low, FracMode low_mode,
                                      const std::string& high, FracMode high_mode) {
    std::vector<std::string> parts;
    const bool low_tight = low_mode != FracMode::kNone;
    const bool high_tight = high_mode != FracMode::kNone;
    // No fraction: the value is the integer part itself.
    bool whole_ok = true;
    if (low_tight && (!low.empty() || low_mode == FracMode::kExclusive)) whole_ok = false;
    if (high_tight && high.empty() && high_mode == FracMode::kExclusive) whole_ok = false;
    if (auto digits = FracDigits(0, low, low_mode, low_tight, high, high_mode, high_tight, true)) {
      parts.push_back("\".\" " + *digits);
    }
    if (parts.empty() && !whole_ok) return std::nullopt;
    if (parts.empty()) return std::string("\"\"");
    return whole_ok ? Group(parts[0], "?") : parts[0];
  }

  // Magnitudes in [low, high] (high: none for unbounded), each written as digits with an
  // optional fraction and no exponent.
  std::optional<std::string> MagnitudeRange(const Bound& low, const std::optional<Bound>& high,
                                            const Decimal* a, const Decimal* b) {
    if (high) {
      const int c = CompareMagnitude(low.value, high->value);
      if (c > 0 || (c == 0 && (low.exclusive || high->exclusive))) return std::nullopt;
    }
    const FracMode low_mode = low.exclusive ? FracMode::kExclusive : FracMode::kInclusive;
    const std::string free_fraction =
        "(\".\" " + Repeat("[0-9]", 1, options_.max_fraction_digits) + ")?";
    const std::string& low_whole = low.value.whole;
    std::vector<std::string> parts;
    if (high && high->value.whole == low_whole) {
      const FracMode high_mode = high->exclusive ? FracMode::kExclusive : FracMode::kInclusive;
      if (auto f = Fraction(low.value.frac, low_mode, high->value.frac, high_mode)) {
        parts.push_back(GbnfLiteral(low_whole) + " " + *f);
      }
    } else {
      const std::string high_whole = high ? high->value.whole : std::string(CapDigits(a, b), '9');
      if (auto f = Fraction(low.value.frac, low_mode, "", FracMode::kNone)) {
        parts.push_back(GbnfLiteral(low_whole) + " " + *f);
      }
      const std::string next = Increment(low_whole);
      const std::string last = high ? DecrementPositive(high_whole) : high_whole;
      if (!LessDigits(last, next)) parts.push_back(UnsignedRange(next, last) + " " + free_fraction);
      if (high) {
        const FracMode high_mode = high->exclusive ? FracMode::kExclusive : FracMode::kInclusive;
        if (auto f = Fraction("", FracMode::kNone, high->value.frac, high_mode)) {
          parts.push_back(GbnfLiteral(high_whole) + " " + *f);
        }
      }
    }
    if (parts.empty()) return std::nullopt;
    return Alternatives(parts);
  }

  // ---- Objects. ----
  struct Property {
    std::string name;
    std::string member;  // key, colon, value
    bool required = false;
  };

  // Keys of JSON strings that are none of `names` (raw characters only, no escapes, so no other
  // spelling of a declared name can slip through).
  std::string KeyExcept(const std::vector<std::string>& names) {
    if (names.empty()) return AnyString();
    // low_whole trie of the names' code points.
    struct Node {
      std::map<char32_t, size_t> kids;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& name : names) {
      size_t node = 0;
      for (size_t i = 0; i < name.size();) {
        const auto lead = static_cast<unsigned char>(name[i]);
        const size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
        char32_t cp = len == 1   ? lead
                      : len == 2 ? (lead & 0x1F)
                      : len == 3 ? (lead & 0x0F)
                                 : (lead & 0x07);
        for (size_t k = 1; k < len && i + k < name.size(); ++k) {
          cp = (cp << 6) | (static_cast<unsigned char>(name[i + k]) & 0x3F);
        }
        i += len;
        auto it = trie[node].kids.find(cp);
        if (it == trie[node].kids.end()) {
          trie.push_back({});
          it = trie[node].kids.emplace(cp, trie.size() - 1).first;
        }
        node = it->second;
      }
      trie[node].terminal = true;
    }
    rules_.Charge(trie.size() * 16);
    const grammar::CodeSet raw =
        grammar::Complement(grammar::Normalize({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
    const std::string raw_char = rules_.Add("key-char", grammar::GbnfClass(raw));
    const std::string quote = "\"\\\"\"";
    const std::string free_tail = rules_.Add("key-tail", raw_char + "* " + quote);
    std::vector<std::string> names_of(trie.size());
    for (size_t n = 0; n < trie.size(); ++n) names_of[n] = rules_.Reserve("key-except");
    for (size_t n = trie.size(); n-- > 0;) {
      std::vector<std::string> parts;
      if (!trie[n].terminal) parts.push_back(quote);
      grammar::CodeSet others = raw;
      for (const auto& [cp, kid] : trie[n].kids) {
        if (!grammar::Contains(raw, cp)) continue;
        others = grammar::Subtract(others, {{cp, cp}});
        parts.push_back(GbnfLiteral(grammar::Utf8(cp)) + " " + names_of[kid]);
      }
      if (!others.empty()) parts.push_back(grammar::GbnfClass(others) + " " + free_tail);
      std::string body;
      for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
      rules_.Define(names_of[n], body);
    }
    return quote + " " + names_of[0];
  }

  // Inside an object or array a token was written: a $ref back to an enclosing one recurses
  // properly from here on.
  class HeadGuard {
   public:
    explicit HeadGuard(std::set<std::string>& open) : open_(open), saved_(std::move(open)) {
      open_.clear();
    }
    ~HeadGuard() { open_ = std::move(saved_); }
    HeadGuard(const HeadGuard&) = delete;
    HeadGuard& operator=(const HeadGuard&) = delete;

   private:
    std::set<std::string>& open_;
    std::set<std::string> saved_;
  };

  std::string CompileObject(const Json& schema, const std::string& pointer, std::string_view hint) {
    const HeadGuard guard(head_open_);
    std::vector<Property> props;
    std::set<std::string> required;
    if (const auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) Refuse(Child(pointer, "required"), "must be an array of strings");
      for (const Json& name : *it) {
        if (!name.is_string()) Refuse(Child(pointer, "required"), "must be an array of strings");
        required.insert(name.get<std::string>());
      }
    }
    std::vector<std::string> names;
    const std::string props_pointer = Child(pointer, "properties");
    const Json empty = Json::object();
    const Json& properties = schema.contains("properties") ? schema["properties"] : empty;
    if (!properties.is_object()) Refuse(props_pointer, "must be an object");
    for (const auto& [name, sub] : properties.items()) {
      names.push_back(name);
      const bool is_required = required.count(name) != 0;
      if (sub.is_boolean() && !sub.get<bool>()) {
        if (is_required)
          Refuse(Child(props_pointer, name), "a required property whose schema is false");
        continue;
      }
      const std::string value = Compile(sub, Child(props_pointer, name), name);
      props.push_back(
          {name, GbnfLiteral(DumpJson(Json(name))) + " " + Colon() + " " + value, is_required});
    }
    // Required names without a schema: any value, after the declared ones, in the given order.
    if (const auto it = schema.find("required"); it != schema.end()) {
      for (const Json& name : *it) {
        const std::string n = name.get<std::string>();
        if (properties.contains(n)) continue;
        if (std::find(names.begin(), names.end(), n) != names.end()) continue;
        names.push_back(n);
        props.push_back(
            {n, GbnfLiteral(DumpJson(Json(n))) + " " + Colon() + " " + AnyValue(), true});
      }
    }
    // Extra members.
    std::optional<std::string> extra_value;
    const auto ap = schema.find("additionalProperties");
    if (ap == schema.end()) {
      if (!options_.strict) extra_value = AnyValue();
    } else if (ap->is_boolean()) {
      if (ap->get<bool>()) extra_value = AnyValue();
    } else {
      extra_value =
          Compile(*ap, Child(pointer, "additionalProperties"), std::string(hint) + "-extra");
    }
    std::string extra_member;
    if (extra_value) {
      extra_member = rules_.Add(std::string(hint) + "-extra-kv",
                                KeyExcept(names) + " " + Colon() + " " + *extra_value);
    }
    // after(i): what follows once a member was written; first(i): nothing written yet.
    const std::string tail = extra_value ? Group(Seq({Comma(), extra_member}), "*") : "";
    std::vector<std::string> after(props.size() + 1);
    after[props.size()] = tail;
    for (size_t i = props.size(); i-- > 0;) {
      const std::string piece = Comma() + " " + props[i].member;
      std::string body = props[i].required ? piece : Group(piece, "?");
      if (!after[i + 1].empty()) body += " " + after[i + 1];
      after[i] = rules_.Add(std::string(hint) + "-after", body);
    }
    std::string first = extra_value ? Group(Seq({extra_member, tail}), "?") : "";
    for (size_t i = props.size(); i-- > 0;) {
      std::string with = Seq({props[i].member, after[i + 1]});
      if (props[i].required) {
        first = with;
      } else {
        first = rules_.Add(std::string(hint) + "-first",
                           first.empty() ? Group(with, "?") : Seq({with, "|", first}));
      }
    }
    return Seq({Open('{'), first, Close('}')});
  }

  // ---- Arrays. ----
  std::string CompileArray(const Json& schema, const std::string& pointer, std::string_view hint) {
    const HeadGuard guard(head_open_);
    std::vector<std::string> prefix;
    std::optional<std::string> item;  // none: no items beyond the prefix
    const Json* tuple = nullptr;
    std::string tuple_pointer;
    const Json* rest = nullptr;
    std::string rest_pointer;
    if (const auto it = schema.find("prefixItems"); it != schema.end()) {
      tuple = &*it;
      tuple_pointer = Child(pointer, "prefixItems");
      if (schema.contains("additionalItems")) {
        Refuse(Child(pointer, "additionalItems"), "additionalItems with prefixItems (use items)");
      }
      if (const auto items = schema.find("items"); items != schema.end()) {
        rest = &*items;
        rest_pointer = Child(pointer, "items");
      }
    } else if (const auto items = schema.find("items");
               items != schema.end() && items->is_array()) {
      tuple = &*items;  // draft 4-7 tuple form
      tuple_pointer = Child(pointer, "items");
      if (const auto more = schema.find("additionalItems"); more != schema.end()) {
        rest = &*more;
        rest_pointer = Child(pointer, "additionalItems");
      }
    } else if (items != schema.end()) {
      rest = &*items;
      rest_pointer = Child(pointer, "items");
    }
    if (tuple != nullptr) {
      if (!tuple->is_array()) Refuse(tuple_pointer, "must be an array of schemas");
      if (tuple->size() > options_.max_repetition) Refuse(tuple_pointer, "too many items");
      for (size_t i = 0; i < tuple->size(); ++i) {
        const Json& sub = (*tuple)[i];
        if (sub.is_boolean() && !sub.get<bool>()) break;  // no item from here on
        prefix.push_back(
            Compile(sub, Child(tuple_pointer, std::to_string(i)), std::string(hint) + "-item"));
      }
    }
    bool rest_allowed = true;
    if (tuple != nullptr && prefix.size() < tuple->size()) rest_allowed = false;
    if (rest_allowed) {
      if (rest == nullptr) {
        item = AnyValue();
      } else if (rest->is_boolean() && !rest->get<bool>()) {
        item = std::nullopt;
      } else {
        item = Compile(*rest, rest_pointer, std::string(hint) + "-item");
      }
    }
    const size_t min = Count(schema, "minItems", pointer);
    std::optional<size_t> max = MaxCount(schema, "maxItems", pointer);
    if (max && *max < min) Refuse(Child(pointer, "maxItems"), "maxItems is below minItems");
    const size_t p = prefix.size();
    if (!item) max = max ? std::min(*max, p) : p;
    if (min > (max ? *max : min))
      Refuse(Child(pointer, "minItems"), "more items than the schema allows");
    // Items beyond the prefix: how many, and with or without a leading comma.
    const size_t tail_min = min > p ? min - p : 0;
    std::optional<size_t> tail_max;
    if (max) tail_max = *max > p ? *max - p : 0;
    auto tail = [&](bool comma) -> std::string {
      if (!item || (tail_max && *tail_max == 0)) return "";
      const std::string sep_item = Group(Seq({Comma(), *item}), "");
      if (comma) return Repeat(sep_item, tail_min, tail_max);
      const std::string more =
          Repeat(sep_item, tail_min > 0 ? tail_min - 1 : 0,
                 tail_max ? std::optional<size_t>(*tail_max - 1) : std::nullopt);
      const std::string seq = more == "\"\"" ? *item : fmt::format("{} {}", *item, more);
      return tail_min > 0 ? seq : fmt::format("({})?", seq);
    };
    std::string body = tail(p > 0);
    for (size_t i = p; i-- > 0;) {
      if (max && i >= *max) continue;
      std::string piece = Seq({i > 0 ? Comma() : "", prefix[i], body});
      body = i < min ? piece : Group(piece, "?");
    }
    return Seq({Open('['), body, Close(']')});
  }

  const Json& root_;
  const JsonSchemaOptions& options_;
  GbnfRules rules_;
  std::map<std::string, std::string> ref_rules_;  // target pointer -> rule
  std::set<std::string> head_open_;               // $refs being compiled, no token written yet
  size_t depth_ = 0;
};

}  // namespace

std::string JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                             const JsonSchemaOptions& options) {
  SchemaCompiler compiler(schema, options);
  return compiler.Run();
}

std::string JsonSchemaToGbnf(const nlohmann::json& schema, const JsonSchemaOptions& options) {
  return JsonSchemaToGbnf(nlohmann::ordered_json::parse(schema.dump()), options);
}

std::string JsonSchemaTextToGbnf(std::string_view schema_text, const JsonSchemaOptions& options) {
  nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) throw GrammarError("JSON schema: not valid JSON");
  return JsonSchemaToGbnf(schema, options);
}

}  // namespace infer
