// Causal (optionally sliding-window) GQA attention over the f32 KV cache, compiled once per
// ISA. Flash style: per task (one kv head x a block of queries), keys are visited in blocks;
// each block of K is transposed once so that q . k runs as broadcast FMAs across keys, and
// every query row keeps an online softmax (running max, sum, and output accumulator).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

// Keys per block: four vectors of scores, i.e. four independent FMA chains over head_dim.
constexpr int64_t kKeyBlock = 4 * kLanes;
// Queries per task: with the kv group's heads this gives rows enough to amortise the K
// transpose, and tasks enough to balance causal work over the threads.
constexpr int64_t kQueryBlock = 32;

thread_local Scratch tls_attention_scratch;

// kt[d][j] = keys[j][d] for j < num_keys, zero for num_keys <= j < kKeyBlock.
inline void TransposeKeys(const float* keys, int64_t num_keys, int64_t head_dim, float* kt) {
  int64_t d_done = 0;
#if defined(__AVX512F__)
  // 16 x 16 blocks in registers; what is left over goes element by element below.
  if (num_keys == kKeyBlock) {
    d_done = head_dim / kLanes * kLanes;
    for (int64_t d0 = 0; d0 < d_done; d0 += kLanes) {
      for (int64_t j0 = 0; j0 < kKeyBlock; j0 += kLanes) {
        V r[kLanes];
        for (int i = 0; i < kLanes; ++i) r[i] = Load(keys + (j0 + i) * head_dim + d0);
        Transpose16x16(r);
        for (int i = 0; i < kLanes; ++i) Store(kt + (d0 + i) * kKeyBlock + j0, r[i]);
      }
    }
  }
#endif
  for (int64_t d = d_done; d < head_dim; ++d) {
    float* dst = kt + d * kKeyBlock;
    for (int64_t j = 0; j < num_keys; ++j) dst[j] = keys[j * head_dim + d];
    for (int64_t j = num_keys; j < kKeyBlock; ++j) dst[j] = 0.0F;
  }
}

// Scores of two query rows (q1 may equal q0) against a transposed key block kt
// [head_dim][kKeyBlock]: eight independent FMA chains, each kt load used twice.
inline void BlockScores2(const float* q0, const float* q1, const float* kt, int64_t head_dim,
                         float scale, float* scores0, float* scores1) {
  V a0 = Zero(), a1 = Zero(), a2 = Zero(), a3 = Zero();
  V b0 = Zero(), b1 = Zero(), b2 = Zero(), b3 = Zero();
  for (int64_t d = 0; d < head_dim; ++d) {
    const float* row = kt + d * kKeyBlock;
    const V k0 = Load(row);
    const V k1 = Load(row + kLanes);
    const V k2 = Load(row + 2 * kLanes);
    const V k3 = Load(row + 3 * kLanes);
    const V qa = Set1(q0[d]);
    const V qb = Set1(q1[d]);
    a0 = Fma(qa, k0, a0);
    a1 = Fma(qa, k1, a1);
    a2 = Fma(qa, k2, a2);
    a3 = Fma(qa, k3, a3);
    b0 = Fma(qb, k0, b0);
    b1 = Fma(qb, k1, b1);
    b2 = Fma(qb, k2, b2);
    b3 = Fma(qb, k3, b3);
  }
  const V sc = Set1(scale);
  Store(scores0, Mul(a0, sc));
  Store(scores0 + kLanes, Mul(a1, sc));
  Store(scores0 + 2 * kLanes, Mul(a2, sc));
  Store(scores0 + 3 * kLanes, Mul(a3, sc));
  Store(scores1, Mul(b0, sc));
  Store(scores1 + kLanes, Mul(b1, sc));
  Store(scores1 + 2 * kLanes, Mul(b2, sc));
  Store(scores1 + 3 * kLanes, Mul(b3, sc));
}

