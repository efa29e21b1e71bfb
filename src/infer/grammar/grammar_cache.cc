// LRU cache of compiled grammars; see grammar_cache.h.
#include "infer/grammar/grammar_cache.h"

#include <fmt/format.h>

namespace infer::grammar {

std::shared_ptr<const CompiledGrammar> GrammarCache::Get(
    const std::string& key, const std::shared_ptr<const VocabularyIndex>& vocabulary,
    const std::function<std::shared_ptr<const CompiledGrammar>()>& compile) {
  // The vocabulary's identity is its address: every CompiledGrammar holds its VocabularyIndex,
  // so the address cannot be reused while an entry for it exists.
  const std::string full_key =
      fmt::format("{}\n{}", static_cast<const void*>(vocabulary.get()), key);
  std::promise<std::shared_ptr<const CompiledGrammar>> promise;
  Future future;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(full_key);
    if (it != entries_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      future = it->second.value;
    } else {
      ++misses_;
      future = promise.get_future().share();
      lru_.push_front(full_key);
      entries_.emplace(full_key, Entry{future, lru_.begin()});
      while (entries_.size() > max_entries_) {
        entries_.erase(lru_.back());
        lru_.pop_back();
      }
      future = Future();  // marks "compile here"
    }
  }
  if (future.valid()) return future.get();
  try {
    auto compiled = compile();
    promise.set_value(compiled);
    return compiled;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard lock(mutex_);
    auto it = entries_.find(full_key);
    if (it != entries_.end()) {
      lru_.erase(it->second.lru);
      entries_.erase(it);
    }
    throw;
  }
}

std::shared_ptr<const CompiledGrammar> GrammarCache::GetGbnf(
    const std::string& gbnf, const std::shared_ptr<const VocabularyIndex>& vocabulary) {
  return Get("gbnf:" + gbnf, vocabulary,
             [&] { return CompiledGrammar::FromGbnf(gbnf, vocabulary); });
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}
size_t GrammarCache::hits() const {
  std::lock_guard lock(mutex_);
  return hits_;
}
size_t GrammarCache::misses() const {
  std::lock_guard lock(mutex_);
  return misses_;
}

}  // namespace infer::grammar
