#include "infer/engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "infer/engine/logits_processor.h"
#include "infer/kernels/cpu/isa.h"

namespace infer {
namespace {

// A draw as the engine makes one: the logits processors of `params` (with `suppressed` as the
// end-of-generation ids and min_tokens 1 when given, so that they are held back), then
// `sampler`; logprobs as params.logprobs asks.
int32_t DrawWith(Sampler& sampler, SamplingParams params, std::vector<float>& logits,
                 const std::vector<int32_t>& context, int64_t num_prompt_tokens = 0,
                 const std::vector<int32_t>& suppressed = {}, TokenLogprobs* logprobs = nullptr) {
  if (!suppressed.empty()) params.min_tokens = 1;
  const LogitsProcessors processors =
      MakeLogitsProcessors(params, suppressed, nullptr, nullptr, nullptr);
  std::vector<float> raw;
  return DrawToken(logits, {context, num_prompt_tokens}, processors, sampler, params.logprobs,
                   logprobs, raw);
}

constexpr float kInf = std::numeric_limits<float>::infinity();

int CountFinite(const std::vector<float>& logits) {
  int count = 0;
  for (const float logit : logits) count += std::isfinite(logit) ? 1 : 0;
  return count;
}

TEST(SamplerTest, TemperatureScales) {
  const std::vector<float> original{1.0F, -2.0F, 3.5F, 0.0F};
  std::vector<float> logits = original;
  ApplyTemperature(logits, 1.0);
  EXPECT_EQ(logits, original);
  ApplyTemperature(logits, 0.5);
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_FLOAT_EQ(logits[i], original[i] * 2.0F);
  logits = original;
  ApplyTemperature(logits, 2.0);
  ASSERT_EQ(logits.size(), original.size());
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_FLOAT_EQ(logits[i], original[i] / 2.0F);
}

TEST(SamplerTest, TopKKeepsLargest) {
  const std::vector<float> original{0.1F, 5.0F, -1.0F, 3.0F, 2.0F, 0.5F, 4.0F, -3.0F, 1.0F, 0.0F};
  std::vector<float> logits = original;
  ApplyTopK(logits, 3);
  EXPECT_EQ(CountFinite(logits), 3);
  EXPECT_EQ(logits[1], 5.0F);
  EXPECT_EQ(logits[6], 4.0F);
  EXPECT_EQ(logits[3], 3.0F);
  logits = original;
  ApplyTopK(logits, 10);
  EXPECT_EQ(logits, original);
  ApplyTopK(logits, 1);
  EXPECT_EQ(CountFinite(logits), 1);
  EXPECT_EQ(logits[1], 5.0F);
}

std::vector<float> TopP(std::vector<float> logits, double p) {
  ApplyTopP(logits, p);
  return logits;
}

TEST(SamplerTest, TopPKeepsNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05.
  const std::vector<float> original{std::log(0.15F), std::log(0.5F), std::log(0.05F),
                                    std::log(0.3F)};
  std::vector<float> logits = TopP(original, 0.9);  // 0.5 + 0.3 < 0.9, + 0.15 reaches it
  EXPECT_EQ(CountFinite(logits), 3);
  EXPECT_EQ(logits[2], -kInf);
  EXPECT_EQ(TopP(original, 1.0), original);
  logits = TopP(original, 0.01);
  EXPECT_EQ(CountFinite(logits), 1);
  EXPECT_TRUE(std::isfinite(logits[1]));
  int previous = 5;
  for (const double p : {0.99, 0.9, 0.7, 0.5, 0.2, 0.05}) {
    const int kept = CountFinite(TopP(original, p));
    EXPECT_LE(kept, previous) << p;
    previous = kept;
  }
  // Masked entries carry no probability.
  std::vector<float> masked{-kInf, 2.0F, 2.0F, -kInf};
  ApplyTopP(masked, 0.5);
  EXPECT_EQ(CountFinite(masked), 1);
  EXPECT_EQ(masked[1], 2.0F);
}

TEST(SamplerTest, TopPOnLargeVocabSortsAsFarAsNeeded) {
  std::vector<float> logits(5000, 0.0F);  // uniform: each token has 1/5000
  ApplyTopP(logits, 0.4999);              // reached at the 2500th token
  EXPECT_EQ(CountFinite(logits), 2500);
  EXPECT_TRUE(std::isfinite(logits[0]));  // ties: lower ids first
  EXPECT_FALSE(std::isfinite(logits[4999]));
}

// The nucleus as the header defines it, by a full sort: the tokens in descending order (lower
// id first among equals) up to the one at which their probabilities, summed in that order in
// double, reach p.
std::vector<float> TopPByFullSort(std::vector<float> logits, double p) {
  std::vector<int32_t> order;
  float max_logit = -kInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == -kInf) continue;
    order.push_back(static_cast<int32_t>(i));
    max_logit = std::max(max_logit, logits[i]);
  }
  double total = 0.0;
  for (const int32_t id : order) total += std::exp(static_cast<double>(logits[id] - max_logit));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  double cumulative = 0.0;
  size_t keep = order.size();
  for (size_t i = 0; i < order.size(); ++i) {
    cumulative += std::exp(static_cast<double>(logits[order[i]] - max_logit)) / total;
    if (cumulative >= p) {
      keep = i + 1;
      break;
    }
  }
  for (size_t i = keep; i < order.size(); ++i) logits[order[i]] = -kInf;
  return logits;
}

