// MatMul: every SIMD path against the reference over odd shapes, dtypes, strides and bias.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "infer/core/error.h"
#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/ops.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

struct Shape3 {
  int64_t m, k, n;
};

void CheckMatMulIn(ThreadPool& pool, DType dtype, MatMulPrecision precision, Shape3 s,
                   bool with_bias, int64_t x_pad, int64_t y_pad, uint32_t seed) {
  const bool bf16_activations = precision == MatMulPrecision::kBf16 && dtype == DType::kBF16;
  const int64_t x_stride = s.k + x_pad;
  const int64_t y_stride = s.n + y_pad;
  // +1 float so that x starts misaligned.
  std::vector<float> x_store = RandomFloats(static_cast<size_t>(s.m * x_stride + 1), -1, 1, seed);
  const float* x = x_store.data() + 1;
  StoredTensor w =
      Store(dtype, {s.n, s.k}, RandomFloats(static_cast<size_t>(s.n * s.k), -1, 1, seed + 1));
  StoredTensor bias = Store(dtype, {s.n}, RandomFloats(static_cast<size_t>(s.n), -1, 1, seed + 2));
  std::vector<float> bias_f32 = bias.widened;

  std::vector<float> expected(static_cast<size_t>(s.m * y_stride), -7.0F);
  const Tensor widened = Tensor::Borrow(DType::kF32, {s.n, s.k}, w.widened.data());
  cpu::reference::MatMul(x, s.m, s.k, x_stride, PackedMatrix::Pack(widened),
                         with_bias ? bias_f32.data() : nullptr, expected.data(), y_stride, pool,
                         bf16_activations);
  std::vector<double> tolerance(static_cast<size_t>(s.m * s.n));
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double abs_sum = with_bias ? std::fabs(bias_f32[j]) : 0.0;
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const float xv = x[i * x_stride + kk];
        abs_sum +=
            std::fabs((bf16_activations ? Bf16ToF32(F32ToBf16(xv)) : xv) * w.widened[j * s.k + kk]);
      }
      tolerance[i * s.n + j] = 2e-6 * abs_sum + 1e-30;
    }
  }
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> y(static_cast<size_t>(s.m * y_stride), -7.0F);
    MatMul(x, s.m, s.k, x_stride, w.tensor, with_bias ? &bias.tensor : nullptr, y.data(), y_stride,
           pool, precision);
    int failures = 0;
    for (int64_t i = 0; i < s.m && failures < 5; ++i) {
      for (int64_t j = 0; j < y_stride && failures < 5; ++j) {
        const double want = expected[i * y_stride + j];
        const double got = y[i * y_stride + j];
        if (j >= s.n) {  // padding columns are untouched
          failures += got != -7.0F;
          EXPECT_EQ(got, -7.0F) << "wrote padding at " << i << "," << j;
          continue;
        }
        const double tol = tolerance[i * s.n + j];
        if (!(std::fabs(got - want) <= tol)) {
          ++failures;
          ADD_FAILURE() << Describe(isa, dtype) << " m=" << s.m << " k=" << s.k << " n=" << s.n
                        << " bias=" << with_bias << " y[" << i << "," << j << "] = " << got
                        << ", want " << want << " (tol " << tol << ")";
        }
      }
    }
  }
}

// Runs one shape on every SIMD ISA, in both precisions, and checks each output within a
// tolerance scaled by the sum of |x_i w_i| of its dot product. The reference for kBf16 rounds x
// to bf16 first (bf16 weights only; other dtypes ignore the precision).
void CheckMatMul(ThreadPool& pool, DType dtype, Shape3 s, bool with_bias, int64_t x_pad = 0,
                 int64_t y_pad = 0, uint32_t seed = 1) {
  for (MatMulPrecision precision : {MatMulPrecision::kF32, MatMulPrecision::kBf16}) {
    SCOPED_TRACE(std::string("precision ") + std::string(MatMulPrecisionName(precision)));
    CheckMatMulIn(pool, dtype, precision, s, with_bias, x_pad, y_pad, seed);
  }
}

class MatMulTest : public ::testing::TestWithParam<DType> {
 protected:
  ThreadPool& pool_ = TestPool();
};

