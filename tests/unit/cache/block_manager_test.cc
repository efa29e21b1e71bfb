// The block manager without a model: allocation, reference counts, prefix hits through hash
// chains, pending blocks, LRU eviction, fork, and a property test of thousands of random
// operations after which every block is free again.
#include "infer/cache/block_manager.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <vector>

#include "infer/core/error.h"

namespace infer {
namespace {

std::vector<int32_t> Tokens(int n, int32_t first = 0) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(first + i);
  return tokens;
}

TEST(BlockManagerTest, AllocatesAndFreesWholeBlocks) {
  BlockManager blocks(8, 16, true);
  BlockTable table;
  const auto tokens = Tokens(20);
  ASSERT_TRUE(blocks.Allocate(table, tokens, 20));
  EXPECT_EQ(table.blocks.size(), 2U);
  EXPECT_EQ(blocks.num_free_blocks(), 6);
  ASSERT_TRUE(blocks.Allocate(table, tokens, 33));  // room for tokens to come
  EXPECT_EQ(table.blocks.size(), 3U);
  EXPECT_FALSE(blocks.Allocate(table, tokens, 16 * 9));  // not enough: nothing changes
  EXPECT_EQ(table.blocks.size(), 3U);
  blocks.Free(table);
  EXPECT_TRUE(table.blocks.empty());
  EXPECT_EQ(blocks.num_free_blocks(), 8);
}

TEST(BlockManagerTest, ComputedFullBlocksAreSharedByTheirTokenPrefix) {
  BlockManager blocks(8, 16, true);
  BlockTable first;
  const auto tokens = Tokens(40);
  ASSERT_TRUE(blocks.Allocate(first, tokens, 40));
  EXPECT_TRUE(blocks.Match(tokens).next_pending);  // registered, not yet computed
  EXPECT_EQ(blocks.Match(tokens).num_blocks, 0);
  blocks.MarkComputed(first, tokens, 40);
  EXPECT_EQ(blocks.Match(tokens).num_blocks, 2);  // the partial third block is not shared

  auto other = Tokens(40);
  other[20] = 999;  // differs in the second block
  EXPECT_EQ(blocks.Match(other).num_blocks, 1);
  BlockTable second;
  ASSERT_TRUE(blocks.Allocate(second, other, 40));
  EXPECT_EQ(second.num_cached_tokens, 16);
  EXPECT_EQ(second.blocks[0], first.blocks[0]);
  EXPECT_NE(second.blocks[1], first.blocks[1]);
  // The same block content after a different first block is another chain: no hit.
  auto shifted = Tokens(40);
  shifted[0] = 777;
  EXPECT_EQ(blocks.Match(shifted).num_blocks, 0);
  const BlockTable* tables[] = {&first, &second};
  EXPECT_NO_THROW(blocks.CheckInvariants(tables));
}

TEST(BlockManagerTest, TablesOfAnotherSaltNeverShareBlocks) {
  // A LoRA adapter's K/V differ from the base's for the same tokens: salts keep them apart.
  BlockManager blocks(12, 16, true);
  const auto tokens = Tokens(40);
  BlockTable base;
  ASSERT_TRUE(blocks.Allocate(base, tokens, 40));
  blocks.MarkComputed(base, tokens, 40);
  EXPECT_EQ(blocks.Match(tokens).num_blocks, 2);
  EXPECT_EQ(blocks.Match(tokens, 7).num_blocks, 0);
  EXPECT_FALSE(blocks.Match(tokens, 7).next_pending);
  BlockTable adapter;
  adapter.salt = 7;
  ASSERT_TRUE(blocks.Allocate(adapter, tokens, 40));
  EXPECT_EQ(adapter.num_cached_tokens, 0);
  EXPECT_NE(adapter.blocks[0], base.blocks[0]);
  blocks.MarkComputed(adapter, tokens, 40);
  // Each salt now hits its own blocks; a third salt hits none.
  BlockTable again;
  again.salt = 7;
  ASSERT_TRUE(blocks.Allocate(again, tokens, 40));
  EXPECT_EQ(again.num_cached_tokens, 32);
  EXPECT_EQ(again.blocks[0], adapter.blocks[0]);
  EXPECT_EQ(blocks.Match(tokens, 8).num_blocks, 0);
  EXPECT_EQ(blocks.Match(tokens).num_blocks, 2);
  // Free keeps the salt (a preempted request comes back under its adapter); Fork passes it on.
  blocks.Free(again);
  EXPECT_EQ(again.salt, 7U);
  BlockTable child;
  blocks.Fork(adapter, 40, child);
  EXPECT_EQ(child.salt, 7U);
  const BlockTable* tables[] = {&base, &adapter, &child};
  EXPECT_NO_THROW(blocks.CheckInvariants(tables));
}

// A model with recurrent state: each table holds one state slot from its first allocation to
// Free; with every slot taken, Allocate fails and changes nothing (the scheduler's cue to wait or
// preempt, as for blocks); a freed slot is handed out again.
TEST(BlockManagerTest, StateSlotsGoWithTheTables) {
  BlockManager blocks(8, 16, false, 2);
  BlockTable a, b, c;
  const auto tokens = Tokens(20, 0);
  ASSERT_TRUE(blocks.Allocate(a, tokens, 20));
  ASSERT_TRUE(blocks.Allocate(b, tokens, 20));
  EXPECT_EQ(a.state_slot, 0);
  EXPECT_EQ(b.state_slot, 1);
  ASSERT_TRUE(blocks.Allocate(a, tokens, 40));  // growing keeps the slot
  EXPECT_EQ(a.state_slot, 0);
  const int64_t free_before = blocks.num_free_blocks();
  EXPECT_FALSE(blocks.Allocate(c, tokens, 20));
  EXPECT_EQ(c.state_slot, -1);
  EXPECT_TRUE(c.blocks.empty());
  EXPECT_EQ(blocks.num_free_blocks(), free_before);
  blocks.Free(a);
  EXPECT_EQ(a.state_slot, -1);
  ASSERT_TRUE(blocks.Allocate(c, tokens, 20));
  EXPECT_EQ(c.state_slot, 0);
  // Without state slots a table never takes one.
  BlockManager plain(4, 16, false);
  BlockTable d;
  ASSERT_TRUE(plain.Allocate(d, tokens, 20));
  EXPECT_EQ(d.state_slot, -1);
}

// Runs a table's step from `from` to `to` as the scheduler does with snapshots: restore, the
// chunk cut at the first wanted boundary, the capture settled after the step. Returns where the
// chunk ended.
int64_t SnapshotStep(BlockManager& blocks, BlockTable& table, const std::vector<int32_t>& tokens,
                     int64_t from, int64_t to, bool decoding = false) {
  blocks.TakeRestore(table);
  const std::optional<int64_t> boundary = blocks.NextCapture(table, tokens, from, to, decoding);
  std::optional<StateCapture> capture;
  if (boundary) capture = blocks.BeginCapture(table, tokens, *boundary, decoding);
  const int64_t end = capture ? *boundary : to;
  blocks.MarkComputed(table, tokens, end);
  if (capture) blocks.EndCapture(capture->hash, true);
  return end;
}

// A model with state resumes a cached prefix only from a snapshot: the prompt's last full block
// is snapshotted on the way, a prefix another request computes is snapshotted where the two part
// (the second waits for it), snapshots go with their blocks and least recently used first.
TEST(BlockManagerTest, StatePrefixesResumeFromSnapshots) {
  BlockManager blocks(40, 4, true, /*num_state_slots=*/4, /*num_snapshot_slots=*/2);
  ASSERT_TRUE(blocks.snapshots());
  const auto check = [&](std::vector<const BlockTable*> tables) { blocks.CheckInvariants(tables); };
  // a: 10 tokens; its chunk stops at 8, the end of its last full block before the last token.
  BlockTable a;
  const auto ta = Tokens(10);
  ASSERT_TRUE(blocks.Allocate(a, ta, 10));
  EXPECT_EQ(SnapshotStep(blocks, a, ta, 0, 10), 8);
  EXPECT_EQ(blocks.num_snapshots(), 1);
  EXPECT_EQ(SnapshotStep(blocks, a, ta, 8, 10), 10);
  check({&a});
  // b shares a's first 8 tokens: it resumes at 8, from the snapshot's slot (after the 4 running
  // ones).
  BlockTable b;
  auto tb = Tokens(8);
  for (const int32_t t : Tokens(5, 100)) tb.push_back(t);
  EXPECT_EQ(blocks.Match(tb).num_blocks, 2);
  ASSERT_TRUE(blocks.Allocate(b, tb, 13));
  EXPECT_EQ(b.num_cached_tokens, 8);
  EXPECT_EQ(b.restore_slot, 4);
  EXPECT_EQ(blocks.TakeRestore(b), 4);
  EXPECT_EQ(blocks.TakeRestore(b), -1);
  check({&a, &b});
  // c shares only 4: no snapshot there, so nothing is usable and nothing pending; it computes
  // from 0 and snapshots the boundary it shares, which d then resumes from.
  auto tc = Tokens(4);
  for (const int32_t t : Tokens(6, 200)) tc.push_back(t);
  EXPECT_EQ(blocks.Match(tc).num_blocks, 0);
  EXPECT_FALSE(blocks.Match(tc).next_pending);
  BlockTable c;
  ASSERT_TRUE(blocks.Allocate(c, tc, 10));
  EXPECT_EQ(c.num_cached_tokens, 0);
  EXPECT_EQ(SnapshotStep(blocks, c, tc, 0, 10), 4);
  auto td = Tokens(4);
  for (const int32_t t : Tokens(3, 300)) td.push_back(t);
  EXPECT_EQ(blocks.Match(td).num_blocks, 1);
  check({&a, &b, &c});
  blocks.Free(b);
  blocks.Free(c);
  // e is being computed; f shares its first 8 tokens and waits; e is cut there and snapshots it
  // (the want f left), and f resumes at 8. Two snapshot slots: the least recently used goes.
  BlockTable e, f;
  const auto te = Tokens(16, 500);
  auto tf = Tokens(8, 500);
  for (const int32_t t : Tokens(4, 700)) tf.push_back(t);
  ASSERT_TRUE(blocks.Allocate(e, te, 16));
  blocks.WantSnapshot(tf, 0);
  EXPECT_TRUE(blocks.Match(tf).next_pending);
  EXPECT_EQ(SnapshotStep(blocks, e, te, 0, 16), 8);
  EXPECT_EQ(blocks.num_snapshots(), 2);
  EXPECT_FALSE(blocks.Match(tf).next_pending);
  EXPECT_EQ(blocks.Match(tf).num_blocks, 2);
  ASSERT_TRUE(blocks.Allocate(f, tf, 12));
  EXPECT_EQ(f.num_cached_tokens, 8);
  check({&a, &e, &f});
  // A decoding table snapshots each block it completes (while slots last).
  BlockTable g;
  auto tg = Tokens(7, 900);
  ASSERT_TRUE(blocks.Allocate(g, tg, 7));
  EXPECT_EQ(SnapshotStep(blocks, g, tg, 0, 4), 4);  // its prompt's last full block
  EXPECT_EQ(SnapshotStep(blocks, g, tg, 4, 7), 7);
  tg.push_back(950);
  ASSERT_TRUE(blocks.Allocate(g, tg, 8));
  EXPECT_EQ(blocks.NextCapture(g, tg, 7, 8, /*decoding=*/true), 8);
  EXPECT_EQ(blocks.NextCapture(g, tg, 7, 8, /*decoding=*/false), std::nullopt);
  EXPECT_EQ(SnapshotStep(blocks, g, tg, 7, 8, true), 8);
  tg.push_back(951);
  EXPECT_EQ(blocks.Match(tg).num_blocks, 2);
  check({&a, &e, &f, &g});
  // Freed and evicted blocks take their snapshots with them; every slot comes back.
  for (BlockTable* t : {&a, &e, &f, &g}) blocks.Free(*t);
  BlockTable big;
  const auto tbig = Tokens(160, 5000);
  ASSERT_TRUE(blocks.Allocate(big, tbig, 160));
  EXPECT_EQ(blocks.num_snapshots(), 0);
  check({&big});
  blocks.Free(big);
  // Without snapshot slots a state model's prefix is never usable.
  BlockManager none(8, 4, true, 1, 0);
  BlockTable h, i;
  ASSERT_TRUE(none.Allocate(h, ta, 10));
  none.MarkComputed(h, ta, 10);
  none.Free(h);
  EXPECT_EQ(none.Match(ta).num_blocks, 0);
  ASSERT_TRUE(none.Allocate(i, ta, 10));
  EXPECT_EQ(i.num_cached_tokens, 0);
}

TEST(BlockManagerTest, UnreferencedCachedBlocksAreEvictedLruOnlyWhenNeeded) {
  BlockManager blocks(4, 16, true);
  BlockTable a, b;
  const auto ta = Tokens(48, 0), tb = Tokens(32, 1000);
  ASSERT_TRUE(blocks.Allocate(a, ta, 48));
  blocks.MarkComputed(a, ta, 48);
  blocks.Free(a);  // three cached, unreferenced blocks
  EXPECT_EQ(blocks.num_cached_blocks(), 3);
  EXPECT_EQ(blocks.num_free_blocks(), 4);
  ASSERT_TRUE(blocks.Allocate(b, tb, 32));    // one free block, then one eviction
  EXPECT_EQ(blocks.Match(ta).num_blocks, 2);  // the tail block went first
  blocks.Free(b);  // b's blocks were never computed: plain free blocks again
  BlockTable c;
  ASSERT_TRUE(blocks.Allocate(c, ta, 48));  // revives the two cached blocks
  EXPECT_EQ(c.num_cached_tokens, 32);
  EXPECT_EQ(c.blocks.size(), 3U);
  const BlockTable* tables[] = {&c};
  EXPECT_NO_THROW(blocks.CheckInvariants(tables));
}

TEST(BlockManagerTest, ForkSharesFullBlocksAndCopiesThePartialOne) {
  BlockManager blocks(8, 16, true);
  BlockTable parent, child;
  const auto tokens = Tokens(20);
  ASSERT_TRUE(blocks.Allocate(parent, tokens, 20));
  const auto copy = blocks.Fork(parent, 20, child);
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->first, parent.blocks[1]);
  EXPECT_EQ(copy->second, child.blocks[1]);
  EXPECT_EQ(child.blocks[0], parent.blocks[0]);
  const BlockTable* tables[] = {&parent, &child};
  EXPECT_NO_THROW(blocks.CheckInvariants(tables));
  blocks.Free(parent);
  blocks.Free(child);
  EXPECT_EQ(blocks.num_free_blocks(), 8);
}

