// Test helpers: where the real tokenizer files and the reference fixtures live.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace infer::testing {

// .cache/tokenizers/<model>/, fetched by scripts/fetch_tokenizers.sh (CI runs it first).
inline std::filesystem::path RealTokenizerDir(const std::string& model) {
  return std::filesystem::path(INFER_SOURCE_DIR) / ".cache" / "tokenizers" / model;
}

// Fails the test (not skips) when the real tokenizer files are missing.
inline bool RequireRealTokenizer(const std::string& model) {
  const auto path = RealTokenizerDir(model) / "tokenizer.json";
  if (std::filesystem::is_regular_file(path)) return true;
  ADD_FAILURE() << path << " is missing: run scripts/fetch_tokenizers.sh first";
  return false;
}

inline std::filesystem::path TokenizerFixture(const std::string& name) {
  return std::filesystem::path(INFER_TEST_FIXTURES) / "tokenizer" / name;
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

}  // namespace infer::testing
