// LRU cache of compiled grammars; see grammar_cache.h.
#include "infer/grammar/grammar_cache.h"

#include <algorithm>
#include <chrono>

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
      EvictLocked();
    } else {
      ++misses_;
      future = promise.get_future().share();
      lru_.push_front(full_key);
      entries_.emplace(full_key, Entry{future, lru_.begin()});
      EvictLocked();
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

namespace {
// A ready entry's bytes (0 while it compiles or when its compile failed).
size_t ReadyBytes(const std::shared_future<std::shared_ptr<const CompiledGrammar>>& value) {
  if (value.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return 0;
  try {
    const auto& compiled = value.get();
    return compiled != nullptr ? compiled->MemoryBytes() : 0;
  } catch (...) {
    return 0;
  }
}
}  // namespace

size_t GrammarCache::BytesLocked() const {
  size_t total = 0;
  for (const auto& entry : entries_) total += ReadyBytes(entry.second.value);
  return total;
}

void GrammarCache::EvictLocked() {
  // The entry just used is at the front, so it is never the victim while another one is left.
  size_t bytes = max_bytes_ == SIZE_MAX ? 0 : BytesLocked();
  while (entries_.size() > 1 && (entries_.size() > max_entries_ || bytes > max_bytes_)) {
    auto victim = entries_.find(lru_.back());
    bytes -= std::min(bytes, max_bytes_ == SIZE_MAX ? 0 : ReadyBytes(victim->second.value));
    entries_.erase(victim);
    lru_.pop_back();
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
size_t GrammarCache::bytes() const {
  std::lock_guard lock(mutex_);
  return BytesLocked();
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
