// LoRA's gathered shrink and expand (ops.h LoraAdd), compiled once per ISA. Every value a row
// gets is summed in an order fixed by k, the rank and its column alone: one accumulator per
// (row, rank) over k's vectors, then one sum across its lanes; one chain of FMAs over the rank
// per output vector, starting from y. Blocking (several rows and ranks, or rows and output
// vectors, at once: what makes a prefill's many rows cheap) only chooses which of those chains
// run side by side, so a row's bits do not depend on the rows or adapters beside it. The blocks
// are templates over the dtype and their sizes, so that their accumulators stay in registers.
#include <algorithm>
#include <cstddef>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

// Register blocks: rows x ranks (shrink), rows x output vectors (expand); AVX2's 16 registers
// take half the width of AVX-512's 32.
constexpr int kShrinkRows = kLanes == 16 ? 4 : 2;
constexpr int kShrinkRanks = 4;
constexpr int kExpandRows = 4;
constexpr int kExpandVectors = kLanes == 16 ? 4 : 2;

// Lanes of a vector at `offset` that lie before `end` (0 to kLanes).
inline int64_t LanesBefore(int64_t end, int64_t offset) {
  return std::clamp<int64_t>(end - offset, 0, kLanes);
}

// t[row, j .. j + C) for R rows: C rows of a (from a_rows, row_bytes apart) against each.
template <DType D, int R, int C>
void ShrinkBlock(const float* x, int64_t x_stride, const int32_t* rows, int64_t k,
                 const std::byte* a_rows, size_t row_bytes, int64_t j, float scale, float* t,
                 int64_t t_stride) {
  V acc[R][C];
#pragma GCC unroll 16
  for (auto& row : acc) {
#pragma GCC unroll 16
    for (V& v : row) v = Zero();
  }
  const float* xs[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) xs[i] = x + rows[i] * x_stride;
  const auto step = [&](int64_t c, int64_t lanes) {
    V xv[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) xv[i] = LoadN(xs[i] + c, lanes);
#pragma GCC unroll 16
    for (int r = 0; r < C; ++r) {
      const V av = LoadWidened(D, a_rows + static_cast<size_t>(r) * row_bytes, c, lanes);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][r] = Fma(xv[i], av, acc[i][r]);
    }
  };
  int64_t c = 0;
  for (; c + kLanes <= k; c += kLanes) step(c, kLanes);
  if (c < k) step(c, k - c);
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < C; ++r) t[rows[i] * t_stride + j + r] = scale * ReduceSum(acc[i][r]);
  }
}

// y[row, o .. o + kExpandVectors kLanes) (what lies before `end`) for R rows, from one panel
// of b (its rank rows of kLoraPanel columns from `panel`).
template <DType D, int R>
void ExpandBlock(const float* t, int64_t t_stride, const int32_t* rows, int64_t rank,
                 const std::byte* panel, int64_t o, int64_t end, float* y, int64_t y_stride) {
  const int64_t in_panel = o % kLoraPanel;
  const size_t row_bytes = static_cast<size_t>(kLoraPanel) * DTypeSize(D);
  V acc[R][kExpandVectors];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int v = 0; v < kExpandVectors; ++v) {
      const int64_t at = o + v * kLanes;
      acc[i][v] = LoadN(y + rows[i] * y_stride + at, LanesBefore(end, at));
    }
  }
  for (int64_t j = 0; j < rank; ++j) {
    V tj[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) tj[i] = Set1(t[rows[i] * t_stride + j]);
    const std::byte* b = panel + static_cast<size_t>(j) * row_bytes;
#pragma GCC unroll 16
    for (int v = 0; v < kExpandVectors; ++v) {
      // Whole vectors: a block lies inside its panel, which holds zeros past n.
      const V bv = LoadWidened(D, b, in_panel + v * kLanes, kLanes);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][v] = Fma(tj[i], bv, acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int v = 0; v < kExpandVectors; ++v) {
      const int64_t at = o + v * kLanes;
      if (at < end) StoreN(y + rows[i] * y_stride + at, acc[i][v], LanesBefore(end, at));
    }
  }
}

