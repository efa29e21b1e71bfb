// PEFT adapter folders read by LoadLoraAdapter: the config's rank, alpha and rsLoRA scale, names
// with and without PEFT's base_model.model. prefix, each matrix kept in the file's dtype (B
// transposed), and a clear error naming the adapter and the tensor or field for what infer does
// not run or what does not fit the base.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/loader/lora.h"
#include "infer/loader/safetensors.h"
#include "test_util.h"

namespace infer {
namespace {

using nlohmann::json;

ModelConfig SmallConfig() {
  ModelConfig config;
  config.hidden_size = 8;
  config.intermediate_size = 12;
  config.num_layers = 2;
  config.num_heads = 2;
  config.num_kv_heads = 1;
  config.head_dim = 4;
  return config;
}

Tensor Filled(DType dtype, Shape shape, float start) {
  Tensor t = Tensor::Empty(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float value = start + static_cast<float>(i);
    if (dtype == DType::kF32) {
      t.data<float>()[i] = value;
    } else if (dtype == DType::kBF16) {
      t.data<uint16_t>()[i] = F32ToBf16(value);
    } else {
      t.data<uint16_t>()[i] = F32ToF16(value);
    }
  }
  return t;
}

class LoraLoaderTest : public ::testing::Test {
 protected:
  // An adapter folder: `config` as adapter_config.json, `tensors` as adapter_model.safetensors.
  std::string Write(const json& config, const std::map<std::string, Tensor>& tensors) {
    const std::string dir = (dir_.path() / std::to_string(count_++)).string();
    std::filesystem::create_directories(dir);
    testing::WriteFile(dir + "/adapter_config.json", config.dump());
    WriteSafetensors(dir + "/adapter_model.safetensors", tensors);
    return dir;
  }
  static json Config(int64_t r = 2, double alpha = 4.0) {
    return {{"peft_type", "LORA"},
            {"r", r},
            {"lora_alpha", alpha},
            {"bias", "none"},
            {"use_dora", false},
            {"modules_to_save", nullptr},
            {"target_modules", {"q_proj", "down_proj"}}};
  }
  // q_proj of layer 0 and down_proj of layer 1, rank 2.
  static std::map<std::string, Tensor> Tensors(const std::string& prefix = "base_model.model.",
                                               DType dtype = DType::kF32) {
    return {{prefix + "model.layers.0.self_attn.q_proj.lora_A.weight", Filled(dtype, {2, 8}, 0)},
            {prefix + "model.layers.0.self_attn.q_proj.lora_B.weight", Filled(dtype, {8, 2}, 100)},
            {prefix + "model.layers.1.mlp.down_proj.lora_A.weight", Filled(dtype, {2, 12}, 0)},
            {prefix + "model.layers.1.mlp.down_proj.lora_B.weight", Filled(dtype, {8, 2}, 0)}};
  }
  void ExpectRefused(const json& config, const std::map<std::string, Tensor>& tensors,
                     const std::string& words, int64_t max_rank = 16) {
    const std::string dir = Write(config, tensors);
    try {
      LoadLoraAdapter("sql", dir, SmallConfig(), max_rank);
      ADD_FAILURE() << "accepted; expected an error with: " << words;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'sql'"), std::string::npos) << message;
      EXPECT_NE(message.find(words), std::string::npos) << message;
    }
  }
  testing::TempDir dir_;
  int count_ = 0;
};

TEST_F(LoraLoaderTest, ReadsRankScaleAndMatricesInTheFilesDtype) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const std::string prefix : {"base_model.model.", ""}) {
      const auto adapter =
          LoadLoraAdapter("sql", Write(Config(), Tensors(prefix, dtype)), SmallConfig(), 16);
      EXPECT_EQ(adapter->rank, 2);
      EXPECT_FLOAT_EQ(adapter->scale, 2.0F);  // alpha / r
      EXPECT_EQ(adapter->target_modules, (std::vector<std::string>{"q_proj", "down_proj"}));
      const kernels::LoraMatrices& q = adapter->Delta(0, LoraTarget::kQ);
      ASSERT_TRUE(q.defined());
      EXPECT_FALSE(adapter->Delta(0, LoraTarget::kK).defined());
      EXPECT_FALSE(adapter->Delta(1, LoraTarget::kQ).defined());
      EXPECT_EQ(q.a.dtype(), dtype);
      EXPECT_EQ(q.a.shape(), (Shape{2, 8}));
      EXPECT_EQ(q.n, 8);
      EXPECT_EQ(q.b.shape(), (Shape{1, 2, kernels::kLoraPanel}));  // B [8, 2] in one panel
      // B[o, j] = 100 + 2 o + j, at j kLoraPanel + o in the panel.
      const auto at = [&](const Tensor& t, int64_t i) {
        return dtype == DType::kF32    ? t.data<float>()[i]
               : dtype == DType::kBF16 ? Bf16ToF32(t.data<uint16_t>()[i])
                                       : F16ToF32(t.data<uint16_t>()[i]);
      };
      EXPECT_EQ(at(q.b, 1 * kernels::kLoraPanel + 3), 100.0F + 2 * 3 + 1);
      EXPECT_EQ(at(q.a, 1 * 8 + 3), 11.0F);
      // A as given; B's panels of 64 output columns (8 of them used here).
      EXPECT_EQ(adapter->size_bytes,
                static_cast<int64_t>((16 + 2 * 64 + 24 + 2 * 64) * DTypeSize(dtype)));
    }
  }
}

