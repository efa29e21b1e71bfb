// The decoder against the fixtures' float64 reference (tests/fixtures/models/README.md):
// every logit row within 1e-4 of the row's max |ref|, greedy continuations token for token,
// with and without the KV cache, for bf16 and f32 checkpoints of all three architectures.
#include "infer/model/decoder.h"

#include "infer/core/error.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <cstring>

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace infer {
namespace {

constexpr double kBf16RowTolerance = 0.2;  // bf16 roundings amplified by random weights
constexpr double kRowTolerance = 1e-4;     // README: max_v |logit - ref| <= 1e-4 * max_v |ref|

std::string FixtureDir(const std::string& arch) {
  return std::string(INFER_TEST_FIXTURES) + "/models/" + arch;
}

nlohmann::json Reference(const std::string& arch) {
  std::ifstream in(FixtureDir(arch) + "/reference.json");
  return nlohmann::json::parse(in);
}

std::vector<float> ReadF32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

// Worst row of max_v |a - ref| / max_v |ref|.
double WorstRowError(const float* actual, const float* reference, int64_t rows, int64_t vocab) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double max_diff = 0, max_ref = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      max_diff =
          std::max(max_diff, std::abs(double(actual[r * vocab + v]) - reference[r * vocab + v]));
      max_ref = std::max(max_ref, std::abs(double(reference[r * vocab + v])));
    }
    worst = std::max(worst, max_diff / max_ref);
  }
  return worst;
}

int32_t Argmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

struct Case {
  const char* arch;
  const char* variant;  // model (bf16) or model_f32
};

class DecoderFixture : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    model_ = LoadModel(FixtureDir(GetParam().arch) + "/" + GetParam().variant, {});
    decoder_ = std::make_unique<Decoder>(model_, pool_);
    reference_ = Reference(GetParam().arch);
  }
  ThreadPool pool_{2};
  LoadedModel model_;
  std::unique_ptr<Decoder> decoder_;
  nlohmann::json reference_;
};

TEST_P(DecoderFixture, LogitsAtEveryPosition) {
  const auto ids = reference_["logits_input_ids"].get<std::vector<int32_t>>();
  const auto expected = ReadF32(FixtureDir(GetParam().arch) + "/logits.f32.bin");
  const int64_t vocab = decoder_->vocab_size();
  ASSERT_EQ(expected.size(), ids.size() * vocab);

  std::vector<float> logits;
  decoder_->ForwardUncached(ids, LogitsMode::kAllPositions, logits);
  EXPECT_LE(WorstRowError(logits.data(), expected.data(), ids.size(), vocab), kRowTolerance);

  // Cached: a prefill of 20 tokens, then one token at a time.
  PagedKvCache cache = decoder_->MakeSequenceCache(64);
  std::vector<float> step_logits;
  decoder_->Forward(std::span(ids).first(20), 0, cache, LogitsMode::kAllPositions, step_logits);
  EXPECT_LE(WorstRowError(step_logits.data(), expected.data(), 20, vocab), kRowTolerance);
  for (size_t t = 20; t < ids.size(); ++t) {
    decoder_->Forward(std::span(ids).subspan(t, 1), static_cast<int64_t>(t), cache,
                      LogitsMode::kLastPosition, step_logits);
    EXPECT_LE(WorstRowError(step_logits.data(), expected.data() + t * vocab, 1, vocab),
              kRowTolerance)
        << t;
  }
}

// A bf16 KV cache (the serving default) with f32 matmuls: teacher-forced logits against the
// float64 reference. The error is reported (worst_row_error) and bounded.
TEST_P(DecoderFixture, Bf16KvCacheLogitsNearTheReference) {
  const auto ids = reference_["logits_input_ids"].get<std::vector<int32_t>>();
  const auto expected = ReadF32(FixtureDir(GetParam().arch) + "/logits.f32.bin");
  const int64_t vocab = decoder_->vocab_size();
  PagedKvCache cache = decoder_->MakeSequenceCache(64, DType::kBF16);
  std::vector<float> logits;
  decoder_->Forward(std::span(ids).first(20), 0, cache, LogitsMode::kAllPositions, logits);
  double worst = WorstRowError(logits.data(), expected.data(), 20, vocab);
  for (size_t t = 20; t < ids.size(); ++t) {
    decoder_->Forward(std::span(ids).subspan(t, 1), static_cast<int64_t>(t), cache,
                      LogitsMode::kLastPosition, logits);
    worst = std::max(worst, WorstRowError(logits.data(), expected.data() + t * vocab, 1, vocab));
  }
  RecordProperty("worst_row_error", std::to_string(worst));
  std::printf("[ %s bf16 KV: worst row error %.4g of the row max ]\n", GetParam().arch, worst);
  EXPECT_LE(worst, kBf16RowTolerance);
}

