// Quantized weights (int8, int4, int4k, int6, and int6k and int5k from Q6_K and Q5_K rows): the
// stored values against the quantization rule written out here, the activation rounding against
// the rule, and every MatMul path (the scalar reference and each SIMD level the CPU has) against a
// float64 product of the dequantized weights and the rounded activations (with two int8 planes
// of activations, the activations as given), over odd shapes, strides, groups and bias; and batch
// invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "infer/core/error.h"
#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/ops.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

// Every path: the reference (kScalar) and the SIMD levels.
std::vector<Isa> AllIsas() {
  std::vector<Isa> isas{Isa::kScalar};
  for (Isa isa : SimdIsas()) isas.push_back(isa);
  return isas;
}

// The quantization rule, written independently of quantized.cc: per row and group of
// `group` input channels,
//   int8: d = f16(max|w| / 127), q = clamp(round(w / d), -127, 127), w' = d q;
//   int6: d = f16(max|w| / 31), then as int4's search below (m = 0, q = clamp(round(w / d),
//         -31, 31)): of d_i = f16(max|w| / 31 * (1 - 0.02 i)), i < 8, the first with the least
//         error;
//   int4: m = f16(min w); of the scales d_i = f16((max w - m) / 15 * (1 - 0.02 i)), i < 8,
//         the first with the least sum of (w' - w)^2, where q = clamp(round((w - m) / d), 0, 15)
//         and w' = d q + m.
//   int4k (groups of 256, sub-blocks of 32): per sub-block j, m_j = min(min w, 0) and s_j the
//         first best of (max w - m_j) / 15 * (1 - 0.02 i), i < 8 (unrounded); dm =
//         f16(min_j m_j / 63); of d_i = f16(max_j s_j / 63 * (1 + 0.02 i)), i < 4, the first
//         with the least total error, where per sub-block, of the mn from floor - 1 to ceil + 1
//         of m_j / dm (0 if dm = 0) in [0, 63] and, for each, the sc from floor(0.86 t) to
//         ceil(t) + 1 in [1, 63] ([0, 0] if d = 0), t = (max w - dm mn) / 15 / d, the first with
//         the least error is kept (errors as int4's, with d sc and dm mn, but their 8 partial
//         sums added as a tree: Int4KError); q as int4's.
// Returns w' in double and the step d per element.
struct Dequantized {
  std::vector<double> values;
  std::vector<double> step;
};

// int4k's error: the sum of (d q + m - w)^2 over w, f32 squares in 8 interleaved partial sums
// (entry c in sum c % 8) added as a tree,
// ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)).
float Int4KError(const float* w, int64_t count, float d, float m) {
  float p[8] = {};
  const float inverse = d > 0 ? 1.0F / d : 0.0F;
  for (int64_t c = 0; c < count; ++c) {
    const float q = std::clamp(std::nearbyint((w[c] - m) * inverse), 0.0F, 15.0F);
    const float e = d * q + m - w[c];
    p[c % 8] += e * e;
  }
  return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

Dequantized QuantizeInt4KByRule(const std::vector<float>& w, int64_t n, int64_t k) {
  Dequantized out{std::vector<double>(w.size()), std::vector<double>(w.size())};
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t g0 = 0; g0 < k; g0 += 256) {
      const int64_t subs = (std::min(k, g0 + 256) - g0 + 31) / 32;
      std::vector<float> s(subs), m(subs), hi(subs);
      float max_s = 0, min_m = 0;
      for (int64_t j = 0; j < subs; ++j) {
        const float* v = w.data() + row * k + g0 + 32 * j;
        const int64_t count = std::min<int64_t>(32, k - g0 - 32 * j);
        m[j] = std::min(*std::min_element(v, v + count), 0.0F);
        hi[j] = *std::max_element(v, v + count);
        s[j] = (hi[j] - m[j]) / 15.0F;
        float best = Int4KError(v, count, s[j], m[j]);
        for (int i = 1; i < 8; ++i) {
          const float candidate = (hi[j] - m[j]) / 15.0F * (1.0F - 0.02F * i);
          if (Int4KError(v, count, candidate, m[j]) < best) {
            best = Int4KError(v, count, candidate, m[j]);
            s[j] = candidate;
          }
        }
        max_s = std::max(max_s, s[j]);
        min_m = std::min(min_m, m[j]);
      }
      const float dm = F16ToF32(F32ToF16(min_m / 63.0F));
      // Per sub-block: the best (scale, minimum) for a super-block scale d, and its error.
      auto fit = [&](float d, int64_t j, float& best_d, float& best_m) {
        const float* v = w.data() + row * k + g0 + 32 * j;
        const int64_t count = std::min<int64_t>(32, k - g0 - 32 * j);
        const float exact = dm < 0 ? m[j] / dm : 0.0F;
        float best = INFINITY;
        for (int mn = static_cast<int>(std::floor(exact)) - 1; mn <= std::ceil(exact) + 1; ++mn) {
          if (mn < 0 || mn > 63) continue;
          const float t = d > 0 ? (hi[j] - dm * static_cast<float>(mn)) / 15.0F / d : 0.0F;
          const int least = d > 0 ? 1 : 0;
          const int lo_sc =
              std::clamp(static_cast<int>(std::floor(t * (1.0F - 0.02F * 7))), least, 63);
          const int hi_sc = std::clamp(static_cast<int>(std::ceil(t)) + 1, least, 63);
          for (int sc = lo_sc; sc <= hi_sc; ++sc) {
            const float e = Int4KError(v, count, d * sc, dm * mn);
            if (e < best) {
              best = e;
              best_d = d * sc;
              best_m = dm * mn;
            }
          }
        }
        return best;
      };
      float d = 0, best_total = INFINITY;
      for (int i = 0; i < 4; ++i) {
        const float candidate = F16ToF32(F32ToF16(max_s / 63.0F * (1.0F + 0.02F * i)));
        float total = 0, unused_d = 0, unused_m = 0;
        for (int64_t j = 0; j < subs; ++j) total += fit(candidate, j, unused_d, unused_m);
        if (total < best_total) {
          best_total = total;
          d = candidate;
        }
      }
      for (int64_t j = 0; j < subs; ++j) {
        const float* v = w.data() + row * k + g0 + 32 * j;
        const int64_t count = std::min<int64_t>(32, k - g0 - 32 * j);
        float best_d = 0, best_m = 0;
        fit(d, j, best_d, best_m);
        const float inverse = best_d > 0 ? 1.0F / best_d : 0.0F;
        for (int64_t c = 0; c < count; ++c) {
          const float q = std::clamp(std::nearbyint((v[c] - best_m) * inverse), 0.0F, 15.0F);
          out.values[row * k + g0 + 32 * j + c] = static_cast<double>(best_d) * q + best_m;
          out.step[row * k + g0 + 32 * j + c] = best_d + std::fabs(dm);
        }
      }
    }
  }
  return out;
}

