// Writes a real-size Hugging Face checkpoint folder with random weights (config.json and
// generation_config.json copied from --config, model.safetensors from --load-format dummy
// weights), for measuring loading: `write_checkpoint --config DIR --out DIR [--shards N]`.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infer/core/dtype.h"
#include "infer/core/error.h"
#include "infer/loader/safetensors.h"
#include "infer/loader/weights.h"

namespace {

// A weight matrix packed at load, back in its checkpoint layout: [rows, cols] bf16 (the dummy
// weights are bf16 values, so the round trip is exact).
infer::Tensor Unpacked(const infer::kernels::PackedMatrix& matrix) {
  infer::Tensor out = infer::Tensor::Empty(infer::DType::kBF16, {matrix.rows(), matrix.cols()});
  auto* values = static_cast<uint16_t*>(out.raw());
  for (int64_t row = 0; row < matrix.rows(); ++row) {
    for (int64_t col = 0; col < matrix.cols(); ++col) {
      values[row * matrix.cols() + col] = infer::F32ToBf16(matrix.At(row, col));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  CLI::App app{"Write a random-weight safetensors checkpoint of a model config"};
  std::string config_dir, out_dir;
  int shards = 1;
  app.add_option("--config", config_dir, "Folder with config.json")->required();
  app.add_option("--out", out_dir, "Output folder")->required();
  app.add_option("--shards", shards, "Number of safetensors shards")->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);
  try {
    infer::ThreadPool pool;
    infer::LoadOptions options;
    options.dummy = true;
    options.pool = &pool;
    infer::LoadedModel model = infer::LoadModel(config_dir, options);
    fs::create_directories(out_dir);
    for (const char* name : {"config.json", "generation_config.json"}) {
      if (fs::exists(fs::path(config_dir) / name)) {
        fs::copy_file(fs::path(config_dir) / name, fs::path(out_dir) / name,
                      fs::copy_options::overwrite_existing);
      }
    }
    auto slots = infer::WeightSlots(model.config, model.weights);
    std::vector<std::map<std::string, infer::Tensor>> files(static_cast<size_t>(shards));
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < slots.size(); ++i) {
      const size_t shard = i * static_cast<size_t>(shards) / slots.size();
      files[shard][slots[i].hf_name] =
          slots[i].tensor != nullptr ? *slots[i].tensor : Unpacked(*slots[i].matrix);
      weight_map[slots[i].hf_name] =
          fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, shards);
    }
    if (shards == 1) {
      infer::WriteSafetensors((fs::path(out_dir) / "model.safetensors").string(), files[0],
                              {{"format", "pt"}});
    } else {
      for (int s = 0; s < shards; ++s) {
        infer::WriteSafetensors(
            (fs::path(out_dir) / fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards))
                .string(),
            files[static_cast<size_t>(s)], {{"format", "pt"}});
      }
      std::ofstream index(fs::path(out_dir) / "model.safetensors.index.json");
      index << nlohmann::json{{"metadata", {{"total_size", model.weight_bytes}}},
                              {"weight_map", weight_map}}
                   .dump(2);
    }
    std::printf("wrote %s (%.2f GB)\n", out_dir.c_str(),
                static_cast<double>(model.weight_bytes) / 1e9);
  } catch (const infer::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
