#include "infer/loader/weights.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/loader/safetensors.h"
#include "test_util.h"

namespace infer {
namespace {

using testing::FixturePath;
using testing::TempDir;
namespace fs = std::filesystem;

bool SameValues(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (ElementAsF32(a, i) != ElementAsF32(b, i)) return false;
  }
  return true;
}

bool SameValues(const kernels::PackedMatrix& a, const kernels::PackedMatrix& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (int64_t row = 0; row < a.rows(); ++row) {
    for (int64_t col = 0; col < a.cols(); ++col) {
      if (a.At(row, col) != b.At(row, col)) return false;
    }
  }
  return true;
}

bool SameValues(const kernels::PackedMatrix& a, const Tensor& b) {
  if (b.rank() != 2 || a.rows() != b.dim(0) || a.cols() != b.dim(1)) return false;
  for (int64_t row = 0; row < a.rows(); ++row) {
    for (int64_t col = 0; col < a.cols(); ++col) {
      if (a.At(row, col) != ElementAsF32(b, row * a.cols() + col)) return false;
    }
  }
  return true;
}

bool SameSlotValues(const WeightSlot& a, const WeightSlot& b) {
  if (a.matrix != nullptr) return b.matrix != nullptr && SameValues(*a.matrix, *b.matrix);
  return b.tensor != nullptr && SameValues(*a.tensor, *b.tensor);
}

class FixtureWeights : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureWeights, Bf16AndF32CheckpointsHoldTheSameValues) {
  const std::string arch = GetParam();
  LoadedModel bf16 = LoadModel(FixturePath("models/" + arch + "/model").string(), {});
  LoadedModel f32 = LoadModel(FixturePath("models/" + arch + "/model_f32").string(), {});
  EXPECT_EQ(bf16.weight_dtype, DType::kBF16);
  EXPECT_EQ(f32.weight_dtype, DType::kF32);
  EXPECT_TRUE(bf16.warnings.empty());
  ModelWeights& a = bf16.weights;
  ModelWeights& b = f32.weights;
  auto slots_a = WeightSlots(bf16.config, a);
  auto slots_b = WeightSlots(f32.config, b);
  ASSERT_EQ(slots_a.size(), slots_b.size());
  for (size_t i = 0; i < slots_a.size(); ++i) {
    EXPECT_TRUE(SameSlotValues(slots_a[i], slots_b[i])) << slots_a[i].hf_name;
  }
  // A tied head is the embedding's storage.
  EXPECT_EQ(a.lm_head.data() == a.embed_tokens.data(), bf16.config.tie_word_embeddings);
}

// The weight matrices of a config: the embedding, an untied head, four attention projections
// per layer, and three for a dense MLP or a router and three per expert for a sparse one.
int64_t MatrixCount(const ModelConfig& config) {
  int64_t count = config.tie_word_embeddings ? 1 : 2;
  const bool shared = config.moe.shared_expert_intermediate_size > 0;
  for (const LayerConfig& layer : config.layers) {
    // q, k, v, o; or Gated DeltaNet's in_proj_qkv, _z, _b, _a and out_proj.
    count += layer.linear_attention ? 5 : 4;
    // The router and every expert's three, a shared expert's three and its gate; or a dense MLP.
    count += layer.sparse_mlp ? 1 + 3 * config.moe.num_experts + (shared ? 4 : 0) : 3;
  }
  return count;
}

// A slot's values as the checkpoint holds them: its tensor under the config's prefix (Qwen3.5:
// "model.language_model."), and for an expert of a fused stack ([experts, rows, cols]) that
// expert's rows, gate rows before up rows (HF_SEMANTICS.md, Qwen3.5-MoE).
Tensor CheckpointValues(const SafetensorsCheckpoint& checkpoint, const ModelConfig& config,
                        const WeightSlot& slot) {
  const std::string name = slot.hf_name.starts_with("model.")
                               ? config.weights_prefix + slot.hf_name.substr(6)
                               : slot.hf_name;
  const auto& location = checkpoint.tensors().at(name);
  Tensor view = location.file->View(*location.entry);
  if (slot.stack_shape.empty()) return view;
  const Tensor expert = view.Row(slot.expert);
  const int64_t row_bytes = expert.dim(1) * static_cast<int64_t>(DTypeSize(expert.dtype()));
  return Tensor::Borrow(expert.dtype(), slot.shape,
                        static_cast<std::byte*>(expert.raw()) + slot.row_begin * row_bytes);
}

