// The BPE model of tokenizer.json: vocab + ranked merges, with byte_fallback (<0xNN> tokens),
// unk fusing, ignore_merges and subword prefix/suffix, matching Hugging Face's BPE::tokenize.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/tokenizer/tokenizer_json.h"

namespace infer {

// Hash for heterogeneous lookup of std::string keys by std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // `model` is tokenizer.json's "model" object (without vocab/merges, which `data` holds).
  static std::unique_ptr<Bpe> Create(const nlohmann::json& model, TokenizerJson& data,
                                     const std::string& source);

  // Appends the ids of one pre-tokenized word to `out`.
  void Tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Empty optional for ids outside the vocab.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id in the vocab.
  int32_t VocabSize() const { return static_cast<int32_t>(id_to_token_.size()); }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  // Open-addressing map (id_left, id_right) -> Merge; the merge table is the hot lookup.
  class MergeMap {
   public:
    void Build(const std::vector<std::pair<uint64_t, Merge>>& entries);
    const Merge* Find(uint64_t key) const;

   private:
    std::vector<uint64_t> keys_;
    std::vector<Merge> values_;
    uint64_t mask_ = 0;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  void MergeWord(std::string_view word, std::vector<int32_t>& out) const;

  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  MergeMap merges_;
  std::string unk_token_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_token_ids_{};  // <0xNN> ids, -1 where missing

  // Word -> ids cache, as HF's; bounded so memory stays flat on long inputs.
  static constexpr size_t kCacheCapacity = 65536;
  static constexpr size_t kMaxCachedWordBytes = 64;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace infer