TEST_P(MatMulTest, SweepsOddShapes) {
  INFER_SKIP_WITHOUT_SIMD();
  const DType dtype = GetParam();
  uint32_t seed = 10;
  for (int64_t m : {1, 2, 3, 4, 5, 7, 16, 33}) {
    for (int64_t k : {1, 3, 17, 31, 33, 65, 127}) {
      for (int64_t n : {1, 3, 17, 33, 67})
        CheckMatMul(pool_, dtype, {m, k, n}, (m + k + n) % 2 == 0, 0, 0, ++seed);
    }
  }
}

TEST_P(MatMulTest, LargerShapesCrossBlocks) {
  INFER_SKIP_WITHOUT_SIMD();
  const DType dtype = GetParam();
  // k over the GEMM k-block and n over its weight block; m over several register tiles.
  CheckMatMul(pool_, dtype, {128, 600, 300}, true, 0, 0, 3);
  CheckMatMul(pool_, dtype, {33, 513, 70}, false, 0, 0, 4);
  CheckMatMul(pool_, dtype, {1, 4099, 37}, true, 0, 0, 5);
  CheckMatMul(pool_, dtype, {3, 4099, 9}, false, 0, 0, 6);
  CheckMatMul(pool_, dtype, {2, 2048, 260}, false, 0, 0, 7);
}

TEST_P(MatMulTest, StridedRows) {
  INFER_SKIP_WITHOUT_SIMD();
  const DType dtype = GetParam();
  CheckMatMul(pool_, dtype, {1, 65, 31}, true, 5, 3, 8);
  CheckMatMul(pool_, dtype, {7, 33, 40}, false, 1, 9, 9);
  CheckMatMul(pool_, dtype, {40, 100, 70}, true, 3, 2, 10);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatMulTest,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(MatMulOpTest, ZeroSizesAndEmptyK) {
  INFER_SKIP_WITHOUT_SIMD();
  ThreadPool& pool = TestPool();
  Tensor w = Tensor::Empty(DType::kBF16, {3, 0});
  float bias_values[3] = {1, 2, 3};
  Tensor bias = Tensor::Borrow(DType::kF32, {3}, bias_values);
  float y[6] = {};
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    MatMul(nullptr, 2, 0, 0, w, &bias, y, 3, pool);
    EXPECT_EQ(y[0], 1.0F);
    EXPECT_EQ(y[5], 3.0F);
    MatMul(nullptr, 0, 0, 0, w, nullptr, nullptr, 3, pool);  // m = 0: nothing to do
  }
}

// kBf16 really rounds x for bf16 weights (x = 1 + 2^-10 is 1 in bf16), and leaves f16 / f32
// weights on the exact path.
TEST(MatMulOpTest, Bf16PrecisionRoundsActivationsOfBf16WeightsOnly) {
  INFER_SKIP_WITHOUT_SIMD();
  ThreadPool& pool = TestPool();
  const int64_t k = 64;
  for (int64_t m : {1, 70}) {  // the streaming and the blocked loop order
    const std::vector<float> x(static_cast<size_t>(m * k), 1.0F + 1.0F / 1024.0F);
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      StoredTensor w = Store(dtype, {2, k}, std::vector<float>(2 * k, 1.0F));
      const float exact = static_cast<float>(k) * (1.0F + 1.0F / 1024.0F);
      const float rounded = static_cast<float>(k);
      for (Isa isa : SimdIsas()) {
        ScopedIsa scoped(isa);
        std::vector<float> y(static_cast<size_t>(m * 2));
        MatMul(x.data(), m, k, k, w.tensor, nullptr, y.data(), 2, pool, MatMulPrecision::kBf16);
        EXPECT_EQ(y.back(), dtype == DType::kBF16 ? rounded : exact) << Describe(isa, dtype);
        MatMul(x.data(), m, k, k, w.tensor, nullptr, y.data(), 2, pool, MatMulPrecision::kF32);
        EXPECT_EQ(y.back(), exact) << Describe(isa, dtype);
      }
    }
  }
}

