#include "infer/engine/structured.h"

#include <algorithm>
#include <chrono>
#include <string>

#include <spdlog/spdlog.h>

#include "infer/tokenizer/utf8.h"
#include "infer/tokenizer/vocabulary_bytes.h"

namespace infer {

namespace {

// The grammar engine's matcher as the runner sees it.
class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> compiled, TextEncoder encode)
      : matcher_(std::move(compiled)), encode_(std::move(encode)) {}
  void FillMask(std::span<uint32_t> mask) override { matcher_.FillNextTokenBitmask(mask); }
  bool Accept(int32_t token) override { return matcher_.AcceptToken(token); }
  bool Finished() const override { return matcher_.IsComplete() && !matcher_.CanContinue(); }
  // The forced bytes up to the last whole UTF-8 character, tokenized alone (no special tokens).
  std::vector<int32_t> ForcedTokens() override {
    std::string text = matcher_.JumpForwardString();
    text.resize(std::min(text.size(), FindInvalidUtf8(text)));
    if (text.empty()) return {};
    return encode_(text);
  }

 private:
  grammar::GrammarMatcher matcher_;
  TextEncoder encode_;
};

// The cache key: the kind and its source (choices joined by a byte no JSON text holds).
std::string CacheKey(const StructuredOutput& spec) {
  std::string key(StructuredOutputKindName(spec.kind));
  key += '\x01';
  key += spec.source;
  for (const std::string& choice : spec.choices) key += '\x01' + choice;
  return key;
}

}  // namespace

std::unique_ptr<TokenConstraint> MakeGrammarConstraint(
    std::shared_ptr<const grammar::CompiledGrammar> compiled, TextEncoder encode) {
  return std::make_unique<GrammarConstraint>(std::move(compiled), std::move(encode));
}

StructuredOutputCompiler::StructuredOutputCompiler(const Tokenizer& tokenizer,
                                                   std::vector<int32_t> end_ids)
    : tokenizer_(tokenizer), end_ids_(std::move(end_ids)) {}

void StructuredOutputCompiler::IndexInBackground() { StartIndex(std::launch::async); }

StructuredOutputCompiler::IndexFuture StructuredOutputCompiler::StartIndex(std::launch policy) {
  std::lock_guard lock(index_mutex_);
  if (!index_.valid()) index_ = std::async(policy, [this] { return BuildIndex(); }).share();
  return index_;
}

std::shared_ptr<const grammar::VocabularyIndex> StructuredOutputCompiler::Vocabulary() {
  // Deferred when nothing started it: the first caller builds it, the others wait.
  return StartIndex(std::launch::deferred).get();
}

std::shared_ptr<const grammar::VocabularyIndex> StructuredOutputCompiler::BuildIndex() const {
  const auto start = std::chrono::steady_clock::now();
  grammar::Vocabulary vocabulary;
  vocabulary.token_bytes = TokenBytes(tokenizer_);
  vocabulary.special_ids = SpecialTokenIds(tokenizer_);
  vocabulary.end_ids = end_ids_;
  auto index = std::make_shared<const grammar::VocabularyIndex>(std::move(vocabulary));
  spdlog::info(
      "structured output: indexed the vocabulary in {:.0f} ms",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return index;
}

std::unique_ptr<TokenConstraint> StructuredOutputCompiler::Make(const StructuredOutput& spec) {
  const auto vocabulary = Vocabulary();
  const auto compiled = cache_.Get(CacheKey(spec), vocabulary, [&] {
    const std::string gbnf = StructuredOutputToGbnf(spec);
    auto grammar = grammar::CompiledGrammar::FromGbnf(gbnf, vocabulary);
    spdlog::info("structured output: compiled a {} grammar ({} bytes of GBNF) in {:.1f} ms",
                 StructuredOutputKindName(spec.kind), gbnf.size(), grammar->compile_ms());
    return grammar;
  });
  return MakeGrammarConstraint(compiled, [this](std::string_view text) {
    return tokenizer_.Encode(text, /*add_special_tokens=*/false);
  });
}

}  // namespace infer
