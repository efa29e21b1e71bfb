// Paged causal (optionally sliding-window) GQA attention, compiled once per ISA.
//
// Arithmetic (what makes a row's result independent of the call it is in):
// - A query row's keys are cut into partitions of kAttentionPartition keys at absolute
//   positions. A partition's state (max m, sum s, accumulator acc[head_dim]) is computed from
//   nothing but the row and the partition: scores of the visible keys, m = their max,
//   p = exp(score - m), s = sum of p, acc = sum of p * v (keys ascending, one FMA chain per
//   element from zero). Scores come in groups of kLanes keys at absolute positions (a group
//   never straddles a cache block or a partition), each score a fixed FMA chain over head_dim
//   followed by a fixed tree over the lanes.
// - Partition states are folded left, in ascending order, by one function (Merge). A task that
//   owns all of a row's partitions folds them as it goes; when a long context is split across
//   tasks (flash-decoding), each partition's state goes to scratch and the item's last task
//   folds them in the same order with the same function.
// - How a row is computed depends only on the model's shape (head_dim, group size) and the
//   ISA: the heads of a kv head run in fixed runs of 4, 2, 1 (RowsAt) whatever the call holds.
// So the work split (threads, batch, prefill chunks, decode) never changes a row's bits.
//
// The rows' arithmetic is attention_rows.h's; this file splits a call into items and tasks
// (threads, flash-decoding splits of long contexts) and runs them.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "infer/kernels/cpu/attention_rows.h"
#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace attention {
namespace {

// Query positions per item (task) of a prefill.
constexpr int64_t kQueryBlock = 16;
// Blocks of at most this many positions (decodes) keep all kv heads in one item.
constexpr int64_t kStreamMaxPositions = 4;
// Tasks per thread that the split aims at, so that dynamic claiming balances the load.
constexpr int kTasksPerThread = 4;
// Calls of fewer (query head, key) pairs run on the calling thread.
constexpr double kInlineCost = 2048;

thread_local Scratch tls_task_scratch;  // per task: prepared queries, scores, states
thread_local Scratch tls_call_scratch;  // per call, on the calling thread: split states

// ---- Work items and tasks ------------------------------------------------------------------

// The rows of one sequence, kv heads [h_begin, h_end) and a block of query positions: row
// t_local * RowsPerPosition() + (h - h_begin) * group + g is query head h * group + g.
struct Item {
  const AttentionSequence* seq;
  int64_t h_begin, h_end;
  int64_t t_begin, t_end;   // query tokens of the sequence
  int64_t p_first, p_last;  // partitions its rows see, inclusive
  double cost;
  int64_t slots = -1;  // split items: offset of their partition states in the call's buffer
  int split_index = -1;

