#include "infer/loader/model_path.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "infer/core/error.h"
#include "infer/loader/gguf.h"

namespace infer {

namespace fs = std::filesystem;

namespace {
fs::path HubCacheDir() {
  if (const char* hub = std::getenv("HF_HUB_CACHE"); hub != nullptr && *hub != '\0') return hub;
  if (const char* home = std::getenv("HF_HOME"); home != nullptr && *home != '\0') {
    return fs::path(home) / "hub";
  }
  const char* user_home = std::getenv("HOME");
  return fs::path(user_home != nullptr ? user_home : "/root") / ".cache" / "huggingface" / "hub";
}
}  // namespace

std::string ResolveModelPath(const std::string& model) {
  INFER_CHECK(!model.empty(), "--model is empty");
  if (fs::is_directory(model)) return model;
  if (fs::is_regular_file(model)) {
    INFER_CHECK(IsGgufFile(model),
                "--model {}: a file, but not a GGUF file (a model is a "
                "checkpoint folder, a .gguf file or a Hugging Face id)",
                model);
    return model;
  }
  const auto slash = model.find('/');
  const bool looks_like_id = slash != std::string::npos && slash > 0 &&
                             model.find('/', slash + 1) == std::string::npos &&
                             slash + 1 < model.size() && model[0] != '.';
  INFER_CHECK(looks_like_id, "--model {}: no such folder (and not a Hugging Face id ORG/NAME)",
              model);
  const fs::path repo =
      HubCacheDir() / ("models--" + model.substr(0, slash) + "--" + model.substr(slash + 1));
  INFER_CHECK(fs::is_directory(repo),
              "--model {}: not a folder, and not in the Hugging Face cache (looked for {})", model,
              repo.string());
  std::string revision;
  if (std::ifstream ref(repo / "refs" / "main"); ref.good()) std::getline(ref, revision);
  if (revision.empty()) {
    // No refs/main (e.g. a download pinned to a revision): accept a single snapshot.
    std::vector<fs::path> snapshots;
    if (fs::is_directory(repo / "snapshots")) {
      for (const auto& entry : fs::directory_iterator(repo / "snapshots")) {
        if (entry.is_directory()) snapshots.push_back(entry.path());
      }
    }
    INFER_CHECK(snapshots.size() == 1,
                "--model {}: {} has no refs/main and {} snapshots; pass the snapshot folder", model,
                repo.string(), snapshots.size());
    return snapshots.front().string();
  }
  const fs::path snapshot = repo / "snapshots" / revision;
  INFER_CHECK(fs::is_directory(snapshot), "--model {}: refs/main names {} but {} is missing", model,
              revision, snapshot.string());
  return snapshot.string();
}

std::string GgufModelFile(const std::string& resolved) {
  if (fs::is_regular_file(resolved)) return resolved;
  if (!fs::is_directory(resolved) || fs::exists(fs::path(resolved) / "config.json")) return "";
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(resolved)) {
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") {
      found.push_back(entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  if (found.size() > 1) {
    std::string names;
    for (const auto& name : found) names += "\n  " + name;
    Fail("--model {}: the folder holds {} GGUF files and no config.json; pass one:{}", resolved,
         found.size(), names);
  }
  return found.empty() ? "" : found.front();
}

std::string ModelFolder(const std::string& resolved) {
  if (fs::is_regular_file(resolved)) {
    const fs::path folder = fs::path(resolved).parent_path();
    return folder.empty() ? "." : folder.string();
  }
  return resolved;
}

}  // namespace infer
