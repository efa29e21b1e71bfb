// A bounded, thread-safe LRU cache of compiled grammars keyed by (grammar text, vocabulary):
// clients resend the same schema request after request, and compiling it (the per-position
// precomputation over the whole vocabulary) is the expensive part. Concurrent requests for the
// same key compile once; the others wait for that result. Bounded in entries and in bytes: a
// compiled grammar's context masks grow with use (up to CompiledGrammar::kMaxContextBytes each),
// so many distinct schemas could otherwise hold entries x 48 MiB; past max_bytes (counted at
// each Get), the least recently used entries go (requests still using one keep it alive).
#pragma once

#include <cstddef>
#include <cstdint>
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
  explicit GrammarCache(size_t max_entries = 64, size_t max_bytes = SIZE_MAX)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

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
  // The MemoryBytes of the compiled grammars it holds.
  size_t bytes() const;
  size_t hits() const;
  size_t misses() const;

 private:
  using Future = std::shared_future<std::shared_ptr<const CompiledGrammar>>;
  struct Entry {
    Future value;
    std::list<std::string>::iterator lru;
  };
  // Evicts from the least recently used end while over either bound, keeping the most recent.
  void EvictLocked();
  size_t BytesLocked() const;
  mutable std::mutex mutex_;
  size_t max_entries_;
  size_t max_bytes_;
  size_t hits_ = 0, misses_ = 0;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace infer::grammar