TEST_F(LoraLoaderTest, RsLoraScalesByTheSquareRootOfTheRank) {
  json config = Config(4, 8.0);
  config["use_rslora"] = true;
  std::map<std::string, Tensor> tensors = {
      {"base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight",
       Filled(DType::kF32, {4, 8}, 0)},
      {"base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight",
       Filled(DType::kF32, {4, 4}, 0)}};
  const auto adapter = LoadLoraAdapter("sql", Write(config, tensors), SmallConfig(), 16);
  EXPECT_FLOAT_EQ(adapter->scale, 4.0F);  // 8 / sqrt(4)
}

TEST_F(LoraLoaderTest, AHuggingFaceIdIsFoundInTheHfCache) {
  // An adapter downloaded with huggingface_hub: models--ORG--NAME/snapshots/<refs/main>/.
  const std::filesystem::path repo = dir_.path() / "hub" / "models--org--sql-lora";
  const std::string snapshot = (repo / "snapshots" / "rev1").string();
  std::filesystem::create_directories(repo / "refs");
  testing::WriteFile(repo / "refs" / "main", "rev1");
  std::filesystem::create_directories(snapshot);
  testing::WriteFile(snapshot + "/adapter_config.json", Config().dump());
  WriteSafetensors(snapshot + "/adapter_model.safetensors", Tensors());
  ::setenv("HF_HUB_CACHE", (dir_.path() / "hub").c_str(), 1);
  const auto adapter = LoadLoraAdapter("sql", "org/sql-lora", SmallConfig(), 16);
  ::unsetenv("HF_HUB_CACHE");
  EXPECT_EQ(adapter->path, "org/sql-lora");
  EXPECT_TRUE(adapter->Delta(0, LoraTarget::kQ).defined());
}

TEST_F(LoraLoaderTest, EachAdapterLoadGetsItsOwnId) {
  const std::string dir = Write(Config(), Tensors());
  const auto first = LoadLoraAdapter("a", dir, SmallConfig(), 16);
  const auto second = LoadLoraAdapter("a", dir, SmallConfig(), 16);
  EXPECT_NE(first->id, second->id);
}

TEST_F(LoraLoaderTest, RefusesWhatItDoesNotRunNamingIt) {
  json dora = Config();
  dora["use_dora"] = true;
  ExpectRefused(dora, Tensors(), "DoRA");
  json save = Config();
  save["modules_to_save"] = {"lm_head"};
  ExpectRefused(save, Tensors(), "modules_to_save");
  json bias = Config();
  bias["bias"] = "all";
  ExpectRefused(bias, Tensors(), "bias");
  json targets = Config();
  targets["target_modules"] = {"q_proj", "embed_tokens"};
  ExpectRefused(targets, Tensors(), "embed_tokens");
  json pattern = Config();
  pattern["rank_pattern"] = {{"q_proj", 4}};
  ExpectRefused(pattern, Tensors(), "rank_pattern");
  json prefix = Config();
  prefix["peft_type"] = "PREFIX_TUNING";
  ExpectRefused(prefix, Tensors(), "PREFIX_TUNING");
  auto head = Tensors();
  head["base_model.model.lm_head.lora_A.weight"] = Filled(DType::kF32, {2, 8}, 0);
  ExpectRefused(Config(), head, "lm_head");
  auto embed = Tensors();
  embed["base_model.model.model.embed_tokens.lora_embedding_A"] = Filled(DType::kF32, {2, 8}, 0);
  ExpectRefused(Config(), embed, "embeddings");
  auto with_bias = Tensors();
  with_bias["base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias"] =
      Filled(DType::kF32, {8}, 0);
  ExpectRefused(Config(), with_bias, "bias");
}