Dequantized QuantizeByRule(const std::vector<float>& w, int64_t n, int64_t k, Quantization type,
                           int64_t group) {
  if (type == Quantization::kInt4K) return QuantizeInt4KByRule(w, n, k);
  Dequantized out{std::vector<double>(w.size()), std::vector<double>(w.size())};
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      const int64_t g1 = std::min(k, g0 + group);
      float lo = w[row * k + g0], hi = lo, amax = 0.0F;
      for (int64_t c = g0; c < g1; ++c) {
        lo = std::min(lo, w[row * k + c]);
        hi = std::max(hi, w[row * k + c]);
        amax = std::max(amax, std::fabs(w[row * k + c]));
      }
      const bool int4 = type == Quantization::kInt4;
      const float q_max = type == Quantization::kInt6 ? 31.0F : 127.0F;
      const float m = int4 ? F16ToF32(F32ToF16(lo)) : 0.0F;
      auto q_of = [&](float v, float d) {
        const float inverse = d > 0 ? 1.0F / d : 0.0F;
        return int4 ? std::clamp(std::nearbyint((v - m) * inverse), 0.0F, 15.0F)
                    : std::clamp(std::nearbyint(v * inverse), -q_max, q_max);
      };
      float d = F16ToF32(F32ToF16(amax / q_max));
      if (type == Quantization::kInt6) {
        auto sse = [&](float candidate) {
          float partial[8] = {};
          for (int64_t c = g0; c < g1; ++c) {
            const float e = candidate * q_of(w[row * k + c], candidate) - w[row * k + c];
            partial[(c - g0) % 8] += e * e;
          }
          float total = 0;
          for (float p : partial) total += p;
          return total;
        };
        float best = sse(d);
        for (int i = 1; i < 8; ++i) {
          const float candidate = F16ToF32(F32ToF16(amax / q_max * (1.0F - 0.02F * i)));
          if (sse(candidate) < best) {
            best = sse(candidate);
            d = candidate;
          }
        }
      }
      if (int4) {
        // The error of a candidate: f32 squares in 8 interleaved partial sums, added in order.
        auto sse = [&](float candidate) {
          float partial[8] = {};
          for (int64_t c = g0; c < g1; ++c) {
            const float e = candidate * q_of(w[row * k + c], candidate) + m - w[row * k + c];
            partial[(c - g0) % 8] += e * e;
          }
          float total = 0;
          for (float p : partial) total += p;
          return total;
        };
        float best = sse(d = F16ToF32(F32ToF16((hi - m) / 15.0F)));
        for (int i = 1; i < 8; ++i) {
          const float candidate = F16ToF32(F32ToF16((hi - m) / 15.0F * (1.0F - 0.02F * i)));
          if (sse(candidate) < best) {
            best = sse(candidate);
            d = candidate;
          }
        }
      }
      for (int64_t c = g0; c < g1; ++c) {
        const double q = q_of(w[row * k + c], d);
        out.values[row * k + c] = static_cast<double>(d) * q + m;
        out.step[row * k + c] = d;
      }
    }
  }
  return out;
}

// The activation rule: per row and block of 32, d = max|x| / 127 (f32), q = round-to-even of
// x * (1 / d) (f32 product), x' = d q.
std::vector<double> RoundActivationsByRule(const float* x, int64_t m, int64_t k, int64_t stride) {
  std::vector<double> out(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < k; b += 32) {
      const int64_t e = std::min(k, b + 32);
      float amax = 0.0F;
      for (int64_t c = b; c < e; ++c) amax = std::max(amax, std::fabs(x[i * stride + c]));
      const float d = amax / 127.0F;
      const float inverse = d > 0 ? 1.0F / d : 0.0F;
      for (int64_t c = b; c < e; ++c) {
        out[i * k + c] = static_cast<double>(d) * std::nearbyint(x[i * stride + c] * inverse);
      }
    }
  }
  return out;
}

struct QuantCase {
  Quantization type;
  int64_t group;
};

std::vector<QuantCase> QuantCases() {
  return {{Quantization::kInt8, 32},  {Quantization::kInt4, 32},   {Quantization::kInt4, 64},
          {Quantization::kInt4, 128}, {Quantization::kInt4K, 256}, {Quantization::kInt6, 32}};
}

std::string Name(const QuantCase& c) {
  return std::string(QuantizationName(c.type)) + "/g" + std::to_string(c.group);
}

// One product's operands for the tests against float64: x [m, k] in rows of k + 3, bf16 weights
// [n, k] in [-0.5, 0.25] quantized as `qc` says (and by the rule, in double), an f32 bias [n].
struct ProductOperands {
  int64_t x_stride = 0;
  int64_t y_stride = 0;  // n + 2: the tests check that the padding is not written
  std::vector<float> x;
  StoredTensor w;
  StoredTensor bias;
  PackedMatrix packed;
  Dequantized wq;
};
ProductOperands MakeOperands(const QuantCase& qc, int64_t m, int64_t k, int64_t n, uint32_t seed) {
  ProductOperands o;
  o.x_stride = k + 3;
  o.y_stride = n + 2;
  o.x = RandomFloats(static_cast<size_t>(m * o.x_stride), -1, 1, seed);
  o.w = Store(DType::kBF16, {n, k}, RandomFloats(n * k, -0.5F, 0.25F, seed + 1));
  o.bias = Store(DType::kF32, {n}, RandomFloats(n, -1, 1, seed + 2));
  o.packed = PackedMatrix::Quantize(o.w.tensor, qc.type, qc.group, &TestPool());
  o.wq = QuantizeByRule(o.w.widened, n, k, qc.type, qc.group);
  return o;
}

