// UTF-8 helpers shared by the tokenizer: validation, code-point iteration, Rust-compatible lossy
// decoding, Python's notion of whitespace, the GPT-2 byte-to-unicode alphabet, and the hex digits
// of escapes (\uHHHH, <0xHH>).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infer {

// Byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid.
size_t FindInvalidUtf8(std::string_view text);
inline bool IsValidUtf8(std::string_view text) {
  return FindInvalidUtf8(text) == std::string_view::npos;
}

// Decodes the code point at text[pos] (which must be valid UTF-8) and advances pos.
inline char32_t NextCodePoint(std::string_view text, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    const char32_t cp = ((lead & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if (lead < 0xF0) {
    const char32_t cp =
        ((lead & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  const char32_t cp = ((lead & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) |
                      ((byte(pos + 2) & 0x3F) << 6) | (byte(pos + 3) & 0x3F);
  pos += 4;
  return cp;
}

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for stray bytes).
inline size_t Utf8SequenceLength(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

void AppendUtf8(std::string& out, char32_t code_point);
std::u32string ToCodePoints(std::string_view text);  // text must be valid UTF-8
std::string FromCodePoints(std::u32string_view code_points);
size_t CountCodePoints(std::string_view text);  // text must be valid UTF-8

// The leading hex digits of `digits` (either case): their value and how many there are (all of
// `digits` when count == digits.size()).
struct HexDigits {
  uint32_t value = 0;
  size_t count = 0;
};
HexDigits ParseHexDigits(std::string_view digits);

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string Utf8Lossy(std::string_view bytes);

// Python's str.isspace(), which Jinja's trim and str.strip() use.
bool IsPythonSpace(char32_t code_point);

// GPT-2's reversible byte <-> printable code point alphabet (ByteLevel pre-tokenizer/decoder).
const std::array<char32_t, 256>& ByteToUnicode();
// Inverse of ByteToUnicode(); -1 for code points outside the alphabet.
int UnicodeToByte(char32_t code_point);

}  // namespace infer