// The packed matrices hold exactly the checkpoint's values (read here straight from the file).
TEST_P(FixtureWeights, MatricesArePackedFromTheCheckpoint) {
  const std::string path = FixturePath(std::string("models/") + GetParam() + "/model").string();
  LoadedModel loaded = LoadModel(path, {});
  SafetensorsCheckpoint checkpoint = SafetensorsCheckpoint::Open(path);
  int matrices = 0;
  for (const WeightSlot& slot : WeightSlots(loaded.config, loaded.weights)) {
    if (slot.matrix == nullptr) continue;
    EXPECT_TRUE(SameValues(*slot.matrix, CheckpointValues(checkpoint, loaded.config, slot)))
        << slot.hf_name;
    ++matrices;
  }
  EXPECT_EQ(matrices, MatrixCount(loaded.config));
}

// The packed matrices share 2 MiB pages: each starts where the one before it ended (64-byte
// aligned), dummy or from a checkpoint, so none leaves a tail in 4 KiB pages.
TEST_P(FixtureWeights, MatricesSitOneAfterAnotherInTheirPages) {
  const std::string path = FixturePath(std::string("models/") + GetParam() + "/model").string();
  for (const bool dummy : {false, true}) {
    LoadOptions options;
    options.dummy = dummy;
    options.quantization = kernels::Quantization::kInt4K;
    LoadedModel loaded = LoadModel(path, options);
    const std::byte* end = nullptr;
    int matrices = 0;
    for (const WeightSlot& slot : WeightSlots(loaded.config, loaded.weights)) {
      if (slot.matrix == nullptr || !slot.matrix->defined()) continue;
      const auto* start = static_cast<const std::byte*>(slot.matrix->data());
      if (end == nullptr) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(start) % (2 << 20), 0U) << slot.hf_name;
      } else {
        EXPECT_EQ(start, end + (64 - reinterpret_cast<uintptr_t>(end) % 64) % 64) << slot.hf_name;
      }
      end = start + slot.matrix->size_bytes();
      ++matrices;
    }
    EXPECT_EQ(matrices, MatrixCount(loaded.config));
  }
}

