// UTF-8 helpers; the lossy decoder follows Rust's core::str::Utf8Chunks exactly.
#include "infer/tokenizer/utf8.h"

namespace infer {
namespace {

// Length of the invalid prefix at text[pos] per Rust's from_utf8 (0 when valid), and the
// length of the valid sequence otherwise (through `valid_length`).
size_t InvalidPrefixLength(std::string_view text, size_t pos, size_t& valid_length) {
  const size_t size = text.size();
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const auto is_continuation = [&](size_t i) { return i < size && (byte(i) & 0xC0) == 0x80; };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) {
    valid_length = 1;
    return 0;
  }
  if (lead >= 0xC2 && lead <= 0xDF) {
    if (!is_continuation(pos + 1)) return 1;
    valid_length = 2;
    return 0;
  }
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (pos + 1 >= size) return 1;
    const uint8_t second = byte(pos + 1);
    const bool second_ok = (lead == 0xE0)   ? (second >= 0xA0 && second <= 0xBF)
                           : (lead == 0xED) ? (second >= 0x80 && second <= 0x9F)
                                            : (second >= 0x80 && second <= 0xBF);
    if (!second_ok) return 1;
    if (!is_continuation(pos + 2)) return 2;
    valid_length = 3;
    return 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (pos + 1 >= size) return 1;
    const uint8_t second = byte(pos + 1);
    const bool second_ok = (lead == 0xF0)   ? (second >= 0x90 && second <= 0xBF)
                           : (lead == 0xF4) ? (second >= 0x80 && second <= 0x8F)
                                            : (second >= 0x80 && second <= 0xBF);
    if (!second_ok) return 1;
    if (!is_continuation(pos + 2)) return 2;
    if (!is_continuation(pos + 3)) return 3;
    valid_length = 4;
    return 0;
  }
  return 1;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path, eight bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t chunk;
      __builtin_memcpy(&chunk, text.data() + pos, 8);
      if (chunk & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    size_t valid_length = 0;
    if (InvalidPrefixLength(text, pos, valid_length) != 0) return pos;
    pos += valid_length;
  }
  return std::string_view::npos;
}

void AppendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::u32string ToCodePoints(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) out.push_back(NextCodePoint(text, pos));
  return out;
}

std::string FromCodePoints(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) AppendUtf8(out, cp);
  return out;
}

size_t CountCodePoints(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return count;
}

HexDigits ParseHexDigits(std::string_view digits) {
  HexDigits hex;
  for (const char c : digits) {
    uint32_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<uint32_t>(c - 'A' + 10);
    } else {
      break;
    }
    hex.value = hex.value << 4 | digit;
    ++hex.count;
  }
  return hex;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t valid_length = 0;
    const size_t invalid_length = InvalidPrefixLength(bytes, pos, valid_length);
    if (invalid_length == 0) {
      out.append(bytes.substr(pos, valid_length));
      pos += valid_length;
    } else {
      out.append("\xEF\xBF\xBD");
      pos += invalid_length;
    }
  }
  return out;
}

bool IsPythonSpace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

const std::array<char32_t, 256>& ByteToUnicode() {
  static const std::array<char32_t, 256> kTable = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return kTable;
}

int UnicodeToByte(char32_t cp) {
  static const std::vector<int> kInverse = [] {
    std::vector<int> inv(512, -1);
    const auto& table = ByteToUnicode();
    for (int b = 0; b < 256; ++b) inv[table[b]] = b;
    return inv;
  }();
  return cp < kInverse.size() ? kInverse[cp] : -1;
}

}  // namespace infer
