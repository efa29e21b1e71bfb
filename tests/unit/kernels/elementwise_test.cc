// Elementwise and per-row kernels: SIMD paths against the reference over swept sizes and
// misaligned pointers; exp and tanh against the C library over wide ranges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "infer/core/error.h"
#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/ops.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

// 0 .. 2 x 16 lanes + 1, then odd sizes.
std::vector<int64_t> Sizes() {
  std::vector<int64_t> sizes;
  for (int64_t n = 0; n <= 33; ++n) sizes.push_back(n);
  for (int64_t n : {63, 65, 127, 4099}) sizes.push_back(n);
  return sizes;
}

// Misalignments in floats: 0, lanes / 4, 3 lanes / 5 for 16 lanes.
constexpr int64_t kOffsets[] = {0, 4, 9};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double rel,
                double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= rel * std::fabs(want[i]) + abs)) {
      ++failures;
      ADD_FAILURE() << what << " [" << i << "] = " << got[i] << ", want " << want[i];
    }
  }
}

TEST(ElementwiseTest, ActivationsAndAdd) {
  INFER_SKIP_WITHOUT_SIMD();
  for (Isa isa : SimdIsas()) {
    for (int64_t n : Sizes()) {
      for (int64_t offset : kOffsets) {
        const std::string what = std::string(IsaName(isa)) + " n=" + std::to_string(n) +
                                 " offset=" + std::to_string(offset);
        std::vector<float> gate =
            RandomFloats(static_cast<size_t>(n + offset), -12, 12, static_cast<uint32_t>(n));
        std::vector<float> up =
            RandomFloats(static_cast<size_t>(n + offset), -2, 2, static_cast<uint32_t>(n + 1));
        const float* g = gate.data() + offset;
        const float* u = up.data() + offset;
        std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n) + 1, 5.0F);
        ScopedIsa scoped(isa);

        cpu::reference::SiluMul(g, u, want.data(), n);
        SiluMul(g, u, got.data(), n);
        EXPECT_EQ(got[n], 5.0F) << "SiluMul wrote past the end " << what;
        got.resize(static_cast<size_t>(n));
        ExpectNear(got, want, 1e-6, 1e-30, "SiluMul " + what);

        cpu::reference::GeluTanhMul(g, u, want.data(), n);
        GeluTanhMul(g, u, got.data(), n);
        // The tail (x < -3) is tiny; its error scales with |u|, the float rounding of the input.
        ExpectNear(got, want, 2e-6, 1e-9, "GeluTanhMul " + what);

        std::vector<float> sum(g, g + n);
        Add(sum.data(), u, n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], g[i] + u[i]) << "Add " << what;

        std::vector<float> capped(g, g + n), capped_want(g, g + n);
        SoftCap(capped.data(), n, 5.0F);
        cpu::reference::SoftCap(capped_want.data(), n, 5.0F);
        ExpectNear(capped, capped_want, 1e-6, 1e-30, "SoftCap " + what);
      }
    }
  }
}

TEST(ElementwiseTest, ExpMatchesLibmOverItsRange) {
  INFER_SKIP_WITHOUT_SIMD();
  std::vector<float> x;
  for (float v = -100.0F; v <= 88.0F; v += 0.0037F) x.push_back(v);
  for (float v : {0.0F, -0.0F, 1e-30F, -1e-30F, 1e-8F}) x.push_back(v);
  std::vector<float> want(x.size()), got(x.size());
  cpu::reference::ExpArray(x.data(), want.data(), static_cast<int64_t>(x.size()));
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    if (isa == Isa::kAvx2)
      cpu::avx2::ExpArray(x.data(), got.data(), static_cast<int64_t>(x.size()));
    if (isa == Isa::kAvx512)
      cpu::avx512::ExpArray(x.data(), got.data(), static_cast<int64_t>(x.size()));
    // Relative accuracy for normal results; absolute below FLT_MIN where results flush to 0.
    ExpectNear(got, want, 3e-7, 1.2e-38, std::string("Exp ") + std::string(IsaName(isa)));
  }
}

