// tokenizer.json decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence):
// token strings -> text, exactly as Hugging Face's decode_chain.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace infer {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // Transforms the token strings in place (some decoders fuse them into one).
  virtual void DecodeChain(std::vector<std::string>& tokens) const = 0;
  // True when a token boundary right after `token` may change how the next tokens decode (an
  // unfinished <0xNN> byte run); the incremental detokenizer holds its output there.
  virtual bool JoinsAcross(const std::string& token) const {
    (void)token;
    return false;
  }
};

// Null for JSON null; unsupported types throw infer::Error naming them.
std::unique_ptr<TokenDecoder> CreateDecoder(const nlohmann::json& config);

}  // namespace infer