TEST_P(FixtureWeights, HugePageCopyEqualsMmap) {
  const std::string path = FixturePath(std::string("models/") + GetParam() + "/model").string();
  LoadOptions mmap_options;
  mmap_options.placement = WeightPlacement::kMmap;
  LoadedModel mapped = LoadModel(path, mmap_options);
  LoadOptions options;
  options.placement = WeightPlacement::kHugePageCopy;
  ThreadPool pool(2);
  options.pool = &pool;
  LoadedModel copied = LoadModel(path, options);
  auto slots_a = WeightSlots(mapped.config, mapped.weights);
  auto slots_b = WeightSlots(copied.config, copied.weights);
  for (size_t i = 0; i < slots_a.size(); ++i) {
    if (slots_a[i].tensor != nullptr) {
      EXPECT_NE(slots_a[i].tensor->raw(), slots_b[i].tensor->raw());
    }
    EXPECT_TRUE(SameSlotValues(slots_a[i], slots_b[i])) << slots_a[i].hf_name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureWeights,
                         ::testing::Values("llama", "qwen3", "qwen3_moe", "gemma3", "qwen3_5",
                                           "qwen3_5_moe"));

TEST(Weights, ParameterCountsOfTheDevModels) {
  // Published sizes: Llama-3.2-1B 1,235,814,400; Qwen3-1.7B 1.72B; gemma-3-1b 999,885,952.
  auto count = [](const std::string& name) {
    return ParameterCount(
        LoadModelConfig(FixturePath("configs/" + name + "/config.json").string()));
  };
  EXPECT_EQ(count("Llama-3.2-1B-Instruct"), 1235814400);
  EXPECT_EQ(count("Qwen3-1.7B"), 1720574976);
  EXPECT_EQ(count("gemma-3-1b-it"), 999885952);
  // Qwen3-30B-A3B's model card: 30.5B parameters, 3.3B activated (8 of 128 experts per layer).
  const ModelConfig moe =
      LoadModelConfig(FixturePath("configs/Qwen3-30B-A3B/config.json").string());
  EXPECT_EQ(ParameterCount(moe), 30532122624);
  EXPECT_EQ(ActiveParameterCount(moe), 3353032704);
  EXPECT_EQ(
      ActiveParameterCount(LoadModelConfig(FixturePath("configs/Qwen3-1.7B/config.json").string())),
      1720574976);
}

TEST(Weights, ExpertsAreLoadedPerExpertAndTheRouterStaysFloat) {
  const std::string path = FixturePath("models/qwen3_moe/model").string();
  LoadOptions options;
  options.quantization = kernels::Quantization::kInt8;
  const LoadedModel loaded = LoadModel(path, options);
  const LayerWeights& sparse = loaded.weights.layers[0];
  ASSERT_EQ(sparse.experts.size(), 8U);
  EXPECT_FALSE(sparse.router.quantized());
  EXPECT_EQ(sparse.router.rows(), 8);
  EXPECT_EQ(sparse.experts[5].down.quantization(), kernels::Quantization::kInt8);
  EXPECT_EQ(sparse.experts[5].gate.rows(), 32);
  EXPECT_FALSE(sparse.gate_proj.defined());
  const LayerWeights& dense = loaded.weights.layers[2];  // mlp_only_layers
  EXPECT_TRUE(dense.experts.empty());
  EXPECT_EQ(dense.gate_proj.rows(), 96);
  // Expert 5's up projection holds the checkpoint's tensor of that name.
  SafetensorsFile file = SafetensorsFile::Open(path + "/model.safetensors");
  const LoadedModel exact = LoadModel(path, {});
  for (const auto& entry : file.header().entries) {
    if (entry.name == "model.layers.3.mlp.experts.5.up_proj.weight") {
      EXPECT_TRUE(SameValues(exact.weights.layers[3].experts[5].up, file.View(entry)));
    }
  }
  // Bytes per token: attention, router, dense MLP and head whole, 2 of 8 experts per layer.
  EXPECT_LT(exact.weight_bytes_per_token, exact.weight_bytes);
}

TEST(Weights, DummyIsDeterministicAndThreadCountFree) {
  const std::string path = FixturePath("models/gemma3/model").string();
  LoadOptions options;
  options.dummy = true;
  options.dummy_seed = 7;
  LoadedModel one = LoadModel(path, options);
  ThreadPool pool(2);
  options.pool = &pool;
  LoadedModel two = LoadModel(path, options);
  options.dummy_seed = 8;
  LoadedModel other = LoadModel(path, options);
  EXPECT_TRUE(SameValues(one.weights.layers[3].down_proj, two.weights.layers[3].down_proj));
  EXPECT_FALSE(SameValues(one.weights.layers[3].down_proj, other.weights.layers[3].down_proj));
  EXPECT_EQ(one.weights.embed_tokens.dtype(), DType::kBF16);  // the config's torch_dtype
}

// Copies a fixture folder with its safetensors rewritten by `edit`.
fs::path EditedCopy(const TempDir& dir, const std::string& arch,
                    const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  const fs::path source = FixturePath("models/" + arch + "/model");
  fs::copy_file(source / "config.json", dir.path() / "config.json");
  SafetensorsFile file = SafetensorsFile::Open((source / "model.safetensors").string());
  std::map<std::string, Tensor> tensors;
  for (const auto& entry : file.header().entries) tensors[entry.name] = file.View(entry);
  edit(tensors);
  WriteSafetensors((dir.path() / "model.safetensors").string(), tensors);
  return dir.path();
}

std::string LoadError(const fs::path& folder) {
  try {
    LoadModel(folder.string(), {});
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// A config whose weights cannot fit in this machine's memory (Llama shapes scaled to about 4.4
// trillion bf16 bytes) is refused before anything is allocated, with the sizes in the message;
// with int4 the same estimate shrinks as the packing does.
TEST(Weights, WeightsBeyondTheMachinesMemoryAreRefusedBeforeAllocating) {
  TempDir dir;
  nlohmann::json config;
  std::ifstream(FixturePath("configs/Llama-3.2-1B-Instruct/config.json")) >> config;
  config["hidden_size"] = 65536;
  config["intermediate_size"] = 262144;
  config["num_attention_heads"] = 512;
  config["num_key_value_heads"] = 128;
  config["head_dim"] = 128;
  config["num_hidden_layers"] = 80;
  testing::WriteFile(dir.path() / "config.json", config.dump());
  LoadOptions options;
  options.dummy = true;
  for (const auto quantization : {kernels::Quantization::kNone, kernels::Quantization::kInt4}) {
    options.quantization = quantization;
    const auto start = std::chrono::steady_clock::now();
    try {
      LoadModel(dir.path().string(), options);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("the weights need"), std::string::npos) << message;
      EXPECT_NE(message.find("GiB this machine has available"), std::string::npos) << message;
      EXPECT_NE(
          message.find(quantization == kernels::Quantization::kNone ? "4" : "quantized to int4"),
          std::string::npos)
          << message;
    }
    // Nothing was allocated or filled: the refusal is immediate (reported, not asserted).
    std::printf("[ refused in %.3f s ]\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

TEST(Weights, MissingTensorIsNamed) {
  TempDir dir;
  auto folder =
      EditedCopy(dir, "llama", [](auto& t) { t.erase("model.layers.2.mlp.up_proj.weight"); });
  EXPECT_NE(LoadError(folder).find("missing tensor 'model.layers.2.mlp.up_proj.weight'"),
            std::string::npos);
}

TEST(Weights, MisShapedTensorIsNamed) {
  TempDir dir;
  auto folder = EditedCopy(dir, "qwen3", [](auto& t) {
    t["model.layers.0.self_attn.k_norm.weight"] = Tensor::Empty(DType::kBF16, {16});
  });
  const std::string error = LoadError(folder);
  EXPECT_NE(error.find("model.layers.0.self_attn.k_norm.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("[16]"), std::string::npos) << error;
}

TEST(Weights, MissingOrMisShapedExpertsAreNamed) {
  {
    TempDir dir;
    auto folder = EditedCopy(dir, "qwen3_moe", [](auto& t) {
      t.erase("model.layers.1.mlp.experts.6.down_proj.weight");
    });
    EXPECT_NE(
        LoadError(folder).find("missing tensor 'model.layers.1.mlp.experts.6.down_proj.weight'"),
        std::string::npos);
  }
  {
    TempDir dir;  // a router of the wrong width: 7 experts where the config has 8
    auto folder = EditedCopy(dir, "qwen3_moe", [](auto& t) {
      t["model.layers.0.mlp.gate.weight"] = Tensor::Empty(DType::kBF16, {7, 64});
    });
    const std::string error = LoadError(folder);
    EXPECT_NE(error.find("'model.layers.0.mlp.gate.weight' has shape [7, 64] but the config needs "
                         "[8, 64]"),
              std::string::npos)
        << error;
  }
  {
    TempDir dir;  // one expert narrower than the others
    auto folder = EditedCopy(dir, "qwen3_moe", [](auto& t) {
      t["model.layers.3.mlp.experts.2.gate_proj.weight"] = Tensor::Empty(DType::kBF16, {16, 64});
    });
    const std::string error = LoadError(folder);
    EXPECT_NE(error.find("model.layers.3.mlp.experts.2.gate_proj.weight"), std::string::npos)
        << error;
  }
}

// Qwen3.5: the linear-attention tensors and the fused expert stacks are named in the
// checkpoint's own terms (under model.language_model.) when missing or mis-shaped.
TEST(Weights, HybridTensorsAreNamed) {
  const auto error_of = [](const char* arch,
                           const std::function<void(std::map<std::string, Tensor>&)>& edit) {
    TempDir dir;
    return LoadError(EditedCopy(dir, arch, edit));
  };
  std::string error = error_of("qwen3_5", [](std::map<std::string, Tensor>& t) {
    t.erase("model.language_model.layers.1.linear_attn.A_log");
  });
  EXPECT_NE(error.find("missing tensor 'model.language_model.layers.1.linear_attn.A_log'"),
            std::string::npos)
      << error;
  // A conv kernel of 3 taps where the config has 4; a fused expert stack with 7 experts where
  // the config has 8.
  struct Misshapen {
    const char* arch;
    const char* name;
    Shape shape;
    const char* expected;
  };
  const Misshapen cases[] = {
      {"qwen3_5",
       "model.language_model.layers.0.linear_attn.conv1d.weight",
       {112, 1, 3},
       "'model.language_model.layers.0.linear_attn.conv1d.weight' has shape [112, 1, 3] but the "
       "config needs [112, 1, 4]"},
      {"qwen3_5_moe",
       "model.language_model.layers.2.mlp.experts.gate_up_proj",
       {7, 64, 64},
       "'model.language_model.layers.2.mlp.experts.gate_up_proj' has shape [7, 64, 64] but the "
       "config needs [8, 64, 64]"}};
  for (const Misshapen& c : cases) {
    error = error_of(c.arch, [&](std::map<std::string, Tensor>& t) {
      t[c.name] = Tensor::Empty(DType::kBF16, c.shape);
    });
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
  }
}

TEST(Weights, UnexpectedTensorIsAWarning) {
  TempDir dir;
  auto folder = EditedCopy(dir, "llama", [](auto& t) {
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = Tensor::Empty(DType::kF32, {8});
  });
  LoadedModel loaded = LoadModel(folder.string(), {});
  ASSERT_EQ(loaded.warnings.size(), 1U);
  EXPECT_NE(loaded.warnings[0].find("rotary_emb.inv_freq"), std::string::npos);
}

TEST(Weights, UnsupportedDtypeIsNamed) {
  TempDir dir;
  auto folder = EditedCopy(
      dir, "llama", [](auto& t) { t["model.norm.weight"] = Tensor::Empty(DType::kI32, {64}); });
  EXPECT_NE(LoadError(folder).find("model.norm.weight"), std::string::npos);
}

TEST(Weights, ShardedFixtureLoadsTheSameValues) {
  TempDir dir;
  const fs::path source = FixturePath("models/llama/model");
  fs::copy_file(source / "config.json", dir.path() / "config.json");
  SafetensorsFile file = SafetensorsFile::Open((source / "model.safetensors").string());
  std::map<std::string, Tensor> shard1, shard2;
  std::string index = R"({"metadata":{},"weight_map":{)";
  for (size_t i = 0; i < file.header().entries.size(); ++i) {
    const auto& entry = file.header().entries[i];
    const bool first = i % 2 == 0;
    (first ? shard1 : shard2)[entry.name] = file.View(entry);
    if (i > 0) index += ",";
    index += fmt::format("\"{}\":\"model-0000{}-of-00002.safetensors\"", entry.name, first ? 1 : 2);
  }
  index += "}}";
  WriteSafetensors((dir.path() / "model-00001-of-00002.safetensors").string(), shard1);
  WriteSafetensors((dir.path() / "model-00002-of-00002.safetensors").string(), shard2);
  testing::WriteFile(dir.path() / "model.safetensors.index.json", index);
  LoadedModel sharded = LoadModel(dir.path().string(), {});
  LoadedModel single = LoadModel(source.string(), {});
  EXPECT_TRUE(SameValues(sharded.weights.layers[3].o_proj, single.weights.layers[3].o_proj));
  EXPECT_TRUE(SameValues(sharded.weights.final_norm, single.weights.final_norm));
}

}  // namespace
}  // namespace infer
