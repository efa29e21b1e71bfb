// JSON Schema as clients send it (OpenAI structured outputs, zod-to-json-schema, pydantic's
// model_json_schema, llama.cpp's json_schema field) compiled to GBNF whose language is a subset
// of the instances the schema accepts: every string the grammar accepts parses as JSON and
// validates. What is compiled:
//   type (and lists of types), properties (in the order given: the grammar writes them in that
//   order, as OpenAI strict mode does), required (optional properties may be left out),
//   additionalProperties (false, true or a schema; extra keys come after the declared ones and
//   are never one of them), items, prefixItems (and draft-7 array `items` with additionalItems),
//   minItems/maxItems, enum, const, anyOf/oneOf (as alternatives; oneOf's "exactly one" is not
//   checked: branches that overlap produce outputs valid for anyOf only), allOf (merged, for
//   objects, and a single-schema allOf as pydantic writes around a $ref), $ref to `#...` JSON
//   pointers ($defs, definitions, "#", ~0 ~1 and %XX escapes; recursion becomes recursive rules),
//   string minLength/maxLength/pattern (regex_to_gbnf.h, search semantics: an unanchored side
//   may add any text) and format date, time, date-time, uuid, email; integer and number minimum,
//   maximum, exclusiveMinimum, exclusiveMaximum (numbers as in draft 6+, booleans as in draft 4).
//   {"type": "json_object"} is any JSON object; {} and true any JSON value.
// Annotations are ignored (title, description, examples, default, $schema, $id, $comment,
// deprecated, readOnly, writeOnly, nullable, discriminator). Every other keyword is refused with
// a GrammarError that names it and its JSON pointer, never silently ignored.
//
// Bounds. What JSON leaves unbounded is bounded so that sampling at random ends (see
// JsonSchemaOptions): whitespace, the digits of a number, the nesting of free-form values.
// Strings and arrays stay unbounded unless the schema bounds them. Integer ranges are exact
// (digit by digit); a bounded number is written without an exponent and its range is exact in
// decimal: the grammar compares the decimal text with the bound's shortest decimal form, so
// only a value within one double rounding step of an exclusive bound can parse onto the bound.
// A schema without `type` is compiled as the types its keywords imply (properties: object, ...),
// a subset of what it accepts.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace infer {

struct JsonSchemaOptions {
  enum class Whitespace {
    kCompact,      // none anywhere: {"a":1,"b":[2,3]}
    kSingleSpace,  // an optional single space after ':' and ',' (what json.dumps writes)
    kFlexible,     // up to max_whitespace of [ \t\n] between any two tokens
  };
  Whitespace whitespace = Whitespace::kSingleSpace;
  size_t max_whitespace = 4;
  // OpenAI strict mode: an object schema without additionalProperties allows no other keys
  // (JSON Schema's default, false here, allows any).
  bool strict = false;
  // Digits of a number the schema does not bound: the integer part (and the unbounded side of a
  // range), the fraction and the exponent.
  size_t max_integer_digits = 15;
  size_t max_fraction_digits = 15;
  size_t max_exponent_digits = 2;
  // Nesting of free-form values ({}, true, items without a schema, additionalProperties: true).
  size_t max_any_depth = 6;

  // Limits on hostile schemas; past each, GrammarError.
  size_t max_depth = 64;                       // nesting of subschemas
  size_t max_grammar_bytes = size_t{1} << 20;  // the emitted grammar
  size_t max_enum = 10000;                     // values of one enum
  size_t max_repetition = 10000;               // minItems, maxItems, minLength, maxLength
  // The start rule's name: another than "root" embeds the schema in a larger grammar.
  std::string start_rule = "root";
};

// Throws GrammarError. Keeps the order of `properties` as the object holds it: parse the schema
// into an ordered_json (or pass its text) to keep the client's order.
std::string JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                             const JsonSchemaOptions& options = {});
// nlohmann::json sorts keys: properties come out in alphabetical order.
std::string JsonSchemaToGbnf(const nlohmann::json& schema, const JsonSchemaOptions& options = {});
// The schema as JSON text; GrammarError when it does not parse.
std::string JsonSchemaTextToGbnf(std::string_view schema_text,
                                 const JsonSchemaOptions& options = {});

}  // namespace infer
