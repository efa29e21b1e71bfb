// The mixture-of-experts ops: SoftmaxTopK against a float64 softmax, and MixtureOfExperts at
// every SIMD level and the reference, for float and quantized experts: near a float64 product of
// the stored weights (float), and row by row the same bits as that row alone through MatMul, its
// experts summed in ascending id, whatever the other rows and their experts are, on one thread or
// two.
#include "infer/kernels/experts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "infer/core/error.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

TEST(SoftmaxTopK, PicksTheLargestWithTiesToTheLowerIdAndRenormalises) {
  const std::vector<float> logits = {0.5F, 2.0F, -1.0F, 2.0F, 1.0F,  // a tie between 1 and 3
                                     3.0F, 0.0F, 0.0F,  0.0F, 0.0F};
  std::vector<int32_t> ids(6);
  std::vector<float> weights(6);
  SoftmaxTopK(logits.data(), 2, 5, 3, /*normalize=*/false, ids.data(), weights.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4, 0, 1, 2}));
  for (int row = 0; row < 2; ++row) {
    double sum = 0;
    for (int e = 0; e < 5; ++e) sum += std::exp(static_cast<double>(logits[row * 5 + e]));
    for (int j = 0; j < 3; ++j) {
      const double p = std::exp(static_cast<double>(logits[row * 5 + ids[row * 3 + j]])) / sum;
      EXPECT_NEAR(weights[row * 3 + j], p, 1e-7) << row << " " << j;
    }
  }
  std::vector<float> normalized(6);
  SoftmaxTopK(logits.data(), 2, 5, 3, /*normalize=*/true, ids.data(), normalized.data());
  for (int row = 0; row < 2; ++row) {
    const double kept = weights[row * 3] + weights[row * 3 + 1] + weights[row * 3 + 2];
    for (int j = 0; j < 3; ++j) {
      EXPECT_NEAR(normalized[row * 3 + j], weights[row * 3 + j] / kept, 1e-7);
    }
  }
  EXPECT_THROW(SoftmaxTopK(logits.data(), 1, 5, 6, false, ids.data(), weights.data()), Error);
}

struct ExpertCase {
  const char* name;
  DType dtype;
  Quantization quantization;
  MatMulPrecision precision;
};

constexpr int64_t kHidden = 256;
constexpr int64_t kInter = 96;
constexpr int64_t kExperts = 6;
constexpr int64_t kTopK = 2;

struct ExpertSet {
  std::vector<Expert> experts;
  std::vector<float> router;  // [kExperts, kHidden]
};

ExpertSet MakeExperts(const ExpertCase& c, uint32_t seed) {
  ExpertSet set;
  auto matrix = [&](int64_t n, int64_t k, uint32_t s) {
    const StoredTensor stored =
        Store(c.dtype, {n, k}, RandomFloats(n * k, -1.0F / 16, 1.0F / 16, s));
    return c.quantization == Quantization::kNone
               ? PackedMatrix::Pack(stored.tensor)
               : PackedMatrix::Quantize(stored.tensor, c.quantization);
  };
  for (int64_t e = 0; e < kExperts; ++e) {
    const auto s = static_cast<uint32_t>(seed + 3 * e);
    set.experts.push_back({matrix(kInter, kHidden, s), matrix(kInter, kHidden, s + 1),
                           matrix(kHidden, kInter, s + 2)});
  }
  set.router = RandomFloats(kExperts * kHidden, -1.0F, 1.0F, seed + 100);
  return set;
}

// Routing of rows x [m, kHidden]: the top kTopK of a random router's softmax, renormalised.
void Route(const ExpertSet& set, const std::vector<float>& x, int64_t m, std::vector<int32_t>& ids,
           std::vector<float>& weights) {
  std::vector<float> logits(static_cast<size_t>(m * kExperts));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t e = 0; e < kExperts; ++e) {
      double sum = 0;
      for (int64_t c = 0; c < kHidden; ++c) sum += x[i * kHidden + c] * set.router[e * kHidden + c];
      logits[i * kExperts + e] = static_cast<float>(sum);
    }
  }
  ids.resize(static_cast<size_t>(m * kTopK));
  weights.resize(ids.size());
  SoftmaxTopK(logits.data(), m, kExperts, kTopK, true, ids.data(), weights.data());
}

