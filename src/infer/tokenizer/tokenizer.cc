// Tokenizer pipeline glue and EOS discovery.
#include "infer/tokenizer/tokenizer.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/tokenizer/added_vocabulary.h"
#include "infer/tokenizer/bpe.h"
#include "infer/tokenizer/decode_chain.h"
#include "infer/tokenizer/gguf_vocab.h"
#include "infer/tokenizer/normalizer.h"
#include "infer/tokenizer/post_processor.h"
#include "infer/tokenizer/pre_tokenizer.h"
#include "infer/tokenizer/tokenizer_json.h"
#include "infer/tokenizer/utf8.h"

namespace infer {

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::FromFile(const std::filesystem::path& tokenizer_json) {
  TokenizerJson data = ReadTokenizerJson(tokenizer_json.string());
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  tokenizer->Init(data, tokenizer_json.string());
  return tokenizer;
}

std::unique_ptr<Tokenizer> Tokenizer::FromJsonText(std::string_view text,
                                                   const std::string& source_name) {
  TokenizerJson data = ParseTokenizerJson(text, source_name);
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  tokenizer->Init(data, source_name);
  return tokenizer;
}

std::unique_ptr<Tokenizer> Tokenizer::FromModelDir(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "tokenizer.json";
  INFER_CHECK(std::filesystem::is_regular_file(path),
              "model folder {} has no tokenizer.json (this command needs a tokenizer)",
              dir.string());
  return FromFile(path);
}

std::unique_ptr<Tokenizer> Tokenizer::FromGguf(const GgufVocab& vocab, const std::string& source) {
  TokenizerJson data = GgufTokenizerJson(vocab, source);
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  tokenizer->Init(data, source);
  return tokenizer;
}

void Tokenizer::Init(TokenizerJson& data, const std::string& source) {
  const nlohmann::json& config = data.config;
  INFER_CHECK(config.contains("model") && config["model"].is_object(), "{}: no \"model\"", source);
  const nlohmann::json& model = config["model"];
  const std::string model_type = model.value("type", "BPE");
  INFER_CHECK(model_type == "BPE", "{}: model type '{}' is not supported (only BPE)", source,
              model_type);
  try {
    for (const char* key : {"truncation", "padding"}) {
      INFER_CHECK(!config.contains(key) || config[key].is_null(), "{}: \"{}\" is not supported",
                  source, key);
    }
    model_ = Bpe::Create(model, data, source);
    normalizer_ = CreateNormalizer(config.value("normalizer", nlohmann::json()));
    std::function<void(std::string&)> normalize;
    if (normalizer_) normalize = [this](std::string& text) { normalizer_->Normalize(text); };
    added_ = std::make_unique<AddedVocabulary>(config.value("added_tokens", nlohmann::json()),
                                               normalize);
    pre_tokenizer_ = CreatePreTokenizer(config.value("pre_tokenizer", nlohmann::json()));
    post_processor_ = CreatePostProcessor(config.value("post_processor", nlohmann::json()));
    decoder_ = CreateDecoder(config.value("decoder", nlohmann::json()));
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: {}", source, e.what());
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(source)) throw;
    Fail("{}: {}", source, e.what());
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  const size_t invalid = FindInvalidUtf8(text);
  INFER_CHECK(invalid == std::string_view::npos, "tokenize: input is not valid UTF-8 (byte {})",
              invalid);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<TextSegment> segments;
  added_->Split(text, /*normalized=*/false, segments);
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0) {
      ids.push_back(segment.token_id);
    } else {
      EncodeSegment(text.substr(segment.start, segment.end - segment.start), segment.start == 0,
                    ids);
    }
  }
  post_processor_->Process(ids, add_special_tokens);
  return ids;
}

void Tokenizer::EncodeSegment(std::string_view text, bool at_input_start,
                              std::vector<int32_t>& ids) const {
  if (!normalizer_) {
    if (!added_->HasNormalizedTokens()) {
      EncodeNormalized(text, at_input_start, ids);
      return;
    }
  }
  std::string normalized(text);
  if (normalizer_) normalizer_->Normalize(normalized);
  if (!added_->HasNormalizedTokens()) {
    EncodeNormalized(normalized, at_input_start, ids);
    return;
  }
  std::vector<TextSegment> segments;
  added_->Split(normalized, /*normalized=*/true, segments);
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0) {
      ids.push_back(segment.token_id);
    } else {
      EncodeNormalized(
          std::string_view(normalized).substr(segment.start, segment.end - segment.start),
          at_input_start && segment.start == 0, ids);
    }
  }
}

