#include "infer/cache/block_manager.h"

#include <algorithm>

#include "infer/core/error.h"
#include "infer/core/fault_injection.h"
#include "infer/core/splitmix.h"

namespace infer {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
                           int64_t num_state_slots, int64_t num_snapshot_slots)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching) {
  INFER_CHECK(num_state_slots >= 0 && num_snapshot_slots >= 0,
              "block manager: num_state_slots = {}, num_snapshot_slots = {}", num_state_slots,
              num_snapshot_slots);
  num_state_slots_ = num_state_slots;
  // Handed out from the back: slot 0 first.
  for (int64_t s = num_state_slots - 1; s >= 0; --s) free_state_slots_.push_back(s);
  if (snapshots()) {
    num_snapshot_slots_ = num_snapshot_slots;
    for (int64_t s = num_snapshot_slots - 1; s >= 0; --s) {
      free_snapshot_slots_.push_back(num_state_slots + s);
    }
  }
  INFER_CHECK(num_blocks >= 1 && num_blocks <= (int64_t{1} << 30),
              "block manager: num_blocks must be in [1, 2^30], got {}", num_blocks);
  INFER_CHECK(block_size >= 1, "block manager: block_size must be at least 1, got {}", block_size);
  meta_.resize(static_cast<size_t>(num_blocks));
  free_.reserve(static_cast<size_t>(num_blocks));
  // Handed out from the back: block 0 first.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

uint64_t BlockManager::HashBlock(uint64_t parent, std::span<const int32_t> tokens) {
  // splitmix64 finalizer over the parent hash and each token: a well-mixed 64-bit chain. Hits
  // are still checked against the stored tokens, so a collision costs a miss, never wrong KV.
  uint64_t h = SplitMix64(parent ^ 0x5bd1e9955bd1e995ULL);
  for (const int32_t token : tokens) h = SplitMix64(h ^ static_cast<uint32_t>(token));
  return h;
}

uint64_t BlockManager::ChainStart(uint64_t salt) {
  // The base model's chain starts at 0, as before salts; an adapter's at its id's hash.
  return salt == 0 ? 0 : HashBlock(salt, {});
}

int32_t BlockManager::Lookup(uint64_t hash, std::span<const int32_t> tokens, uint64_t salt) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const Meta& meta = meta_[static_cast<size_t>(it->second)];
  if (meta.salt != salt) return -1;
  if (!std::equal(meta.tokens.begin(), meta.tokens.end(), tokens.begin(), tokens.end())) return -1;
  return it->second;
}

BlockManager::CachedPrefix BlockManager::RegisteredChain(std::span<const int32_t> tokens,
                                                         uint64_t salt) const {
  CachedPrefix chain;
  if (!prefix_caching_ || tokens.empty()) return chain;
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  uint64_t parent = ChainStart(salt);
  for (int64_t i = 0; i < max_blocks; ++i) {
    const auto block_tokens =
        tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_));
    const uint64_t hash = HashBlock(parent, block_tokens);
    const int32_t block = Lookup(hash, block_tokens, salt);
    if (block < 0) break;
    chain.blocks.push_back(block);
    chain.hashes.push_back(hash);
    parent = hash;
  }
  return chain;
}

const BlockManager::Snapshot* BlockManager::FindSnapshot(uint64_t hash) const {
  const auto it = snapshots_.find(hash);
  return it == snapshots_.end() ? nullptr : &it->second;
}

BlockManager::CachedPrefix BlockManager::FindCachedPrefix(std::span<const int32_t> tokens,
                                                          uint64_t salt) const {
  // Usable up to the first block still being computed (waiting for it: next_pending); with
  // snapshots only up to the last of those with a snapshot after it, and a snapshot being taken
  // in the chain is waited for too.
  const CachedPrefix chain = RegisteredChain(tokens, salt);
  CachedPrefix prefix;
  size_t usable = 0;
  for (size_t i = 0; i < chain.blocks.size(); ++i) {
    const Snapshot* snapshot = snapshots() ? FindSnapshot(chain.hashes[i]) : nullptr;
    if (!meta_[static_cast<size_t>(chain.blocks[i])].computed ||
        (snapshot != nullptr && snapshot->slot >= 0 && !snapshot->computed)) {
      prefix.next_pending = true;
      break;
    }
    if (!snapshots() || (snapshot != nullptr && snapshot->computed)) usable = i + 1;
  }
  prefix.blocks.assign(chain.blocks.begin(), chain.blocks.begin() + static_cast<long>(usable));
  prefix.hashes.assign(chain.hashes.begin(), chain.hashes.begin() + static_cast<long>(usable));
  return prefix;
}

