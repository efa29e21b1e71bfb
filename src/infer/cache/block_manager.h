// Which KV blocks each sequence owns (pure: no model, threads or memory of its own). Fixed-size
// blocks with reference counts, per-sequence block tables, and prefix caching: a full block is
// known by the hash of its tokens chained with its parent block's hash (as vLLM does), so a new
// sequence reuses every cached full block its tokens start with. Unreferenced cached blocks stay
// cached and are evicted least-recently-used only when a fresh block is needed.
//
// A model with recurrent state (linear-attention layers) cannot resume from K/V alone: with
// snapshot slots, a cached prefix is usable only up to a block boundary whose state snapshot
// (every linear layer's state after that block, a copy of a sequence's slot) is cached under the
// block's chain hash. Snapshots are taken where a step ends on a wanted boundary: the end of a
// prompt's last full block, the end of a prefix that a waiting request shares with the cache
// (the scheduler ends a chunk there), and each block a decoding sequence completes (its latest
// only, the ones before it evicted first). They live in their own slots, least-recently-used
// evicted, and go when their block leaves the cache.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace infer {

// A sequence's blocks, owned by the caller (the scheduler keeps one per request).
struct BlockTable {
  std::vector<int32_t> blocks;
  // Hash of each full block whose tokens are registered (hashes[i] is blocks[i]'s chain hash).
  std::vector<uint64_t> hashes;
  // Leading tokens whose KV came from the prefix cache on the first allocation.
  int64_t num_cached_tokens = 0;
  // The prefix cache's namespace (a LoRA adapter's id; 0: the base model): blocks are shared only
  // between tables of the same salt, since the same tokens give other K/V under another adapter.
  // Kept by Free.
  uint64_t salt = 0;
  // The recurrent-state slot of a model with linear-attention layers (-1: none), taken by the
  // first Allocate and given back by Free.
  int64_t state_slot = -1;
  // With snapshots: the snapshot slot whose state the cached prefix resumes from, to be copied
  // into state_slot before the table's first computed token (-1: none, or copied already;
  // TakeRestore). Pinned in the cache until then.
  int64_t restore_slot = -1;
  uint64_t restore_hash = 0;
  // The chain hash of the last snapshot this table took while decoding (0: none).
  uint64_t last_snapshot = 0;
};

// A snapshot the step takes: after it runs, copy the table's state slot into `slot` and call
// BlockManager::EndCapture with `hash`.
struct StateCapture {
  int64_t from_slot = 0;
  int64_t slot = 0;
  uint64_t hash = 0;
};

// What the prefix cache holds for a sequence's tokens.
struct PrefixMatch {
  int64_t num_blocks = 0;  // leading full blocks whose KV is cached and computed
  // The block after them is being computed by another sequence right now: waiting a step for
  // it avoids computing it twice.
  bool next_pending = false;
};