void Tokenizer::EncodeNormalized(std::string_view text, bool at_input_start,
                                 std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  if (!pre_tokenizer_) {
    model_->Tokenize(text, ids);
    return;
  }
  std::vector<Piece> pieces;
  pieces.push_back(Piece{std::string(text), at_input_start});
  pre_tokenizer_->PreTokenize(pieces);
  for (const Piece& piece : pieces) model_->Tokenize(piece.text, ids);
}

const std::string* Tokenizer::TokenString(int32_t id) const {
  if (const AddedToken* token = added_->FindById(id)) return &token->content;
  return model_->IdToToken(id);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const AddedToken* added = added_->FindById(id);
    if (added != nullptr) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
      continue;
    }
    if (const std::string* token = model_->IdToToken(id)) {
      // A model token whose text is a special added token's is skipped too (HF checks by text).
      if (skip_special_tokens) {
        if (auto added_id = added_->FindByContent(*token)) {
          if (added_->FindById(*added_id)->special) continue;
        }
      }
      tokens.push_back(*token);
    }
  }
  if (!decoder_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined += ' ';
      joined += tokens[i];
    }
    return joined;
  }
  decoder_->DecodeChain(tokens);
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto id = added_->FindByContent(token)) return id;
  return model_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  const std::string* token = TokenString(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* token = added_->FindById(id);
  return token != nullptr && token->special;
}

int32_t Tokenizer::VocabSize() const {
  int32_t size = model_->VocabSize();
  for (const AddedToken& token : added_->tokens()) size = std::max(size, token.id + 1);
  return size;
}

bool Tokenizer::JoinsWithNext(int32_t id) const {
  if (!decoder_) return false;
  const std::string* token = TokenString(id);
  return token != nullptr && decoder_->JoinsAcross(*token);
}

namespace {

std::optional<nlohmann::json> ReadJsonIfPresent(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  std::ifstream file(path);
  try {
    return nlohmann::json::parse(file);
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: invalid JSON: {}", path.string(), e.what());
  }
}

void AddIds(const nlohmann::json& value, std::vector<int32_t>& ids, const std::string& where) {
  if (value.is_null()) return;
  const auto add = [&](const nlohmann::json& item) {
    INFER_CHECK(item.is_number_integer(), "{}: eos_token_id must be an integer or a list", where);
    const int32_t id = item.get<int32_t>();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  if (value.is_array()) {
    for (const auto& item : value) add(item);
  } else {
    add(value);
  }
}

}  // namespace

std::vector<int32_t> LoadEosTokenIds(const std::filesystem::path& model_dir,
                                     const Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  for (const char* name : {"generation_config.json", "config.json"}) {
    const auto path = model_dir / name;
    if (auto json = ReadJsonIfPresent(path); json && json->is_object()) {
      if (json->contains("eos_token_id")) AddIds((*json)["eos_token_id"], ids, path.string());
      // Multimodal configs (e.g. Gemma 3) keep the text model's ids under text_config.
      if (json->contains("text_config") && (*json)["text_config"].is_object() &&
          (*json)["text_config"].contains("eos_token_id"))
        AddIds((*json)["text_config"]["eos_token_id"], ids, path.string());
    }
  }
  if (tokenizer != nullptr) {
    const auto path = model_dir / "tokenizer_config.json";
    if (auto json = ReadJsonIfPresent(path);
        json && json->is_object() && json->contains("eos_token")) {
      const nlohmann::json& eos = (*json)["eos_token"];
      std::string content;
      if (eos.is_string())
        content = eos.get<std::string>();
      else if (eos.is_object() && eos.contains("content"))
        content = eos["content"].get<std::string>();
      if (!content.empty()) {
        if (auto id = tokenizer->TokenToId(content)) AddIds(*id, ids, path.string());
      }
    }
  }
  return ids;
}

}  // namespace infer
