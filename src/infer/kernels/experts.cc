#include "infer/kernels/experts.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "infer/core/error.h"

namespace infer::kernels {

void SoftmaxTopK(const float* logits, int64_t m, int64_t num_experts, int64_t top_k, bool normalize,
                 int32_t* ids, float* weights) {
  INFER_CHECK(num_experts > 0 && top_k > 0 && top_k <= num_experts,
              "SoftmaxTopK: top {} of {} experts", top_k, num_experts);
  INFER_CHECK(m >= 0, "SoftmaxTopK: m = {}", m);
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t i = 0; i < m; ++i) {
    const float* row = logits + i * num_experts;
    // The largest logits are the largest probabilities; ties go to the lower id.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    const double max = row[order[0]];
    double sum = 0.0;
    for (int64_t e = 0; e < num_experts; ++e) sum += std::exp(static_cast<double>(row[e]) - max);
    float kept = 0.0F;
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      ids[i * top_k + j] = e;
      weights[i * top_k + j] =
          static_cast<float>(std::exp(static_cast<double>(row[e]) - max) / sum);
      kept += weights[i * top_k + j];
    }
    if (normalize) {
      for (int64_t j = 0; j < top_k; ++j) weights[i * top_k + j] /= kept;
    }
  }
}

namespace {

void CheckExpert(const Expert& e, int64_t k, int64_t id) {
  INFER_CHECK(e.gate.defined() && e.up.defined() && e.down.defined(),
              "MixtureOfExperts: expert {} is not packed", id);
  const int64_t inter = e.gate.rows();
  INFER_CHECK(e.gate.cols() == k && e.up.cols() == k && e.up.rows() == inter &&
                  e.down.rows() == k && e.down.cols() == inter,
              "MixtureOfExperts: expert {} has gate [{}, {}], up [{}, {}], down [{}, {}] for a "
              "hidden size of {}",
              id, e.gate.rows(), e.gate.cols(), e.up.rows(), e.up.cols(), e.down.rows(),
              e.down.cols(), k);
}

}  // namespace

void MixtureOfExperts(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Expert> experts, const ExpertRouting& routing,
                      GatedActivation activation, float* y, int64_t y_stride, ThreadPool& pool,
                      MatMulPrecision precision, QuantizedActivations activations) {
  INFER_CHECK(m >= 0 && k > 0 && x_stride >= k && y_stride >= k,
              "MixtureOfExperts: m = {}, k = {}, x_stride = {}, y_stride = {}", m, k, x_stride,
              y_stride);
  INFER_CHECK(!experts.empty() && routing.per_row > 0 &&
                  routing.per_row <= static_cast<int64_t>(experts.size()),
              "MixtureOfExperts: {} experts per row of {}", routing.per_row, experts.size());
  if (m == 0) return;
  const auto num_experts = static_cast<int64_t>(experts.size());
  const int64_t per_row = routing.per_row;
  const int64_t slots = m * per_row;
  // Rows per expert, then each slot's place in the expert-major order (rows ascending).
  std::vector<int64_t> first(static_cast<size_t>(num_experts + 1), 0);
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t e = routing.ids[s];
    INFER_CHECK(e >= 0 && e < num_experts, "MixtureOfExperts: row {} chose expert {} of {}",
                s / per_row, e, num_experts);
    ++first[static_cast<size_t>(e) + 1];
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<int64_t> place(static_cast<size_t>(slots));
  std::vector<int32_t> row_of(static_cast<size_t>(slots));
  {
    std::vector<int64_t> next(first.begin(), first.end() - 1);
    for (int64_t s = 0; s < slots; ++s) {
      const auto e = static_cast<size_t>(routing.ids[s]);
      for (int64_t j = s - s % per_row; j < s; ++j) {
        INFER_CHECK(routing.ids[j] != routing.ids[s],
                    "MixtureOfExperts: row {} chose expert {} twice", s / per_row, routing.ids[s]);
      }
      place[static_cast<size_t>(s)] = next[e];
      row_of[static_cast<size_t>(next[e]++)] = static_cast<int32_t>(s / per_row);
    }
  }
  std::vector<int32_t> active;
  int64_t inter_max = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (first[e + 1] == first[e]) continue;
    CheckExpert(experts[static_cast<size_t>(e)], k, e);
    active.push_back(static_cast<int32_t>(e));
    inter_max = std::max(inter_max, experts[static_cast<size_t>(e)].gate.rows());
  }
  // Per slot (expert-major): its row of x, the gate and up products, the expert's output.
  thread_local std::vector<float> gathered, gate, up, out;
  gathered.resize(static_cast<size_t>(slots * k));
  gate.resize(static_cast<size_t>(slots * inter_max));
  up.resize(static_cast<size_t>(slots * inter_max));
  out.resize(static_cast<size_t>(slots * k));
  float* const gathered_at = gathered.data();
  float* const gate_at = gate.data();
  float* const up_at = up.data();
  float* const out_at = out.data();
  const auto run_expert = [&](int32_t e) {
    const Expert& expert = experts[static_cast<size_t>(e)];
    const int64_t begin = first[static_cast<size_t>(e)];
    const int64_t rows = first[static_cast<size_t>(e) + 1] - begin;
    const int64_t inter = expert.gate.rows();
    float* xs = gathered_at + begin * k;
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(x + row_of[static_cast<size_t>(begin + r)] * x_stride, k, xs + r * k);
    }
    float* g = gate_at + begin * inter_max;
    float* u = up_at + begin * inter_max;
    const MatMulOutput gate_up[] = {{&expert.gate, nullptr, g, inter_max},
                                    {&expert.up, nullptr, u, inter_max}};
    MatMuls(xs, rows, k, k, gate_up, pool, precision, activations);
    for (int64_t r = 0; r < rows; ++r) {
      if (activation == GatedActivation::kSilu) {
        SiluMul(g + r * inter_max, u + r * inter_max, g + r * inter_max, inter);
      } else {
        GeluTanhMul(g + r * inter_max, u + r * inter_max, g + r * inter_max, inter);
      }
    }
    MatMul(g, rows, inter, inter_max, expert.down, nullptr, out_at + begin * k, k, pool, precision,
           activations);
  };
  const auto num_active = static_cast<int64_t>(active.size());
  if (pool.num_threads() == 1 || num_active >= 2 * pool.num_threads()) {
    // One task per expert (products inside a task run on its thread).
    pool.RunTasks(static_cast<int>(num_active),
                  [&](int task) { run_expert(active[static_cast<size_t>(task)]); });
  } else {
    for (const int32_t e : active) run_expert(e);
  }
  // Each row's sum in ascending expert id.
  const auto combine = [&](int64_t begin, int64_t end) {
    std::vector<std::pair<int32_t, int64_t>> chosen(static_cast<size_t>(per_row));
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < per_row; ++j) {
        chosen[static_cast<size_t>(j)] = {routing.ids[i * per_row + j], i * per_row + j};
      }
      std::sort(chosen.begin(), chosen.end());
      float* yi = y + i * y_stride;
      for (size_t j = 0; j < chosen.size(); ++j) {
        const int64_t s = chosen[j].second;
        const float w = routing.weights[s];
        const float* o = out_at + place[static_cast<size_t>(s)] * k;
        if (j == 0) {
          for (int64_t c = 0; c < k; ++c) yi[c] = w * o[c];
        } else {
          for (int64_t c = 0; c < k; ++c) yi[c] += w * o[c];
        }
      }
    }
  };
  if (m >= 16) {
    pool.ParallelFor(m, 4, combine);
  } else {
    combine(0, m);
  }
}

}  // namespace infer::kernels