PrefixMatch BlockManager::Match(std::span<const int32_t> tokens, uint64_t salt) const {
  const CachedPrefix prefix = FindCachedPrefix(tokens, salt);
  return {static_cast<int64_t>(prefix.blocks.size()), prefix.next_pending};
}

int64_t BlockManager::BlocksNeeded(const BlockTable& table, std::span<const int32_t> tokens,
                                   int64_t num_tokens) const {
  const int64_t total = BlocksFor(num_tokens);
  if (!table.blocks.empty() || !prefix_caching_) {
    return std::max<int64_t>(0, total - static_cast<int64_t>(table.blocks.size()));
  }
  // A first allocation shares the cached prefix; reviving an unreferenced cached block takes it
  // out of the evictable pool, so it counts like a fresh one.
  const CachedPrefix prefix = FindCachedPrefix(
      tokens.first(std::min(tokens.size(), static_cast<size_t>(num_tokens))), table.salt);
  int64_t needed = std::max<int64_t>(0, total - static_cast<int64_t>(prefix.blocks.size()));
  for (const int32_t block : prefix.blocks) {
    if (meta_[static_cast<size_t>(block)].ref_count == 0) ++needed;
  }
  return needed;
}

int32_t BlockManager::TakeFresh() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    INFER_CHECK(!evictable_.empty(), "block manager: no free block");
    block = evictable_.front();
    evictable_.pop_front();
    meta_[static_cast<size_t>(block)].in_lru = false;
    Unregister(block);
  }
  Meta& meta = meta_[static_cast<size_t>(block)];
  meta.ref_count = 1;
  meta.computed = false;
  return block;
}

void BlockManager::Register(int32_t block, uint64_t hash, std::span<const int32_t> tokens,
                            uint64_t salt) {
  if (by_hash_.contains(hash)) return;  // another sequence's copy is the cache entry
  Meta& meta = meta_[static_cast<size_t>(block)];
  meta.registered = true;
  meta.hash = hash;
  meta.salt = salt;
  meta.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, block);
}

void BlockManager::Unregister(int32_t block) {
  Meta& meta = meta_[static_cast<size_t>(block)];
  if (!meta.registered) return;
  by_hash_.erase(meta.hash);
  DropSnapshot(meta.hash);  // no sequence can reach it any more
  meta.registered = false;
  meta.tokens.clear();
}