void CheckGreedy(Decoder& decoder, const ModelConfig& config, const nlohmann::json& run,
                 const std::string& step_logits_path, bool use_cache) {
  auto tokens = run["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected_ids = run["generated_ids"].get<std::vector<int32_t>>();
  const auto expected_logits = ReadF32(step_logits_path);
  const int64_t vocab = config.vocab_size;
  PagedKvCache cache = decoder.MakeSequenceCache(128);
  std::vector<float> logits;
  std::vector<int32_t> generated;
  for (size_t step = 0; step < expected_ids.size(); ++step) {
    if (use_cache) {
      const auto fresh =
          step == 0 ? std::span<const int32_t>(tokens) : std::span<const int32_t>(tokens).last(1);
      decoder.Forward(fresh, static_cast<int64_t>(tokens.size() - fresh.size()), cache,
                      LogitsMode::kLastPosition, logits);
    } else {
      decoder.ForwardUncached(tokens, LogitsMode::kLastPosition, logits);
    }
    EXPECT_LE(WorstRowError(logits.data(), expected_logits.data() + step * vocab, 1, vocab),
              kRowTolerance)
        << "step " << step;
    generated.push_back(Argmax(logits.data(), vocab));
    tokens.push_back(generated.back());
  }
  EXPECT_EQ(generated, expected_ids);
}

TEST_P(DecoderFixture, GreedyWithKvCache) {
  const std::string dir = FixtureDir(GetParam().arch);
  CheckGreedy(*decoder_, model_.config, reference_["greedy_short"],
              dir + "/greedy_short_step_logits.f32.bin", true);
  CheckGreedy(*decoder_, model_.config, reference_["greedy_long"],
              dir + "/greedy_long_step_logits.f32.bin", true);
}

TEST_P(DecoderFixture, GreedyWithoutKvCache) {
  const std::string dir = FixtureDir(GetParam().arch);
  CheckGreedy(*decoder_, model_.config, reference_["greedy_short"],
              dir + "/greedy_short_step_logits.f32.bin", false);
  CheckGreedy(*decoder_, model_.config, reference_["greedy_long"],
              dir + "/greedy_long_step_logits.f32.bin", false);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecoderFixture,
                         ::testing::Values(Case{"llama", "model"}, Case{"llama", "model_f32"},
                                           Case{"qwen3", "model"}, Case{"qwen3", "model_f32"},
                                           Case{"gemma3", "model"}, Case{"gemma3", "model_f32"}),
                         [](const auto& info) {
                           return std::string(info.param.arch) + "_" + info.param.variant;
                         });

// --matmul-precision bf16 (kernels/ops.h) rounds every projection's input to bf16. On these
// random models the rounding is amplified layer by layer: measured on the scalar reference
// kernels and both SIMD paths alike, the worst teacher-forced row moves by 12.6% (llama), 1.3%
// (qwen3) and 2.5% (gemma3) of its max |ref|, and free-running greedy runs part from the
// float64 reference after 11 to 18 tokens (their top-2 gaps were chosen for f32 accuracy). So
// bf16 is checked teacher-forced, with a bound that a wrong kernel (errors ~100%) cannot meet.
constexpr double kBf16MinArgmaxAgreement = 0.9;

class DecoderBf16MatMul : public ::testing::TestWithParam<const char*> {};

TEST_P(DecoderBf16MatMul, TeacherForcedLogitsNearTheReference) {
  const std::string arch = GetParam();
  LoadedModel model = LoadModel(FixtureDir(arch) + "/model", {});
  ThreadPool pool(2);
  Decoder decoder(model, pool, kernels::MatMulPrecision::kBf16);
  const auto ids = Reference(arch)["logits_input_ids"].get<std::vector<int32_t>>();
  const auto expected = ReadF32(FixtureDir(arch) + "/logits.f32.bin");
  const int64_t vocab = decoder.vocab_size();
  const auto rows = static_cast<int64_t>(ids.size());

  std::vector<float> uncached;
  decoder.ForwardUncached(ids, LogitsMode::kAllPositions, uncached);
  const double error = WorstRowError(uncached.data(), expected.data(), rows, vocab);
  RecordProperty("worst_row_error", std::to_string(error));
  EXPECT_LE(error, kBf16RowTolerance);
  int agree = 0;
  for (int64_t r = 0; r < rows; ++r) {
    agree +=
        Argmax(uncached.data() + r * vocab, vocab) == Argmax(expected.data() + r * vocab, vocab);
  }
  EXPECT_GE(agree, kBf16MinArgmaxAgreement * static_cast<double>(rows)) << agree << "/" << rows;

  // Cached (a 20-token prefill, then single tokens): the same tolerance.
  PagedKvCache cache = decoder.MakeSequenceCache(64);
  std::vector<float> step_logits;
  decoder.Forward(std::span(ids).first(20), 0, cache, LogitsMode::kAllPositions, step_logits);
  EXPECT_LE(WorstRowError(step_logits.data(), expected.data(), 20, vocab), kBf16RowTolerance);
  for (size_t t = 20; t < ids.size(); ++t) {
    decoder.Forward(std::span(ids).subspan(t, 1), static_cast<int64_t>(t), cache,
                    LogitsMode::kLastPosition, step_logits);
    EXPECT_LE(WorstRowError(step_logits.data(), expected.data() + t * vocab, 1, vocab),
              kBf16RowTolerance)
        << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecoderBf16MatMul, ::testing::Values("llama", "qwen3", "gemma3"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Decoder, ContextOverflowIsAnError) {
  LoadedModel model = LoadModel(FixtureDir("llama") + "/model", {});
  ThreadPool pool(1);
  Decoder decoder(model, pool);
  PagedKvCache cache = decoder.MakeSequenceCache(16);  // one block of 16
  std::vector<float> logits;
  const std::vector<int32_t> ids(17, 1);
  EXPECT_THROW(decoder.Forward(ids, 0, cache, LogitsMode::kLastPosition, logits), Error);
  EXPECT_THROW(
      decoder.Forward(std::span(ids).first(2), 15, cache, LogitsMode::kLastPosition, logits),
      Error);
  const std::vector<int32_t> bad = {1, 100000};
  EXPECT_THROW(decoder.Forward(bad, 0, cache, LogitsMode::kLastPosition, logits), Error);
}

}  // namespace
}  // namespace infer
