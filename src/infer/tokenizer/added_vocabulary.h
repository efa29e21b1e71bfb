// Added tokens of tokenizer.json ("added_tokens"): matched leftmost-longest in the text before
// the model runs, honouring lstrip / rstrip / single_word / normalized like Hugging Face.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A span of text: either an added token (`token_id` >= 0) or text for the model (-1).
struct TextSegment {
  size_t start;
  size_t end;
  int32_t token_id;
};

class AddedVocabulary {
 public:
  // `normalize` (may be null) is the tokenizer's normalizer: tokens with normalized=true are
  // matched in normalized text by their normalized content, as Hugging Face does.
  AddedVocabulary(const nlohmann::json& added_tokens,
                  const std::function<void(std::string&)>& normalize);

  // Splits `text` on the added tokens that match raw (normalized == false) or normalized text.
  void Split(std::string_view text, bool normalized, std::vector<TextSegment>& out) const;
  bool HasNormalizedTokens() const { return !normalized_trie_.nodes.empty(); }

  const AddedToken* FindById(int32_t id) const;
  std::optional<int32_t> FindByContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Byte trie; the root has a dense table so most text positions are rejected in one load.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token_index = -1;
    };
    std::vector<Node> nodes;
    std::array<int32_t, 256> root{};
    void Insert(std::string_view key, int32_t token_index);
    // Longest token starting at text[pos]: (token index, end) or (-1, pos).
    std::pair<int32_t, size_t> LongestMatch(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_by_id_;
  std::unordered_map<std::string, size_t> index_by_content_;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace infer
