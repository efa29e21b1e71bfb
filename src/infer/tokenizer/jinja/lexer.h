// Lexer for the Jinja subset of chat templates: whitespace control exactly as Jinja2's lexer with
// trim_blocks and lstrip_blocks (transformers' settings), one trailing newline dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace infer::jinja {

enum class TokenKind {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEnd
};

struct Token {
  TokenKind kind;
  std::string text;
  int line;
};

// Tokens of `source`: text runs and the tokens inside {{ }} / {% %} (comments dropped), ending
// with kEnd. Throws infer::Error ("chat template line N: ...") on malformed tags.
std::vector<Token> Lex(std::string_view source);

}  // namespace infer::jinja
