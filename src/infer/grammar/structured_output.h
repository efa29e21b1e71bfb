// What a request asks its output to match, as it arrives (OpenAI response_format, vLLM
// structured_outputs and guided_*, llama.cpp json_schema / grammar, the CLI's --json-schema /
// --regex / --grammar / --choice), before it is compiled into a grammar.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace infer {

struct StructuredOutput {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonObject;
  // The JSON schema (as JSON text), the regex or the GBNF grammar; empty for json_object and
  // choice.
  std::string source;
  std::vector<std::string> choices;  // kChoice

  bool operator==(const StructuredOutput&) const = default;
};

// "json_schema", "json_object", "regex", "choice", "grammar".
std::string_view StructuredOutputKindName(StructuredOutput::Kind kind);

// The spec as a GBNF grammar (root rule `root`). Throws GrammarError saying where a schema,
// regex or choice list is at fault.
std::string StructuredOutputToGbnf(const StructuredOutput& spec);

// The GBNF of a JSON schema (as JSON text) whose start rule is `rule` instead of `root`, to be
// embedded in a larger grammar (a tool call between tags). Throws GrammarError.
std::string JsonSchemaRuleGbnf(std::string_view schema_text, std::string_view rule);

}  // namespace infer