  int64_t RowsPerPosition(int64_t group) const { return (h_end - h_begin) * group; }
  int64_t Rows(int64_t group) const { return (t_end - t_begin) * RowsPerPosition(group); }
};

struct Task {
  int item;
  int64_t p_begin, p_end;  // partitions [p_begin, p_end)
  double cost;
};

template <class Kv>
struct Call;

// Where row `row` of an item goes in `out`.
template <class Kv>
float* OutputRow(const Context<Kv>& c, const Item& item, int64_t row) {
  const int64_t per_position = item.RowsPerPosition(c.group);
  const int64_t t = item.t_begin + row / per_position;
  const int64_t head = item.h_begin * c.group + row % per_position;
  return c.out + (item.seq->row + t) * c.row_stride + head * c.head_dim;
}

template <class Kv>
struct Call {
  Context<Kv> c;
  const Item* items;
  const Task* tasks;
  float* slots;
  std::atomic<int>* pending;  // per split item: tasks not yet finished
  int64_t slot_stride;        // floats per (partition, row) state: acc, then m, s
};

template <int kNch, class Kv>
void PartitionStateR(int rows, const Context<Kv>& c, const int32_t* table, int64_t kv_head,
                     const float* qp, int64_t lo, int64_t hi, int64_t prefetch_end, float* scores,
                     float* m, float* s, float* acc) {
  switch (rows) {
    case 1:
      return PartitionState<1, Kv, kNch>(c, table, kv_head, qp, lo, hi, prefetch_end, scores, m, s,
                                         acc);
    case 2:
      return PartitionState<2, Kv, kNch>(c, table, kv_head, qp, lo, hi, prefetch_end, scores, m, s,
                                         acc);
    default:
      return PartitionState<4, Kv, kNch>(c, table, kv_head, qp, lo, hi, prefetch_end, scores, m, s,
                                         acc);
  }
}

template <class Kv>
void PartitionStateN(int rows, const Context<Kv>& c, const int32_t* table, int64_t kv_head,
                     const float* qp, int64_t lo, int64_t hi, int64_t prefetch_end, float* scores,
                     float* m, float* s, float* acc) {
  // The models' head dims get unrolled kernels; any other runs the generic one.
  const int64_t fixed = c.last_chunk == kChunk ? c.num_chunks : 0;
  switch (fixed) {
    case kFixedChunks[0]:
      return PartitionStateR<kFixedChunks[0], Kv>(rows, c, table, kv_head, qp, lo, hi, prefetch_end,
                                                  scores, m, s, acc);
    case kFixedChunks[1]:
      return PartitionStateR<kFixedChunks[1], Kv>(rows, c, table, kv_head, qp, lo, hi, prefetch_end,
                                                  scores, m, s, acc);
    case kFixedChunks[2]:
      return PartitionStateR<kFixedChunks[2], Kv>(rows, c, table, kv_head, qp, lo, hi, prefetch_end,
                                                  scores, m, s, acc);
    default:
      return PartitionStateR<0, Kv>(rows, c, table, kv_head, qp, lo, hi, prefetch_end, scores, m, s,
                                    acc);
  }
}

// Folds a split item's partition states in ascending order and writes its output rows.
template <class Kv>
void FoldSplitItem(const Call<Kv>& call, const Item& item) {
  const Context<Kv>& c = call.c;
  const int64_t rows = item.Rows(c.group);
  float* acc = tls_task_scratch.Floats(static_cast<size_t>(c.padded_dim));
  for (int64_t row = 0; row < rows; ++row) {
    float m = kNegInf;
    float s = 0.0F;
    for (int64_t p = item.p_first; p <= item.p_last; ++p) {
      const float* state =
          call.slots + item.slots + ((p - item.p_first) * rows + row) * call.slot_stride;
      Merge(m, s, acc, state[c.padded_dim], state[c.padded_dim + 1], state, c.padded_dim);
    }
    WriteOutput(c, acc, s, OutputRow(c, item, row));
  }
}

template <class Kv>
void RunTask(const Call<Kv>& call, const Task& task) {
  const Context<Kv>& c = call.c;
  const Item& item = call.items[task.item];
  const AttentionSequence& seq = *item.seq;
  const bool split = item.slots >= 0;
  const int64_t rows = item.Rows(c.group);
  const int64_t per_position = item.RowsPerPosition(c.group);
  const int64_t dp = c.padded_dim;
  // Scratch: prepared queries, scores, one partition state, then (unsplit) the running states.
  float* qp = tls_task_scratch.Floats(static_cast<size_t>(
      rows * dp + kMaxRows * kPartition + kMaxRows * dp + 2 * kMaxRows + rows * (dp + 2)));
  float* scores = qp + rows * dp;
  float* part_acc = scores + kMaxRows * kPartition;
  float* part_m = part_acc + kMaxRows * dp;
  float* part_s = part_m + kMaxRows;
  float* total_acc = part_s + kMaxRows;
  float* total_m = total_acc + rows * dp;
  float* total_s = total_m + rows;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t t = item.t_begin + row / per_position;
    const int64_t head = item.h_begin * c.group + row % per_position;
    PrepareQuery(c, c.q + (seq.row + t) * c.row_stride + head * c.head_dim, qp + row * dp);
    total_m[row] = kNegInf;
    total_s[row] = 0.0F;
  }
  for (int64_t p = task.p_begin; p < task.p_end; ++p) {
    for (int64_t t = item.t_begin; t < item.t_end; ++t) {
      const int64_t pos = seq.first_pos + t;
      const int64_t lo = std::max(c.FirstKey(pos), p * kPartition);
      const int64_t hi = std::min(pos + 1, (p + 1) * kPartition);
      for (int64_t h = item.h_begin; h < item.h_end; ++h) {
        for (int64_t g0 = 0, n = 0; g0 < c.group; g0 += n) {
          n = RowsAt(c.group - g0);
          const int64_t row0 =
              (t - item.t_begin) * per_position + (h - item.h_begin) * c.group + g0;
          if (split) {
            float* state =
                call.slots + item.slots + ((p - item.p_first) * rows + row0) * call.slot_stride;
            if (lo < hi) {
              PartitionStateN<Kv>(n, c, seq.block_table, h, qp + row0 * dp, lo, hi, pos + 1, scores,
                                  part_m, part_s, part_acc);
            }
            for (int r = 0; r < n; ++r) {
              float* dst = state + r * call.slot_stride;
              if (lo < hi) {
                std::memcpy(dst, part_acc + r * dp, static_cast<size_t>(dp) * sizeof(float));
                dst[dp] = part_m[r];
                dst[dp + 1] = part_s[r];
              } else {
                dst[dp] = kNegInf;
                dst[dp + 1] = 0.0F;
              }
            }
          } else if (lo < hi) {
            PartitionStateN<Kv>(n, c, seq.block_table, h, qp + row0 * dp, lo, hi, pos + 1, scores,
                                part_m, part_s, part_acc);
            for (int r = 0; r < n; ++r) {
              Merge(total_m[row0 + r], total_s[row0 + r], total_acc + (row0 + r) * dp, part_m[r],
                    part_s[r], part_acc + r * dp, dp);
            }
          }
        }
      }
    }
  }
  if (!split) {
    for (int64_t row = 0; row < rows; ++row) {
      WriteOutput(c, total_acc + row * dp, total_s[row], OutputRow(c, item, row));
    }
    return;
  }
  // The last task of a split item folds its partitions (acquire: the others' states).
  if (call.pending[item.split_index].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    FoldSplitItem(call, item);
  }
}

