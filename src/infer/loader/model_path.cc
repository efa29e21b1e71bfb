#include "infer/loader/model_path.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "infer/core/error.h"

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

}  // namespace infer
