// libFuzzer target for the model folder's JSON files: random text -> config.json parsing
// (ParseModelConfig: every architecture's fields, the consistency checks) and
// generation_config.json parsing. infer::Error is an expected outcome; anything else (a crash, a
// sanitizer report, an uncaught nlohmann exception, an accepted config that breaks its own
// invariants) is a finding.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "infer/core/error.h"
#include "infer/loader/generation_config.h"
#include "infer/loader/model_config.h"

namespace {

void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const infer::ModelConfig config = infer::ParseModelConfig(text, "fuzz/config.json");
    // What the loader and the decoder rely on once a config is accepted.
    Check(config.vocab_size > 0 && config.hidden_size > 0 && config.num_layers > 0,
          "accepted a config with a zero size");
    Check(config.num_heads > 0 && config.num_kv_heads > 0 && config.head_dim > 0,
          "accepted a config with zero heads");
    Check(config.num_heads % config.num_kv_heads == 0, "heads not a multiple of kv heads");
    Check(config.intermediate_size > 0, "accepted a zero intermediate_size");
    Check(static_cast<int64_t>(config.layers.size()) == config.num_layers,
          "one LayerConfig per layer");
    Check(std::isfinite(config.rms_norm_eps) && config.rms_norm_eps >= 0,
          "accepted a non-finite or negative rms_norm_eps");
    Check(config.max_position_embeddings > 0, "accepted max_position_embeddings <= 0");
    for (const infer::LayerConfig& layer : config.layers) {
      Check(std::isfinite(layer.rope.theta) && layer.rope.theta > 0,
            "accepted a non-finite or non-positive rope_theta");
      Check(std::isfinite(layer.rope.factor) && layer.rope.factor > 0,
            "accepted a non-finite or non-positive rope scaling factor");
      Check(layer.sliding_window >= 0, "accepted a negative sliding window");
    }
  } catch (const infer::Error&) {
  }
  try {
    infer::ParseGenerationConfig(text, "fuzz/generation_config.json");
  } catch (const infer::Error&) {
  }
  return 0;
}
