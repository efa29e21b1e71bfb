#include "infer/grammar/structured_output.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "infer/grammar/choice.h"
#include "infer/grammar/json_schema.h"
#include "infer/grammar/regex.h"

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
  const std::string gbnf = JsonSchemaTextToGbnf(schema_text);
  // Renames the rule `root` wherever it stands as a name: outside string literals, character
  // classes and comments, and not as part of a longer name.
  const auto name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  };
  std::string out;
  out.reserve(gbnf.size() + 64);
  for (size_t i = 0; i < gbnf.size();) {
    const char c = gbnf[i];
    if (c == '"' || c == '[') {  // a literal or a class: copied with its escapes
      const char close = c == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < gbnf.size() && gbnf[j] != close) j += gbnf[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, gbnf.size());
      out.append(gbnf, i, j - i);
      i = j;
    } else if (c == '#') {
      const size_t j = std::min(gbnf.find('\n', i), gbnf.size());
      out.append(gbnf, i, j - i);
      i = j;
    } else if (name_char(c)) {
      size_t j = i;
      while (j < gbnf.size() && name_char(gbnf[j])) ++j;
      const std::string_view name(gbnf.data() + i, j - i);
      if (name == "root") {
        out += rule;
      } else {
        out += name;
      }
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace infer
