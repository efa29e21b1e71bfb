#include "infer/loader/model_path.h"

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "infer/core/error.h"
#include "test_util.h"

namespace infer {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

TEST(ModelPath, FolderIsReturnedAsIs) {
  TempDir dir;
  EXPECT_EQ(ResolveModelPath(dir.path().string()), dir.path().string());
}

TEST(ModelPath, HuggingFaceIdInTheCache) {
  TempDir home;
  const fs::path repo = home.path() / "hub" / "models--meta-llama--Llama-3.2-1B-Instruct";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / "abc123");
  testing::WriteFile(repo / "refs" / "main", "abc123");
  ::setenv("HF_HOME", home.path().c_str(), 1);
  ::unsetenv("HF_HUB_CACHE");
  EXPECT_EQ(ResolveModelPath("meta-llama/Llama-3.2-1B-Instruct"),
            (repo / "snapshots" / "abc123").string());
  EXPECT_THROW(ResolveModelPath("meta-llama/Other"), Error);
  EXPECT_THROW(ResolveModelPath("no/such/thing"), Error);
  ::unsetenv("HF_HOME");
}

}  // namespace
}  // namespace infer
