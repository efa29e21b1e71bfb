#include "infer/engine/structured.h"

#include <string>

#include <spdlog/spdlog.h>

#include "infer/tokenizer/vocabulary_bytes.h"

namespace infer {

namespace {

// The grammar engine's matcher as the runner sees it.
class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> compiled)
      : matcher_(std::move(compiled)) {}
  void FillMask(std::span<uint32_t> mask) override { matcher_.FillNextTokenBitmask(mask); }
  bool Accept(int32_t token) override { return matcher_.AcceptToken(token); }
  bool Finished() const override { return matcher_.IsComplete() && !matcher_.CanContinue(); }

 private:
  grammar::GrammarMatcher matcher_;
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

StructuredOutputCompiler::StructuredOutputCompiler(const Tokenizer& tokenizer,
                                                   std::vector<int32_t> end_ids)
    : tokenizer_(tokenizer), end_ids_(std::move(end_ids)) {}

std::shared_ptr<const grammar::VocabularyIndex> StructuredOutputCompiler::Vocabulary() {
  std::call_once(vocabulary_once_, [this] {
    grammar::Vocabulary vocabulary;
    vocabulary.token_bytes = TokenBytes(tokenizer_);
    vocabulary.special_ids = SpecialTokenIds(tokenizer_);
    vocabulary.end_ids = end_ids_;
    vocabulary_ = std::make_shared<const grammar::VocabularyIndex>(std::move(vocabulary));
  });
  return vocabulary_;
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
  return std::make_unique<GrammarConstraint>(compiled);
}

}  // namespace infer