bool BlockManager::Allocate(BlockTable& table, std::span<const int32_t> tokens,
                            int64_t num_tokens) {
  INFER_CHECK(num_tokens >= 0, "block manager: num_tokens = {}", num_tokens);
  const int64_t needed = BlocksNeeded(table, tokens, num_tokens);
  if (needed > 0) fault::MaybeThrow("kv_alloc");  // tests only (INFER_FAULTS); nothing changed yet
  if (needed > num_free_blocks()) return false;
  const bool wants_slot = table.state_slot < 0 && (num_state_slots_total() > 0);
  if (wants_slot && free_state_slots_.empty()) return false;
  if (wants_slot) {
    table.state_slot = free_state_slots_.back();
    free_state_slots_.pop_back();
  }
  const auto known = std::min(tokens.size(), static_cast<size_t>(num_tokens));
  const bool first = table.blocks.empty();
  if (first && snapshots()) WantSnapshot(tokens.first(known), table.salt);
  if (table.blocks.empty() && prefix_caching_) {
    const CachedPrefix prefix = FindCachedPrefix(tokens.first(known), table.salt);
    prefix_queries_ +=
        std::max<int64_t>(0, (static_cast<int64_t>(tokens.size()) - 1) / block_size_);
    prefix_hits_ += static_cast<int64_t>(prefix.blocks.size());
    for (const int32_t block : prefix.blocks) {
      Meta& meta = meta_[static_cast<size_t>(block)];
      if (meta.in_lru) {
        evictable_.erase(meta.lru);
        meta.in_lru = false;
      }
      ++meta.ref_count;
    }
    table.blocks = prefix.blocks;
    table.hashes = prefix.hashes;
    table.num_cached_tokens = static_cast<int64_t>(prefix.blocks.size()) * block_size_;
    if (snapshots() && !prefix.hashes.empty()) {
      // Pinned until the table's state is restored from it (TakeRestore).
      Snapshot& snapshot = snapshots_.at(prefix.hashes.back());
      if (snapshot.in_lru) {
        snapshot_lru_.erase(snapshot.lru);
        snapshot.in_lru = false;
      }
      ++snapshot.pins;
      table.restore_slot = snapshot.slot;
      table.restore_hash = prefix.hashes.back();
    }
  }
  while (static_cast<int64_t>(table.blocks.size()) < BlocksFor(num_tokens)) {
    const int32_t block = TakeFresh();
    table.blocks.push_back(block);
    // Register a full block of known tokens right away (pending until computed), so that a
    // sequence arriving meanwhile with the same prefix waits for it instead of recomputing it.
    const size_t i = table.blocks.size() - 1;
    const size_t end = (i + 1) * static_cast<size_t>(block_size_);
    if (!prefix_caching_ || table.hashes.size() != i || end > known) continue;
    const auto block_tokens =
        tokens.subspan(end - static_cast<size_t>(block_size_), static_cast<size_t>(block_size_));
    const uint64_t hash = HashBlock(ParentHash(table), block_tokens);
    table.hashes.push_back(hash);
    Register(block, hash, block_tokens, table.salt);
  }
  // A prompt's last full block (before the token whose logits it needs) wants a snapshot: the
  // same prompt again, or a conversation's next turn, resumes there.
  const auto prompt_blocks = static_cast<size_t>((static_cast<int64_t>(known) - 1) / block_size_);
  if (first && snapshots() && known > 0 && prompt_blocks > 0 &&
      table.hashes.size() >= prompt_blocks) {
    snapshots_.try_emplace(table.hashes[prompt_blocks - 1]);
  }
  return true;
}

void BlockManager::WantSnapshot(std::span<const int32_t> tokens, uint64_t salt) {
  if (!snapshots()) return;
  const CachedPrefix chain = RegisteredChain(tokens, salt);
  if (!chain.hashes.empty()) snapshots_.try_emplace(chain.hashes.back());
}

std::optional<uint64_t> BlockManager::BoundaryHash(const BlockTable& table,
                                                   std::span<const int32_t> tokens,
                                                   int64_t boundary) const {
  const auto index = static_cast<size_t>(boundary / block_size_) - 1;
  if (index < table.hashes.size()) return table.hashes[index];
  if (index != table.hashes.size() || static_cast<int64_t>(tokens.size()) < boundary) {
    return std::nullopt;
  }
  return HashBlock(ParentHash(table), tokens.subspan(static_cast<size_t>(boundary - block_size_),
                                                     static_cast<size_t>(block_size_)));
}

std::optional<int64_t> BlockManager::NextCapture(const BlockTable& table,
                                                 std::span<const int32_t> tokens, int64_t from,
                                                 int64_t to, bool decoding) const {
  if (!snapshots() || num_snapshot_slots_ == 0 || table.state_slot < 0) return std::nullopt;
  for (int64_t b = (from / block_size_ + 1) * block_size_; b <= to; b += block_size_) {
    const std::optional<uint64_t> hash = BoundaryHash(table, tokens, b);
    if (!hash) continue;
    const Snapshot* snapshot = FindSnapshot(*hash);
    if (snapshot != nullptr ? snapshot->slot < 0 : decoding && b == to) return b;
  }
  return std::nullopt;
}

std::optional<StateCapture> BlockManager::BeginCapture(BlockTable& table,
                                                       std::span<const int32_t> tokens,
                                                       int64_t boundary, bool decoding) {
  const std::optional<uint64_t> hash = BoundaryHash(table, tokens, boundary);
  if (!hash || table.state_slot < 0) return std::nullopt;
  const auto [it, created] = snapshots_.try_emplace(*hash);
  if (it->second.slot >= 0) return std::nullopt;  // taken, or being taken, already
  if (free_snapshot_slots_.empty() && !snapshot_lru_.empty()) {
    DropSnapshot(snapshot_lru_.front());  // the least recently used (never this one: no slot)
  }
  if (free_snapshot_slots_.empty()) {
    if (created) snapshots_.erase(*hash);
    return std::nullopt;
  }
  Snapshot& snapshot = snapshots_.at(*hash);
  snapshot.slot = free_snapshot_slots_.back();
  free_snapshot_slots_.pop_back();
  if (decoding) {
    // A decoding sequence's older snapshots are the first to go.
    if (const auto previous = snapshots_.find(table.last_snapshot);
        table.last_snapshot != 0 && previous != snapshots_.end() && previous->second.in_lru) {
      snapshot_lru_.splice(snapshot_lru_.begin(), snapshot_lru_, previous->second.lru);
    }
    table.last_snapshot = *hash;
  }
  return StateCapture{table.state_slot, snapshot.slot, *hash};
}