TEST(QuantizedTest, StoredWeightsFollowTheRule) {
  for (const QuantCase& qc : QuantCases()) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      const int64_t n = 37;
      const int64_t k = 203;  // a partial last group
      StoredTensor w = Store(dtype, {n, k}, RandomFloats(static_cast<size_t>(n * k), -2, 1, 31));
      const PackedMatrix packed = PackedMatrix::Quantize(w.tensor, qc.type, qc.group);
      EXPECT_TRUE(packed.quantized());
      EXPECT_EQ(packed.rows(), n);
      EXPECT_EQ(packed.cols(), k);
      const Dequantized rule = QuantizeByRule(w.widened, n, k, qc.type, qc.group);
      for (int64_t row = 0; row < n; ++row) {
        for (int64_t col = 0; col < k; ++col) {
          const double want = rule.values[row * k + col];
          ASSERT_EQ(packed.At(row, col), static_cast<float>(want))
              << Name(qc) << " " << DTypeName(dtype) << " [" << row << ", " << col << "]";
          // int8 rounds to nearest: within half a step, plus the f16 rounding of the scale
          // times |q| <= 127. int4's and int6's smaller scales clip the top of the range by up
          // to 14% of 15 (31) steps.
          const double steps = qc.type == Quantization::kInt8   ? 0.5 + 127 * 1e-3
                               : qc.type == Quantization::kInt6 ? 0.5 + 31 * 0.14
                                                                : 0.5 + 15 * 0.14;
          ASSERT_LE(std::fabs(want - w.widened[row * k + col]),
                    rule.step[row * k + col] * steps + 1e-30);
        }
      }
      // Bytes: 8 + 16 / 32 (int8), 6 + 16 / 32 (int6), 4 + 32 / group (int4) or 4.5 (int4k)
      // bits per weight, padding included.
      const int64_t padded = packed.num_panels() * 32 * packed.num_groups() * qc.group;
      const double bits = qc.type == Quantization::kInt8   ? 8.5
                          : qc.type == Quantization::kInt6 ? 6.5
                          : qc.type == Quantization::kInt4 ? 4.0 + 32.0 / qc.group
                                                           : 4.5;
      EXPECT_EQ(static_cast<double>(packed.size_bytes()) * 8, bits * padded) << Name(qc);
    }
  }
}

TEST(QuantizedTest, LayoutGivesEveryValueItsOwnSlot) {
  for (const QuantCase& qc : QuantCases()) {
    const int64_t n = 64;
    const int64_t k = 256;
    StoredTensor w = Store(DType::kF32, {n, k}, RandomFloats(n * k, -1, 1, 32));
    const PackedMatrix packed = PackedMatrix::Quantize(w.tensor, qc.type, qc.group);
    std::set<std::pair<int64_t, bool>> seen;
    std::set<std::pair<int64_t, int>> tops;
    std::set<int64_t> scale_bytes;
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t col = 0; col < k; ++col) {
        bool high = false;
        const int64_t index = packed.QuantIndex(row, col, &high);
        ASSERT_LT(index, static_cast<int64_t>(packed.size_bytes()));
        ASSERT_TRUE(seen.insert({index, high}).second) << Name(qc) << " " << row << "," << col;
        if (qc.type == Quantization::kInt6) {  // the top 2 bits: a slot of their own
          int shift = 0;
          const int64_t top = packed.Int6HighIndex(row, col, &shift);
          ASSERT_LT(top, static_cast<int64_t>(packed.size_bytes()));
          ASSERT_TRUE(tops.insert({top, shift}).second) << row << "," << col;
        }
      }
      for (int64_t g = 0; g < packed.num_groups(); ++g) {
        const int64_t s = packed.ScaleIndex(row, g);
        ASSERT_FALSE(seen.contains({s, false}));
        ASSERT_TRUE(scale_bytes.insert(s).second);
      }
    }
    for (const auto& [top, shift] : tops) {  // and bytes of their own
      ASSERT_FALSE(seen.contains({top, false}) || seen.contains({top, true}) ||
                   scale_bytes.contains(top) || scale_bytes.contains(top - 1))
          << top;
    }
  }
}

TEST(QuantizedTest, ActivationsAreRoundedPer32ToNearestEven) {
  const int64_t m = 5;
  const int64_t k = 77;
  const int64_t stride = 80;
  const int64_t padded = 96;
  std::vector<float> x = RandomFloats(static_cast<size_t>(m * stride), -3, 3, 33);
  // Exact ties: a block whose max is 127 makes d = 1 and x * (1 / d) = x.
  for (int64_t c = 0; c < 32; ++c) x[c] = c == 0 ? 127.0F : static_cast<float>(c % 8) - 3.5F;
  for (int64_t c = 32; c < 64; ++c) x[c] = 0.0F;  // an all-zero block
  const std::vector<double> rule = RoundActivationsByRule(x.data(), m, k, stride);
  for (Isa isa : AllIsas()) {
    ScopedIsa scoped(isa);
    std::vector<int8_t> q(static_cast<size_t>(m * padded), 99);
    std::vector<float> d(static_cast<size_t>(m * 3));
    std::vector<int32_t> sum(static_cast<size_t>(m * 3));
    QuantizeActivations(x.data(), m, k, stride, padded, q.data(), d.data(), sum.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t b = 0; b < 3; ++b) {
        int32_t total = 0;
        for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
          const int8_t value = q[i * padded + c];
          total += value;
          if (c >= k) {
            ASSERT_EQ(value, 0) << IsaName(isa);
            continue;
          }
          ASSERT_EQ(static_cast<double>(d[i * 3 + b]) * value, rule[i * k + c])
              << IsaName(isa) << " row " << i << " col " << c;
        }
        ASSERT_EQ(total, sum[i * 3 + b]) << IsaName(isa);
      }
    }
    // Ties go to even: -3.5 -> -4, -2.5 -> -2, -1.5 -> -2, -0.5 -> 0, 0.5 -> 0, 1.5 -> 2,
    // 2.5 -> 2, 3.5 -> 4.
    const int8_t even[] = {-4, -2, -2, 0, 0, 2, 2, 4};
    for (int c = 1; c < 16; ++c) EXPECT_EQ(q[c], even[c % 8]) << IsaName(isa) << " col " << c;
  }
}

// Every path equals the float64 product of the dequantized weights (the rule above) and the
// rounded activations, within f32 accumulation error.
TEST(QuantizedTest, MatMulEqualsFloat64ProductOfTheDequantizedValues) {
  ThreadPool& pool = TestPool();
  struct Dims {
    int64_t m, k, n;
  };
  const Dims dims[] = {{1, 1, 1},     {1, 31, 33},   {3, 33, 31},   {5, 100, 75},
                       {17, 257, 64}, {70, 130, 97}, {2, 2048, 96}, {9, 64, 300}};
  uint32_t seed = 40;
  for (const QuantCase& qc : QuantCases()) {
    for (const Dims& s : dims) {
      for (bool with_bias : {false, true}) {
        ++seed;
        const auto [x_stride, y_stride, x, w, bias, packed, wq] =
            MakeOperands(qc, s.m, s.k, s.n, seed);
        const std::vector<double> xq = RoundActivationsByRule(x.data(), s.m, s.k, x_stride);
        for (Isa isa : AllIsas()) {
          ScopedIsa scoped(isa);
          std::vector<float> y(static_cast<size_t>(s.m * y_stride), -7.0F);
          MatMul(x.data(), s.m, s.k, x_stride, packed, with_bias ? &bias.tensor : nullptr, y.data(),
                 y_stride, pool);
          for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < y_stride; ++j) {
              const float got = y[i * y_stride + j];
              if (j >= s.n) {
                ASSERT_EQ(got, -7.0F) << "padding column written";
                continue;
              }
              double want = with_bias ? bias.widened[j] : 0.0;
              double abs_sum = std::fabs(want);
              for (int64_t c = 0; c < s.k; ++c) {
                want += wq.values[j * s.k + c] * xq[i * s.k + c];
                abs_sum += std::fabs(wq.values[j * s.k + c] * xq[i * s.k + c]);
              }
              ASSERT_NEAR(got, want, 4e-6 * abs_sum + 1e-30)
                  << Name(qc) << " " << IsaName(isa) << " m=" << s.m << " k=" << s.k << " n=" << s.n
                  << " bias=" << with_bias << " at [" << i << ", " << j << "]";
            }
          }
        }
      }
    }
  }
}