// The same kept set as the full sort, bit for bit, on the distributions a sampler meets: flat
// ones over a 128k vocabulary (most of it in the nucleus), peaked ones, many ties, signed zeros,
// masked entries, and p values that land exactly on a prefix's sum.
TEST(SamplerTest, TopPKeepsTheFullSortsNucleusOnEveryDistribution) {
  std::mt19937_64 rng(7);
  const auto check = [](const std::vector<float>& logits, double p, const std::string& what) {
    const std::vector<float> expected = TopPByFullSort(logits, p);
    const std::vector<float> actual = TopP(logits, p);
    ASSERT_EQ(actual.size(), expected.size());
    size_t differing = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      differing += std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0 ? 1 : 0;
    }
    EXPECT_EQ(differing, 0U) << what << " p=" << p << " kept " << CountFinite(actual) << " of "
                             << CountFinite(expected);
  };
  for (const double spread : {0.05, 0.5, 2.0, 8.0}) {
    std::normal_distribution<float> normal(0.0F, static_cast<float>(spread));
    std::vector<float> logits(128256);
    for (float& logit : logits) logit = normal(rng);
    for (const double p : {0.05, 0.5, 0.9, 0.95, 0.999}) {
      check(logits, p, "normal spread " + std::to_string(spread));
    }
  }
  std::vector<float> peaked(151936, -12.0F);
  for (size_t i = 0; i < 40; ++i) peaked[i * 997] = static_cast<float>(i) * 0.25F;
  for (const double p : {0.5, 0.9, 0.95}) check(peaked, p, "peaked");
  std::uniform_int_distribution<int> level(0, 7);
  std::vector<float> ties(50000);
  for (float& logit : ties) logit = static_cast<float>(level(rng)) * 0.5F - 2.0F;
  for (const double p : {0.1, 0.6, 0.9}) check(ties, p, "ties");
  std::vector<float> zeros(20000);
  for (size_t i = 0; i < zeros.size(); ++i) zeros[i] = (i % 3 == 0) ? -0.0F : 0.0F;
  zeros[5] = 1.0F;
  for (const double p : {0.3, 0.7}) check(zeros, p, "signed zeros");
  std::vector<float> masked = peaked;
  for (size_t i = 0; i < masked.size(); i += 2) masked[i] = -kInf;
  for (const double p : {0.5, 0.9}) check(masked, p, "masked");
  const std::vector<float> quarters(4, 1.0F);  // prefix sums 0.25, 0.5, 0.75 exactly
  for (const double p : {0.25, 0.5, 0.75, 1.0 - 1e-17}) check(quarters, p, "exact sums");
  const std::vector<float> uniform(200000, 0.0F);  // one bucket larger than a bucket sort
  check(uniform, 0.9, "uniform");
}

