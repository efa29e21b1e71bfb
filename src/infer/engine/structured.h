// Structured output on the engine: compiles a request's StructuredOutput (JSON schema, JSON
// object, regex, choice, GBNF) with the grammar engine over the tokenizer's vocabulary, cached
// by spec, and gives each request its matcher behind the runner's TokenConstraint.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "infer/engine/constraint.h"
#include "infer/grammar/grammar_cache.h"
#include "infer/grammar/structured_output.h"
#include "infer/grammar/token_mask.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer {

// Tokenizes text (jump-forward's forced text) into ids, without special tokens.
using TextEncoder = std::function<std::vector<int32_t>(std::string_view text)>;
// The grammar engine's matcher as a TokenConstraint: its mask, its tokens, and as
// ForcedTokens the jump-forward string up to its last whole UTF-8 character, encoded.
std::unique_ptr<TokenConstraint> MakeGrammarConstraint(
    std::shared_ptr<const grammar::CompiledGrammar> compiled, TextEncoder encode);

class StructuredOutputCompiler {
 public:
  // `tokenizer` must outlive the compiler; `end_ids` end generation (allowed only where the
  // grammar is complete). The vocabulary is indexed on first use, or by IndexInBackground.
  StructuredOutputCompiler(const Tokenizer& tokenizer, std::vector<int32_t> end_ids);

  // Starts indexing the vocabulary on a thread of its own (a server calls it at start, so that
  // its first structured request does not wait for it).
  void IndexInBackground();

  // A new request's constraint (compiled once per spec; later ones hit the cache). Throws
  // GrammarError for a bad schema, regex, choice list or grammar.
  std::unique_ptr<TokenConstraint> Make(const StructuredOutput& spec);

  const grammar::GrammarCache& cache() const { return cache_; }

 private:
  using IndexFuture = std::shared_future<std::shared_ptr<const grammar::VocabularyIndex>>;
  std::shared_ptr<const grammar::VocabularyIndex> Vocabulary();
  IndexFuture StartIndex(std::launch policy);
  std::shared_ptr<const grammar::VocabularyIndex> BuildIndex() const;

  const Tokenizer& tokenizer_;
  const std::vector<int32_t> end_ids_;
  std::mutex index_mutex_;
  IndexFuture index_;  // guarded by index_mutex_ (valid once started)
  // At most 16 compiled grammars and 256 MiB of their masks (each grammar's context masks grow
  // with use, up to 48 MiB: 16 busy schemas would otherwise hold 768 MiB).
  static constexpr size_t kCacheMaxBytes = size_t{256} << 20;
  grammar::GrammarCache cache_{16, kCacheMaxBytes};
};

}  // namespace infer
