// tokenizer.json normalizers (NFC/NFD/NFKC/NFKD, Lowercase, Replace, Prepend, Strip, Sequence).
// Offsets are not tracked: infer needs ids, not alignments.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace infer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `config` (tokenizer.json "normalizer"); null for JSON null.
// Unsupported types throw infer::Error naming them.
std::unique_ptr<Normalizer> CreateNormalizer(const nlohmann::json& config);

}  // namespace infer
