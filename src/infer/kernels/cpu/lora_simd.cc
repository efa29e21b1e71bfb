// LoRA's gathered shrink and expand (ops.h LoraAdd), compiled once per ISA. Every value a row
// gets is summed in an order fixed by k, the rank and its column alone: one accumulator per
// (row, rank) over k's vectors, then one sum across its lanes; one chain of FMAs over the rank
// per output vector. So a row's bits do not depend on the rows or adapters beside it.
#include <algorithm>
#include <cstddef>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

void LoraShrink(const float* x, int64_t x_stride, std::span<const int32_t> rows, int64_t k,
                DType dtype, const void* a, int64_t j0, int64_t j1, float scale, float* t,
                int64_t t_stride) {
  // Up to four rows of a at a time against one row of x: x is read once per four.
  constexpr int64_t kRanks = 4;
  const size_t element = DTypeSize(dtype);
  for (const int32_t row : rows) {
    const float* xi = x + row * x_stride;
    for (int64_t j = j0; j < j1; j += kRanks) {
      const int64_t count = std::min(kRanks, j1 - j);
      V acc[kRanks] = {Zero(), Zero(), Zero(), Zero()};
      const auto* a_rows = static_cast<const std::byte*>(a) + j * k * element;
      ForEachVector(k, [&](int64_t c, int64_t lanes) {
        const V xv = LoadN(xi + c, lanes);
        for (int64_t r = 0; r < count; ++r) {
          acc[r] = Fma(xv, LoadWidened(dtype, a_rows + r * k * element, c, lanes), acc[r]);
        }
      });
      for (int64_t r = 0; r < count; ++r) t[row * t_stride + j + r] = scale * ReduceSum(acc[r]);
    }
  }
}

void LoraExpand(const float* t, int64_t t_stride, std::span<const int32_t> rows, int64_t rank,
                DType dtype, const void* b_t, int64_t n, int64_t o0, int64_t o1, float* y,
                int64_t y_stride) {
  const size_t element = DTypeSize(dtype);
  const auto* b_rows = static_cast<const std::byte*>(b_t);
  for (const int32_t row : rows) {
    const float* ti = t + row * t_stride;
    float* yi = y + row * y_stride;
    ForEachVector(o1 - o0, [&](int64_t offset, int64_t lanes) {
      const int64_t o = o0 + offset;
      V acc = LoadN(yi + o, lanes);
      for (int64_t j = 0; j < rank; ++j) {
        acc = Fma(Set1(ti[j]), LoadWidened(dtype, b_rows + j * n * element, o, lanes), acc);
      }
      StoreN(yi + o, acc, lanes);
    });
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
