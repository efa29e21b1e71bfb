#include "infer/grammar/structured_output.h"

#include <nlohmann/json.hpp>

#include "infer/grammar/choice.h"
#include "infer/grammar/json_schema.h"
#include "infer/grammar/regex_to_gbnf.h"

namespace infer {

std::string_view StructuredOutputKindName(StructuredOutput::Kind kind) {
  switch (kind) {
    case StructuredOutput::Kind::kJsonSchema:
      return "json_schema";
    case StructuredOutput::Kind::kJsonObject:
      return "json_object";
    case StructuredOutput::Kind::kRegex:
      return "regex";
    case StructuredOutput::Kind::kChoice:
      return "choice";
    case StructuredOutput::Kind::kGrammar:
      return "grammar";
  }
  return "json_object";
}

std::string StructuredOutputToGbnf(const StructuredOutput& spec) {
  switch (spec.kind) {
    case StructuredOutput::Kind::kJsonSchema:
      return JsonSchemaTextToGbnf(spec.source);
    case StructuredOutput::Kind::kJsonObject:
      return JsonSchemaToGbnf(nlohmann::ordered_json{{"type", "object"}});
    case StructuredOutput::Kind::kRegex:
      return RegexToGbnf(spec.source);
    case StructuredOutput::Kind::kChoice:
      return ChoiceToGbnf(spec.choices);
    case StructuredOutput::Kind::kGrammar:
      return spec.source;
  }
  return spec.source;
}

std::string JsonSchemaRuleGbnf(std::string_view schema_text, std::string_view rule) {
  JsonSchemaOptions options;
  options.start_rule = std::string(rule);
  return JsonSchemaTextToGbnf(schema_text, options);
}

}  // namespace infer
