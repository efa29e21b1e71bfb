// Fast reader for Hugging Face tokenizer.json: the large model.vocab / model.merges sections are
// scanned by hand (nlohmann's DOM takes ~0.8 s on Gemma 3's 33 MB file), the rest goes to nlohmann.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer {

struct TokenizerJson {
  // The whole document except model.vocab and model.merges (which are moved out below).
  nlohmann::json config;
  // model.vocab in file order (token, id); empty when the model has no vocab object.
  std::vector<std::pair<std::string, int32_t>> vocab;
  // model.merges as (left, right) pairs, from either "a b" strings or ["a", "b"] arrays.
  std::vector<std::pair<std::string, std::string>> merges;
};

// Parses tokenizer.json text; `source_name` names the file in error messages.
TokenizerJson ParseTokenizerJson(std::string_view text, const std::string& source_name);
TokenizerJson ReadTokenizerJson(const std::string& path);

}  // namespace infer