// Sampler::Sample by its definition, with std::exp throughout: temperature, top-k, the full
// sort's nucleus, then the inverse-CDF draw over exp(logit - max) in id order with one 53-bit
// uniform. The weights are made once per row and setting; Draw takes a uniform each time.
class DefinitionSampler {
 public:
  DefinitionSampler(std::vector<float> logits, const SamplingParams& params) {
    if (params.temperature != 1.0) {
      const auto scale = static_cast<float>(1.0 / params.temperature);
      for (float& logit : logits) logit *= scale;
    }
    if (params.top_k && *params.top_k < std::ssize(logits)) {
      std::vector<float> sorted = logits;
      const auto kth = sorted.begin() + (*params.top_k - 1);
      std::nth_element(sorted.begin(), kth, sorted.end(), std::greater<>());
      for (float& logit : logits) logit = logit < *kth ? -kInf : logit;
    }
    if (params.top_p < 1.0) logits = TopPByFullSort(logits, params.top_p);
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] == -kInf) continue;
      if (best_ < 0 || logits[i] > logits[static_cast<size_t>(best_)]) {
        best_ = static_cast<int32_t>(i);
      }
    }
    const float max_logit = logits[static_cast<size_t>(best_)];
    weights_.assign(logits.size(), 0.0);
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] == -kInf) continue;
      weights_[i] = std::exp(static_cast<double>(logits[i] - max_logit));
      total_ += weights_[i];
    }
  }

  int32_t Draw(std::mt19937_64& rng) const {
    const double target = static_cast<double>(rng() >> 11U) * 0x1.0p-53 * total_;
    double cumulative = 0.0;
    int32_t last = best_;
    for (size_t i = 0; i < weights_.size(); ++i) {
      if (weights_[i] == 0.0) continue;
      cumulative += weights_[i];
      last = static_cast<int32_t>(i);
      if (target < cumulative) return last;
    }
    return last;
  }

 private:
  std::vector<double> weights_;  // 0 for the masked tokens
  double total_ = 0.0;
  int32_t best_ = -1;
};