// Row i of the layer from MatMul on that row alone: each chosen expert in ascending id, w e(x).
std::vector<float> RowAlone(const ExpertCase& c, const ExpertSet& set, const float* x,
                            const int32_t* ids, const float* weights) {
  std::vector<std::pair<int32_t, float>> chosen;
  for (int64_t j = 0; j < kTopK; ++j) chosen.emplace_back(ids[j], weights[j]);
  std::sort(chosen.begin(), chosen.end());
  std::vector<float> y(kHidden), gate(kInter), up(kInter), out(kHidden);
  for (size_t j = 0; j < chosen.size(); ++j) {
    const Expert& e = set.experts[static_cast<size_t>(chosen[j].first)];
    MatMul(x, 1, kHidden, kHidden, e.gate, nullptr, gate.data(), kInter, TestPool(), c.precision);
    MatMul(x, 1, kHidden, kHidden, e.up, nullptr, up.data(), kInter, TestPool(), c.precision);
    SiluMul(gate.data(), up.data(), gate.data(), kInter);
    MatMul(gate.data(), 1, kInter, kInter, e.down, nullptr, out.data(), kHidden, TestPool(),
           c.precision);
    for (int64_t col = 0; col < kHidden; ++col) {
      y[col] = j == 0 ? chosen[j].second * out[col] : y[col] + chosen[j].second * out[col];
    }
  }
  return y;
}

// The same row in float64 over the stored (widened) weights.
std::vector<double> RowInFloat64(const ExpertSet& set, const float* x, const int32_t* ids,
                                 const float* weights) {
  std::vector<double> y(kHidden, 0.0);
  for (int64_t j = 0; j < kTopK; ++j) {
    const Expert& e = set.experts[static_cast<size_t>(ids[j])];
    std::vector<double> h(kInter);
    for (int64_t r = 0; r < kInter; ++r) {
      double g = 0, u = 0;
      for (int64_t col = 0; col < kHidden; ++col) {
        g += x[col] * static_cast<double>(e.gate.At(r, col));
        u += x[col] * static_cast<double>(e.up.At(r, col));
      }
      h[r] = g / (1 + std::exp(-g)) * u;
    }
    for (int64_t col = 0; col < kHidden; ++col) {
      double d = 0;
      for (int64_t r = 0; r < kInter; ++r) d += h[r] * e.down.At(col, r);
      y[col] += weights[j] * d;
    }
  }
  return y;
}

class ExpertsTest : public ::testing::TestWithParam<ExpertCase> {};