class BlockManager {
 public:
  // num_state_slots > 0: every table also holds one of that many recurrent-state slots while it
  // holds blocks (Allocate fails, changing nothing, when none is free).
  // num_snapshot_slots (with prefix caching and state slots): state snapshots the cache may
  // hold, numbered from num_state_slots on (the model allocates both kinds).
  BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
               int64_t num_state_slots = 0, int64_t num_snapshot_slots = 0);

  int64_t num_blocks() const { return static_cast<int64_t>(meta_.size()); }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t num_state_slots_total() const { return num_state_slots_; }
  int64_t num_state_slots_used() const {
    return num_state_slots_ - static_cast<int64_t>(free_state_slots_.size());
  }
  int64_t num_snapshot_slots() const { return num_snapshot_slots_; }
  // Snapshot slots in use (held snapshots, and those being taken).
  int64_t num_snapshots() const {
    return num_snapshot_slots_ - static_cast<int64_t>(free_snapshot_slots_.size());
  }
  // Prefix caching for a model with state: cached prefixes end where a snapshot is.
  bool snapshots() const { return prefix_caching_ && num_state_slots_ > 0; }
  // Blocks a new allocation can take now: free ones plus cached ones nobody references.
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }
  int64_t num_cached_blocks() const { return static_cast<int64_t>(by_hash_.size()); }
  int64_t BlocksFor(int64_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }

  // The cached prefix of `tokens` under `salt` (BlockTable::salt): at most (tokens.size() - 1) /
  // block_size blocks, so that at least one token is left to compute (its logits are needed).
  PrefixMatch Match(std::span<const int32_t> tokens, uint64_t salt = 0) const;

  // Extends `table` to cover the first `num_tokens` of `tokens` (tokens known so far; may be
  // fewer than num_tokens when reserving room for tokens still to come). On a table's first
  // allocation the cached prefix (Match) is shared and table.num_cached_tokens set. Full blocks
  // of known tokens are registered under their hash as pending until MarkComputed. Returns
  // false and changes nothing if there are not enough free blocks.
  bool Allocate(BlockTable& table, std::span<const int32_t> tokens, int64_t num_tokens);
  // Fresh blocks the allocation would take (0 if the table already covers num_tokens).
  int64_t BlocksNeeded(const BlockTable& table, std::span<const int32_t> tokens,
                       int64_t num_tokens) const;

  // The first `num_computed` tokens of `tokens` now have their KV written: the table's full
  // blocks among them become computed (shareable) cache entries.
  void MarkComputed(BlockTable& table, std::span<const int32_t> tokens, int64_t num_computed);

  // A child sharing every block of `parent` (references taken). A partial last block cannot be
  // shared (both would write into it): the child gets a fresh block and the returned
  // (source, destination) pair says which KV to copy. Nullopt also when no block was needed;
  // throws infer::Error when a needed block is not available.
  std::optional<std::pair<int32_t, int32_t>> Fork(const BlockTable& parent, int64_t num_tokens,
                                                  BlockTable& child);

  // Drops the table's references and empties it. A block nobody references goes back to the
  // free list, or, if it is a computed cache entry, stays cached and evictable (the table's
  // last blocks first in eviction order).
  void Free(BlockTable& table);

  // With snapshots: wants one at the end of the prefix of `tokens` the cache holds (computed or
  // being computed) past its last snapshot, so that the sequence computing that prefix, or this
  // one, takes it on the way (a request waiting for a shared prefix calls it each step).
  void WantSnapshot(std::span<const int32_t> tokens, uint64_t salt);
  // With snapshots: the first block boundary b in (from, to] at which `table` (holding `tokens`,
  // those of positions >= from included) should take a snapshot, or nullopt: a wanted one not
  // yet taken, or the end of a block it completes while decoding (`decoding`).
  std::optional<int64_t> NextCapture(const BlockTable& table, std::span<const int32_t> tokens,
                                     int64_t from, int64_t to, bool decoding) const;
  // Starts the snapshot at boundary b (NextCapture's) of `table`: a slot for it (a free one, else
  // the least recently used snapshot's), or nullopt when none can be had or another sequence
  // takes it already.
  // `decoding`: the table's previous decoding snapshot is evicted first from now on.
  std::optional<StateCapture> BeginCapture(BlockTable& table, std::span<const int32_t> tokens,
                                           int64_t boundary, bool decoding);
  // The step ran (`taken`: the state was copied) or did not: the snapshot is cached, or dropped.
  void EndCapture(uint64_t hash, bool taken);
  // The slot `table`'s state is restored from before it computes (TakeRestore unpins it), -1 if
  // none.
  int64_t TakeRestore(BlockTable& table);

  // Counters for logs and /health.
  int64_t prefix_queries() const { return prefix_queries_; }  // blocks looked up at allocation
  int64_t prefix_hits() const { return prefix_hits_; }        // of those, found cached

  // Consistency check for tests: reference counts equal the references of `tables`, the free
  // and evictable lists and the hash index agree. Throws infer::Error describing a mismatch.
  void CheckInvariants(std::span<const BlockTable* const> tables) const;

 private:
  struct Meta {
    int32_t ref_count = 0;
    bool registered = false;  // under `hash` in by_hash_
    bool computed = false;    // its KV is written
    uint64_t hash = 0;
    uint64_t salt = 0;                 // of a registered block (checked on lookup, as the tokens)
    std::vector<int32_t> tokens;       // of a registered block (checked on lookup: no false hits)
    std::list<int32_t>::iterator lru;  // in evictable_ when ref_count == 0 and computed
    bool in_lru = false;
  };

  // The cached, computed full blocks `tokens` starts with (as Match counts them) and their chain
  // hashes; `next_pending` as in PrefixMatch.
  struct CachedPrefix {
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;
    bool next_pending = false;
  };
  CachedPrefix FindCachedPrefix(std::span<const int32_t> tokens, uint64_t salt) const;
  // The registered blocks (computed or not) `tokens` starts with, at most (size - 1) / block_size,
  // and their hashes.
  CachedPrefix RegisteredChain(std::span<const int32_t> tokens, uint64_t salt) const;

  struct Snapshot {
    int64_t slot = -1;      // -1: wanted, not taken
    bool computed = false;  // the state is copied in
    int32_t pins = 0;       // tables that will restore from it (not evictable while > 0)
    std::list<uint64_t>::iterator lru;
    bool in_lru = false;
  };
  const Snapshot* FindSnapshot(uint64_t hash) const;
  // The chain hash of `table`'s block ending at `boundary` (a multiple of the block size):
  // registered, or the next one made from `tokens`; nullopt if neither.
  std::optional<uint64_t> BoundaryHash(const BlockTable& table, std::span<const int32_t> tokens,
                                       int64_t boundary) const;
  void DropSnapshot(uint64_t hash);
  void Unpin(uint64_t hash);

  // A full block's chain hash: its tokens after its parent's hash, or, for a first block, after
  // the salt's.
  static uint64_t HashBlock(uint64_t parent, std::span<const int32_t> tokens);
  static uint64_t ChainStart(uint64_t salt);
  // The parent hash of a table's next full block.
  static uint64_t ParentHash(const BlockTable& table) {
    return table.hashes.empty() ? ChainStart(table.salt) : table.hashes.back();
  }
  // A registered block with these tokens and salt under `hash`, or -1.
  int32_t Lookup(uint64_t hash, std::span<const int32_t> tokens, uint64_t salt) const;
  // A fresh block: from the free list, else the least recently used evictable block.
  int32_t TakeFresh();
  // Indexes `block` under `hash` unless another block already is.
  void Register(int32_t block, uint64_t hash, std::span<const int32_t> tokens, uint64_t salt);
  void Unregister(int32_t block);
  void Release(int32_t block);

  int64_t block_size_;
  bool prefix_caching_;
  int64_t num_state_slots_ = 0;
  std::vector<int64_t> free_state_slots_;  // the last is taken first
  int64_t num_snapshot_slots_ = 0;
  std::vector<int64_t> free_snapshot_slots_;
  std::unordered_map<uint64_t, Snapshot> snapshots_;  // by the chain hash of their last block
  std::list<uint64_t> snapshot_lru_;                  // computed and unpinned; front: evicted first
  std::vector<Meta> meta_;
  std::vector<int32_t> free_;
  std::list<int32_t> evictable_;  // front: evicted first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace infer