// The sampler draws exactly the definition's tokens on every SIMD level (its weights come from
// a vector exp whose choices it confirms against std::exp's error bound): flat rows over the
// vocabularies of the three models, peaked ones, ties, a constant row, masked entries, wide
// logits whose weights underflow, a NaN (top-p and top-k off, where the order is undefined).
TEST(SamplerTest, SampleDrawsTheDefinitionsTokensOnEveryLevel) {
  std::mt19937_64 rng(21);
  std::vector<std::pair<std::string, std::vector<float>>> rows;
  for (const size_t vocab : {size_t{1000}, size_t{128256}, size_t{262144}}) {
    std::normal_distribution<float> normal(0.0F, 1.0F);
    std::vector<float> row(vocab);
    for (float& logit : row) logit = normal(rng);
    rows.emplace_back("flat " + std::to_string(vocab), row);
    for (int i = 0; i < 8; ++i) row[rng() % vocab] += 12.0F + static_cast<float>(i);
    rows.emplace_back("peaked " + std::to_string(vocab), row);
  }
  std::uniform_int_distribution<int> level(0, 5);
  std::vector<float> ties(5000);
  for (float& logit : ties) logit = static_cast<float>(level(rng)) * 0.5F;
  rows.emplace_back("ties", ties);
  rows.emplace_back("constant", std::vector<float>(3001, 0.25F));
  std::vector<float> masked = rows[0].second;
  for (size_t i = 0; i < masked.size(); i += 3) masked[i] = -kInf;
  rows.emplace_back("masked", masked);
  std::vector<float> wide(4099);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = -static_cast<float>(i) * 0.5F;
  rows.emplace_back("wide", wide);
  std::vector<float> with_nan = rows[0].second;
  with_nan[17] = std::numeric_limits<float>::quiet_NaN();
  std::vector<kernels::Isa> isas = {kernels::Isa::kScalar};
  for (const kernels::Isa isa : {kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (kernels::IsaSupported(isa)) isas.push_back(isa);
  }
  const kernels::Isa previous = kernels::ActiveIsa();
  const auto check = [&](const std::string& name, const std::vector<float>& row,
                         const SamplingParams& params) {
    const DefinitionSampler definition(row, params);
    const int draws = row.size() > 100000 ? 4 : 30;
    for (const kernels::Isa isa : isas) {
      kernels::SetActiveIsa(isa);
      Sampler sampler(params);
      std::mt19937_64 reference_rng(*params.seed);
      for (int draw = 0; draw < draws; ++draw) {
        std::vector<float> logits = row;
        ASSERT_EQ(sampler.Sample(logits), definition.Draw(reference_rng))
            << name << " " << kernels::IsaName(isa) << " t " << params.temperature << " p "
            << params.top_p << " k " << params.top_k.value_or(0) << " draw " << draw;
      }
    }
  };
  for (const auto& [name, row] : rows) {
    for (const double temperature : {0.6, 1.0}) {
      for (const double top_p : {1.0, 0.95, 0.9, 0.3}) {
        for (const std::optional<int64_t> top_k : {std::optional<int64_t>{}, {20}}) {
          SamplingParams params;
          params.temperature = temperature;
          params.top_p = top_p;
          params.top_k = top_k;
          params.seed = 5;
          check(name, row, params);
        }
      }
    }
  }
  SamplingParams params;
  params.seed = 9;
  check("nan", with_nan, params);
  kernels::SetActiveIsa(previous);
}

TEST(SamplerTest, RepetitionPenalty) {
  const std::vector<float> original{2.0F, -2.0F, 1.0F, 4.0F};
  std::vector<float> logits = original;
  ApplyRepetitionPenalty(logits, std::vector<int32_t>{0, 1}, 1.0);
  EXPECT_EQ(logits, original);
  ApplyRepetitionPenalty(logits, std::vector<int32_t>{0, 1, 0, 0, 1, 99, -1}, 2.0);
  EXPECT_FLOAT_EQ(logits[0], 1.0F);   // positive: halved, once despite duplicates
  EXPECT_FLOAT_EQ(logits[1], -4.0F);  // negative: doubled
  EXPECT_EQ(logits[2], 1.0F);
  EXPECT_EQ(logits[3], 4.0F);
}

TEST(SamplerTest, GreedyIsArgmax) {
  SamplingParams params;
  params.temperature = 0.0;
  Sampler sampler(params);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits{0.5F, 3.0F, 2.9F, -1.0F};
    EXPECT_EQ(sampler.Sample(logits), 1);
  }
  std::vector<float> logits{0.5F, 3.0F, 2.9F, -1.0F};
  params.repetition_penalty = 2.0;  // the penalty still applies before argmax
  Sampler penalized(params);
  EXPECT_EQ(DrawWith(penalized, params, logits, {1}), 2);
}

std::vector<int32_t> Draw(uint64_t seed, int count) {
  SamplingParams params;
  params.seed = seed;
  Sampler sampler(params);
  std::vector<int32_t> ids;
  for (int i = 0; i < count; ++i) {
    std::vector<float> logits(50, 0.0F);
    ids.push_back(sampler.Sample(logits));
  }
  return ids;
}