// A row's result does not depend on the other rows of the call: the same bits alone, in a
// small batch (the streaming loop order) and in a large one (the blocked order), on every ISA,
// dtype and precision, with k over several k-blocks. The serving engine's "batched output
// equals single-request output" rests on this.
TEST(MatMulOpTest, RowsAreBatchInvariant) {
  INFER_SKIP_WITHOUT_SIMD();
  ThreadPool& pool = TestPool();
  const int64_t m = 70;
  const int64_t n = 75;
  for (int64_t k : {129, 1101}) {
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), -1, 1, 21);
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      StoredTensor w = Store(dtype, {n, k}, RandomFloats(static_cast<size_t>(n * k), -1, 1, 22));
      const PackedMatrix packed = PackedMatrix::Pack(w.tensor);
      for (MatMulPrecision precision : {MatMulPrecision::kF32, MatMulPrecision::kBf16}) {
        for (Isa isa : SimdIsas()) {
          ScopedIsa scoped(isa);
          std::vector<float> all(static_cast<size_t>(m * n));
          MatMul(x.data(), m, k, k, packed, nullptr, all.data(), n, pool, precision);
          std::vector<float> part(static_cast<size_t>(m * n));
          // Rows 5..22 as a batch of 18, then rows one at a time.
          MatMul(x.data() + 5 * k, 18, k, k, packed, nullptr, part.data(), n, pool, precision);
          for (int64_t i = 0; i < 18 * n; ++i) {
            ASSERT_EQ(part[i], all[5 * n + i])
                << Describe(isa, dtype) << " " << MatMulPrecisionName(precision) << " k=" << k;
          }
          for (int64_t row : {0, 13, 14, 69}) {
            MatMul(x.data() + row * k, 1, k, k, packed, nullptr, part.data(), n, pool, precision);
            for (int64_t j = 0; j < n; ++j) {
              ASSERT_EQ(part[j], all[row * n + j])
                  << Describe(isa, dtype) << " " << MatMulPrecisionName(precision) << " k=" << k
                  << " row " << row;
            }
          }
        }
      }
    }
  }
}

// MatMuls (q/k/v and gate/up in one region) gives each output the bits of its own MatMul:
// odd sizes, a bias on one output, k over several blocks, both loop orders, both precisions,
// every path; weights of different dtypes take one MatMul each.
TEST(MatMulOpTest, MatMulsEqualOneMatMulPerOutput) {
  INFER_SKIP_WITHOUT_SIMD();
  const int64_t sizes[] = {75, 33, 1000};
  StoredTensor bias = Store(DType::kF32, {33}, RandomFloats(33, -1, 1, 30));
  for (int64_t k : {161, 1101}) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      std::vector<StoredTensor> weights;
      std::vector<PackedMatrix> packed;
      for (int64_t n : sizes) {
        weights.push_back(
            Store(dtype, {n, k}, RandomFloats(static_cast<size_t>(n * k), -1, 1, 31)));
        packed.push_back(PackedMatrix::Pack(weights.back().tensor));
      }
      StoredTensor other = Store(dtype == DType::kF32 ? DType::kBF16 : DType::kF32, {sizes[2], k},
                                 RandomFloats(static_cast<size_t>(sizes[2] * k), -1, 1, 32));
      const PackedMatrix mixed_last = PackedMatrix::Pack(other.tensor);
      for (bool mixed : {false, true}) {
        for (int64_t m : {1, 5, 17, 70}) {
          const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), -1, 1, 33 + m);
          for (MatMulPrecision precision : {MatMulPrecision::kF32, MatMulPrecision::kBf16}) {
            for (Isa isa : SimdIsas()) {
              ScopedIsa scoped(isa);
              ASSERT_NO_FATAL_FAILURE(ExpectMatMulsEqualEachMatMul(
                  x, m, k, {&packed[0], &packed[1], mixed ? &mixed_last : &packed[2]}, bias.tensor,
                  precision,
                  Describe(isa, dtype) + " " + std::string(MatMulPrecisionName(precision)) +
                      " k=" + std::to_string(k) + " mixed=" + std::to_string(mixed)));
            }
          }
        }
      }
    }
  }
}