// Calls block.template operator()<B>(first) over `rows` in blocks of kBlock, then once for
// the remaining B < kBlock rows.
template <int kBlock, typename Block>
void ForRowBlocks(std::span<const int32_t> rows, Block&& block) {
  size_t i = 0;
  for (; i + kBlock <= rows.size(); i += kBlock) block.template operator()<kBlock>(i);
  switch (rows.size() - i) {
    case 3:
      if constexpr (kBlock > 3) block.template operator()<3>(i);
      break;
    case 2:
      if constexpr (kBlock > 2) block.template operator()<2>(i);
      break;
    case 1:
      block.template operator()<1>(i);
      break;
    default:
      break;
  }
}

template <DType D>
void Shrink(const float* x, int64_t x_stride, std::span<const int32_t> rows, int64_t k,
            const void* a, int64_t j0, int64_t j1, float scale, float* t, int64_t t_stride) {
  const size_t row_bytes = static_cast<size_t>(k) * DTypeSize(D);
  for (int64_t j = j0; j < j1; j += kShrinkRanks) {
    const auto* a_rows = static_cast<const std::byte*>(a) + static_cast<size_t>(j) * row_bytes;
    const int64_t ranks = std::min<int64_t>(kShrinkRanks, j1 - j);
    ForRowBlocks<kShrinkRows>(rows, [&]<int R>(size_t first) {
      const int32_t* block = rows.data() + first;
      switch (ranks) {
        case 4:
          return ShrinkBlock<D, R, 4>(x, x_stride, block, k, a_rows, row_bytes, j, scale, t,
                                      t_stride);
        case 3:
          return ShrinkBlock<D, R, 3>(x, x_stride, block, k, a_rows, row_bytes, j, scale, t,
                                      t_stride);
        case 2:
          return ShrinkBlock<D, R, 2>(x, x_stride, block, k, a_rows, row_bytes, j, scale, t,
                                      t_stride);
        default:
          return ShrinkBlock<D, R, 1>(x, x_stride, block, k, a_rows, row_bytes, j, scale, t,
                                      t_stride);
      }
    });
  }
}

template <DType D>
void Expand(const float* t, int64_t t_stride, std::span<const int32_t> rows, int64_t rank,
            const void* b, int64_t o0, int64_t o1, float* y, int64_t y_stride) {
  static_assert(kLoraPanel % (kExpandVectors * kLanes) == 0, "a block must not cross a panel");
  const size_t panel_bytes = static_cast<size_t>(rank * kLoraPanel) * DTypeSize(D);
  // Output vectors start at o0 (a panel's start) + a multiple of kLanes, whatever the blocks.
  for (int64_t o = o0; o < o1; o += kExpandVectors * kLanes) {
    const std::byte* panel =
        static_cast<const std::byte*>(b) + static_cast<size_t>(o / kLoraPanel) * panel_bytes;
    ForRowBlocks<kExpandRows>(rows, [&]<int R>(size_t first) {
      ExpandBlock<D, R>(t, t_stride, rows.data() + first, rank, panel, o, o1, y, y_stride);
    });
  }
}

}  // namespace

void LoraShrink(const float* x, int64_t x_stride, std::span<const int32_t> rows, int64_t k,
                DType dtype, const void* a, int64_t j0, int64_t j1, float scale, float* t,
                int64_t t_stride) {
  switch (dtype) {
    case DType::kBF16:
      return Shrink<DType::kBF16>(x, x_stride, rows, k, a, j0, j1, scale, t, t_stride);
    case DType::kF16:
      return Shrink<DType::kF16>(x, x_stride, rows, k, a, j0, j1, scale, t, t_stride);
    default:
      return Shrink<DType::kF32>(x, x_stride, rows, k, a, j0, j1, scale, t, t_stride);
  }
}

void LoraExpand(const float* t, int64_t t_stride, std::span<const int32_t> rows, int64_t rank,
                DType dtype, const void* b, int64_t o0, int64_t o1, float* y, int64_t y_stride) {
  switch (dtype) {
    case DType::kBF16:
      return Expand<DType::kBF16>(t, t_stride, rows, rank, b, o0, o1, y, y_stride);
    case DType::kF16:
      return Expand<DType::kF16>(t, t_stride, rows, rank, b, o0, o1, y, y_stride);
    default:
      return Expand<DType::kF32>(t, t_stride, rows, rank, b, o0, o1, y, y_stride);
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