// MT19937-64 written from its published definition (Matsumoto & Nishimura, 2004), independent
// of the standard library the sampler uses.
class ReferenceMt64 {
 public:
  explicit ReferenceMt64(uint64_t seed) {
    state_[0] = seed;
    for (int i = 1; i < 312; ++i) {
      state_[i] = 6364136223846793005ULL * (state_[i - 1] ^ (state_[i - 1] >> 62)) +
                  static_cast<uint64_t>(i);
    }
  }
  uint64_t Next() {
    constexpr uint64_t kUpper = 0xFFFFFFFF80000000ULL, kLower = 0x7FFFFFFFULL;
    if (index_ >= 312) {
      for (int i = 0; i < 312; ++i) {
        const uint64_t x = (state_[i] & kUpper) | (state_[(i + 1) % 312] & kLower);
        uint64_t next = state_[(i + 156) % 312] ^ (x >> 1);
        if (x & 1U) next ^= 0xB5026F5AA96619E9ULL;
        state_[i] = next;
      }
      index_ = 0;
    }
    uint64_t y = state_[index_++];
    y ^= (y >> 29) & 0x5555555555555555ULL;
    y ^= (y << 17) & 0x71D67FFFEDA60000ULL;
    y ^= (y << 37) & 0xFFF7EEE000000000ULL;
    return y ^ (y >> 43);
  }

 private:
  uint64_t state_[312] = {};
  int index_ = 312;
};

TEST(SamplerTest, ReferenceGeneratorMatchesThePublishedValue) {
  // C++ [rand.predef]: the 10000th output of a default-constructed mt19937_64 (seed 5489).
  ReferenceMt64 rng(5489);
  uint64_t value = 0;
  for (int i = 0; i < 10000; ++i) value = rng.Next();
  EXPECT_EQ(value, 9981545732273789042ULL);
}

TEST(SamplerTest, SeedIsDeterministic) {
  EXPECT_EQ(Draw(42, 32), Draw(42, 32));
  EXPECT_NE(Draw(42, 32), Draw(43, 32));
  // With 50 equal logits inverse-CDF sampling picks floor(u * 50), u = the top 53 bits of one
  // 64-bit draw scaled to [0, 1): the ids follow from the reference generator alone.
  ReferenceMt64 rng(42);
  std::vector<int32_t> expected;
  for (int i = 0; i < 32; ++i) {
    const double u = static_cast<double>(rng.Next() >> 11U) * 0x1.0p-53;
    expected.push_back(static_cast<int32_t>(u * 50.0));
  }
  EXPECT_EQ(Draw(42, 32), expected);
}

TEST(SamplerTest, FullPipelineGivesValidId) {
  SamplingParams params;
  params.temperature = 0.8;
  params.top_k = 50;
  params.top_p = 0.9;
  params.repetition_penalty = 1.1;
  params.seed = 7;
  Sampler sampler(params);
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 5.0F;
  const int32_t id = DrawWith(sampler, params, logits, {1, 2, 3});
  EXPECT_GE(id, 0);
  EXPECT_LT(id, 1000);
}

TEST(SamplerTest, UniformLogitsSampleUniformly) {
  constexpr int kVocab = 20;
  constexpr int kSamples = 20000;
  SamplingParams params;
  params.seed = 1234;
  Sampler sampler(params);
  std::vector<int> counts(kVocab, 0);
  for (int i = 0; i < kSamples; ++i) {
    std::vector<float> logits(kVocab, 0.0F);
    ++counts[static_cast<size_t>(sampler.Sample(logits))];
  }
  const double expected = static_cast<double>(kSamples) / kVocab;
  double chi_squared = 0.0;
  for (const int count : counts) chi_squared += (count - expected) * (count - expected) / expected;
  // 19 degrees of freedom: the 99.9th percentile is 43.8.
  EXPECT_LT(chi_squared, 43.8);
}

TEST(SamplerTest, SamplesOnlyUnmaskedTokens) {
  std::mt19937_64 rng(3);
  const std::vector<float> logits{-kInf, 0.0F, -kInf, 0.0F};
  for (int i = 0; i < 200; ++i) {
    const int32_t id = SampleFromLogits(logits, rng);
    EXPECT_TRUE(id == 1 || id == 3);
  }
}

