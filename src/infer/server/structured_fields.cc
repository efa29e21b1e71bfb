#include "infer/server/structured_fields.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace infer::server {
namespace {

// The body's keys in the order given: a schema's `properties` order is the order the output's
// keys are written in (as OpenAI's strict mode does).
using json = nlohmann::ordered_json;
using Kind = StructuredOutput::Kind;

// A schema given as an object, or as JSON text (vLLM's guided_json takes both).
StructuredOutput Schema(const Fields& fields, const json& value, const char* name) {
  json schema = value;
  if (value.is_string()) {
    schema = json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) fields.Reject(fmt::format("'{}' is not valid JSON", name), name);
  }
  if (!schema.is_object() && !schema.is_boolean()) {
    fields.Reject(fmt::format("'{}' must be a JSON schema (an object)", name), name);
  }
  return {Kind::kJsonSchema, schema.dump(), {}};
}

StructuredOutput Text(const Fields& fields, const json& value, Kind kind, const char* name) {
  if (!value.is_string() || value.get<std::string>().empty()) {
    fields.Reject(fmt::format("'{}' must be a non-empty string", name), name);
  }
  return {kind, value.get<std::string>(), {}};
}

StructuredOutput Choice(const Fields& fields, const json& value, const char* name) {
  if (!value.is_array() || value.empty()) {
    fields.Reject(fmt::format("'{}' must be a non-empty list of strings", name), name);
  }
  StructuredOutput spec{Kind::kChoice, "", {}};
  for (const json& item : value) {
    if (!item.is_string()) fields.Reject(fmt::format("'{}' must hold strings", name), name);
    spec.choices.push_back(item.get<std::string>());
  }
  return spec;
}

// OpenAI: {"type": "text" | "json_object" | "json_schema", "json_schema": {name, schema,
// strict}}; llama.cpp also reads {"type": "json_object", "schema": {...}}.
std::optional<StructuredOutput> ResponseFormat(const Fields& fields, const json& format) {
  const char* name = "response_format";
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    fields.Reject("'response_format' must be an object with a 'type'", name);
  }
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    if (const auto schema = format.find("schema"); schema != format.end() && !schema->is_null()) {
      return Schema(fields, *schema, "response_format.schema");
    }
    return StructuredOutput{Kind::kJsonObject, "", {}};
  }
  if (type == "json_schema") {
    const auto spec = format.find("json_schema");
    if (spec == format.end() || !spec->is_object()) {
      fields.Reject("'response_format.json_schema' must be an object with a 'schema'", name);
    }
    const auto schema = spec->find("schema");
    if (schema == spec->end() || schema->is_null()) {
      fields.Reject("'response_format.json_schema.schema' is required", name);
    }
    return Schema(fields, *schema, "response_format.json_schema.schema");
  }
  fields.Reject(fmt::format("'response_format.type' must be text, json_object or json_schema, "
                            "got '{}'",
                            type),
                name);
}

// vLLM: {"json": schema} | {"regex": r} | {"choice": [...]} | {"grammar": g} | {"json_object":
// true}, one of them.
std::optional<StructuredOutput> StructuredOutputs(const Fields& fields, const json& value) {
  const char* name = "structured_outputs";
  if (!value.is_object()) fields.Reject("'structured_outputs' must be an object", name);
  std::optional<StructuredOutput> spec;
  const auto set = [&](StructuredOutput next) {
    if (spec) {
      fields.Reject("'structured_outputs' takes one of json, regex, choice, grammar, json_object",
                    name);
    }
    spec = std::move(next);
  };
  for (const auto& [key, item] : value.items()) {
    if (item.is_null()) continue;
    if (key == "json") {
      set(Schema(fields, item, "structured_outputs.json"));
    } else if (key == "regex") {
      set(Text(fields, item, Kind::kRegex, "structured_outputs.regex"));
    } else if (key == "choice") {
      set(Choice(fields, item, "structured_outputs.choice"));
    } else if (key == "grammar") {
      set(Text(fields, item, Kind::kGrammar, "structured_outputs.grammar"));
    } else if (key == "json_object") {
      if (!item.is_boolean())
        fields.Reject("'structured_outputs.json_object' must be a boolean", name);
      if (item.get<bool>()) set({Kind::kJsonObject, "", {}});
    } else if (key != "disable_any_whitespace" && key != "disable_additional_properties" &&
               key != "whitespace_pattern" && key != "backend") {
      fields.Reject(fmt::format("'structured_outputs.{}' is not supported", key), name);
    }
  }
  return spec;
}

}  // namespace

std::optional<StructuredOutput> ParseStructuredOutput(Fields& fields) {
  static constexpr const char* kNames[] = {
      "response_format", "structured_outputs", "guided_json",    "json_schema",
      "guided_regex",    "guided_choice",      "guided_grammar", "grammar"};
  std::vector<const char*> given;
  for (const char* name : kNames) {
    if (fields.Get(name)) given.push_back(name);
  }
  if (given.empty()) return std::nullopt;
  std::optional<StructuredOutput> spec;
  std::string from;
  for (const char* name : given) {
    const json& value = *fields.Get(name);
    const std::string_view field = name;
    std::optional<StructuredOutput> next;
    if (field == "response_format") {
      next = ResponseFormat(fields, value);
    } else if (field == "structured_outputs") {
      next = StructuredOutputs(fields, value);
    } else if (field == "guided_json" || field == "json_schema") {  // vLLM, llama.cpp
      next = Schema(fields, value, name);
    } else if (field == "guided_regex") {
      next = Text(fields, value, Kind::kRegex, name);
    } else if (field == "guided_choice") {
      next = Choice(fields, value, name);
    } else {  // guided_grammar (vLLM), grammar (llama.cpp)
      next = Text(fields, value, Kind::kGrammar, name);
    }
    if (!next) continue;
    if (spec) {
      fields.Reject(fmt::format("'{}' and '{}' both constrain the output: give one", from, name),
                    name);
    }
    spec = std::move(next);
    from = name;
  }
  return spec;
}

}  // namespace infer::server
