// Choices as one alternation of escaped literals; duplicates collapse to one alternative.
#include "infer/grammar/choice.h"

#include <set>

#include <fmt/format.h>

#include "infer/grammar/gbnf_emit.h"
#include "infer/grammar/grammar_error.h"

namespace infer {
namespace {

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    char32_t cp = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    }
    if (lead >= 0xC2 && lead <= 0xDF) {
      extra = 1, cp = lead & 0x1F;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      extra = 2, cp = lead & 0x0F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      extra = 3, cp = lead & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += extra + 1;
  }
  return true;
}

}  // namespace

std::string ChoiceToGbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) throw GrammarError("choice: the list of choices is empty");
  if (choices.size() > kMaxChoices) {
    throw GrammarError(
        fmt::format("choice: {} choices, more than the limit of {}", choices.size(), kMaxChoices));
  }
  size_t bytes = 0;
  std::set<std::string> seen;
  std::string body;
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string& choice = choices[i];
    if (!IsValidUtf8(choice)) throw GrammarError(fmt::format("choice {}: not valid UTF-8", i));
    bytes += choice.size();
    if (bytes > kMaxChoiceBytes) {
      throw GrammarError(
          fmt::format("choice: the choices exceed {} bytes in all", kMaxChoiceBytes));
    }
    if (!seen.insert(choice).second) continue;
    if (!body.empty()) body += " | ";
    body += grammar::GbnfLiteral(choice);
  }
  return "root ::= " + body + "\n";
}

}  // namespace infer