// OpenAI's penalties: a token seen c times loses presence + c * frequency; prompt tokens are
// not counted (the sampler is told where the prompt ends).
TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountGeneratedTokens) {
  std::vector<float> logits{1.0F, 1.0F, 1.0F, 1.0F};
  ApplyPresenceFrequencyPenalty(logits, std::vector<int32_t>{2, 2, 2, 0, 9, -1}, 0.5, 0.25);
  EXPECT_FLOAT_EQ(logits[0], 1.0F - 0.5F - 0.25F);
  EXPECT_FLOAT_EQ(logits[1], 1.0F);
  EXPECT_FLOAT_EQ(logits[2], 1.0F - 0.5F - 0.75F);
  EXPECT_FLOAT_EQ(logits[3], 1.0F);
  // Through the sampler: token 0 is the prompt's, token 1 was generated twice.
  SamplingParams params;
  params.temperature = 0.0;
  params.presence_penalty = 1.0;
  params.frequency_penalty = 0.5;
  Sampler sampler(params);
  std::vector<float> row{3.0F, 3.5F, 2.2F};
  // Token 1: 3.5 - 1 - 2 * 0.5 = 1.5 < 2.2; token 0 is untouched (in the prompt).
  EXPECT_EQ(DrawWith(sampler, params, row, {0, 1, 1}, /*num_prompt_tokens=*/1), 0);
}

TEST(SamplerTest, LogitBiasAndSuppressedIds) {
  std::vector<float> logits{0.0F, 1.0F, 2.0F};
  ApplyLogitBias(logits, {{0, 5.0}, {7, 100.0}});
  EXPECT_EQ(logits, (std::vector<float>{5.0F, 1.0F, 2.0F}));
  SamplingParams params;
  params.temperature = 0.0;
  Sampler sampler(params);
  std::vector<float> row{0.0F, 1.0F, 2.0F};
  const std::vector<int32_t> suppressed{2};
  EXPECT_EQ(DrawWith(sampler, params, row, {}, 0, suppressed), 1);
}

// Logprobs come from the raw row (before temperature, bias and penalties) and are a log-softmax:
// checked against the definition in long double.
TEST(SamplerTest, LogprobsAreTheRawLogSoftmax) {
  const std::vector<float> raw{0.5F, -1.0F, 2.0F, 2.0F, 0.25F};
  long double total = 0;
  for (const float x : raw) total += std::exp(static_cast<long double>(x));
  const auto expected = [&](int id) {
    return static_cast<double>(static_cast<long double>(raw[static_cast<size_t>(id)]) -
                               std::log(total));
  };
  SamplingParams params;
  params.temperature = 0.3;
  params.seed = 5;
  params.logprobs = 3;
  params.logit_bias = {{1, 50.0}};  // forces token 1, which the raw logprobs do not see
  Sampler sampler(params);
  std::vector<float> row = raw;
  TokenLogprobs logprobs;
  const int32_t token = DrawWith(sampler, params, row, {}, 0, {}, &logprobs);
  EXPECT_EQ(token, 1);
  EXPECT_EQ(logprobs.token_id, 1);
  EXPECT_NEAR(logprobs.logprob, expected(1), 1e-6);
  ASSERT_EQ(logprobs.top.size(), 3U);
  EXPECT_EQ(logprobs.top[0].first, 2);  // ties: the lower id first
  EXPECT_EQ(logprobs.top[1].first, 3);
  EXPECT_EQ(logprobs.top[2].first, 0);
  for (const auto& [id, logprob] : logprobs.top) EXPECT_NEAR(logprob, expected(id), 1e-6);
  // Not requested: untouched.
  Sampler plain(SamplingParams{});
  TokenLogprobs untouched;
  row = raw;
  DrawWith(plain, SamplingParams{}, row, {}, 0, {}, &untouched);
  EXPECT_TRUE(untouched.top.empty());
  EXPECT_EQ(untouched.logprob, 0.0F);
}

}  // namespace
}  // namespace infer
