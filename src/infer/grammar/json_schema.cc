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

#include "infer/grammar/grammar_error.h"
#include "infer/grammar/json_schema_compiler.h"

namespace infer {
namespace schema {
namespace {

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

}  // namespace

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

std::string SchemaCompiler::Ws() {
  if (!Flexible()) return "";
  if (options_.max_whitespace == 0) return "";
  return rules_.Add("ws", Repeat("[ \\t\\n]", 0, options_.max_whitespace));
}

std::string SchemaCompiler::After() {
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

std::string SchemaCompiler::Open(char c) {
  const std::string ws = Flexible() ? Ws() : "";
  return ws.empty() ? GbnfLiteral(std::string(1, c))
                    : fmt::format("{} {}", GbnfLiteral(std::string(1, c)), ws);
}

std::string SchemaCompiler::StringChar() {
  const std::string hex = rules_.Add("hex", "[0-9a-fA-F]");
  // \u escapes of surrogates are left out: a pair would be one character to a validator but
  // two to the grammar's length count.
  const std::string u =
      fmt::format("\"u\" ([0-9a-cA-Ce-fE-F] {0} {0} {0} | [dD] [0-7] {0} {0})", hex);
  return rules_.Add("char",
                    fmt::format("[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | {})", u));
}

std::string SchemaCompiler::AnyString() {
  return rules_.Add("string", "\"\\\"\" " + StringChar() + "* \"\\\"\"");
}

std::string SchemaCompiler::AnyNumber() {
  const std::string integer =
      fmt::format("\"-\"? (\"0\" | [1-9] {})", Repeat("[0-9]", 0, options_.max_integer_digits - 1));
  return rules_.Add(
      "number", fmt::format("{} (\".\" {})? ([eE] [-+]? {})?", integer,
                            Repeat("[0-9]", 1, options_.max_fraction_digits),
                            Repeat("[0-9]", 1, std::max<size_t>(options_.max_exponent_digits, 1))));
}

std::string SchemaCompiler::Scalar() {
  return rules_.Add("scalar",
                    AnyString() + " | " + AnyNumber() + " | \"true\" | \"false\" | \"null\"");
}

std::string SchemaCompiler::AnyObjectOf(const std::string& value) {
  const std::string member = AnyString() + " " + Colon() + " " + value;
  return Open('{') + " (" + member + " (" + Comma() + " " + member + ")*)? " + Close('}');
}

std::string SchemaCompiler::AnyValue(size_t depth) {
  if (depth == 0) return Scalar();
  const std::string inner = AnyValue(depth - 1);
  const std::string array =
      Open('[') + " (" + inner + " (" + Comma() + " " + inner + ")*)? " + Close(']');
  return rules_.Add(fmt::format("value-{}", depth),
                    Scalar() + " | " + AnyObjectOf(inner) + " | " + array);
}

std::string SchemaCompiler::AnyObject() {
  return rules_.Add(
      "object", AnyObjectOf(AnyValue(options_.max_any_depth > 0 ? options_.max_any_depth - 1 : 0)));
}

void SchemaCompiler::CheckKeywords(const Json& schema, const std::string& pointer) {
  for (const auto& [key, value] : schema.items()) {
    if (kAnnotations.count(key) != 0 || kSupported.count(key) != 0) continue;
    Refuse(Child(pointer, key), fmt::format("the keyword '{}' is not supported", key));
  }
}

bool SchemaCompiler::HasConstraints(const Json& schema) {
  for (const auto& [key, value] : schema.items()) {
    if (kAnnotations.count(key) == 0) return true;
  }
  return false;
}

size_t SchemaCompiler::Count(const Json& schema, const char* key, const std::string& pointer) {
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

std::optional<size_t> SchemaCompiler::MaxCount(const Json& schema, const char* key,
                                               const std::string& pointer) {
  if (!schema.contains(key)) return std::nullopt;
  return Count(schema, key, pointer);
}

std::pair<const Json*, std::string> SchemaCompiler::Resolve(const std::string& ref,
                                                            const std::string& pointer) {
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

std::string SchemaCompiler::RefRule(const std::string& ref, const std::string& pointer) {
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

Json SchemaCompiler::Flatten(const Json& schema, const std::string& pointer, size_t depth) {
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

Json SchemaCompiler::Merge(const Json& a, const Json& b, const std::string& pointer) {
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

std::string SchemaCompiler::Compile(const Json& schema, const std::string& pointer,
                                    std::string_view hint) {
  if (++depth_ > options_.max_depth)
    Refuse(pointer, fmt::format("nested more than {} levels deep", options_.max_depth));
  std::string out = CompileInner(schema, pointer, hint);
  --depth_;
  return out;
}

std::string SchemaCompiler::CompileInner(const Json& schema, const std::string& pointer,
                                         std::string_view hint) {
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

std::string SchemaCompiler::CompileAnyOf(const Json& schema, const std::string& pointer,
                                         std::string_view hint) {
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

bool SchemaCompiler::HasType(const Json& value, const std::string& type) {
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

std::string SchemaCompiler::CompileEnum(const Json& schema, const std::string& pointer) {
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

std::string SchemaCompiler::CompileTypes(const Json& schema, const std::string& pointer,
                                         std::string_view hint) {
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

}  // namespace schema

std::string JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                             const JsonSchemaOptions& options) {
  schema::SchemaCompiler compiler(schema, options);
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