// QuantizedActivations::kInt8x2 (the activations as two int8 planes, value and remainder): the
// float64 product of the dequantized weights and the activations as given, not rounded, to
// within what the second plane leaves (per element at most its block's max|x| / 64516, the bound
// ops.h states) plus f32 sums; the bias added once; rows batch invariant; every path. The first
// plane alone (kInt8) leaves up to 254 times as much, and fails it.
TEST(QuantizedTest, Int8x2ActivationsFollowTheDequantizedWeightsInFloat) {
  ThreadPool& pool = TestPool();
  struct Dims {
    int64_t m, k, n;
  };
  const Dims dims[] = {{1, 31, 33}, {3, 100, 75}, {17, 257, 64}, {70, 130, 97}, {2, 2048, 96}};
  uint32_t seed = 140;
  for (const QuantCase& qc : QuantCases()) {
    for (const Dims& s : dims) {
      ++seed;
      const auto [x_stride, y_stride, x, w, bias, packed, wq] =
          MakeOperands(qc, s.m, s.k, s.n, seed);
      for (Isa isa : AllIsas()) {
        ScopedIsa scoped(isa);
        std::vector<float> y(static_cast<size_t>(s.m * y_stride), -7.0F);
        MatMul(x.data(), s.m, s.k, x_stride, packed, &bias.tensor, y.data(), y_stride, pool,
               MatMulPrecision::kF32, QuantizedActivations::kInt8x2);
        for (int64_t i = 0; i < s.m; ++i) {
          const float* row = x.data() + i * x_stride;
          for (int64_t j = 0; j < y_stride; ++j) {
            const float got = y[i * y_stride + j];
            if (j >= s.n) {
              ASSERT_EQ(got, -7.0F) << "padding column written";
              continue;
            }
            double want = bias.widened[j];
            double abs_sum = std::fabs(want);
            double plane_bound = 0;
            for (int64_t c = 0; c < s.k; ++c) {
              const int64_t begin = c / kQuantBlock * kQuantBlock;
              double block_max = 0;
              for (int64_t e = begin; e < std::min(s.k, begin + kQuantBlock); ++e) {
                block_max = std::max(block_max, std::fabs(static_cast<double>(row[e])));
              }
              const double product = wq.values[j * s.k + c] * row[c];
              want += product;
              abs_sum += std::fabs(product);
              plane_bound += std::fabs(wq.values[j * s.k + c]) * block_max / 64516.0;
            }
            ASSERT_NEAR(got, want, plane_bound + 8e-6 * abs_sum + 1e-30)
                << Name(qc) << " " << IsaName(isa) << " m=" << s.m << " k=" << s.k << " n=" << s.n
                << " at [" << i << ", " << j << "]";
          }
        }
        for (int64_t i : {int64_t{0}, s.m - 1}) {
          std::vector<float> alone(static_cast<size_t>(y_stride), -7.0F);
          MatMul(x.data() + i * x_stride, 1, s.k, x_stride, packed, &bias.tensor, alone.data(),
                 y_stride, pool, MatMulPrecision::kF32, QuantizedActivations::kInt8x2);
          for (int64_t j = 0; j < s.n; ++j) {
            ASSERT_EQ(alone[j], y[i * y_stride + j])
                << Name(qc) << " " << IsaName(isa) << " m=" << s.m << " row " << i;
          }
        }
      }
    }
  }
}

// The scalar twin of the SIMD kernels' arithmetic, written out here from the formula in
// matmul_quant_simd.cc: per row, output feature and block of 32 channels, the exact integer
// sum r of the stored weight values (int8: q, the stored byte minus 128; int6: the stored 6 bits
// minus 32; int4: the nibble; int5k: the stored 5 bits; int6k: the stored 6 bits minus 32 times
// their 16 channels' int8 scale) times the activation's q, then the block's f32 term added to one
// f32 accumulator in ascending block order,
//   int8, int6, int6k (d: int6k's super-block d): acc = fma(float(r), d * dx, acc)
//   int4, int4k, int5k: acc = fma(float(r), d * dx, acc); acc = fma(m, dx * float(sx), acc)
// and finally acc + bias. Every SIMD path (each its own integer instructions: vpmaddwd,
// vpmaddubsw of |x| and sign-adjusted q, vpdpbusd, AMX tiles) must give these bits exactly, for a
// row alone, in small batches (the streaming order) and in large ones (the many-row order).
std::vector<float> ScalarTwin(const std::vector<float>& x, int64_t m, int64_t k, int64_t x_stride,
                              const PackedMatrix& w, const float* bias) {
  const int64_t padded_k = w.num_groups() * w.group_size();
  const int64_t blocks = padded_k / kQuantBlock;
  std::vector<int8_t> q(static_cast<size_t>(m * padded_k));
  std::vector<float> dx(static_cast<size_t>(m * blocks));
  std::vector<int32_t> sx(static_cast<size_t>(m * blocks));
  cpu::reference::QuantizeActivations(x.data(), m, k, x_stride, padded_k, q.data(), dx.data(),
                                      sx.data());
  const bool int4 = HasMinimum(w.quantization());
  const bool int6k = w.quantization() == Quantization::kInt6K;
  const int offset = w.quantization() == Quantization::kInt8 ? 128
                     : IsInt6(w.quantization())              ? 32
                                                             : 0;
  std::vector<float> y(static_cast<size_t>(m * w.rows()));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < w.rows(); ++j) {
      float acc = 0.0F;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t r = 0;
        for (int64_t c = b * kQuantBlock; c < (b + 1) * kQuantBlock; ++c) {
          const int stored = c < k ? w.QuantAt(j, c) : offset;
          const int scale = int6k ? w.Int6KHalfScale(j, c / 16) : 1;
          r += scale * (stored - offset) * q[i * padded_k + c];
        }
        const float d =
            int6k ? w.ScaleAt(j, b * kQuantBlock / w.group_size()) : w.SubBlockScale(j, b);
        const float block_dx = dx[i * blocks + b];
        acc = std::fma(static_cast<float>(r), d * block_dx, acc);
        if (int4) {
          acc = std::fma(w.SubBlockMinimum(j, b), block_dx * static_cast<float>(sx[i * blocks + b]),
                         acc);
        }
      }
      y[i * w.rows() + j] = bias != nullptr ? acc + bias[j] : acc;
    }
  }
  return y;
}

