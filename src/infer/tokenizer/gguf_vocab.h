// A tokenizer as a GGUF file describes it (its tokenizer.ggml.* keys, which llama.cpp's
// convert_hf_to_gguf.py writes from a model's Hugging Face tokenizer files), turned back into
// the tokenizer.json it came from, so that infer's one Hugging Face tokenizer reads it:
//   "gpt2" (byte-level BPE: Llama 3, Qwen3): the vocabulary and merges as given; the
//     pre-tokenizer named by tokenizer.ggml.pre (its split pattern and normalizer as the Hugging
//     Face files of that family have them); CONTROL tokens are special added tokens,
//     USER_DEFINED ones plain added tokens, UNUSED ones (padding) left out.
//   "llama" (SentencePiece: Gemma 3): a BPE with byte fallback whose merges are the scores'
//     order, as Hugging Face's SentencePiece converter makes them (a merge's rank is its merged
//     piece's score, highest first; one piece's merges in the order of their halves' ids); ' '
//     becomes '▁' (with a '▁' prepended when add_space_prefix); USER_DEFINED tokens get back
//     the '▁'s the converter turned into spaces.
// The BOS (and EOS) the file asks to add become the post-processor's template. Pure: the caller
// reads the keys (loader/gguf.h); this file needs no GGUF reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "infer/tokenizer/tokenizer_json.h"

namespace infer {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class GgufTokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model
  std::string pre;                   // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens, by id
  std::vector<double> scores;        // tokenizer.ggml.scores (SentencePiece; may be empty)
  std::vector<int64_t> token_types;  // tokenizer.ggml.token_type (empty: all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right" (byte-level BPE)
  std::optional<int64_t> bos_id;
  std::optional<int64_t> eos_id;
  std::optional<int64_t> unknown_id;
  std::optional<bool> add_bos;           // tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos;           // tokenizer.ggml.add_eos_token
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix (SentencePiece)
};

// The tokenizer.json of `vocab`. Throws infer::Error, starting with `source`, for a tokenizer
// model or pre-tokenizer it does not know, arrays of different lengths or an id out of range.
TokenizerJson GgufTokenizerJson(const GgufVocab& vocab, const std::string& source);

// The pre-tokenizer names tokenizer.ggml.pre may hold that GgufTokenizerJson knows.
std::vector<std::string> KnownGgufPreTokenizers();

}  // namespace infer
