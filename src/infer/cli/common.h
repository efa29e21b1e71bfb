// Options shared by the subcommands that load a model (--model, --load-format, ...).
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "infer/core/thread_pool.h"
#include "infer/loader/weights.h"

namespace infer::cli {

struct ModelArgs {
  std::string model;
  std::string load_format = "auto";        // auto | safetensors | dummy
  std::string weights_placement = "mmap";  // mmap | hugepage
  uint64_t dummy_seed = 0;
  int threads = 0;  // 0: all available CPUs
};

void AddModelOptions(CLI::App& command, ModelArgs& args);
// Loads the model named by args, logging the load time.
LoadedModel LoadModelFromArgs(const ModelArgs& args, ThreadPool* pool);

}  // namespace infer::cli