// The sampler's weights: every level within ExpShifted's stated bound of std::exp over the whole
// range of d = x - shift <= 0 (down to where exp underflows, and past it), with the exact
// cases exact, and tails of every length.
TEST(ElementwiseTest, ExpShiftedIsWithinItsBoundOfStdExp) {
  INFER_SKIP_WITHOUT_SIMD();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x;
  for (float v = -760.0F; v <= 0.0F; v += 0.00731F) x.push_back(v);
  for (float v : {0.0F, -0.0F, -1e-30F, -1e-8F, -0.3465736F, -0.3465737F, -700.0F, -699.99994F,
                  -708.0F, -745.1F, -kInf}) {
    x.push_back(v);
  }
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  std::vector<float> logits(262147);
  for (float& logit : logits) logit = normal(rng);
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  const auto check = [](const std::vector<float>& in, float shift, const std::string& what) {
    for (const int64_t n : {static_cast<int64_t>(in.size()), int64_t{1}, int64_t{3}, int64_t{7},
                            int64_t{9}, int64_t{17}}) {
      std::vector<double> got(static_cast<size_t>(n), -1.0);
      const double sum = ExpShifted(in.data(), n, shift, got.data());
      double want_sum = 0.0;
      double worst = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(static_cast<double>(in[i] - shift));
        want_sum += want;
        const double error = std::abs(got[i] - want);
        if (want > 1e-290) worst = std::max(worst, error / want);
        ASSERT_LE(error, kExpShiftedRelativeError * want + kExpShiftedAbsoluteError)
            << what << " d = " << (in[i] - shift);
      }
      const double bound =
          (kExpShiftedRelativeError + 2.0 * static_cast<double>(n) * 0x1p-53) * want_sum +
          static_cast<double>(n) * kExpShiftedAbsoluteError;
      EXPECT_LE(std::abs(sum - want_sum), bound) << what << " n = " << n;
      if (n == static_cast<int64_t>(in.size())) {
        std::cout << what << ": largest relative error above 1e-290 " << worst << "\n";
      }
    }
  };
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    const std::string name(IsaName(isa));
    check(x, 0.0F, "sweep " + name);
    check(logits, max_logit, "logits - max " + name);
    const std::vector<float> exact{0.0F, -kInf, std::numeric_limits<float>::quiet_NaN(), 2.5F};
    std::vector<double> out(exact.size());
    ExpShifted(exact.data(), 4, 2.5F, out.data());
    EXPECT_EQ(out[1], 0.0) << name;
    EXPECT_TRUE(std::isnan(out[2])) << name;
    EXPECT_EQ(out[3], 1.0) << name;
  }
}

TEST(ElementwiseTest, TanhMatchesLibmIncludingTinyInputs) {
  INFER_SKIP_WITHOUT_SIMD();
  std::vector<float> x;
  for (float v = -20.0F; v <= 20.0F; v += 0.00071F) x.push_back(v);
  for (float v = 1e-30F; v < 1.0F; v *= 1.37F) {
    x.push_back(v);
    x.push_back(-v);
  }
  x.push_back(0.625F);
  x.push_back(-0.625F);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  std::vector<float> want(x.size()), got(x.size());
  cpu::reference::TanhArray(x.data(), want.data(), static_cast<int64_t>(x.size()));
  for (Isa isa : SimdIsas()) {
    if (isa == Isa::kAvx2)
      cpu::avx2::TanhArray(x.data(), got.data(), static_cast<int64_t>(x.size()));
    if (isa == Isa::kAvx512)
      cpu::avx512::TanhArray(x.data(), got.data(), static_cast<int64_t>(x.size()));
    ExpectNear(got, want, 5e-7, 0.0, std::string("Tanh ") + std::string(IsaName(isa)));
  }
}

TEST(ElementwiseTest, NanPropagatesThroughActivations) {
  INFER_SKIP_WITHOUT_SIMD();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    float g[3] = {nan, 1.0F, nan};
    float u[3] = {1.0F, nan, 1.0F};
    float out[3];
    SiluMul(g, u, out, 3);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1])) << IsaName(isa);
    GeluTanhMul(g, u, out, 3);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1])) << IsaName(isa);
  }
}