void BlockManager::EndCapture(uint64_t hash, bool taken) {
  const auto it = snapshots_.find(hash);
  if (it == snapshots_.end() || it->second.slot < 0 || it->second.computed) return;
  Snapshot& snapshot = it->second;
  // Kept only while its block is cached (a finished step has registered it).
  if (!taken || !by_hash_.contains(hash)) {
    free_snapshot_slots_.push_back(snapshot.slot);
    snapshots_.erase(it);
    return;
  }
  snapshot.computed = true;
  if (snapshot.pins == 0) {
    snapshot.lru = snapshot_lru_.insert(snapshot_lru_.end(), hash);
    snapshot.in_lru = true;
  }
}

int64_t BlockManager::TakeRestore(BlockTable& table) {
  const int64_t slot = table.restore_slot;
  if (slot >= 0) {
    Unpin(table.restore_hash);
    table.restore_slot = -1;
  }
  return slot;
}

void BlockManager::Unpin(uint64_t hash) {
  const auto it = snapshots_.find(hash);
  if (it == snapshots_.end()) return;
  Snapshot& snapshot = it->second;
  if (--snapshot.pins == 0 && snapshot.computed && !snapshot.in_lru) {
    snapshot.lru = snapshot_lru_.insert(snapshot_lru_.end(), hash);
    snapshot.in_lru = true;
  }
}

void BlockManager::DropSnapshot(uint64_t hash) {
  const auto it = snapshots_.find(hash);
  if (it == snapshots_.end()) return;
  Snapshot& snapshot = it->second;
  // One being taken is settled by EndCapture; a pinned one keeps its blocks referenced.
  if ((snapshot.slot >= 0 && !snapshot.computed) || snapshot.pins > 0) return;
  if (snapshot.in_lru) snapshot_lru_.erase(snapshot.lru);
  if (snapshot.slot >= 0) free_snapshot_slots_.push_back(snapshot.slot);
  snapshots_.erase(it);
}

void BlockManager::MarkComputed(BlockTable& table, std::span<const int32_t> tokens,
                                int64_t num_computed) {
  const int64_t full =
      std::min<int64_t>({num_computed / block_size_, static_cast<int64_t>(table.blocks.size()),
                         static_cast<int64_t>(tokens.size()) / block_size_});
  for (int64_t i = 0; i < full; ++i) {
    meta_[static_cast<size_t>(table.blocks[static_cast<size_t>(i)])].computed = true;
  }
  if (!prefix_caching_) return;
  for (auto i = static_cast<int64_t>(table.hashes.size()); i < full; ++i) {
    const auto block_tokens =
        tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_));
    const uint64_t hash = HashBlock(ParentHash(table), block_tokens);
    table.hashes.push_back(hash);
    Register(table.blocks[static_cast<size_t>(i)], hash, block_tokens, table.salt);
  }
}

std::optional<std::pair<int32_t, int32_t>> BlockManager::Fork(const BlockTable& parent,
                                                              int64_t num_tokens,
                                                              BlockTable& child) {
  INFER_CHECK(child.blocks.empty(), "block manager: fork into a table that has blocks");
  INFER_CHECK(
      num_tokens >= 0 && BlocksFor(num_tokens) <= static_cast<int64_t>(parent.blocks.size()),
      "block manager: fork of {} tokens from a table of {} blocks", num_tokens,
      parent.blocks.size());
  const int64_t full = num_tokens / block_size_;
  const bool partial = num_tokens % block_size_ != 0;
  INFER_CHECK(!partial || num_free_blocks() >= 1, "block manager: no free block to fork into");
  for (int64_t i = 0; i < full; ++i) {
    const int32_t block = parent.blocks[static_cast<size_t>(i)];
    ++meta_[static_cast<size_t>(block)].ref_count;
    child.blocks.push_back(block);
  }
  child.hashes.assign(
      parent.hashes.begin(),
      parent.hashes.begin() + std::min<int64_t>(full, static_cast<int64_t>(parent.hashes.size())));
  child.num_cached_tokens = 0;
  child.salt = parent.salt;
  if (!partial) return std::nullopt;
  const int32_t fresh = TakeFresh();
  child.blocks.push_back(fresh);
  return std::make_pair(parent.blocks[static_cast<size_t>(full)], fresh);
}