// A block of query positions of one sequence, with its cost in (query head, key) pairs per kv
// head.
struct PositionBlock {
  const AttentionSequence* seq;
  int64_t t_begin, t_end;
  double cost_per_kv_head;
};

thread_local std::vector<PositionBlock> tls_blocks;
thread_local std::vector<Item> tls_items;
thread_local std::vector<Task> tls_tasks;

template <class Kv>
void Run(const float* q, std::span<const AttentionSequence> seqs, const PagedKvLayer& kv,
         const AttentionParams& params, float* out, ThreadPool& pool) {
  Call<Kv> call{};
  Context<Kv>& c = call.c;
  c.q = q;
  c.out = out;
  c.k = static_cast<const typename Kv::T*>(kv.k);
  c.v = static_cast<const typename Kv::T*>(kv.v);
  c.block_size = kv.block_size;
  c.block_stride = kv.block_stride;
  c.head_stride = kv.head_stride;
  c.head_dim = params.head_dim;
  c.num_chunks = (params.head_dim + kChunk - 1) / kChunk;
  c.padded_dim = c.num_chunks * kChunk;
  c.last_chunk = params.head_dim - (c.num_chunks - 1) * kChunk;
  c.num_heads = params.num_heads;
  c.num_kv_heads = params.num_kv_heads;
  c.group = params.num_heads / params.num_kv_heads;
  c.row_stride = params.num_heads * params.head_dim;
  c.window = params.sliding_window;
  c.scale = params.scale;
  call.slot_stride = c.padded_dim + kLanes;

  std::vector<PositionBlock>& blocks = tls_blocks;
  blocks.clear();
  double total_cost = 0;
  for (const AttentionSequence& seq : seqs) {
    for (int64_t t0 = 0; t0 < seq.num_tokens; t0 += kQueryBlock) {
      const int64_t t1 = std::min(seq.num_tokens, t0 + kQueryBlock);
      double keys = 0;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t pos = seq.first_pos + t;
        keys += static_cast<double>(pos + 1 - c.FirstKey(pos));
      }
      blocks.push_back({&seq, t0, t1, keys * static_cast<double>(c.group)});
      total_cost += keys * static_cast<double>(c.num_heads);
    }
  }
  if (blocks.empty()) return;

  // Items and tasks. A block of few positions (a decode) keeps all kv heads in one item: its
  // task reads a partition's blocks for every head in turn, and the cache keeps a block's heads
  // side by side. A larger one gets an item per kv head (a head's partition then stays in cache
  // across the positions). An item whose cost is well above its share of the call is cut:
  // ranges of partitions first (each partition's state to scratch, folded by the item's last
  // task), then ranges of kv heads (separate items).
  std::vector<Item>& items = tls_items;
  std::vector<Task>& tasks = tls_tasks;
  items.clear();
  tasks.clear();
  // A call this small costs less than waking the pool: one thread, no split.
  const int threads = total_cost < kInlineCost ? 1 : pool.num_threads();
  const double target = total_cost / (kTasksPerThread * threads);
  int64_t slot_floats = 0;
  int num_split = 0;
  for (const PositionBlock& block : blocks) {
    const int64_t pos0 = block.seq->first_pos + block.t_begin;
    const int64_t p_first = c.FirstKey(pos0) / kPartition;
    const int64_t p_last = (block.seq->first_pos + block.t_end - 1) / kPartition;
    const int64_t num_partitions = p_last - p_first + 1;
    const int64_t heads_per_item =
        block.t_end - block.t_begin <= kStreamMaxPositions ? c.num_kv_heads : 1;
    for (int64_t h0 = 0; h0 < c.num_kv_heads; h0 += heads_per_item) {
      const double cost = block.cost_per_kv_head * static_cast<double>(heads_per_item);
      const int64_t pieces =
          threads > 1 ? std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cost / target))) : 1;
      const int64_t p_ranges = std::min(num_partitions, pieces);
      const int64_t h_ranges = std::min(heads_per_item, (pieces + p_ranges - 1) / p_ranges);
      for (int64_t hr = 0; hr < h_ranges; ++hr) {
        Item item{.seq = block.seq,
                  .h_begin = h0 + heads_per_item * hr / h_ranges,
                  .h_end = h0 + heads_per_item * (hr + 1) / h_ranges,
                  .t_begin = block.t_begin,
                  .t_end = block.t_end,
                  .p_first = p_first,
                  .p_last = p_last,
                  .cost = block.cost_per_kv_head};
        item.cost *= static_cast<double>(item.h_end - item.h_begin);
        if (p_ranges > 1) {
          item.slots = slot_floats;
          item.split_index = num_split++;
          slot_floats += num_partitions * item.Rows(c.group) * call.slot_stride;
        }
        const int index = static_cast<int>(items.size());
        for (int64_t pr = 0; pr < p_ranges; ++pr) {
          const int64_t p0 = p_first + num_partitions * pr / p_ranges;
          const int64_t p1 = p_first + num_partitions * (pr + 1) / p_ranges;
          tasks.push_back(
              Task{index, p0, p1,
                   item.cost * static_cast<double>(p1 - p0) / static_cast<double>(num_partitions)});
        }
        items.push_back(item);
      }
    }
  }
  // Biggest first: tasks are claimed in order, so the tail of the call is short ones.
  std::sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) {
    if (a.cost != b.cost) return a.cost > b.cost;
    return a.item != b.item ? a.item < b.item : a.p_begin < b.p_begin;
  });
  std::unique_ptr<std::atomic<int>[]> pending;
  if (num_split > 0) {
    pending = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(num_split));
    for (int i = 0; i < num_split; ++i) pending[i].store(0, std::memory_order_relaxed);
    for (const Task& task : tasks) {
      const Item& item = items[static_cast<size_t>(task.item)];
      if (item.split_index >= 0) pending[item.split_index].fetch_add(1, std::memory_order_relaxed);
    }
    call.slots = tls_call_scratch.Floats(static_cast<size_t>(slot_floats));
  }
  call.items = items.data();
  call.tasks = tasks.data();
  call.pending = pending.get();
  if (threads == 1) {
    for (const Task& task : tasks) RunTask(call, task);
    return;
  }
  pool.RunTasks(static_cast<int>(tasks.size()),
                [&call](int task) { RunTask(call, call.tasks[task]); });
}

}  // namespace
}  // namespace attention

void PagedAttention(const float* q, std::span<const AttentionSequence> seqs, const PagedKvLayer& kv,
                    const AttentionParams& params, float* out, ThreadPool& pool) {
  if (kv.dtype == DType::kBF16) {
    attention::Run<attention::Bf16Kv>(q, seqs, kv, params, out, pool);
  } else {
    attention::Run<attention::F32Kv>(q, seqs, kv, params, out, pool);
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
