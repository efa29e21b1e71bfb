// Test helpers: where the real tokenizer files and the reference fixtures live.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infer/tokenizer/tokenizer.h"
#include "testing/paths.h"

namespace infer::testing {

// .cache/tokenizers/<model>/, fetched by scripts/fetch_tokenizers.sh (CI runs it first).
inline std::filesystem::path RealTokenizerDir(const std::string& model) {
  return std::filesystem::path(::infer::testing::SourceDir()) / ".cache" / "tokenizers" / model;
}

// Fails the test (not skips) when the real tokenizer files are missing.
inline bool RequireRealTokenizer(const std::string& model) {
  const auto path = RealTokenizerDir(model) / "tokenizer.json";
  if (std::filesystem::is_regular_file(path)) return true;
  ADD_FAILURE() << path << " is missing: run scripts/fetch_tokenizers.sh first";
  return false;
}

inline std::filesystem::path TokenizerFixture(const std::string& name) {
  return std::filesystem::path(::infer::testing::FixturesDir()) / "tokenizer" / name;
}

inline std::vector<nlohmann::ordered_json> ReadJsonLines(const std::filesystem::path& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot open " << path;
  std::vector<nlohmann::ordered_json> lines;
  std::string line;
  while (std::getline(file, line))
    if (!line.empty()) lines.push_back(nlohmann::ordered_json::parse(line));
  return lines;
}

// The GPT-2 byte-level alphabet: printable bytes stand for themselves, the others for
// U+0100 onwards in byte order; returned as UTF-8.
inline std::string ByteLevelChar(unsigned char byte) {
  const auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int code_point = byte;
  if (!printable(byte)) {
    code_point = 256;
    for (int b = 0; b < byte; ++b) code_point += printable(b) ? 0 : 1;
  }
  std::string utf8;
  if (code_point < 0x80) {
    utf8 += static_cast<char>(code_point);
  } else {
    utf8 += static_cast<char>(0xC0 | (code_point >> 6));
    utf8 += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return utf8;
}

// Ids whose tokens are the single bytes of `text` (byte-level or byte-fallback vocab).
inline std::vector<int32_t> ByteTokens(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> ids;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    char fallback[8];
    std::snprintf(fallback, sizeof(fallback), "<0x%02X>", byte);
    std::optional<int32_t> id = tokenizer.TokenToId(fallback);
    if (!id) id = tokenizer.TokenToId(ByteLevelChar(byte));
    EXPECT_TRUE(id.has_value()) << "no token for byte " << int{byte};
    ids.push_back(id.value_or(0));
  }
  return ids;
}

}  // namespace infer::testing
