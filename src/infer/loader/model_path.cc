#include "infer/loader/model_path.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

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

// $OLLAMA_MODELS, else ~/.ollama/models (Ollama's own default).
fs::path OllamaModelsDir() {
  if (const char* dir = std::getenv("OLLAMA_MODELS"); dir != nullptr && *dir != '\0') return dir;
  const char* user_home = std::getenv("HOME");
  return fs::path(user_home != nullptr ? user_home : "/root") / ".ollama" / "models";
}

bool IsHex(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// A path part of an Ollama name: no separators, no "." or "..".
bool IsNamePart(std::string_view part) {
  return !part.empty() && part != "." && part != ".." &&
         part.find_first_of("/\\") == std::string_view::npos;
}

// NAME[:TAG] as Ollama names models: "llama3.2:1b" is registry.ollama.ai/library/llama3.2, tag
// 1b; "user/model" and "host/user/model" name their namespace and registry. The manifest's
// model layer (application/vnd.ollama.image.model) is the GGUF blob.
std::string ResolveOllama(const std::string& model, std::string_view spec) {
  std::string name(spec);
  std::string tag = "latest";
  if (const auto colon = spec.rfind(':');
      colon != std::string_view::npos && spec.find('/', colon) == std::string_view::npos) {
    name = spec.substr(0, colon);
    tag = spec.substr(colon + 1);
  }
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t slash = name.find('/', start);
    parts.push_back(name.substr(start, slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() == 1) parts.insert(parts.begin(), "library");
  if (parts.size() == 2) parts.insert(parts.begin(), "registry.ollama.ai");
  INFER_CHECK(
      parts.size() == 3 && std::all_of(parts.begin(), parts.end(), IsNamePart) && IsNamePart(tag),
      "--model {}: expected ollama:NAME[:TAG] (e.g. ollama:llama3.2:1b)", model);
  const fs::path root = OllamaModelsDir();
  const fs::path manifest_path = root / "manifests" / parts[0] / parts[1] / parts[2] / tag;
  INFER_CHECK(fs::is_regular_file(manifest_path),
              "--model {}: no Ollama manifest {} (set OLLAMA_MODELS to Ollama's model store, or "
              "`ollama pull {}` first)",
              model, manifest_path.string(), spec);
  nlohmann::json manifest;
  try {
    std::ifstream file(manifest_path);
    manifest = nlohmann::json::parse(file);
  } catch (const nlohmann::json::exception& e) {
    Fail("--model {}: {} is not JSON: {}", model, manifest_path.string(), e.what());
  }
  std::string digest;
  if (manifest.is_object() && manifest.contains("layers") && manifest["layers"].is_array()) {
    for (const auto& layer : manifest["layers"]) {
      if (layer.is_object() &&
          layer.value("mediaType", "") == "application/vnd.ollama.image.model" &&
          layer.contains("digest") && layer["digest"].is_string()) {
        digest = layer["digest"].get<std::string>();
      }
    }
  }
  INFER_CHECK(!digest.empty(), "--model {}: {} lists no model layer", model,
              manifest_path.string());
  constexpr std::string_view kSha = "sha256:";
  INFER_CHECK(digest.starts_with(kSha) && digest.size() == kSha.size() + 64 &&
                  IsHex(std::string_view(digest).substr(kSha.size())),
              "--model {}: {}: the model layer's digest '{}' is not sha256:<64 hex>", model,
              manifest_path.string(), digest);
  const fs::path blob = root / "blobs" / ("sha256-" + digest.substr(kSha.size()));
  INFER_CHECK(fs::is_regular_file(blob), "--model {}: the model blob {} is missing", model,
              blob.string());
  INFER_CHECK(IsGgufFile(blob.string()), "--model {}: the model blob {} is not a GGUF file", model,
              blob.string());
  return blob.string();
}

// The snapshot folder of a Hugging Face id in the cache.
std::string HubSnapshot(const std::string& model, const std::string& id) {
  const auto slash = id.find('/');
  const bool looks_like_id = slash != std::string::npos && slash > 0 &&
                             id.find('/', slash + 1) == std::string::npos &&
                             slash + 1 < id.size() && id[0] != '.';
  INFER_CHECK(looks_like_id,
              "--model {}: no such folder (and not a Hugging Face id ORG/NAME[:QUANT], nor "
              "ollama:NAME[:TAG])",
              model);
  const fs::path repo =
      HubCacheDir() / ("models--" + id.substr(0, slash) + "--" + id.substr(slash + 1));
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

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// The GGUF file of a snapshot whose name carries `quant` (Q4_K_M, q8_0, ...) as llama.cpp's
// -hf REPO:QUANT picks it: the quant as a whole word of the file name (letters, digits and '_'),
// in any case.
std::string PickQuant(const std::string& model, const fs::path& snapshot,
                      const std::string& quant) {
  std::vector<std::string> all, matches;
  for (const auto& entry : fs::recursive_directory_iterator(snapshot)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".gguf") continue;
    const std::string name = entry.path().lexically_relative(snapshot).string();
    all.push_back(name);
    const std::string stem = Lower(entry.path().stem().string());
    const std::string want = Lower(quant);
    for (size_t at = stem.find(want); at != std::string::npos; at = stem.find(want, at + 1)) {
      const auto boundary = [&](size_t i) {
        return i >= stem.size() ||
               (!std::isalnum(static_cast<unsigned char>(stem[i])) && stem[i] != '_');
      };
      if ((at == 0 || boundary(at - 1)) && boundary(at + want.size())) {
        matches.push_back(name);
        break;
      }
    }
  }
  std::sort(all.begin(), all.end());
  std::sort(matches.begin(), matches.end());
  const auto list = [](const std::vector<std::string>& names) {
    std::string text;
    for (const auto& name : names) text += "\n  " + name;
    return text.empty() ? std::string(" none") : text;
  };
  INFER_CHECK(!matches.empty(), "--model {}: no GGUF file of {} is named for {}; it holds:{}",
              model, snapshot.string(), quant, list(all));
  INFER_CHECK(matches.size() == 1, "--model {}: {} GGUF files of {} are named for {}:{}", model,
              matches.size(), snapshot.string(), quant, list(matches));
  INFER_CHECK(matches.front().find("-of-") == std::string::npos,
              "--model {}: {} is split into parts; infer reads single-file GGUF models (join them "
              "with llama.cpp's llama-gguf-split --merge)",
              model, matches.front());
  return (snapshot / matches.front()).string();
}

}  // namespace

std::string ResolveModelPath(const std::string& model) {
  INFER_CHECK(!model.empty(), "--model is empty");
  if (fs::is_directory(model)) return model;
  if (fs::is_regular_file(model)) {
    INFER_CHECK(IsGgufFile(model),
                "--model {}: a file, but not a GGUF file (a model is a "
                "checkpoint folder, a .gguf file, a Hugging Face id or ollama:NAME)",
                model);
    return model;
  }
  constexpr std::string_view kOllama = "ollama:";
  if (model.starts_with(kOllama))
    return ResolveOllama(model, std::string_view(model).substr(kOllama.size()));
  // ORG/NAME:QUANT: a GGUF file of the snapshot, as llama.cpp's -hf.
  const auto colon = model.find(':');
  if (colon != std::string::npos && model.find('/') < colon) {
    const std::string quant = model.substr(colon + 1);
    INFER_CHECK(!quant.empty() && IsNamePart(quant), "--model {}: expected ORG/NAME:QUANT", model);
    return PickQuant(model, HubSnapshot(model, model.substr(0, colon)), quant);
  }
  return HubSnapshot(model, model);
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
