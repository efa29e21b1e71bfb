// Shared helpers of the grammar tests: a JSON grammar written for the tests, a matcher wrapper,
// and the real vocabularies (skipped when scripts/fetch_tokenizers.sh has not run).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "infer/grammar/gbnf.h"
#include "infer/grammar/pushdown_matcher.h"
#include "infer/grammar/token_mask.h"
#include "infer/tokenizer/tokenizer.h"
#include "infer/tokenizer/vocabulary_bytes.h"
#include "testing/paths.h"

namespace infer::grammar::testing {

// RFC 8259 JSON, as a test author writes it in GBNF.
inline constexpr std::string_view kJsonGbnf = R"(# JSON (RFC 8259)
root   ::= ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws "}"
         | "{" ws member ( ws "," ws member )* ws "}"
member ::= string ws ":" ws value
array  ::= "[" ws "]" | "[" ws value (ws "," ws value)* ws "]"
string ::= "\"" char* "\""
char   ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex )
hex    ::= [0-9a-fA-F]
number ::= "-"? int frac? exp?
int    ::= "0" | [1-9] [0-9]*
frac   ::= "." [0-9]+
exp    ::= [eE] [+-]? [0-9]+
ws     ::= [ \t\n\r]*
)";

// Whole-string match: every byte accepted and the grammar complete at the end.
inline bool Matches(const std::shared_ptr<const FlatGrammar>& grammar, std::string_view text) {
  ByteMatcher matcher(grammar);
  return matcher.AcceptString(text) && matcher.IsComplete();
}

inline std::shared_ptr<const FlatGrammar> Flat(std::string_view gbnf) {
  return std::make_shared<const FlatGrammar>(ParseGbnf(gbnf));
}

inline std::filesystem::path TokenizerPath(const std::string& model) {
  return std::filesystem::path(::infer::testing::SourceDir()) / ".cache" / "tokenizers" / model /
         "tokenizer.json";
}

// The real vocabulary of `model` (llama3, qwen3, gemma3) with `end_ids`, or null when the file
// is missing (the caller GTEST_SKIPs).
inline std::shared_ptr<const VocabularyIndex> RealVocabulary(const std::string& model) {
  const auto path = TokenizerPath(model);
  if (!std::filesystem::is_regular_file(path)) return nullptr;
  static std::map<std::string, std::shared_ptr<const VocabularyIndex>> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  auto tokenizer = Tokenizer::FromFile(path);
  Vocabulary vocab;
  vocab.token_bytes = TokenBytes(*tokenizer);
  vocab.special_ids = SpecialTokenIds(*tokenizer);
  for (const char* eos :
       {"<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>"}) {
    if (auto id = tokenizer->TokenToId(eos)) vocab.end_ids.push_back(*id);
  }
  auto index = std::make_shared<const VocabularyIndex>(std::move(vocab));
  cache.emplace(model, index);
  return index;
}

}  // namespace infer::grammar::testing
