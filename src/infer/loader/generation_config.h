// generation_config.json: the checkpoint's own EOS ids and sampling defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infer {

struct GenerationConfig {
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
};

// Reads `path` if it exists; a missing file gives an empty config. Malformed content is an
// infer::Error naming the file and key.
GenerationConfig LoadGenerationConfig(const std::string& path);
GenerationConfig ParseGenerationConfig(const std::string& json_text, const std::string& source);

}  // namespace infer