TEST(QuantizedTest, EverySimdPathEqualsTheScalarTwinBitForBit) {
  ThreadPool& pool = TestPool();
  struct Dims {
    int64_t m, k, n;
  };
  // m: decode, the streaming order's small batches, the many-row order with partial row
  // blocks; k over several weight k-blocks (32 groups); n with partial tiles and panels.
  // {5, 1024, 7700} and {9, 1024, 7700}: the streaming order's tasks narrowed to
  // kStreamBlockBytes (an output head's width, several row blocks; on AVX-512 5 and 6 rows are
  // one block, {6, 2080, 40}).
  const Dims dims[] = {{1, 64, 40},   {2, 96, 33},    {3, 160, 75},    {8, 64, 48},
                       {9, 33, 17},   {17, 257, 64},  {33, 1100, 70},  {70, 130, 97},
                       {1, 2048, 48}, {64, 2080, 40}, {2, 2080, 40},   {4, 2080, 40},
                       {6, 2080, 40}, {13, 2080, 40}, {5, 1024, 7700}, {9, 1024, 7700}};
  uint32_t seed = 700;
  for (const QuantCase& qc : QuantCases()) {
    for (const Dims& s : dims) {
      ++seed;
      const int64_t x_stride = s.k + 1;
      std::vector<float> x = RandomFloats(static_cast<size_t>(s.m * x_stride), -2, 2, seed);
      // Extremes: a block whose activations all round to +-127 (the largest products).
      for (int64_t c = 0; c < std::min<int64_t>(32, s.k); ++c) x[c] = c % 2 ? 3.0F : -3.0F;
      StoredTensor w =
          Store(DType::kBF16, {s.n, s.k}, RandomFloats(s.n * s.k, -0.5F, 0.5F, seed + 1));
      // Extremes of the weights: a group of one row at +-max (q = +-127, int4's 0 and 15).
      for (int64_t c = 0; c < std::min<int64_t>(32, s.k); ++c) {
        w.widened[c] = c % 3 ? 0.5F : -0.5F;
      }
      w = Store(DType::kBF16, {s.n, s.k}, w.widened);
      StoredTensor bias = Store(DType::kF32, {s.n}, RandomFloats(s.n, -1, 1, seed + 2));
      const PackedMatrix packed = PackedMatrix::Quantize(w.tensor, qc.type, qc.group, &pool);
      for (bool with_bias : {false, true}) {
        const std::vector<float> want =
            ScalarTwin(x, s.m, s.k, x_stride, packed, with_bias ? bias.widened.data() : nullptr);
        for (Isa isa : SimdIsas()) {
          ScopedIsa scoped(isa);
          std::vector<float> y(static_cast<size_t>(s.m * s.n));
          MatMul(x.data(), s.m, s.k, x_stride, packed, with_bias ? &bias.tensor : nullptr, y.data(),
                 s.n, pool);
          for (int64_t i = 0; i < s.m * s.n; ++i) {
            ASSERT_EQ(y[i], want[i])
                << Name(qc) << " " << IsaName(isa) << " m=" << s.m << " k=" << s.k << " n=" << s.n
                << " bias=" << with_bias << " at [" << i / s.n << ", " << i % s.n << "]";
          }
        }
        // Isa::kAvxVnni's kernels (vpdpbusd on ymm) with the instruction emulated from its
        // definition, so that they are checked on any AVX2 CPU; on a CPU with AVX-VNNI the
        // loop above runs the instruction itself.
        if (IsaSupported(Isa::kAvx2)) {
          std::vector<float> y(static_cast<size_t>(s.m * s.n));
          const cpu::Product product{&packed, with_bias ? bias.widened.data() : nullptr, y.data(),
                                     s.n};
          cpu::avxvnni_emulated::QuantizedMatMuls(x.data(), s.m, s.k, x_stride, {&product, 1},
                                                  pool);
          for (int64_t i = 0; i < s.m * s.n; ++i) {
            ASSERT_EQ(y[i], want[i])
                << Name(qc) << " avxvnni (emulated) m=" << s.m << " k=" << s.k << " n=" << s.n
                << " bias=" << with_bias << " at [" << i / s.n << ", " << i % s.n << "]";
          }
        }
      }
    }
  }
  if (SimdIsas().empty()) GTEST_SKIP() << "this CPU has no SIMD path (AVX2 or wider) to check";
}

// The same bits for a row alone, in a small batch (the streaming order) and in a large one
// (the blocked order), on every path, for k over several weight k-blocks.
// An int6k matrix as a GGUF file's Q6_K rows give it (FromQuantizedRows; nothing quantizes to
// it): q in [-32, 31], an f16 d per 256 channels and an int8 scale per 16, random with their
// extremes (q -32 and 31, scales -128 and 127) in row 0. `values`: each weight d sc q in double.
PackedMatrix RandomInt6K(int64_t n, int64_t k, uint32_t seed, std::vector<double>& values) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> q_of(-32, 31);
  std::uniform_int_distribution<int> scale_of(-128, 127);
  std::uniform_real_distribution<float> d_of(1e-4F, 4e-3F);
  std::vector<int> q(static_cast<size_t>(n * k));
  std::vector<int8_t> scales(static_cast<size_t>(n * k / 16));
  std::vector<uint16_t> d(static_cast<size_t>(n * k / 256));
  for (int& v : q) v = q_of(gen);
  for (int8_t& v : scales) v = static_cast<int8_t>(scale_of(gen));
  for (uint16_t& v : d) v = F32ToF16(d_of(gen));
  q[0] = -32, q[1] = 31, q[16] = -32, q[17] = 31;
  scales[0] = -128, scales[1] = 127;
  values.resize(q.size());
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t col = 0; col < k; ++col) {
      const auto at = static_cast<size_t>(row * k + col);
      values[at] =
          static_cast<double>(F16ToF32(d[static_cast<size_t>(row * k / 256 + col / 256)])) *
          scales[static_cast<size_t>(row * k / 16 + col / 16)] * q[at];
    }
  }
  return PackedMatrix::FromQuantizedRows(
      Quantization::kInt6K, n, k,
      [&](int64_t row, PackedMatrix::QuantizedRow& out) {
        // Stored as q + 32.
        std::transform(q.begin() + row * k, q.begin() + (row + 1) * k, out.q.begin(),
                       [](int v) { return static_cast<uint8_t>(v + 32); });
        std::copy_n(scales.begin() + row * k / 16, k / 16, out.sc16.begin());
        std::copy_n(d.begin() + row * k / 256, k / 256, out.d.begin());
      },
      &TestPool());
}