TEST(BlockManagerTest, PropertyEveryBlockComesBackAfterRandomOperations) {
  // Prefix caching, none, and a model with state: 8 state slots and 3 snapshots (computing goes
  // through the snapshot steps; no forks).
  for (const int mode : {0, 1, 2}) {
    const bool prefix_caching = mode != 1;
    const bool state = mode == 2;
    BlockManager blocks(64, 16, prefix_caching, state ? 8 : 0, state ? 3 : 0);
    std::mt19937 rng(static_cast<uint32_t>(mode + 1));
    struct Seq {
      std::vector<int32_t> tokens;
      int64_t computed = 0;
      BlockTable table;
    };
    std::vector<Seq> seqs;
    // New sequences are prefixes of a few base sequences, so that prefixes repeat.
    std::vector<std::vector<int32_t>> bases(3);
    for (auto& base : bases) {
      for (int i = 0; i < 80; ++i) base.push_back(static_cast<int32_t>(rng() % 50));
    }
    const auto pick = [&](size_t n) {
      return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
    };
    for (int op = 0; op < 5000; ++op) {
      const int kind = static_cast<int>(pick(5));
      if (kind == 0 || seqs.empty()) {  // a new sequence from a small alphabet: many hits
        Seq seq;
        const int length = 1 + static_cast<int>(pick(80));
        const auto& base = bases[pick(bases.size())];
        seq.tokens.assign(base.begin(), base.begin() + length);
        if (blocks.Allocate(seq.table, seq.tokens, length)) {
          seq.computed = seq.table.num_cached_tokens;
          seqs.push_back(std::move(seq));
        }
      } else if (kind == 1 || (state && kind == 3)) {  // compute some of a sequence
        Seq& seq = seqs[pick(seqs.size())];
        const int64_t to = std::min<int64_t>(static_cast<int64_t>(seq.tokens.size()),
                                             seq.computed + static_cast<int64_t>(pick(40)));
        if (state) {
          seq.computed = to > seq.computed ? SnapshotStep(blocks, seq.table, seq.tokens,
                                                          seq.computed, to, pick(2) == 0)
                                           : seq.computed;
        } else {
          seq.computed = to;
          blocks.MarkComputed(seq.table, seq.tokens, seq.computed);
        }
      } else if (kind == 2) {  // grow by generated tokens
        Seq& seq = seqs[pick(seqs.size())];
        const int more = 1 + static_cast<int>(pick(20));
        std::vector<int32_t> grown = seq.tokens;
        for (int i = 0; i < more; ++i) grown.push_back(static_cast<int32_t>(pick(3)));
        if (blocks.Allocate(seq.table, grown, static_cast<int64_t>(grown.size()))) {
          seq.tokens = std::move(grown);
        }
      } else if (kind == 3) {  // fork
        Seq& parent = seqs[pick(seqs.size())];
        Seq child;
        child.tokens = parent.tokens;
        if (blocks.num_free_blocks() >= 1) {
          blocks.Fork(parent.table, static_cast<int64_t>(parent.tokens.size()), child.table);
          seqs.push_back(std::move(child));
        }
      } else {  // free
        const size_t i = pick(seqs.size());
        blocks.Free(seqs[i].table);
        seqs.erase(seqs.begin() + static_cast<std::ptrdiff_t>(i));
      }
      std::vector<const BlockTable*> tables;
      for (const Seq& seq : seqs) tables.push_back(&seq.table);
      ASSERT_NO_THROW(blocks.CheckInvariants(tables)) << "operation " << op;
    }
    if (prefix_caching) {
      EXPECT_GT(blocks.prefix_hits(), 0);
    }
    if (state) {
      EXPECT_GT(blocks.num_snapshots(), 0);
    }
    for (Seq& seq : seqs) blocks.Free(seq.table);
    EXPECT_EQ(blocks.num_free_blocks(), blocks.num_blocks());
    EXPECT_NO_THROW(blocks.CheckInvariants({}));
  }
}

}  // namespace
}  // namespace infer
