// A bounded, thread-safe LRU cache of compiled grammars keyed by (grammar text, vocabulary):
// clients resend the same schema request after request, and compiling it (the per-position
// precomputation over the whole vocabulary) is the expensive part. Concurrent requests for the
// same key compile once; the others wait for that result.
#pragma once

#include <cstddef>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "infer/grammar/token_mask.h"

namespace infer::grammar {

class GrammarCache {
 public:
  explicit GrammarCache(size_t max_entries = 64) : max_entries_(max_entries) {}

  // The compiled grammar of `key` (e.g. "gbnf:" + text, or "schema:" + canonical JSON) for
  // `vocabulary`, compiling it with `compile` on a miss. Errors from `compile` (GrammarError)
  // propagate and are not cached.
  std::shared_ptr<const CompiledGrammar> Get(
      const std::string& key, const std::shared_ptr<const VocabularyIndex>& vocabulary,
      const std::function<std::shared_ptr<const CompiledGrammar>()>& compile);
  // GBNF text, compiled with CompiledGrammar::FromGbnf.
  std::shared_ptr<const CompiledGrammar> GetGbnf(
      const std::string& gbnf, const std::shared_ptr<const VocabularyIndex>& vocabulary);

  size_t size() const;
  size_t hits() const;
  size_t misses() const;

 private:
  using Future = std::shared_future<std::shared_ptr<const CompiledGrammar>>;
  struct Entry {
    Future value;
    std::list<std::string>::iterator lru;
  };
  mutable std::mutex mutex_;
  size_t max_entries_;
  size_t hits_ = 0, misses_ = 0;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace infer::grammar
