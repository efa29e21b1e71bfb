// Causal (optionally sliding-window) GQA attention over the f32 KV cache, compiled once per
// ISA. Flash style: per task (one kv head x a block of queries), keys are visited in blocks;
// each block of K is transposed once so that q . k runs as broadcast FMAs across keys, and
// every query row keeps an online softmax (running max, sum, and output accumulator).
#include <algorithm>
#include <cmath>
#include <limits>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

// Keys per block: four vectors of scores, i.e. four independent FMA chains over head_dim.
constexpr int64_t kKeyBlock = 4 * kLanes;
// Queries per task: with the kv group's heads this gives rows enough to amortise the K
// transpose, and tasks enough to balance causal work over the threads.
constexpr int64_t kQueryBlock = 16;

thread_local Scratch tls_attention_scratch;

// Scores of one query against a transposed key block kt [head_dim][kKeyBlock].
inline void BlockScores(const float* query, const float* kt, int64_t head_dim, float scale,
                        float* scores) {
  V s0 = Zero(), s1 = Zero(), s2 = Zero(), s3 = Zero();
  for (int64_t d = 0; d < head_dim; ++d) {
    const V qd = Set1(query[d]);
    const float* row = kt + d * kKeyBlock;
    s0 = Fma(qd, Load(row), s0);
    s1 = Fma(qd, Load(row + kLanes), s1);
    s2 = Fma(qd, Load(row + 2 * kLanes), s2);
    s3 = Fma(qd, Load(row + 3 * kLanes), s3);
  }
  const V sc = Set1(scale);
  Store(scores, Mul(s0, sc));
  Store(scores + kLanes, Mul(s1, sc));
  Store(scores + 2 * kLanes, Mul(s2, sc));
  Store(scores + 3 * kLanes, Mul(s3, sc));
}

// acc[0, head_dim) = acc * correction + sum_j p[j] * values[j]. Four vectors of the row at a
// time so that each key issues independent FMAs.
inline void AccumulateValues(float* acc, float correction, const float* p, const float* values,
                             int64_t num_keys, int64_t head_dim) {
  const V corr = Set1(correction);
  int64_t d = 0;
  for (; d + 4 * kLanes <= head_dim; d += 4 * kLanes) {
    V a0 = Mul(Load(acc + d), corr);
    V a1 = Mul(Load(acc + d + kLanes), corr);
    V a2 = Mul(Load(acc + d + 2 * kLanes), corr);
    V a3 = Mul(Load(acc + d + 3 * kLanes), corr);
    for (int64_t j = 0; j < num_keys; ++j) {
      const V pj = Set1(p[j]);
      const float* v = values + j * head_dim + d;
      a0 = Fma(pj, Load(v), a0);
      a1 = Fma(pj, Load(v + kLanes), a1);
      a2 = Fma(pj, Load(v + 2 * kLanes), a2);
      a3 = Fma(pj, Load(v + 3 * kLanes), a3);
    }
    Store(acc + d, a0);
    Store(acc + d + kLanes, a1);
    Store(acc + d + 2 * kLanes, a2);
    Store(acc + d + 3 * kLanes, a3);
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
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  pool.RunTasks(static_cast<int>(num_tasks), [&](int task) {
    const int64_t kv_head = task / num_query_blocks;
    const int64_t t_begin = (task % num_query_blocks) * kQueryBlock;
    const int64_t t_end = std::min(num_tokens, t_begin + kQueryBlock);
    const int64_t num_rows = group * (t_end - t_begin);
    const float* keys = k_cache + kv_head * kv_head_stride;
    const float* values = v_cache + kv_head * kv_head_stride;
    auto first_key = [&](int64_t pos) {
      return window > 0 ? std::max<int64_t>(0, pos - window + 1) : int64_t{0};
    };

    // Scratch: transposed key block, then per row: running max, running sum, accumulator.
    float* kt = tls_attention_scratch.Floats(
        static_cast<size_t>(head_dim * kKeyBlock + num_rows * (2 + head_dim)));
    float* row_max = kt + head_dim * kKeyBlock;
    float* row_sum = row_max + num_rows;
    float* row_acc = row_sum + num_rows;
    std::fill(row_max, row_max + num_rows, kNegInf);
    std::fill(row_sum, row_sum + num_rows, 0.0F);
    std::fill(row_acc, row_acc + num_rows * head_dim, 0.0F);

    const int64_t keys_begin = first_key(first_pos + t_begin);
    const int64_t keys_end = first_pos + t_end;  // exclusive
    alignas(64) float scores[kKeyBlock];
    for (int64_t b0 = keys_begin; b0 < keys_end; b0 += kKeyBlock) {
      const int64_t block_len = std::min(kKeyBlock, keys_end - b0);
      for (int64_t d = 0; d < head_dim; ++d) {
        float* dst = kt + d * kKeyBlock;
        for (int64_t j = 0; j < block_len; ++j) dst[j] = keys[(b0 + j) * head_dim + d];
        for (int64_t j = block_len; j < kKeyBlock; ++j) dst[j] = 0.0F;
      }
      for (int64_t t = t_begin; t < t_end; ++t) {
        const int64_t pos = first_pos + t;
        const int64_t lo = std::max(b0, first_key(pos)) - b0;
        const int64_t hi = std::min(b0 + block_len, pos + 1) - b0;  // exclusive
        if (lo >= hi) continue;
        for (int64_t g = 0; g < group; ++g) {
          const int64_t h = kv_head * group + g;
          const int64_t row = (t - t_begin) * group + g;
          BlockScores(q + t * row_stride + h * head_dim, kt, head_dim, params.scale, scores);
          float block_max = kNegInf;
          for (int64_t j = lo; j < hi; ++j) block_max = std::max(block_max, scores[j]);
          const float new_max = std::max(row_max[row], block_max);
          const float correction =
              row_max[row] == kNegInf ? 0.0F : std::exp(row_max[row] - new_max);
          // p[j] = exp(score - max) over the visible keys; masked ones were never computed.
          V sum = Zero();
          for (int64_t j = lo; j < hi; j += kLanes) {
            const int64_t count = std::min<int64_t>(kLanes, hi - j);
            StoreN(scores + j, Exp(Sub(LoadN(scores + j, count), Set1(new_max))), count);
            sum = Add(sum, LoadN(scores + j, count));  // zeros past count
          }
          row_sum[row] = row_sum[row] * correction + ReduceSum(sum);
          row_max[row] = new_max;
          AccumulateValues(row_acc + row * head_dim, correction, scores + lo,
                           values + (b0 + lo) * head_dim, hi - lo, head_dim);
        }
      }
    }
    for (int64_t t = t_begin; t < t_end; ++t) {
      for (int64_t g = 0; g < group; ++g) {
        const int64_t row = (t - t_begin) * group + g;
        const float inv = 1.0F / row_sum[row];
        float* o = out + t * row_stride + (kv_head * group + g) * head_dim;
        const float* acc = row_acc + row * head_dim;
        for (int64_t d = 0; d < head_dim; d += kLanes) {
          const int64_t count = std::min<int64_t>(kLanes, head_dim - d);
          StoreN(o + d, Mul(LoadN(acc + d, count), Set1(inv)), count);
        }
      }
    }
  });
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
