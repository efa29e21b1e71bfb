// The tokenizer and chat template of a resolved model path: the folder's tokenizer.json and
// tokenizer_config.json (or chat_template.jinja) when present, as Hugging Face reads them; else,
// for a GGUF file, its own tokenizer.* metadata (tokenizer/gguf_vocab.h, and
// tokenizer.chat_template with the BOS and EOS tokens named by their ids).
#pragma once

#include <memory>
#include <string>

#include "infer/loader/gguf.h"
#include "infer/tokenizer/chat_template.h"
#include "infer/tokenizer/gguf_vocab.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer::cli {

// Null when the model has neither.
std::unique_ptr<Tokenizer> LoadModelTokenizer(const std::string& resolved);
// Throws infer::Error with a one-line message when the model has none.
std::unique_ptr<ChatTemplate> LoadModelChatTemplate(const std::string& resolved);
// The tokenizer.ggml.* keys of a GGUF file (absent ones left empty).
GgufVocab ReadGgufVocab(const GgufFile& file);

}  // namespace infer::cli