// A matrix made from GGUF rows (FromQuantizedRows) against `values`, each of its weights in
// double: every weight exactly (the types' products are exact in f32, their sums rounded once as
// the double's are), and its MatMul of m random rows (one block of +-127) on every level the CPU
// has, AVX-VNNI's and an AMX build's kernels emulated too: the scalar twin's bits, within 4e-6
// of the float64 product.
void ExpectGgufRowsMultiplied(const PackedMatrix& packed, const std::vector<double>& values,
                              int64_t m, uint32_t seed) {
  ThreadPool& pool = TestPool();
  const int64_t n = packed.rows();
  const int64_t k = packed.cols();
  const std::string where =
      fmt::format("{} m={} k={} n={}", QuantizationName(packed.quantization()), m, k, n);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t col = 0; col < k; ++col) {
      ASSERT_EQ(packed.At(row, col), static_cast<float>(values[row * k + col]))
          << where << " [" << row << ", " << col << "]";
    }
  }
  std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), -2, 2, seed);
  for (int64_t c = 0; c < 32; ++c) x[c] = c % 2 ? 3.0F : -3.0F;  // q of +-127
  const std::vector<double> xq = RoundActivationsByRule(x.data(), m, k, k);
  const std::vector<float> twin = ScalarTwin(x, m, k, k, packed, nullptr);
  for (Isa isa : AllIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> y(static_cast<size_t>(m * n));
    MatMul(x.data(), m, k, k, packed, nullptr, y.data(), n, pool);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float got = y[i * n + j];
        if (isa != Isa::kScalar) {
          ASSERT_EQ(got, twin[i * n + j])
              << IsaName(isa) << " " << where << " at [" << i << ", " << j << "]";
        }
        double want = 0.0;
        double abs_sum = 0.0;
        for (int64_t c = 0; c < k; ++c) {
          want += values[j * k + c] * xq[i * k + c];
          abs_sum += std::fabs(values[j * k + c] * xq[i * k + c]);
        }
        ASSERT_NEAR(got, want, 4e-6 * abs_sum + 1e-30)
            << IsaName(isa) << " " << where << " at [" << i << ", " << j << "]";
      }
    }
  }
  using Kernels =
      void (*)(const float*, int64_t, int64_t, int64_t, std::span<const cpu::Product>, ThreadPool&);
  std::vector<std::pair<const char*, Kernels>> emulated;
  if (IsaSupported(Isa::kAvx2)) {
    emulated.emplace_back("avxvnni (emulated)", cpu::avxvnni_emulated::QuantizedMatMuls);
  }
  if (IsaSupported(Isa::kAvx512Bf16)) {
    emulated.emplace_back("avx512amx (emulated)", cpu::avx512amx_emulated::QuantizedMatMuls);
  }
  for (const auto& [name, kernels] : emulated) {
    std::vector<float> y(static_cast<size_t>(m * n));
    const cpu::Product product{&packed, nullptr, y.data(), n};
    kernels(x.data(), m, k, k, {&product, 1}, pool);
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_EQ(y[i], twin[i]) << name << " " << where << " at [" << i / n << ", " << i % n << "]";
    }
  }
}

TEST(QuantizedTest, Int6KHoldsQ6KRowsAndEveryPathMultipliesThem) {
  struct Dims {
    int64_t m, k, n;
  };
  // Decode, the streaming order's row blocks (int6k takes it at every m), partial tiles and
  // panels, an output head's width.
  const Dims dims[] = {{1, 256, 40}, {2, 512, 33},  {3, 256, 75},  {5, 1024, 7700},
                       {9, 768, 97}, {17, 256, 64}, {33, 512, 70}, {70, 256, 40}};
  uint32_t seed = 900;
  for (const Dims& s : dims) {
    ++seed;
    std::vector<double> values;
    const PackedMatrix packed = RandomInt6K(s.n, s.k, seed, values);
    ASSERT_EQ(packed.quantization(), Quantization::kInt6K);
    // d sc is exact in f32 (11 significant bits times 8), and so is d sc q.
    ExpectGgufRowsMultiplied(packed, values, s.m, seed + 1);
  }
  // Nothing quantizes floats to int6k, and a q outside [-32, 31] (stored past 63) is refused.
  const StoredTensor w = Store(DType::kF32, {2, 256}, RandomFloats(512, -1, 1, 5));
  EXPECT_THROW(PackedMatrix::Quantize(w.tensor, Quantization::kInt6K), Error);
  EXPECT_THROW(PackedMatrix::FromQuantizedRows(
                   Quantization::kInt6K, 1, 256,
                   [](int64_t, PackedMatrix::QuantizedRow& out) { out.q[3] = 32 + 32; }),
               Error);
}

// The 4-bit types' values given as nibbles (QuantizedRow::nibbles: byte c of a sub-block holds
// q[c] low and q[c + 16] high) pack to the same bytes as the same values given as q, whatever
// the other fields; a type with no nibble plane refuses them.
TEST(QuantizedTest, FourBitRowsAsNibblesPackAsTheirValues) {
  for (const Quantization type : {Quantization::kInt4, Quantization::kInt4K}) {
    const int64_t n = 45;  // a partial panel
    const int64_t k = 512;
    std::vector<uint8_t> q(static_cast<size_t>(n * k));
    uint32_t state = 7;
    for (uint8_t& v : q) {
      state = state * 1664525U + 1013904223U;
      v = static_cast<uint8_t>(state >> 28);
    }
    auto scales = [](int64_t row, PackedMatrix::QuantizedRow& out) {
      for (size_t g = 0; g < out.d.size(); ++g) {
        out.d[g] = F32ToF16(0.01F * static_cast<float>(row + 1));
        out.m[g] = F32ToF16(-0.02F);
      }
      for (size_t b = 0; b < out.sc.size(); ++b) {
        out.sc[b] = static_cast<uint8_t>((row + b) % 64);
        out.mn[b] = static_cast<uint8_t>((row * 3 + b) % 64);
      }
    };
    const PackedMatrix from_q = PackedMatrix::FromQuantizedRows(
        type, n, k, [&](int64_t row, PackedMatrix::QuantizedRow& out) {
          std::copy_n(q.begin() + row * k, k, out.q.begin());
          scales(row, out);
        });
    const PackedMatrix from_nibbles = PackedMatrix::FromQuantizedRows(
        type, n, k,
        [&](int64_t row, PackedMatrix::QuantizedRow& out) {
          ASSERT_EQ(static_cast<int64_t>(out.nibbles.size()), k / 2);
          for (int64_t block = 0; block < k / 32; ++block) {
            const uint8_t* v = q.data() + row * k + block * 32;
            for (int64_t c = 0; c < 16; ++c) {
              out.nibbles[block * 16 + c] = static_cast<uint8_t>(v[c] | v[c + 16] << 4);
            }
          }
          out.as_nibbles = true;
          scales(row, out);
        },
        &TestPool());
    const int64_t bytes = from_q.num_panels() * from_q.panel_bytes();
    ASSERT_EQ(from_nibbles.num_panels() * from_nibbles.panel_bytes(), bytes);
    EXPECT_EQ(std::memcmp(from_q.data(), from_nibbles.data(), static_cast<size_t>(bytes)), 0)
        << QuantizationName(type);
    for (int64_t row = 0; row < n; row += 11) {
      for (int64_t col = 0; col < k; col += 37) {
        EXPECT_EQ(from_nibbles.At(row, col), from_q.At(row, col));
      }
    }
  }
  EXPECT_THROW(PackedMatrix::FromQuantizedRows(
                   Quantization::kInt8, 1, 32,
                   [](int64_t, PackedMatrix::QuantizedRow& out) { out.as_nibbles = true; }),
               Error);
}

