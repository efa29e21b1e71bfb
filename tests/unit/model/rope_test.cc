// RoPE inverse frequencies against the fixtures' float64 values (reference.json inv_freq).
#include "infer/model/rope.h"

#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infer/loader/model_config.h"
#include "testing/paths.h"

namespace infer {
namespace {

TEST(Rope, InverseFrequenciesMatchTheReference) {
  for (const char* arch : {"llama", "qwen3", "gemma3"}) {
    const std::string dir = std::string(::infer::testing::FixturesDir()) + "/models/" + arch;
    std::ifstream in(dir + "/reference.json");
    const auto reference = nlohmann::json::parse(in);
    const ModelConfig config = LoadModelConfig(dir + "/model/config.json");
    const auto& layer_types = reference["layer_types"];
    for (size_t layer = 0; layer < config.layers.size(); ++layer) {
      const auto& type = layer_types[layer].get<std::string>();
      const auto expected = reference["inv_freq"][type].get<std::vector<double>>();
      const auto actual = RopeInverseFrequencies(config.layers[layer].rope, config.head_dim);
      ASSERT_EQ(actual.size(), expected.size()) << arch;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_NEAR(actual[i], expected[i], 1e-12 * std::abs(expected[i]) + 1e-300)
            << arch << " " << layer;
      }
    }
  }
}

}  // namespace
}  // namespace infer
