// The raw bytes of every token id, for the grammar engine's vocabulary (grammar/token_mask.h):
// constrained decoding works on bytes, so each id needs the exact bytes it appends to the
// output, including ids whose bytes are not valid UTF-8 alone (byte-level BPE pieces of a
// multi-byte character, SentencePiece <0xHH> byte-fallback tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infer/tokenizer/tokenizer.h"

namespace infer {

// Per id in [0, VocabSize()): the token's raw bytes; empty for special tokens and unknown ids
// (never to be allowed by a grammar).
std::vector<std::string> TokenBytes(const Tokenizer& tokenizer);
// The ids of special added tokens.
std::vector<int32_t> SpecialTokenIds(const Tokenizer& tokenizer);

}  // namespace infer