void BlockManager::Release(int32_t block) {
  Meta& meta = meta_[static_cast<size_t>(block)];
  INFER_CHECK(meta.ref_count > 0, "block manager: block {} freed more often than taken", block);
  if (--meta.ref_count > 0) return;
  if (meta.registered && meta.computed) {
    evictable_.push_back(block);
    meta.lru = std::prev(evictable_.end());
    meta.in_lru = true;
    return;
  }
  Unregister(block);
  free_.push_back(block);
}

void BlockManager::Free(BlockTable& table) {
  // Last blocks first: they are the least likely to be shared, so they are evicted first.
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) Release(*it);
  table.blocks.clear();
  table.hashes.clear();
  table.num_cached_tokens = 0;
  if (table.restore_slot >= 0) TakeRestore(table);
  table.last_snapshot = 0;
  if (table.state_slot >= 0) {
    free_state_slots_.push_back(table.state_slot);
    table.state_slot = -1;
  }
}

void BlockManager::CheckInvariants(std::span<const BlockTable* const> tables) const {
  std::vector<int32_t> refs(meta_.size(), 0);
  for (const BlockTable* table : tables) {
    for (const int32_t block : table->blocks) {
      INFER_CHECK(block >= 0 && block < num_blocks(), "invariant: block id {} out of range", block);
      ++refs[static_cast<size_t>(block)];
    }
  }
  std::vector<int> listed(meta_.size(), 0);
  for (const int32_t block : free_) {
    ++listed[static_cast<size_t>(block)];
    INFER_CHECK(!meta_[static_cast<size_t>(block)].registered, "invariant: free block {} is cached",
                block);
  }
  for (const int32_t block : evictable_) {
    ++listed[static_cast<size_t>(block)];
    const Meta& meta = meta_[static_cast<size_t>(block)];
    INFER_CHECK(meta.in_lru && meta.registered && meta.computed,
                "invariant: evictable block {} is not a computed cache entry", block);
  }
  for (size_t b = 0; b < meta_.size(); ++b) {
    const Meta& meta = meta_[b];
    INFER_CHECK(meta.ref_count == refs[b], "invariant: block {} has ref count {}, {} references", b,
                meta.ref_count, refs[b]);
    INFER_CHECK(listed[b] == (meta.ref_count == 0 ? 1 : 0),
                "invariant: block {} (ref count {}) is listed {} times in free/evictable", b,
                meta.ref_count, listed[b]);
    if (meta.registered) {
      const auto it = by_hash_.find(meta.hash);
      INFER_CHECK(it != by_hash_.end() && it->second == static_cast<int32_t>(b),
                  "invariant: block {} is registered but not indexed", b);
    }
  }
  for (const auto& [hash, block] : by_hash_) {
    INFER_CHECK(meta_[static_cast<size_t>(block)].registered &&
                    meta_[static_cast<size_t>(block)].hash == hash,
                "invariant: hash index points at block {} which is not registered under it", block);
  }
  int64_t held = 0;
  int64_t listed_snapshots = 0;
  for (const auto& [hash, snapshot] : snapshots_) {
    held += snapshot.slot >= 0 ? 1 : 0;
    listed_snapshots += snapshot.in_lru ? 1 : 0;
    INFER_CHECK(by_hash_.contains(hash) || (snapshot.slot >= 0 && !snapshot.computed),
                "invariant: a snapshot outlives its block");
    INFER_CHECK(snapshot.in_lru == (snapshot.computed && snapshot.pins == 0),
                "invariant: a snapshot is {} the LRU with {} pins",
                snapshot.in_lru ? "in" : "out of", snapshot.pins);
  }
  INFER_CHECK(held + static_cast<int64_t>(free_snapshot_slots_.size()) == num_snapshot_slots_ &&
                  listed_snapshots == static_cast<int64_t>(snapshot_lru_.size()),
              "invariant: {} snapshot slots held, {} free, of {}", held,
              free_snapshot_slots_.size(), num_snapshot_slots_);
}

}  // namespace infer