// acc[0, head_dim) = acc * correction + sum_j p[j] * values[j]. Four vectors of the row at a
// time, even and odd keys into separate accumulators: eight independent FMA chains.
inline void AccumulateValues(float* acc, float correction, const float* p, const float* values,
                             int64_t num_keys, int64_t head_dim) {
  const V corr = Set1(correction);
  int64_t d = 0;
  for (; d + 4 * kLanes <= head_dim; d += 4 * kLanes) {
    V a0 = Mul(Load(acc + d), corr);
    V a1 = Mul(Load(acc + d + kLanes), corr);
    V a2 = Mul(Load(acc + d + 2 * kLanes), corr);
    V a3 = Mul(Load(acc + d + 3 * kLanes), corr);
    V b0 = Zero(), b1 = Zero(), b2 = Zero(), b3 = Zero();
    int64_t j = 0;
    for (; j + 2 <= num_keys; j += 2) {
      const V pa = Set1(p[j]);
      const V pb = Set1(p[j + 1]);
      const float* va = values + j * head_dim + d;
      const float* vb = va + head_dim;
      a0 = Fma(pa, Load(va), a0);
      a1 = Fma(pa, Load(va + kLanes), a1);
      a2 = Fma(pa, Load(va + 2 * kLanes), a2);
      a3 = Fma(pa, Load(va + 3 * kLanes), a3);
      b0 = Fma(pb, Load(vb), b0);
      b1 = Fma(pb, Load(vb + kLanes), b1);
      b2 = Fma(pb, Load(vb + 2 * kLanes), b2);
      b3 = Fma(pb, Load(vb + 3 * kLanes), b3);
    }
    if (j < num_keys) {
      const V pa = Set1(p[j]);
      const float* va = values + j * head_dim + d;
      a0 = Fma(pa, Load(va), a0);
      a1 = Fma(pa, Load(va + kLanes), a1);
      a2 = Fma(pa, Load(va + 2 * kLanes), a2);
      a3 = Fma(pa, Load(va + 3 * kLanes), a3);
    }
    Store(acc + d, Add(a0, b0));
    Store(acc + d + kLanes, Add(a1, b1));
    Store(acc + d + 2 * kLanes, Add(a2, b2));
    Store(acc + d + 3 * kLanes, Add(a3, b3));
  }
  for (; d < head_dim; d += kLanes) {
    const int64_t count = std::min<int64_t>(kLanes, head_dim - d);
    V a = Mul(LoadN(acc + d, count), corr);
    for (int64_t j = 0; j < num_keys; ++j) {
      a = Fma(Set1(p[j]), LoadN(values + j * head_dim + d, count), a);
    }
    StoreN(acc + d, a, count);
  }
}

// Online-softmax state of one query row.
struct RowState {
  float max;
  float sum;
};

// Folds the scores [lo, hi) of one key block into a row: rescales the running sum and
// accumulator to the new max, then adds exp(score - max) and the weighted values.
inline void UpdateRow(float* scores, int64_t lo, int64_t hi, const float* values, int64_t head_dim,
                      RowState& state, float* acc) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  V block_max = Set1(kNegInf);
  for (int64_t j = lo; j < hi; j += kLanes) {
    block_max = Max(block_max, LoadNOr(scores + j, hi - j, kNegInf));
  }
  const float new_max = std::max(state.max, ReduceMax(block_max));
  const float correction = state.max == kNegInf ? 0.0F : std::exp(state.max - new_max);
  const V max_v = Set1(new_max);
  V sum = Zero();
  for (int64_t j = lo; j < hi; j += kLanes) {
    const int64_t count = std::min<int64_t>(kLanes, hi - j);
    const V p = KeepFirstN(Exp(Sub(LoadN(scores + j, count), max_v)), count);
    StoreN(scores + j, p, count);
    sum = Add(sum, p);
  }
  state.sum = state.sum * correction + ReduceSum(sum);
  state.max = new_max;
  AccumulateValues(acc, correction, scores + lo, values + lo * head_dim, hi - lo, head_dim);
}

}  // namespace

