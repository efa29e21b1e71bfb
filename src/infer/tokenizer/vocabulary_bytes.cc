// Token id -> raw bytes. A single-id Decode gives them whenever they are valid UTF-8 (the
// decoders of our three families, ByteLevel and Replace+ByteFallback+Fuse, add or strip nothing
// for one token); where Decode had to substitute U+FFFD, the token string is mapped back
// directly: <0xHH> byte fallback, or the GPT-2 byte-to-unicode table of byte-level BPE.
#include "infer/tokenizer/vocabulary_bytes.h"

#include <array>
#include <string_view>

namespace infer {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// GPT-2's bytes_to_unicode, inverted: code point -> byte, -1 if not in the table.
std::array<int, 512> InverseByteLevelTable() {
  std::array<int, 512> inverse{};
  inverse.fill(-1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const int cp = printable ? b : 256 + extra++;
    inverse[static_cast<size_t>(cp)] = b;
  }
  return inverse;
}

// Decodes `token` as GPT-2 byte-level characters; false when a character is not in the table.
bool ByteLevelBytes(std::string_view token, std::string& out) {
  static const std::array<int, 512> kInverse = InverseByteLevelTable();
  out.clear();
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<uint8_t>(token[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;
    }
    if (cp >= kInverse.size() || kInverse[cp] < 0) return false;
    out.push_back(static_cast<char>(kInverse[cp]));
  }
  return true;
}

int ByteFallback(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char h = token[i];
    const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

}  // namespace

std::vector<std::string> TokenBytes(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.VocabSize();
  std::vector<std::string> out(static_cast<size_t>(n));
  std::string bytes;
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    const auto token = tokenizer.IdToToken(id);
    if (!token) continue;
    const int32_t one[1] = {id};
    std::string text = tokenizer.Decode(one, /*skip_special_tokens=*/false);
    if (text.find(kReplacement) != std::string::npos) {
      if (const int b = ByteFallback(*token); b >= 0) {
        text.assign(1, static_cast<char>(b));
      } else if (ByteLevelBytes(*token, bytes)) {
        text = bytes;
      }
    }
    out[static_cast<size_t>(id)] = std::move(text);
  }
  return out;
}

std::vector<int32_t> SpecialTokenIds(const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  // VocabSize() scans the added tokens (6415 of them in Gemma 3): once, not once per id.
  const int32_t n = tokenizer.VocabSize();
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.IsSpecial(id)) ids.push_back(id);
  }
  return ids;
}

}  // namespace infer