TEST_P(ExpertsTest, RowsAreTheirOwnAloneAndNearFloat64AtEveryLevel) {
  const ExpertCase& c = GetParam();
  const ExpertSet set = MakeExperts(c, 7);
  constexpr int64_t kRows = 19;
  const std::vector<float> x = RandomFloats(kRows * kHidden, -1.0F, 1.0F, 11);
  std::vector<int32_t> ids;
  std::vector<float> weights;
  Route(set, x, kRows, ids, weights);
  // Every expert is chosen by some row and some by several.
  std::vector<int> uses(kExperts, 0);
  for (const int32_t id : ids) ++uses[static_cast<size_t>(id)];
  ASSERT_GT(*std::max_element(uses.begin(), uses.end()), 1);
  std::vector<Isa> isas = SimdIsas();
  isas.insert(isas.begin(), Isa::kScalar);
  ThreadPool one(1);
  ThreadPool four(4);  // more threads than half the experts: one expert at a time, pool inside
  for (const Isa isa : isas) {
    ScopedIsa scoped(isa);
    SCOPED_TRACE(std::string(c.name) + " " + std::string(IsaName(isa)));
    std::vector<float> y(kRows * kHidden + 5, -7.0F);  // a wider stride keeps its tail
    const int64_t y_stride = kHidden;
    MixtureOfExperts(x.data(), kRows, kHidden, kHidden, set.experts,
                     {ids.data(), weights.data(), kTopK}, GatedActivation::kSilu, y.data(),
                     y_stride, TestPool(), c.precision);
    EXPECT_EQ(y.back(), -7.0F);
    // The same call on one thread, and on four: the same bits.
    std::vector<float> serial(kRows * kHidden);
    MixtureOfExperts(x.data(), kRows, kHidden, kHidden, set.experts,
                     {ids.data(), weights.data(), kTopK}, GatedActivation::kSilu, serial.data(),
                     kHidden, one, c.precision);
    EXPECT_TRUE(std::equal(serial.begin(), serial.end(), y.begin()));
    MixtureOfExperts(x.data(), kRows, kHidden, kHidden, set.experts,
                     {ids.data(), weights.data(), kTopK}, GatedActivation::kSilu, serial.data(),
                     kHidden, four, c.precision);
    EXPECT_TRUE(std::equal(serial.begin(), serial.end(), y.begin()));
    // A batch of rows 5..9 alone (other experts shared, fewer rows each): the same bits.
    std::vector<float> part(5 * kHidden);
    MixtureOfExperts(x.data() + 5 * kHidden, 5, kHidden, kHidden, set.experts,
                     {ids.data() + 5 * kTopK, weights.data() + 5 * kTopK, kTopK},
                     GatedActivation::kSilu, part.data(), kHidden, TestPool(), c.precision);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), y.begin() + 5 * kHidden));
    double worst = 0;
    for (int64_t i = 0; i < kRows; ++i) {
      const std::vector<float> alone = RowAlone(c, set, x.data() + i * kHidden,
                                                ids.data() + i * kTopK, weights.data() + i * kTopK);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), y.begin() + i * kHidden)) << "row " << i;
      if (c.quantization != Quantization::kNone || c.precision != MatMulPrecision::kF32) continue;
      const std::vector<double> exact = RowInFloat64(
          set, x.data() + i * kHidden, ids.data() + i * kTopK, weights.data() + i * kTopK);
      for (int64_t col = 0; col < kHidden; ++col) {
        worst = std::max(worst, std::abs(y[i * kHidden + col] - exact[col]));
      }
    }
    EXPECT_LE(worst, 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, ExpertsTest,
    ::testing::Values(ExpertCase{"f32", DType::kF32, Quantization::kNone, MatMulPrecision::kF32},
                      ExpertCase{"bf16", DType::kBF16, Quantization::kNone, MatMulPrecision::kF32},
                      ExpertCase{"bf16_bf16", DType::kBF16, Quantization::kNone,
                                 MatMulPrecision::kBf16},
                      ExpertCase{"int8", DType::kF32, Quantization::kInt8, MatMulPrecision::kF32},
                      ExpertCase{"int4k", DType::kF32, Quantization::kInt4K, MatMulPrecision::kF32},
                      ExpertCase{"int6", DType::kF32, Quantization::kInt6, MatMulPrecision::kF32}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(MixtureOfExperts, BadRoutingIsAnError) {
  const ExpertSet set =
      MakeExperts({"f32", DType::kF32, Quantization::kNone, MatMulPrecision::kF32}, 3);
  const std::vector<float> x(kHidden, 0.5F);
  std::vector<float> y(kHidden);
  const std::vector<float> weights = {0.5F, 0.5F};
  for (const std::vector<int32_t>& ids :
       {std::vector<int32_t>{0, 6}, std::vector<int32_t>{-1, 0}, std::vector<int32_t>{2, 2}}) {
    EXPECT_THROW(MixtureOfExperts(x.data(), 1, kHidden, kHidden, set.experts,
                                  {ids.data(), weights.data(), 2}, GatedActivation::kSilu, y.data(),
                                  kHidden, TestPool()),
                 Error);
  }
  std::vector<Expert> mismatched = set.experts;
  mismatched[1].down = mismatched[1].gate;  // [kInter, kHidden] where [kHidden, kInter] belongs
  const std::vector<int32_t> ids = {0, 1};
  EXPECT_THROW(
      MixtureOfExperts(x.data(), 1, kHidden, kHidden, mismatched, {ids.data(), weights.data(), 2},
                       GatedActivation::kSilu, y.data(), kHidden, TestPool()),
      Error);
}

}  // namespace
}  // namespace infer::kernels