TEST(MatMulOpTest, PackedMatrixKeepsEveryValueAndPadsWithZeros) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const int64_t n = 33;
    const int64_t k = 5;
    StoredTensor w = Store(dtype, {n, k}, RandomFloats(static_cast<size_t>(n * k), -1, 1, 23));
    const PackedMatrix packed = PackedMatrix::Pack(w.tensor);
    EXPECT_EQ(packed.rows(), n);
    EXPECT_EQ(packed.cols(), k);
    EXPECT_EQ(packed.dtype(), dtype);
    EXPECT_EQ(packed.num_panels(), 2);
    EXPECT_EQ(packed.steps(), 3);
    // Two panels of 3 steps of 2 x 32 elements.
    EXPECT_EQ(packed.size_bytes(), 2 * 3 * 64 * DTypeSize(dtype));
    std::vector<bool> seen(packed.size_bytes() / DTypeSize(dtype), false);
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t col = 0; col < k; ++col) {
        ASSERT_EQ(packed.At(row, col), w.widened[row * k + col]) << DTypeName(dtype);
        const int64_t index = packed.Index(row, col);
        ASSERT_FALSE(seen[index]) << "two elements at " << index;
        seen[index] = true;
      }
    }
    Tensor storage = Tensor::Borrow(dtype, {static_cast<int64_t>(seen.size())},
                                    const_cast<void*>(packed.data()));
    for (size_t i = 0; i < seen.size(); ++i) {
      if (!seen[i]) {
        ASSERT_EQ(ElementAsF32(storage, static_cast<int64_t>(i)), 0.0F) << i;
      }
    }
  }
  ThreadPool& pool = TestPool();
  EXPECT_THROW(PackedMatrix::Pack(Tensor::Empty(DType::kI32, {2, 2}), &pool), Error);
  EXPECT_THROW(PackedMatrix::Pack(Tensor::Empty(DType::kF32, {4}), &pool), Error);
}

TEST(MatMulOpTest, PrecisionNames) {
  EXPECT_EQ(ParseMatMulPrecision("f32"), MatMulPrecision::kF32);
  EXPECT_EQ(ParseMatMulPrecision("bf16"), MatMulPrecision::kBf16);
  EXPECT_EQ(MatMulPrecisionName(MatMulPrecision::kBf16), "bf16");
  EXPECT_THROW(ParseMatMulPrecision("fp8"), Error);
}

// auto: bf16 on the tiles, and on AVX512_BF16 only where its dot product outruns two f32 FMAs
// (AMD); f32 on every other level, which would only emulate the rounding.
TEST(MatMulOpTest, AutoPrecisionFollowsTheActiveIsa) {
  for (Isa isa :
       {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAvx512Amx}) {
    if (!IsaSupported(isa)) continue;
    ScopedIsa scoped(isa);
    const bool bf16 = isa == Isa::kAvx512Amx || (isa == Isa::kAvx512Bf16 && Bf16DotOutrunsF32());
    EXPECT_EQ(ParseMatMulPrecision("auto"), bf16 ? MatMulPrecision::kBf16 : MatMulPrecision::kF32)
        << IsaName(isa);
  }
}

TEST(MatMulOpTest, RejectsBadArguments) {
  ThreadPool& pool = TestPool();
  Tensor w = Tensor::Empty(DType::kBF16, {4, 8});
  Tensor ids = Tensor::Empty(DType::kI32, {4, 8});
  Tensor short_bias = Tensor::Empty(DType::kF32, {3});
  std::vector<float> x(16), y(16);
  EXPECT_THROW(MatMul(x.data(), 1, 7, 8, w, nullptr, y.data(), 4, pool), Error);  // k mismatch
  EXPECT_THROW(MatMul(x.data(), 1, 8, 4, w, nullptr, y.data(), 4, pool), Error);  // x_stride < k
  EXPECT_THROW(MatMul(x.data(), 1, 8, 8, w, nullptr, y.data(), 3, pool), Error);  // y_stride < n
  EXPECT_THROW(MatMul(x.data(), 1, 8, 8, ids, nullptr, y.data(), 4, pool), Error);
  EXPECT_THROW(MatMul(x.data(), 1, 8, 8, w, &short_bias, y.data(), 4, pool), Error);
  try {
    MatMul(x.data(), 1, 7, 8, w, nullptr, y.data(), 4, pool);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MatMul"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace infer::kernels