void Attention(const float* q, int64_t num_tokens, int64_t first_pos, const float* k_cache,
               const float* v_cache, int64_t kv_head_stride, const AttentionParams& params,
               float* out, ThreadPool& pool) {
  const int64_t head_dim = params.head_dim;
  const int64_t group = params.num_heads / params.num_kv_heads;
  const int64_t row_stride = params.num_heads * head_dim;
  const int64_t window = params.sliding_window;
  const int64_t num_query_blocks = (num_tokens + kQueryBlock - 1) / kQueryBlock;
  const int64_t num_tasks = params.num_kv_heads * num_query_blocks;

  pool.RunTasks(static_cast<int>(num_tasks), [&](int task) {
    const int64_t kv_head = task / num_query_blocks;
    const int64_t t_begin = (task % num_query_blocks) * kQueryBlock;
    const int64_t t_end = std::min(num_tokens, t_begin + kQueryBlock);
    const int64_t num_rows = group * (t_end - t_begin);  // row = (t - t_begin) * group + g
    const float* keys = k_cache + kv_head * kv_head_stride;
    const float* values = v_cache + kv_head * kv_head_stride;
    auto first_key = [&](int64_t pos) {
      return window > 0 ? std::max<int64_t>(0, pos - window + 1) : int64_t{0};
    };
    auto query = [&](int64_t row) {
      const int64_t t = t_begin + row / group;
      return q + t * row_stride + (kv_head * group + row % group) * head_dim;
    };

    // Scratch: the transposed key block, two score rows, then per row its accumulator.
    float* kt = tls_attention_scratch.Floats(
        static_cast<size_t>(head_dim * kKeyBlock + 2 * kKeyBlock + num_rows * head_dim));
    float* scores = kt + head_dim * kKeyBlock;
    float* row_acc = scores + 2 * kKeyBlock;
    std::fill(row_acc, row_acc + num_rows * head_dim, 0.0F);
    std::vector<RowState> states(static_cast<size_t>(num_rows),
                                 RowState{-std::numeric_limits<float>::infinity(), 0.0F});

    // Key blocks start at multiples of kKeyBlock whatever the task's first query, so a query
    // folds the same blocks in the same order alone, in a batch or in a prefill chunk.
    const int64_t keys_begin = first_key(first_pos + t_begin) / kKeyBlock * kKeyBlock;
    const int64_t keys_end = first_pos + t_end;  // exclusive
    for (int64_t b0 = keys_begin; b0 < keys_end; b0 += kKeyBlock) {
      const int64_t block_len = std::min(kKeyBlock, keys_end - b0);
      TransposeKeys(keys + b0 * head_dim, block_len, head_dim, kt);
      // The rows that see part of this block, [row_begin, row_end): whole query positions.
      auto visible = [&](int64_t row, int64_t& lo, int64_t& hi) {
        const int64_t pos = first_pos + t_begin + row / group;
        lo = std::max(b0, first_key(pos)) - b0;
        hi = std::min(b0 + block_len, pos + 1) - b0;
        return lo < hi;
      };
      for (int64_t row = 0; row < num_rows;) {
        int64_t lo0, hi0, lo1, hi1;
        if (!visible(row, lo0, hi0)) {
          ++row;
          continue;
        }
        const bool pair = row + 1 < num_rows && visible(row + 1, lo1, hi1);
        BlockScores2(query(row), query(pair ? row + 1 : row), kt, head_dim, params.scale, scores,
                     scores + kKeyBlock);
        UpdateRow(scores, lo0, hi0, values + b0 * head_dim, head_dim, states[row],
                  row_acc + row * head_dim);
        if (pair) {
          UpdateRow(scores + kKeyBlock, lo1, hi1, values + b0 * head_dim, head_dim, states[row + 1],
                    row_acc + (row + 1) * head_dim);
        }
        row += pair ? 2 : 1;
      }
    }
    for (int64_t row = 0; row < num_rows; ++row) {
      const V inv = Set1(1.0F / states[row].sum);
      float* o = out + (query(row) - q);
      const float* acc = row_acc + row * head_dim;
      for (int64_t d = 0; d < head_dim; d += kLanes) {
        const int64_t count = std::min<int64_t>(kLanes, head_dim - d);
        StoreN(o + d, Mul(LoadN(acc + d, count), inv), count);
      }
    }
  });
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
