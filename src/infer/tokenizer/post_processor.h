// tokenizer.json post-processors: TemplateProcessing (e.g. BOS), Roberta/Bert (cls/sep),
// ByteLevel (no id change) and Sequence. Only single sequences are supported (no pairs).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around `ids`; nothing when add_special_tokens is false.
  virtual void Process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
};

std::unique_ptr<PostProcessor> CreatePostProcessor(const nlohmann::json& config);

}  // namespace infer
