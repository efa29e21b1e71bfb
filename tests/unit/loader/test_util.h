// Helpers for loader tests: temporary folders and small files.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include "testing/paths.h"

namespace infer::testing {

// A fresh folder under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "infer-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void WriteFile(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::filesystem::path FixturePath(const std::string& relative) {
  return std::filesystem::path(::infer::testing::FixturesDir()) / relative;
}

}  // namespace infer::testing
