// LoraAdd against a float64 product of the stored (widened) values, at every SIMD level and the
// reference, and row by row the same bits whatever the other rows and their adapters are.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "infer/core/error.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

struct Adapter {
  StoredTensor a, b;  // b: [n, rank], as PEFT stores lora_B
  LoraMatrices delta;
};

Adapter MakeAdapter(DType dtype, int64_t rank, int64_t k, int64_t n, float scale, uint32_t seed) {
  Adapter adapter{Store(dtype, {rank, k}, RandomFloats(rank * k, -0.5F, 0.5F, seed)),
                  Store(dtype, {n, rank}, RandomFloats(n * rank, -0.5F, 0.5F, seed + 1)),
                  {}};
  adapter.delta = LoraMatrices::Make(adapter.a.tensor, adapter.b.tensor, scale);
  return adapter;
}

// y0[i] + scale * B (A x[i]) in float64 over the stored values.
double Expected(const Adapter& adapter, const std::vector<float>& x, const std::vector<float>& y0,
                int64_t row, int64_t col, int64_t k, int64_t n) {
  const int64_t rank = adapter.delta.rank();
  double sum = y0[row * n + col];
  for (int64_t j = 0; j < rank; ++j) {
    double t = 0.0;
    for (int64_t c = 0; c < k; ++c) {
      t += static_cast<double>(x[row * k + c]) * adapter.a.widened[j * k + c];
    }
    sum += adapter.delta.scale * t * adapter.b.widened[col * rank + j];
  }
  return sum;
}

std::vector<Isa> AllLevels() {
  std::vector<Isa> isas = SimdIsas();
  isas.push_back(Isa::kScalar);
  return isas;
}

TEST(LoraTest, AddsScaledLowRankProductOfEachRowsOwnAdapter) {
  const int64_t m = 7, k = 77, n = 45;
  const std::vector<float> x = RandomFloats(m * k, -1.0F, 1.0F, 1);
  const std::vector<float> y0 = RandomFloats(m * n, -1.0F, 1.0F, 2);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Adapter first = MakeAdapter(dtype, 5, k, n, 2.0F, 10);
    const Adapter second = MakeAdapter(dtype, 16, k, n, 0.25F, 20);
    const std::vector<int32_t> first_rows = {0, 3, 4}, second_rows = {1, 6};  // 2, 5: base
    const LoraRows groups[] = {{&first.delta, first_rows}, {&second.delta, second_rows}};
    for (Isa isa : AllLevels()) {
      ScopedIsa scoped(isa);
      std::vector<float> y = y0;
      const LoraOutput output{groups, y.data(), n};
      LoraAdd(x.data(), m, k, k, {&output, 1}, TestPool());
      for (int64_t i = 0; i < m; ++i) {
        const Adapter* adapter = i == 0 || i == 3 || i == 4 ? &first
                                 : i == 1 || i == 6         ? &second
                                                            : nullptr;
        for (int64_t o = 0; o < n; ++o) {
          const double want =
              adapter != nullptr ? Expected(*adapter, x, y0, i, o, k, n) : y0[i * n + o];
          EXPECT_NEAR(y[i * n + o], want, 2e-5 * (1.0 + std::abs(want)))
              << IsaName(isa) << " " << DTypeName(dtype) << " row " << i << " col " << o;
        }
      }
    }
  }
}

TEST(LoraTest, RowBitsDoNotDependOnTheOtherRowsOrTheirAdapters) {
  const int64_t k = 300, n = 1100, m = 40;  // n: two column tasks, a partial panel
  const std::vector<float> x = RandomFloats(m * k, -1.0F, 1.0F, 3);
  const std::vector<float> y0 = RandomFloats(m * n, -1.0F, 1.0F, 4);
  const Adapter first = MakeAdapter(DType::kBF16, 16, k, n, 1.5F, 30);
  const Adapter second = MakeAdapter(DType::kBF16, 8, k, n, 0.5F, 40);
  for (Isa isa : AllLevels()) {
    ScopedIsa scoped(isa);
    // Every row alone with the first adapter.
    std::vector<float> alone = y0;
    for (int32_t i = 0; i < m; ++i) {
      const int32_t row[] = {0};
      const LoraRows group[] = {{&first.delta, row}};
      const LoraOutput output{group, alone.data() + i * n, n};
      LoraAdd(x.data() + i * k, 1, k, k, {&output, 1}, TestPool());
    }
    // The same rows in one call, every third one given to the second adapter.
    std::vector<int32_t> first_rows, second_rows;
    for (int32_t i = 0; i < m; ++i) (i % 3 == 1 ? second_rows : first_rows).push_back(i);
    const LoraRows groups[] = {{&second.delta, second_rows}, {&first.delta, first_rows}};
    std::vector<float> batched = y0;
    const LoraOutput output{groups, batched.data(), n};
    LoraAdd(x.data(), m, k, k, {&output, 1}, TestPool());
    for (const int32_t i : first_rows) {
      for (int64_t o = 0; o < n; ++o) {
        ASSERT_EQ(batched[i * n + o], alone[i * n + o]) << IsaName(isa) << " row " << i;
      }
    }
  }
}

TEST(LoraTest, RejectsMismatchedShapesAndRowsOutOfRange) {
  const Adapter adapter = MakeAdapter(DType::kF32, 4, 8, 6, 1.0F, 50);
  std::vector<float> x(16), y(12);
  const int32_t outside[] = {2};
  const LoraRows group[] = {{&adapter.delta, outside}};
  const LoraOutput output{group, y.data(), 6};
  EXPECT_THROW(LoraAdd(x.data(), 2, 8, 8, {&output, 1}, TestPool()), Error);
  const int32_t inside[] = {1};
  const LoraRows fine[] = {{&adapter.delta, inside}};
  const LoraOutput wrong_k{fine, y.data(), 6};
  EXPECT_THROW(LoraAdd(x.data(), 2, 7, 8, {&wrong_k, 1}, TestPool()), Error);
}

}  // namespace
}  // namespace infer::kernels