TEST_F(LoraLoaderTest, RefusesWhatDoesNotFitTheBaseNamingTheTensor) {
  ExpectRefused(Config(), Tensors(), "exceeds --max-lora-rank 1", 1);
  auto shape = Tensors();
  shape["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] =
      Filled(DType::kF32, {2, 9}, 0);
  ExpectRefused(Config(), shape, "model.layers.0.self_attn.q_proj.lora_A.weight");
  auto rank = Tensors();
  rank["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"] =
      Filled(DType::kF32, {8, 3}, 0);
  ExpectRefused(Config(), rank, "does not fit");
  auto layer = Tensors();
  layer["base_model.model.model.layers.5.self_attn.q_proj.lora_A.weight"] =
      Filled(DType::kF32, {2, 8}, 0);
  ExpectRefused(Config(), layer, "layer 5");
  auto lonely = Tensors();
  lonely.erase("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  ExpectRefused(Config(), lonely, "without its lora_B");
  auto ints = Tensors();
  Tensor i32 = Tensor::Empty(DType::kI32, {2, 8});
  std::fill_n(i32.data<int32_t>(), 16, 0);
  ints["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] = i32;
  ExpectRefused(Config(), ints, "dtype");
}

TEST_F(LoraLoaderTest, RefusesExpertsAndTheMlpOfASparseLayer) {
  // Layer 1 a mixture of experts: its experts, router and (absent) dense MLP are refused by name;
  // the attention projections of every layer load.
  ModelConfig config = SmallConfig();
  config.layers.resize(2);
  config.layers[1].sparse_mlp = true;
  config.moe = {4, 2, 6, true};
  const auto refused = [&](const std::map<std::string, Tensor>& tensors, const std::string& words) {
    try {
      LoadLoraAdapter("moe", Write(Config(), tensors), config, 16);
      ADD_FAILURE() << "accepted; expected an error with: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  const std::string p = "base_model.model.model.layers.1.";
  refused({{p + "mlp.experts.3.up_proj.lora_A.weight", Filled(DType::kF32, {2, 8}, 0)},
           {p + "mlp.experts.3.up_proj.lora_B.weight", Filled(DType::kF32, {6, 2}, 0)}},
          "targets a mixture of experts' experts or router, which is not supported");
  refused({{p + "mlp.gate.lora_A.weight", Filled(DType::kF32, {2, 8}, 0)},
           {p + "mlp.gate.lora_B.weight", Filled(DType::kF32, {4, 2}, 0)}},
          "experts or router");
  refused(Tensors(), "the base model has no mlp.down_proj: layer 1 is a mixture of experts");
  auto attention = Tensors();
  attention.erase("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
  attention.erase("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  attention[p + "self_attn.o_proj.lora_A.weight"] = Filled(DType::kF32, {2, 8}, 0);
  attention[p + "self_attn.o_proj.lora_B.weight"] = Filled(DType::kF32, {8, 2}, 0);
  EXPECT_NO_THROW(LoadLoraAdapter("moe", Write(Config(), attention), config, 16));
}

TEST_F(LoraLoaderTest, RefusesMissingAndCorruptFiles) {
  ExpectRefused(json::object(), Tensors(), "'r'");
  const std::string dir = Write(Config(), Tensors());
  // Truncated safetensors.
  const std::string weights = dir + "/adapter_model.safetensors";
  std::filesystem::resize_file(weights, std::filesystem::file_size(weights) - 10);
  EXPECT_THROW(LoadLoraAdapter("sql", dir, SmallConfig(), 16), Error);
  testing::WriteFile(dir + "/adapter_config.json", "{not json");
  EXPECT_THROW(LoadLoraAdapter("sql", dir, SmallConfig(), 16), Error);
  std::filesystem::remove(dir + "/adapter_config.json");
  try {
    LoadLoraAdapter("sql", dir, SmallConfig(), 16);
    ADD_FAILURE() << "accepted a folder without adapter_config.json";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adapter_config.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LoadLoraAdapter("sql", (dir_.path() / "nowhere").string(), SmallConfig(), 16),
               Error);
}

}  // namespace
}  // namespace infer