// A 5-bit matrix as a GGUF file's rows give it (FromQuantizedRows; nothing quantizes to these):
// q in [0, 31]; int5k (Q5_K): per 256 channels an f16 d and an f16 minimum step dm (<= 0, as the
// loader stores -dmin), per 32 a 6-bit sc and mn; int5 (Q5_1): per 32 an f16 d and an f16 m.
// Random, with their extremes (q 0 and 31, sc and mn 63) in row 0. `values`: each weight
// (d sc) q + (dm mn), or d q + m, in double.
PackedMatrix RandomInt5(Quantization type, int64_t n, int64_t k, uint32_t seed,
                        std::vector<double>& values) {
  const bool super = type == Quantization::kInt5K;
  const int64_t group = super ? 256 : 32;
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> q_of(0, 31);
  std::uniform_int_distribution<int> six_of(0, 63);
  std::uniform_real_distribution<float> d_of(1e-4F, 4e-3F);
  std::vector<int> q(static_cast<size_t>(n * k));
  std::vector<uint8_t> sc(static_cast<size_t>(n * k / 32), 1), mn(sc.size(), 1);
  std::vector<uint16_t> d(static_cast<size_t>(n * k / group)), m(d.size());
  for (int& v : q) v = q_of(gen);
  for (size_t i = 0; i < sc.size() && super; ++i) {
    sc[i] = static_cast<uint8_t>(six_of(gen));
    mn[i] = static_cast<uint8_t>(six_of(gen));
  }
  for (size_t i = 0; i < d.size(); ++i) {
    d[i] = F32ToF16(d_of(gen));
    // int5k's minimum step is <= 0; int5's minimum either sign.
    m[i] = F32ToF16(super || i % 2 ? -d_of(gen) : 16 * d_of(gen));
  }
  q[0] = 0, q[1] = 31, q[32] = 31;
  if (super) sc[0] = 63, mn[0] = 63, sc[7] = 63, mn[7] = 63;  // sub-block 7: mn7's split bits
  values.resize(q.size());
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t col = 0; col < k; ++col) {
      const auto at = static_cast<size_t>(row * k + col);
      const auto sub = static_cast<size_t>(row * k / 32 + col / 32);
      const auto g = static_cast<size_t>(row * k / group + col / group);
      values[at] = static_cast<double>(F16ToF32(d[g])) * sc[sub] * q[at] +
                   static_cast<double>(F16ToF32(m[g])) * mn[sub];
    }
  }
  return PackedMatrix::FromQuantizedRows(
      type, n, k,
      [&](int64_t row, PackedMatrix::QuantizedRow& out) {
        std::copy_n(q.begin() + row * k, k, out.q.begin());
        if (super) {
          std::copy_n(sc.begin() + row * k / 32, k / 32, out.sc.begin());
          std::copy_n(mn.begin() + row * k / 32, k / 32, out.mn.begin());
        }
        std::copy_n(d.begin() + row * k / group, k / group, out.d.begin());
        std::copy_n(m.begin() + row * k / group, k / group, out.m.begin());
      },
      &TestPool());
}

TEST(QuantizedTest, FiveBitTypesHoldGgufRowsAndEveryPathMultipliesThem) {
  struct Dims {
    int64_t m, k, n;
  };
  // Decode, the streaming order's row blocks, the many-row order (AVX-512 from 65 rows, an AMX
  // build from 17; AVX2 streams at every m), partial tiles and panels, an output head's width.
  const Dims dims[] = {{1, 256, 40},  {2, 512, 33},  {3, 256, 75},   {5, 1024, 7700}, {9, 768, 97},
                       {17, 256, 64}, {33, 512, 70}, {70, 1280, 40}, {130, 256, 300}};
  uint32_t seed = 950;
  for (const Quantization type : {Quantization::kInt5K, Quantization::kInt5}) {
    for (const Dims& s : dims) {
      ++seed;
      std::vector<double> values;
      const PackedMatrix packed = RandomInt5(type, s.n, s.k, seed, values);
      ASSERT_EQ(packed.quantization(), type);
      // (d sc) q and dm mn (or d q and m) are exact in f32 (11 significant bits times 6, times 5).
      ExpectGgufRowsMultiplied(packed, values, s.m, seed + 1);
    }
  }
  // Nothing quantizes floats to the 5-bit types, and a q outside [0, 31] is refused.
  const StoredTensor w = Store(DType::kF32, {2, 256}, RandomFloats(512, -1, 1, 5));
  for (const Quantization type : {Quantization::kInt5K, Quantization::kInt5}) {
    EXPECT_THROW(PackedMatrix::Quantize(w.tensor, type), Error);
    EXPECT_THROW(PackedMatrix::FromQuantizedRows(
                     type, 1, 256, [](int64_t, PackedMatrix::QuantizedRow& out) { out.q[3] = 32; }),
                 Error);
  }
}

TEST(QuantizedTest, RowsAreBatchInvariant) {
  ThreadPool& pool = TestPool();
  const int64_t m = 70;
  const int64_t n = 75;
  for (int64_t k : {129, 2101}) {
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), -1, 1, 51);
    StoredTensor w = Store(DType::kBF16, {n, k}, RandomFloats(n * k, -1, 1, 52));
    for (const QuantCase& qc : QuantCases()) {
      const PackedMatrix packed = PackedMatrix::Quantize(w.tensor, qc.type, qc.group);
      for (Isa isa : AllIsas()) {
        ScopedIsa scoped(isa);
        std::vector<float> all(static_cast<size_t>(m * n));
        MatMul(x.data(), m, k, k, packed, nullptr, all.data(), n, pool);
        std::vector<float> part(static_cast<size_t>(m * n));
        MatMul(x.data() + 5 * k, 18, k, k, packed, nullptr, part.data(), n, pool);
        for (int64_t i = 0; i < 18 * n; ++i) {
          ASSERT_EQ(part[i], all[5 * n + i]) << Name(qc) << " " << IsaName(isa) << " k=" << k;
        }
        for (int64_t row : {0, 13, 14, 69}) {
          MatMul(x.data() + row * k, 1, k, k, packed, nullptr, part.data(), n, pool);
          for (int64_t j = 0; j < n; ++j) {
            ASSERT_EQ(part[j], all[row * n + j])
                << Name(qc) << " " << IsaName(isa) << " k=" << k << " row " << row;
          }
        }
      }
    }
  }
}

