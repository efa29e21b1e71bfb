// tokenizer.json pre-tokenizers (Split, ByteLevel, Metaspace, Digits, Whitespace,
// WhitespaceSplit, Sequence): they cut normalized text into the words the model sees.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer {

struct Piece {
  std::string text;
  bool at_input_start = false;  // starts at offset 0 of the original input (Metaspace "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits; empty pieces are dropped.
  virtual void PreTokenize(std::vector<Piece>& pieces) const = 0;
};

// Null for JSON null; unsupported types throw infer::Error naming them.
std::unique_ptr<PreTokenizer> CreatePreTokenizer(const nlohmann::json& config);

// Maps each byte of `text` to its GPT-2 byte-level character (ByteLevel's alphabet).
std::string ByteLevelEncode(std::string_view text);

}  // namespace infer
