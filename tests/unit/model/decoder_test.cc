// The decoder against the fixtures' float64 reference (tests/fixtures/models/README.md):
// every logit row within 1e-4 of the row's max |ref|, greedy continuations token for token,
// with and without the KV cache, for bf16 and f32 checkpoints of every architecture (Qwen3-MoE's
// fixture: sparse layers beside a dense one, top-2 of 8 experts).
#include "infer/model/decoder.h"

#include "infer/core/dtype.h"
#include "infer/core/error.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <cstring>

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include "fixture_logits.h"
#include "testing/paths.h"

namespace infer {
namespace {

constexpr double kBf16RowTolerance = 0.2;  // bf16 roundings amplified by random weights
constexpr double kMoeBf16KvRowTolerance = 0.3;
constexpr double kRowTolerance = 1e-4;  // README: max_v |logit - ref| <= 1e-4 * max_v |ref|

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
  // A mixture of experts amplifies the rounding where it tips a router's choice: on the
  // Qwen3-MoE fixture one position changes an expert, and the float64 reference with only K and
  // V rounded to bf16 (tests/gguf/reference_f64.py so changed) is 0.2719 from it too.
  const double tolerance =
      std::string(GetParam().arch) == "qwen3_moe" ? kMoeBf16KvRowTolerance : kBf16RowTolerance;
  EXPECT_LE(worst, tolerance);
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

INSTANTIATE_TEST_SUITE_P(
    Fixtures, DecoderFixture,
    ::testing::Values(Case{"llama", "model"}, Case{"llama", "model_f32"}, Case{"qwen3", "model"},
                      Case{"qwen3", "model_f32"}, Case{"qwen3_moe", "model"},
                      Case{"qwen3_moe", "model_f32"}, Case{"gemma3", "model"},
                      Case{"gemma3", "model_f32"}, Case{"qwen3_5", "model"},
                      Case{"qwen3_5", "model_f32"}, Case{"qwen3_5_moe", "model"},
                      Case{"qwen3_5_moe", "model_f32"}),
    [](const auto& info) { return std::string(info.param.arch) + "_" + info.param.variant; });

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

namespace infer {
namespace {

// ---- Quantized weights against the float64 reference, beside llama.cpp's scheme ----

// w's values as an f32 [n, k] tensor.
Tensor ValuesOf(const kernels::PackedMatrix& w) {
  Tensor values = Tensor::Empty(DType::kF32, {w.rows(), w.cols()});
  float* out = values.data<float>();
  for (int64_t row = 0; row < w.rows(); ++row) {
    for (int64_t c = 0; c < w.cols(); ++c) out[row * w.cols() + c] = w.At(row, c);
  }
  return values;
}

// llama.cpp's scheme on the decoder layers' matrices, in float64: per row and block of 32
// input channels d = max|w| / qmax, w' = d * round(w / d) clamped to [-qmax, qmax] (Q8_0:
// qmax 127; a symmetric Q4_0: 7). Stored as f32 (the float64 values rounded once). With
// `f16_scale`, as ggml's quantize_row_q8_0_ref stores a block: q = round(w * (1 / d)) in f32
// and d kept as f16.
kernels::PackedMatrix LlamaCppRounded(const kernels::PackedMatrix& w, double qmax, bool f16_scale) {
  Tensor values = Tensor::Empty(DType::kF32, {w.rows(), w.cols()});
  float* out = values.data<float>();
  for (int64_t row = 0; row < w.rows(); ++row) {
    for (int64_t b = 0; b < w.cols(); b += 32) {
      const int64_t e = std::min(w.cols(), b + 32);
      double amax = 0;
      for (int64_t c = b; c < e; ++c) amax = std::max(amax, std::fabs(double(w.At(row, c))));
      const double d = amax / qmax;
      const float inverse = d > 0 ? 1.0f / static_cast<float>(d) : 0.0f;
      const double stored_d = f16_scale ? F16ToF32(F32ToF16(static_cast<float>(d))) : d;
      for (int64_t c = b; c < e; ++c) {
        const double ratio = f16_scale ? double(w.At(row, c) * inverse) : w.At(row, c) / d;
        const double q = d > 0 ? std::clamp(std::round(ratio), -qmax, qmax) : 0.0;
        out[row * w.cols() + c] = static_cast<float>(stored_d * q);
      }
    }
  }
  return kernels::PackedMatrix::Pack(values);
}

// int8's own rounding of w (PackedMatrix::Quantize), its values back as f32 (d * q, an f16
// scale times a 7-bit integer, is exact in f32), for the same float64 product as the above.
kernels::PackedMatrix Int8Rounded(const kernels::PackedMatrix& w) {
  return kernels::PackedMatrix::Pack(
      ValuesOf(kernels::PackedMatrix::Quantize(ValuesOf(w), kernels::Quantization::kInt8)));
}

// model with every decoder-layer matrix replaced by round(matrix).
template <class Round>
LoadedModel WithLayersRounded(LoadedModel model, Round round) {
  for (LayerWeights& layer : model.weights.layers) {
    for (kernels::PackedMatrix* m : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj,
                                     &layer.gate_proj, &layer.up_proj, &layer.down_proj}) {
      *m = round(*m);
    }
  }
  return model;
}

LoadedModel WithLlamaCppWeights(LoadedModel model, double qmax, bool f16_scale = false) {
  return WithLayersRounded(std::move(model), [&](const kernels::PackedMatrix& w) {
    return LlamaCppRounded(w, qmax, f16_scale);
  });
}

// Teacher-forced logits of every position of logits_input_ids for int8 and int4 weights, next
// to --matmul-precision bf16 and to llama.cpp's Q8_0 / symmetric Q4_0 rounding of the same
// weights with int8 activations per 32 (MatMulPrecision::kInt8). These tiny random models
// amplify rounding enormously: this compares schemes, it does not certify quality on real
// checkpoints (README "Quantized weights").
TEST(QuantizedAccuracyTest, NoWorseThanLlamaCppSchemeOnTheFixtures) {
  ThreadPool pool(2);
  // Measured on the public fixtures (worst row error, top-1, KL) with the AVX-512 kernels (the
  // integer sums are exact, so VNNI or not gives the same bits); held with a margin: errors
  // 1.2x, KL 1.5x, top-1 two positions of 48.
  struct Bound {
    const char* arch;
    Accuracy int8, int4;
  };
  const Bound bounds[] = {
      {"llama", {0.3004, 0.812, 0.2795}, {1.2738, 0.271, 6.352}},
      {"qwen3", {0.0816, 0.917, 0.02233}, {0.7064, 0.542, 1.954}},
      {"gemma3", {0.0684, 0.938, 0.00561}, {0.8088, 0.542, 0.4150}},
  };
  auto check = [](const Accuracy& got, const Accuracy& measured, const std::string& what) {
    EXPECT_LE(got.worst_row_error, 1.2 * measured.worst_row_error) << what;
    EXPECT_GE(got.top1, measured.top1 - 2.0 / 48) << what;
    EXPECT_LE(got.kl, 1.5 * measured.kl) << what;
  };
  for (const Bound& bound : bounds) {
    const std::string dir = FixtureDir(bound.arch) + "/model";
    const auto ids = Reference(bound.arch)["logits_input_ids"].get<std::vector<int32_t>>();
    const auto ref = ReadF32(FixtureDir(bound.arch) + "/logits.f32.bin");
    const LoadedModel plain = LoadModel(dir, {});
    const int64_t vocab = plain.config.vocab_size;
    const auto rows = static_cast<int64_t>(ids.size());
    auto run = [&](const LoadedModel& model, kernels::MatMulPrecision precision) {
      Decoder decoder(model, pool, precision);
      std::vector<float> logits;
      decoder.ForwardUncached(ids, LogitsMode::kAllPositions, logits);
      return Measure(logits, ref, rows, vocab);
    };
    LoadOptions int8_options, int4_options;
    int8_options.quantization = kernels::Quantization::kInt8;
    int4_options.quantization = kernels::Quantization::kInt4;
    const Accuracy bf16 = run(plain, kernels::MatMulPrecision::kBf16);
    const Accuracy int8 = run(LoadModel(dir, int8_options), kernels::MatMulPrecision::kF32);
    const Accuracy int4 = run(LoadModel(dir, int4_options), kernels::MatMulPrecision::kF32);
    int8_options.head = int4_options.head = LoadOptions::Head::kUnquantized;
    const Accuracy int8_body = run(LoadModel(dir, int8_options), kernels::MatMulPrecision::kF32);
    const Accuracy int4_body = run(LoadModel(dir, int4_options), kernels::MatMulPrecision::kF32);
    const Accuracy q8 = run(WithLlamaCppWeights(plain, 127), kernels::MatMulPrecision::kInt8);
    const Accuracy q4 = run(WithLlamaCppWeights(plain, 7), kernels::MatMulPrecision::kInt8);
    // The same Q8_0 with ggml's f16 block scale: a change far below the rounding itself, shown
    // beside the others because it moves top-1 by several positions on these fixtures.
    const Accuracy q8_f16 =
        run(WithLlamaCppWeights(plain, 127, true), kernels::MatMulPrecision::kInt8);
    // And with int8's own rounding of the layers (PackedMatrix::Quantize) in the same float64
    // product: where it lands says whether a top-1 difference comes from the rounding
    // pattern or from the kernels' arithmetic.
    const Accuracy q8_int8_rounding =
        run(WithLayersRounded(plain, Int8Rounded), kernels::MatMulPrecision::kInt8);
    for (const auto& [name, a] :
         {std::pair{"bf16 matmul", bf16}, std::pair{"int8", int8}, std::pair{"llama.cpp Q8_0", q8},
          std::pair{"Q8_0, f16 scale (ggml)", q8_f16},
          std::pair{"Q8_0, int8's rounding", q8_int8_rounding}, std::pair{"int4", int4},
          std::pair{"int8 layers only", int8_body}, std::pair{"int4 layers only", int4_body},
          std::pair{"llama.cpp Q4_0 (symmetric)", q4}}) {
      std::printf("[ %-6s %-26s worst row error %.4f  top-1 %.3f  KL %.5f ]\n", bound.arch, name,
                  a.worst_row_error, a.top1, a.kl);
    }
    check(int8, bound.int8, std::string(bound.arch) + " int8");
    check(int4, bound.int4, std::string(bound.arch) + " int4");
    // The schemes: int8's worst error is no worse than Q8_0's, int4's error and top-1 no
    // worse than the symmetric Q4_0's. int8's top-1 is NOT held against Q8_0's: on qwen3
    // (44/48 vs 48/48) and gemma3 (45/48 vs 47/48) it is lower, the cost of the int8 output
    // head that Q8_0's definition here leaves exact (with the head exact: 47/48 and 44/48),
    // and of int8's rounding pattern: the same rounding in the float64 product scores the same
    // 47/48 and 44/48. Positions whose reference top-1 margin is under 1% of the row max (5 on
    // qwen3, 8 on gemma3) go whichever way a rounding tips them. Over 1024 positions (the next
    // test) the layers-only int8 and Q8_0 agree within 1%.
    EXPECT_LE(int8.worst_row_error, q8.worst_row_error) << bound.arch;
    EXPECT_LE(int4.worst_row_error, q4.worst_row_error) << bound.arch;
    EXPECT_GE(int4.top1, q4.top1) << bound.arch;
  }
}

// Top-1 over many positions: the 48 reference positions above decide top-1 by one or two
// near-ties. Here the reference is the f32 model itself (held to the float64 reference within
// 1e-4 of the row max by DecoderTest, 3-4 orders below these schemes' errors) over 16 random
// sequences of 64 tokens (1024 positions), so top-1 differences are a few standard errors wide.
TEST(QuantizedAccuracyTest, TopOneOverManyPositionsAgainstTheF32Model) {
  ThreadPool pool(2);
  // int8 with its int8 output head, measured here (worst row error, top-1, KL; AVX-512), held
  // as the test above holds its figures: errors 1.2x, KL 1.5x, top-1 2% of the positions.
  struct Bound {
    const char* arch;
    Accuracy int8;
  };
  const Bound bounds[] = {{"llama", {0.5114, 0.7988, 0.2616}},
                          {"qwen3", {0.1485, 0.9248, 0.02442}},
                          {"gemma3", {0.1159, 0.9268, 0.00618}}};
  for (const auto& [arch, measured] : bounds) {
    const std::string dir = FixtureDir(arch) + "/model";
    const LoadedModel plain = LoadModel(dir, {});
    const int64_t vocab = plain.config.vocab_size;
    std::vector<std::vector<int32_t>> sequences;
    uint32_t state = 12345;
    for (int s = 0; s < 16; ++s) {
      std::vector<int32_t> ids(64);
      for (int32_t& id : ids) {
        state = state * 1664525U + 1013904223U;
        id = static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(vocab));
      }
      sequences.push_back(std::move(ids));
    }
    auto logits_of = [&](const LoadedModel& model, kernels::MatMulPrecision precision) {
      Decoder decoder(model, pool, precision);
      std::vector<float> all, logits;
      for (const auto& ids : sequences) {
        decoder.ForwardUncached(ids, LogitsMode::kAllPositions, logits);
        all.insert(all.end(), logits.begin(), logits.end());
      }
      return all;
    };
    const std::vector<float> ref = logits_of(plain, kernels::MatMulPrecision::kF32);
    const int64_t rows = 16 * 64;
    auto measure = [&](const LoadedModel& model, kernels::MatMulPrecision precision) {
      return Measure(logits_of(model, precision), ref, rows, vocab);
    };
    LoadOptions int8_options, int4_options;
    int8_options.quantization = kernels::Quantization::kInt8;
    int4_options.quantization = kernels::Quantization::kInt4;
    const Accuracy int8 = measure(LoadModel(dir, int8_options), kernels::MatMulPrecision::kF32);
    const Accuracy int4 = measure(LoadModel(dir, int4_options), kernels::MatMulPrecision::kF32);
    LoadOptions int4k_options;
    int4k_options.quantization = kernels::Quantization::kInt4K;
    const Accuracy int4k = measure(LoadModel(dir, int4k_options), kernels::MatMulPrecision::kF32);
    int4k_options.head = LoadOptions::Head::kInt6;
    const Accuracy int4k_int6 =
        measure(LoadModel(dir, int4k_options), kernels::MatMulPrecision::kF32);
    int4_options.head = LoadOptions::Head::kInt6;
    const Accuracy int4_int6 =
        measure(LoadModel(dir, int4_options), kernels::MatMulPrecision::kF32);
    int8_options.head = LoadOptions::Head::kUnquantized;
    const Accuracy int8_body =
        measure(LoadModel(dir, int8_options), kernels::MatMulPrecision::kF32);
    const Accuracy q8 = measure(WithLlamaCppWeights(plain, 127), kernels::MatMulPrecision::kInt8);
    const Accuracy q8_f16 =
        measure(WithLlamaCppWeights(plain, 127, true), kernels::MatMulPrecision::kInt8);
    const Accuracy q8_int8_rounding =
        measure(WithLayersRounded(plain, Int8Rounded), kernels::MatMulPrecision::kInt8);
    const Accuracy q4 = measure(WithLlamaCppWeights(plain, 7), kernels::MatMulPrecision::kInt8);
    for (const auto& [name, a] :
         {std::pair{"int8", int8}, std::pair{"int8 layers only", int8_body},
          std::pair{"llama.cpp Q8_0", q8}, std::pair{"Q8_0, f16 scale (ggml)", q8_f16},
          std::pair{"Q8_0, int8's rounding", q8_int8_rounding}, std::pair{"int4", int4},
          std::pair{"int4k (4.5 bits)", int4k}, std::pair{"int4, int6 head", int4_int6},
          std::pair{"int4k, int6 head", int4k_int6}, std::pair{"llama.cpp Q4_0 (symmetric)", q4}}) {
      std::printf("[ %-6s %-26s 1024 positions: worst row error %.4f  top-1 %.4f  KL %.5f ]\n",
                  arch, name, a.worst_row_error, a.top1, a.kl);
    }
    EXPECT_LE(int8.worst_row_error, 1.2 * measured.worst_row_error) << arch;
    EXPECT_GE(int8.top1, measured.top1 - 0.02) << arch;
    EXPECT_LE(int8.kl, 1.5 * measured.kl) << arch;
    // The schemes on the same layers (output head exact on both sides): int8 is ggml's Q8_0
    // (an f16 scale per 32), so it matches that row within a few positions, and the issue's
    // Q8_0 (exact scale) within 1% top-1 and 1.15x error (measured: top-1 -0.5 to +0.1 points,
    // error 0.76-1.10x). int4 is no worse than the symmetric Q4_0 in error and top-1.
    EXPECT_GE(int8_body.top1, q8.top1 - 0.01) << arch;
    EXPECT_GE(int8_body.top1, q8_f16.top1 - 0.01) << arch;
    EXPECT_LE(int8_body.worst_row_error, 1.15 * q8.worst_row_error) << arch;
    EXPECT_LE(int4.worst_row_error, q4.worst_row_error) << arch;
    EXPECT_GE(int4.top1, q4.top1) << arch;
    // int4k (4.5 bits per weight) is no worse than int4 (5 bits) in error and top-1.
    EXPECT_LE(int4k.worst_row_error, int4.worst_row_error) << arch;
    EXPECT_GE(int4k.top1, int4.top1) << arch;
    // With a 6-bit head (--lm-head-quantization int6, llama.cpp's 4-bit files' choice), int4k
    // still beats the symmetric Q4_0 with its head exact in top-1 and KL. Its worst-row error
    // does not hold against int4 with the int8 head on llama (1.79 vs 1.71; qwen3 0.78 vs 0.97,
    // gemma3 0.99 vs 1.09; top-1 0.268, 0.532, 0.520 against int4's 0.260, 0.528, 0.503): why
    // auto keeps the head at int8.
    EXPECT_GE(int4k_int6.top1, q4.top1) << arch;
    EXPECT_LE(int4k_int6.kl, q4.kl) << arch;
  }
}

}  // namespace
}  // namespace infer
