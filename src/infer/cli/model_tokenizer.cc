#include "infer/cli/model_tokenizer.h"

#include <filesystem>

#include "infer/core/error.h"
#include "infer/loader/model_path.h"

namespace infer::cli {
namespace {

bool HasFile(const std::string& folder, const char* name) {
  return std::filesystem::is_regular_file(std::filesystem::path(folder) / name);
}

}  // namespace

GgufVocab ReadGgufVocab(const GgufFile& file) {
  GgufVocab vocab;
  vocab.model = file.String("tokenizer.ggml.model").value_or("");
  vocab.pre = file.String("tokenizer.ggml.pre").value_or("");
  if (const auto* tokens = file.Strings("tokenizer.ggml.tokens")) vocab.tokens = *tokens;
  if (const auto* scores = file.Floats("tokenizer.ggml.scores")) vocab.scores = *scores;
  if (const auto* types = file.Ints("tokenizer.ggml.token_type")) vocab.token_types = *types;
  if (const auto* merges = file.Strings("tokenizer.ggml.merges")) vocab.merges = *merges;
  vocab.bos_id = file.Int("tokenizer.ggml.bos_token_id");
  vocab.eos_id = file.Int("tokenizer.ggml.eos_token_id");
  vocab.unknown_id = file.Int("tokenizer.ggml.unknown_token_id");
  vocab.add_bos = file.Bool("tokenizer.ggml.add_bos_token");
  vocab.add_eos = file.Bool("tokenizer.ggml.add_eos_token");
  vocab.add_space_prefix = file.Bool("tokenizer.ggml.add_space_prefix");
  return vocab;
}

std::unique_ptr<Tokenizer> LoadModelTokenizer(const std::string& resolved) {
  const std::string folder = ModelFolder(resolved);
  if (HasFile(folder, "tokenizer.json")) return Tokenizer::FromModelDir(folder);
  const std::string gguf = GgufModelFile(resolved);
  if (gguf.empty()) return nullptr;
  const GgufFile file = GgufFile::Open(gguf);
  if (!file.Has("tokenizer.ggml.model")) return nullptr;
  return Tokenizer::FromGguf(ReadGgufVocab(file), gguf);
}

std::unique_ptr<ChatTemplate> LoadModelChatTemplate(const std::string& resolved) {
  const std::string folder = ModelFolder(resolved);
  const std::string gguf = GgufModelFile(resolved);
  if (gguf.empty() || HasFile(folder, "tokenizer_config.json") ||
      HasFile(folder, "chat_template.jinja")) {
    return ChatTemplate::FromModelDir(folder);
  }
  const GgufFile file = GgufFile::Open(gguf);
  const std::optional<std::string> source = file.String("tokenizer.chat_template");
  INFER_CHECK(source && !source->empty(),
              "{} has no chat template (no tokenizer.chat_template, and no tokenizer_config.json "
              "beside it)",
              gguf);
  // The special tokens a template may name, as tokenizer_config.json gives them.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  const auto* tokens = file.Strings("tokenizer.ggml.tokens");
  for (const auto& [name, key] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"},
                                  std::pair{"eos_token", "tokenizer.ggml.eos_token_id"},
                                  std::pair{"unk_token", "tokenizer.ggml.unknown_token_id"},
                                  std::pair{"pad_token", "tokenizer.ggml.padding_token_id"}}) {
    const std::optional<int64_t> id = file.Int(key);
    if (tokens != nullptr && id && *id >= 0 && static_cast<size_t>(*id) < tokens->size()) {
      special_tokens[name] = (*tokens)[static_cast<size_t>(*id)];
    }
  }
  try {
    return std::make_unique<ChatTemplate>(*source, std::move(special_tokens));
  } catch (const Error& e) {
    Fail("{}: {}", gguf, e.what());
  }
}

}  // namespace infer::cli
