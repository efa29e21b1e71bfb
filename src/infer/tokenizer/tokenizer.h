// Hugging Face tokenizer.json tokenizer: added tokens -> normalizer -> pre-tokenizer -> BPE ->
// post-processor for encode; ids -> tokens -> decoder for decode. Matches the Rust crate.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace infer {

class AddedVocabulary;
class Bpe;
class TokenDecoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;
struct GgufVocab;
struct TokenizerJson;

class Tokenizer {
 public:
  // Parses tokenizer.json; unsupported components throw infer::Error naming them.
  static std::unique_ptr<Tokenizer> FromFile(const std::filesystem::path& tokenizer_json);
  static std::unique_ptr<Tokenizer> FromJsonText(std::string_view text,
                                                 const std::string& source_name);
  // DIR/tokenizer.json, failing with a one-line message when the folder has none.
  static std::unique_ptr<Tokenizer> FromModelDir(const std::filesystem::path& dir);
  // From a GGUF file's tokenizer.ggml.* metadata (gguf_vocab.h); `source` names the file.
  static std::unique_ptr<Tokenizer> FromGguf(const GgufVocab& vocab, const std::string& source);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Throws infer::Error when `text` is not valid UTF-8. Thread-safe.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const;
  // Unknown ids are skipped (as HF does); invalid UTF-8 from byte tokens becomes U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  std::optional<std::string> IdToToken(int32_t id) const;
  // True for added tokens marked special (skipped by Decode(..., true)).
  bool IsSpecial(int32_t id) const;
  // One past the largest id of the model vocab and the added tokens.
  int32_t VocabSize() const;
  // True when the decoding of `id` may merge with the next token's (an unfinished byte-fallback
  // run), so a streaming detokenizer must not treat the boundary after it as final.
  bool JoinsWithNext(int32_t id) const;

 private:
  Tokenizer();
  void Init(TokenizerJson& data, const std::string& source);
  void EncodeSegment(std::string_view text, bool at_input_start, std::vector<int32_t>& ids) const;
  void EncodeNormalized(std::string_view text, bool at_input_start,
                        std::vector<int32_t>& ids) const;
  const std::string* TokenString(int32_t id) const;

  std::unique_ptr<AddedVocabulary> added_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Bpe> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<TokenDecoder> decoder_;
};

// Ids that end generation: generation_config.json eos_token_id (int or list), then config.json's,
// then tokenizer_config.json's eos_token (through `tokenizer`, which may be null); deduplicated.
std::vector<int32_t> LoadEosTokenIds(const std::filesystem::path& model_dir,
                                     const Tokenizer* tokenizer);

}  // namespace infer
