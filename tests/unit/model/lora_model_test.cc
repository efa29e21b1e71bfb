// LoRA adapters on the fixtures' three architectures, against a float64 reference of each adapter
// merged into its base (tests/gguf/reference_f64.py --lora: W + s B A from PEFT's files, numpy);
// the adapters are written in PEFT's format by tests/lora/make_adapter.py (ranks 4, 8 and 16; f32,
// bf16 and f16; one rsLoRA; all seven projections or a few). The base and every adapter run as
// one batch, the same prompt each, so each row also shows it takes only its own adapter.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../loader/test_util.h"
#include "fixture_logits.h"
#include "infer/loader/lora.h"
#include "infer/loader/weights.h"
#include "infer/model/decoder.h"
#include "testing/paths.h"

namespace infer {
namespace {

constexpr double kRowTolerance = 1e-4;

void RunTool(const std::string& command) {
  ASSERT_EQ(std::system((command + " > /dev/null").c_str()), 0) << command;
}

// The float64 reference's logits of the checkpoint `model_dir` at `ids`, with the adapter at
// `adapter_dir` merged in ("": none), written to `out`.
std::vector<float> ReferenceLogits(const std::string& model_dir, const std::string& adapter_dir,
                                   const std::vector<int32_t>& ids, const std::string& out) {
  std::string command =
      fmt::format("{} {} {}", ::infer::testing::GgufTool("reference_f64.py"), model_dir, out);
  if (!adapter_dir.empty()) command += " --lora " + adapter_dir;
  for (const int32_t id : ids) command += fmt::format(" {}", id);
  RunTool(command);
  return ReadF32(out);
}

struct AdapterCase {
  const char* tag;
  const char* options;
};
// Ranks 4 to 16, every dtype, rsLoRA once, every projection covered; the last without PEFT's
// base_model.model. prefix.
constexpr AdapterCase kAdapters[] = {
    {"r4_f32_all", "--rank 4 --dtype f32 --seed 1"},
    {"r8_bf16_attn", "--rank 8 --dtype bf16 --targets q_proj,v_proj,o_proj --seed 2"},
    {"r16_f16_rslora_mlp",
     "--rank 16 --alpha 8 --dtype f16 --rslora --targets k_proj,gate_proj,up_proj,down_proj "
     "--seed 3"},
    {"r12_f32_noprefix", "--rank 12 --dtype f32 --targets q_proj,down_proj --no-prefix --seed 4"},
};

class LoraModelTest : public ::testing::Test {
 protected:
  // Writes each adapter of kAdapters for `arch`; returns their folders.
  std::vector<std::string> WriteAdapters(const std::string& arch) {
    std::vector<std::string> dirs;
    for (const AdapterCase& adapter : kAdapters) {
      const std::string dir = (dir_.path() / fmt::format("{}_{}", arch, adapter.tag)).string();
      RunTool(fmt::format("{} {}/model {} {}", ::infer::testing::LoraTool("make_adapter.py"),
                          FixtureDir(arch), dir, adapter.options));
      dirs.push_back(dir);
    }
    return dirs;
  }
  testing::TempDir dir_;
};

// The base (null) and each adapter as one sequence of `ids` each, in one forward: every
// position's logits, sequence by sequence.
std::vector<std::vector<float>> BatchedLogits(const LoadedModel& model,
                                              const std::vector<const LoraAdapter*>& adapters,
                                              const std::vector<int32_t>& ids) {
  ThreadPool pool(2);
  Decoder decoder(model, pool);
  constexpr int64_t kBlock = 16;
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  PagedKvCache cache = PagedKvCache::FromModelConfig(
      model.config, blocks * static_cast<int64_t>(adapters.size()), kBlock, DType::kF32);
  std::vector<std::vector<int32_t>> tables(adapters.size());
  std::vector<SequenceTokens> seqs;
  for (size_t s = 0; s < adapters.size(); ++s) {
    for (int64_t b = 0; b < blocks; ++b) {
      tables[s].push_back(static_cast<int32_t>(static_cast<int64_t>(s) * blocks + b));
    }
    SequenceTokens seq{ids, 0, tables[s], LogitsMode::kAllPositions};
    seq.lora = adapters[s];
    seqs.push_back(seq);
  }
  std::vector<float> logits;
  decoder.Forward(seqs, cache, logits);
  const auto row = static_cast<size_t>(n * model.config.vocab_size);
  std::vector<std::vector<float>> out;
  for (size_t s = 0; s < adapters.size(); ++s) {
    out.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(s * row),
                     logits.begin() + static_cast<std::ptrdiff_t>((s + 1) * row));
  }
  return out;
}

TEST_F(LoraModelTest, EachRowOfAMixedBatchGivesItsMergedModelsFloat64Logits) {
  for (const char* arch : {"llama", "qwen3", "gemma3"}) {
    SCOPED_TRACE(arch);
    const std::vector<int32_t> ids =
        infer::Reference(arch)["logits_input_ids"].get<std::vector<int32_t>>();
    const LoadedModel model = LoadModel(FixtureDir(arch) + "/model", {});
    const std::vector<std::string> dirs = WriteAdapters(arch);
    std::vector<std::shared_ptr<const LoraAdapter>> adapters;
    std::vector<const LoraAdapter*> batch = {nullptr};
    for (size_t i = 0; i < dirs.size(); ++i) {
      adapters.push_back(LoadLoraAdapter(kAdapters[i].tag, dirs[i], model.config, 16));
      batch.push_back(adapters.back().get());
    }
    const std::vector<std::vector<float>> logits = BatchedLogits(model, batch, ids);
    const auto rows = static_cast<int64_t>(ids.size());
    const int64_t vocab = model.config.vocab_size;
    const std::vector<float> base = ReadF32(FixtureDir(arch) + "/logits.f32.bin");
    EXPECT_LE(WorstRowError(logits[0].data(), base.data(), rows, vocab), kRowTolerance);
    for (size_t i = 0; i < dirs.size(); ++i) {
      const std::vector<float> reference =
          ReferenceLogits(FixtureDir(arch) + "/model", dirs[i], ids, dirs[i] + ".bin");
      const double error = WorstRowError(logits[i + 1].data(), reference.data(), rows, vocab);
      // The adapter moves the logits far more than the tolerance (so a missing one fails).
      const double moved = WorstRowError(base.data(), reference.data(), rows, vocab);
      std::printf("[ %-6s %-20s worst row error %.3g (the adapter moves them %.3g) ]\n", arch,
                  kAdapters[i].tag, error, moved);
      EXPECT_LE(error, kRowTolerance) << kAdapters[i].tag;
      EXPECT_GT(moved, 100 * kRowTolerance) << kAdapters[i].tag;
    }
    // Batch invariance: a row's bits are the same alone as beside the base and other adapters.
    for (size_t i : {size_t{0}, size_t{2}}) {
      EXPECT_EQ(BatchedLogits(model, {batch[i]}, ids).front(), logits[i]) << "sequence " << i;
    }
  }
}

TEST_F(LoraModelTest, AdaptersAddTheirUpdateToQuantizedBases) {
  // Over int8, int4 and int4k weights the adapter's rows are about as far from their merged
  // reference as the quantized base alone is from its own (the update's inputs are the quantized
  // model's activations), and far nearer to it than rows without the adapter. On a random llama
  // checkpoint with rows of 256 (the GGUF tests' K-sized one): the fixture's 64-wide rows lose
  // most of their top-1 to 4-bit weights alone.
  const std::string arch = "llama";
  const std::vector<int32_t> ids =
      infer::Reference(arch)["logits_input_ids"].get<std::vector<int32_t>>();
  const std::string source = (dir_.path() / "random").string();
  RunTool(::infer::testing::GgufTool("random_model.py") + " " + FixtureDir(arch) + "/model " +
          source + " --hidden 256 --intermediate 512 --layers 2 --head-dim 64");
  const std::string adapter_dir = (dir_.path() / "random_r16").string();
  RunTool(fmt::format("{} {} {} --rank 16 --dtype bf16 --seed 5",
                      ::infer::testing::LoraTool("make_adapter.py"), source, adapter_dir));
  const std::vector<float> base_reference = ReferenceLogits(source, "", ids, source + ".bin");
  const std::vector<float> reference =
      ReferenceLogits(source, adapter_dir, ids, adapter_dir + ".bin");
  const auto rows = static_cast<int64_t>(ids.size());
  for (const auto quantization : {kernels::Quantization::kInt8, kernels::Quantization::kInt4,
                                  kernels::Quantization::kInt4K}) {
    SCOPED_TRACE(kernels::QuantizationName(quantization));
    LoadOptions options;
    options.quantization = quantization;
    const LoadedModel model = LoadModel(source, options);
    const auto adapter = LoadLoraAdapter("a", adapter_dir, model.config, 16);
    const std::vector<std::vector<float>> logits =
        BatchedLogits(model, {nullptr, adapter.get()}, ids);
    const int64_t vocab = model.config.vocab_size;
    const Accuracy base = Measure(logits[0], base_reference, rows, vocab);
    const Accuracy adapted = Measure(logits[1], reference, rows, vocab);
    // The base's rows against the adapter's reference: what a row that missed its adapter gets.
    const Accuracy missed = Measure(logits[0], reference, rows, vocab);
    std::printf(
        "[ %-6s adapter: error %.3g KL %.3g top-1 %.3f; base alone %.3g %.3g %.3f; without "
        "the adapter %.3g %.3g %.3f ]\n",
        std::string(kernels::QuantizationName(quantization)).c_str(), adapted.worst_row_error,
        adapted.kl, adapted.top1, base.worst_row_error, base.kl, base.top1, missed.worst_row_error,
        missed.kl, missed.top1);
    EXPECT_LE(adapted.worst_row_error, 2 * base.worst_row_error + 1e-3);
    EXPECT_LE(adapted.kl, 2 * base.kl + 1e-3);
    EXPECT_LT(adapted.kl, missed.kl / 4);
  }
}

}  // namespace
}  // namespace infer
