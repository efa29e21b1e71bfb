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

// An empty GGUF v3 file: the magic, the version, no tensors, no metadata.
std::string EmptyGguf() {
  std::string bytes = "GGUF";
  const auto put = [&](uint64_t value, int size) {
    for (int i = 0; i < size; ++i) bytes += static_cast<char>((value >> (8 * i)) & 0xFF);
  };
  put(3, 4);
  put(0, 8);
  put(0, 8);
  return bytes;
}

// Ollama's store: a manifest per name and tag, whose model layer names a content-addressed blob.
TEST(ModelPath, OllamaNamesResolveToTheirModelBlob) {
  TempDir store;
  const std::string digest(64, 'a');
  const fs::path blob = store.path() / "blobs" / ("sha256-" + digest);
  fs::create_directories(blob.parent_path());
  testing::WriteFile(blob, EmptyGguf());
  const auto manifest = [&](const fs::path& relative, const std::string& layer_digest) {
    const fs::path path = store.path() / "manifests" / relative;
    fs::create_directories(path.parent_path());
    testing::WriteFile(path,
                       R"({"schemaVersion":2,"layers":[)"
                       R"({"mediaType":"application/vnd.ollama.image.template","digest":"sha256:)" +
                           std::string(64, 'b') +
                           R"("},)"
                           R"({"mediaType":"application/vnd.ollama.image.model","digest":")" +
                           layer_digest + R"(","size":24}]})");
  };
  manifest("registry.ollama.ai/library/llama3.2/1b", "sha256:" + digest);
  manifest("registry.ollama.ai/library/llama3.2/latest", "sha256:" + digest);
  manifest("registry.ollama.ai/someone/tuned/q8", "sha256:" + digest);
  manifest("registry.ollama.ai/library/evil/latest", "sha256:../../../etc/passwd");
  manifest("registry.ollama.ai/library/gone/latest", "sha256:" + std::string(64, 'c'));
  ::setenv("OLLAMA_MODELS", store.path().c_str(), 1);
  EXPECT_EQ(ResolveModelPath("ollama:llama3.2:1b"), blob.string());
  EXPECT_EQ(ResolveModelPath("ollama:llama3.2"), blob.string());
  EXPECT_EQ(ResolveModelPath("ollama:someone/tuned:q8"), blob.string());
  const auto message = [](const std::string& model) {
    try {
      ResolveModelPath(model);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("ollama:llama3.2:3b").find("no Ollama manifest"), std::string::npos);
  EXPECT_NE(message("ollama:evil").find("is not sha256:<64 hex>"), std::string::npos);
  EXPECT_NE(message("ollama:gone").find("is missing"), std::string::npos);
  EXPECT_NE(message("ollama:../x").find("expected ollama:NAME[:TAG]"), std::string::npos);
  EXPECT_NE(message("ollama:").find("expected ollama:NAME[:TAG]"), std::string::npos);
  ::unsetenv("OLLAMA_MODELS");
}

// ORG/NAME:QUANT picks the snapshot's GGUF file named for that quantization, as llama.cpp's -hf.
TEST(ModelPath, HuggingFaceRepoWithAQuantPicksItsFile) {
  TempDir home;
  const fs::path snapshot = home.path() / "hub" / "models--org--Model-GGUF" / "snapshots" / "rev1";
  fs::create_directories(snapshot);
  fs::create_directories(home.path() / "hub" / "models--org--Model-GGUF" / "refs");
  testing::WriteFile(home.path() / "hub" / "models--org--Model-GGUF" / "refs" / "main", "rev1");
  for (const char* name : {"Model-Q4_K_M.gguf", "Model-Q4_K_S.gguf", "Model-Q8_0.gguf",
                           "Model-Q6_K-00001-of-00002.gguf"}) {
    testing::WriteFile(snapshot / name, EmptyGguf());
  }
  ::setenv("HF_HOME", home.path().c_str(), 1);
  ::unsetenv("HF_HUB_CACHE");
  EXPECT_EQ(ResolveModelPath("org/Model-GGUF:Q4_K_M"), (snapshot / "Model-Q4_K_M.gguf").string());
  EXPECT_EQ(ResolveModelPath("org/Model-GGUF:q8_0"), (snapshot / "Model-Q8_0.gguf").string());
  EXPECT_THROW(ResolveModelPath("org/Model-GGUF:Q4_K"), Error);    // Q4_K_M and Q4_K_S are others
  EXPECT_THROW(ResolveModelPath("org/Model-GGUF:Q5_K_M"), Error);  // none
  EXPECT_THROW(ResolveModelPath("org/Model-GGUF:Q6_K"), Error);    // split into parts
  EXPECT_THROW(ResolveModelPath("org/Model-GGUF:../x"), Error);
  ::unsetenv("HF_HOME");
}

}  // namespace
}  // namespace infer