// MatMuls (q/k/v and gate/up in one region) gives each output the bits of its own MatMul,
// whose values the test above holds to the float64 reference: odd sizes, a bias on one output,
// both loop orders, every path; and weights not quantized alike take one MatMul each.
TEST(QuantizedTest, MatMulsEqualOneMatMulPerOutput) {
  const int64_t k = 161;
  const int64_t sizes[] = {75, 33, 300};
  StoredTensor bias = Store(DType::kF32, {33}, RandomFloats(33, -1, 1, 60));
  for (const QuantCase& qc : QuantCases()) {
    std::vector<StoredTensor> weights;
    std::vector<PackedMatrix> packed;
    for (int64_t n : sizes) {
      weights.push_back(Store(DType::kBF16, {n, k}, RandomFloats(n * k, -1, 1, 61 + n)));
      packed.push_back(PackedMatrix::Quantize(weights.back().tensor, qc.type, qc.group));
    }
    // The last output bf16: a mix, computed one MatMul each.
    const PackedMatrix plain = PackedMatrix::Pack(weights.back().tensor);
    for (bool mixed : {false, true}) {
      for (int64_t m : {1, 5, 17, 70}) {
        const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), -1, 1, 62 + m);
        for (Isa isa : AllIsas()) {
          ScopedIsa scoped(isa);
          ASSERT_NO_FATAL_FAILURE(ExpectMatMulsEqualEachMatMul(
              x, m, k, {&packed[0], &packed[1], mixed ? &plain : &packed[2]}, bias.tensor,
              MatMulPrecision::kF32,
              Name(qc) + " " + std::string(IsaName(isa)) + " mixed=" + std::to_string(mixed)));
          ASSERT_NO_FATAL_FAILURE(ExpectMatMulsEqualEachMatMul(
              x, m, k, {&packed[0], &packed[1], mixed ? &plain : &packed[2]}, bias.tensor,
              MatMulPrecision::kF32,
              Name(qc) + " int8x2 " + std::string(IsaName(isa)) + " mixed=" + std::to_string(mixed),
              QuantizedActivations::kInt8x2));
        }
      }
    }
  }
}

// The AMX tile path (prefill: more than 16 rows) gives the same bits as the AVX-512 VNNI path,
// hence (tests above) the float64 product within f32 error and batch invariance. The tile
// operations run emulated as Intel's manual defines them (amx_tiles.h), so this holds the
// tile path's layout, loops and arithmetic on any CPU with AVX512_BF16; on a CPU with AMX the
// tests above also run the instructions themselves (Isa::kAvx512Amx in SimdIsas()).
TEST(QuantizedTest, AmxTilePathEqualsTheVnniPathBitForBit) {
  if (!IsaSupported(Isa::kAvx512Bf16)) GTEST_SKIP() << "the emulation is compiled for AVX512_BF16";
  ThreadPool& pool = TestPool();
  struct Dims {
    int64_t m, k;
    std::vector<int64_t> n;  // one product per entry, in one call
  };
  const Dims dims[] = {{17, 31, {16}},        {33, 257, {75, 33}}, {70, 130, {97}},
                       {40, 1100, {48, 300}}, {19, 2101, {31}},    {64, 96, {300, 17, 64}}};
  uint32_t seed = 90;
  for (const QuantCase& qc : QuantCases()) {
    for (const Dims& s : dims) {
      ++seed;
      const int64_t x_stride = s.k + 5;
      const std::vector<float> x = RandomFloats(static_cast<size_t>(s.m * x_stride), -1, 1, seed);
      std::vector<PackedMatrix> packed;
      std::vector<StoredTensor> bias;
      for (int64_t n : s.n) {
        StoredTensor w = Store(DType::kBF16, {n, s.k}, RandomFloats(n * s.k, -1, 1, seed + n));
        packed.push_back(PackedMatrix::Quantize(w.tensor, qc.type, qc.group, &pool));
        bias.push_back(Store(DType::kF32, {n}, RandomFloats(n, -1, 1, seed + 2 * n)));
      }
      // Each output's y (row stride n + 3), one run per path; the first output has a bias.
      auto run = [&](auto matmuls) {
        std::vector<std::vector<float>> ys;
        std::vector<cpu::Product> products;
        ys.reserve(s.n.size());
        for (size_t i = 0; i < s.n.size(); ++i) {
          ys.emplace_back(static_cast<size_t>(s.m * (s.n[i] + 3)), -7.0F);
          products.push_back({&packed[i], i == 0 ? bias[i].widened.data() : nullptr,
                              ys.back().data(), s.n[i] + 3});
        }
        matmuls(x.data(), s.m, s.k, x_stride, std::span<const cpu::Product>(products), pool);
        return ys;
      };
      const auto vnni = run(cpu::avx512bf16::QuantizedMatMuls);
      const auto tiles = run(cpu::avx512amx_emulated::QuantizedMatMuls);
      for (size_t o = 0; o < s.n.size(); ++o) {
        for (size_t i = 0; i < vnni[o].size(); ++i) {
          ASSERT_EQ(tiles[o][i], vnni[o][i])
              << Name(qc) << " m=" << s.m << " k=" << s.k << " output " << o << " at "
              << i / (s.n[o] + 3) << ", " << i % (s.n[o] + 3);
        }
      }
    }
  }
}

TEST(QuantizedTest, BadInputsAreClearErrors) {
  StoredTensor w = Store(DType::kF32, {4, 64}, RandomFloats(256, -1, 1, 61));
  EXPECT_THROW(PackedMatrix::Quantize(w.tensor, Quantization::kInt4, 48), Error);
  EXPECT_THROW(PackedMatrix::Quantize(w.tensor, Quantization::kInt8, 64), Error);
  w.tensor.data<float>()[3] = std::nanf("");
  EXPECT_THROW(PackedMatrix::Quantize(w.tensor, Quantization::kInt8), Error);
  w.tensor.data<float>()[3] = 1e9F;  // scale beyond f16
  EXPECT_THROW(PackedMatrix::Quantize(w.tensor, Quantization::kInt8), Error);
  EXPECT_THROW(PackedMatrix::Quantize(w.tensor, Quantization::kInt4), Error);
  EXPECT_EQ(ParseQuantization("int4"), Quantization::kInt4);
  EXPECT_THROW(ParseQuantization("q4_0"), Error);
}

}  // namespace
}  // namespace infer::kernels
