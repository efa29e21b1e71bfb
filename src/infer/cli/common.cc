#include "infer/cli/common.h"

#include <spdlog/spdlog.h>

#include "infer/core/error.h"

namespace infer::cli {

void AddModelOptions(CLI::App& command, ModelArgs& args) {
  command.add_option("--model", args.model, "Model folder or Hugging Face id (in the HF cache)")
      ->required();
  command
      .add_option("--load-format", args.load_format,
                  "auto/safetensors: read the checkpoint; dummy: random weights from config.json")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}))
      ->capture_default_str();
  command
      .add_option("--weights-placement", args.weights_placement,
                  "mmap: zero-copy views of the files; hugepage: copy into 2 MiB pages")
      ->check(CLI::IsMember({"mmap", "hugepage"}))
      ->capture_default_str();
  command.add_option("--dummy-seed", args.dummy_seed, "Seed of --load-format dummy weights")
      ->capture_default_str();
  command.add_option("--threads", args.threads, "Compute threads (0: all CPUs)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
}

LoadedModel LoadModelFromArgs(const ModelArgs& args, ThreadPool* pool) {
  LoadOptions options;
  options.dummy = args.load_format == "dummy";
  options.dummy_seed = args.dummy_seed;
  options.placement = args.weights_placement == "hugepage" ? WeightPlacement::kHugePageCopy
                                                           : WeightPlacement::kMmap;
  options.pool = pool;
  LoadedModel loaded = LoadModel(args.model, options);
  spdlog::debug("loaded {} in {:.3f} s", loaded.path, loaded.load_time_s);
  return loaded;
}

}  // namespace infer::cli