TEST(ElementwiseTest, RmsNormMatchesReference) {
  INFER_SKIP_WITHOUT_SIMD();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t dim : {1, 3, 16, 17, 31, 33, 64, 2048, 4099}) {
      for (float offset : {0.0F, 1.0F}) {
        const int64_t rows = 3;
        std::vector<float> x =
            RandomFloats(static_cast<size_t>(rows * dim), -4, 4, static_cast<uint32_t>(dim));
        StoredTensor w = Store(dtype, {dim}, RandomFloats(static_cast<size_t>(dim), -1, 2, 3));
        std::vector<float> want(x.size());
        cpu::reference::RmsNorm(x.data(), rows, dim, dtype, w.tensor.raw(), 1e-6F, offset,
                                want.data());
        for (Isa isa : SimdIsas()) {
          ScopedIsa scoped(isa);
          std::vector<float> got = x;  // in place: y aliases x
          RmsNorm(got.data(), rows, dim, w.tensor, 1e-6F, offset, got.data());
          ExpectNear(got, want, 1e-6, 1e-7,
                     "RmsNorm " + Describe(isa, dtype) + " dim=" + std::to_string(dim));
        }
      }
    }
  }
}

TEST(ElementwiseTest, RopeMatchesReference) {
  INFER_SKIP_WITHOUT_SIMD();
  for (int64_t head_dim : {2, 8, 34, 64, 128, 256}) {
    for (int64_t heads : {1, 3}) {
      const int64_t tokens = 5;
      const int64_t stride = heads * head_dim + 7;
      std::vector<float> x = RandomFloats(static_cast<size_t>(tokens * stride), -3, 3, 11);
      std::vector<float> angles =
          RandomFloats(static_cast<size_t>(tokens * head_dim / 2), -3, 3, 12);
      std::vector<float> cos(angles.size()), sin(angles.size());
      for (size_t i = 0; i < angles.size(); ++i) {
        cos[i] = std::cos(angles[i]);
        sin[i] = std::sin(angles[i]);
      }
      std::vector<float> want = x;
      cpu::reference::Rope(want.data(), tokens, heads, head_dim, stride, cos.data(), sin.data());
      for (Isa isa : SimdIsas()) {
        ScopedIsa scoped(isa);
        std::vector<float> got = x;
        Rope(got.data(), tokens, heads, head_dim, stride, cos.data(), sin.data());
        ExpectNear(got, want, 1e-6, 1e-6, "Rope " + std::string(IsaName(isa)));
      }
    }
  }
}

TEST(ElementwiseTest, EmbedWidensAndScales) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t dim : {1, 17, 33, 2048}) {
      StoredTensor table =
          Store(dtype, {5, dim}, RandomFloats(static_cast<size_t>(5 * dim), -1, 1, 5));
      const int32_t ids[3] = {4, 0, 4};
      for (Isa isa : SimdIsas()) {
        ScopedIsa scoped(isa);
        std::vector<float> out(static_cast<size_t>(3 * dim));
        Embed(PackedMatrix::Pack(table.tensor), ids, 3, 2.5F, out.data());
        for (int64_t t = 0; t < 3; ++t) {
          for (int64_t i = 0; i < dim; ++i) {
            ASSERT_EQ(out[t * dim + i], table.widened[ids[t] * dim + i] * 2.5F)
                << Describe(isa, dtype);
          }
        }
      }
      const int32_t bad[1] = {5};
      std::vector<float> out(static_cast<size_t>(dim));
      EXPECT_THROW(Embed(PackedMatrix::Pack(table.tensor), bad, 1, 1.0F, out.data()), Error);
    }
  }
}

TEST(ElementwiseTest, ScalarPathRunsThroughOps) {
  ScopedIsa scoped(Isa::kScalar);
  float g[3] = {-1.0F, 0.0F, 2.0F};
  float u[3] = {1.0F, 1.0F, 1.0F};
  float out[3];
  SiluMul(g, u, out, 3);
  EXPECT_NEAR(out[2], 2.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

}  // namespace
}  // namespace infer::kernels
