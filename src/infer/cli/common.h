// Options shared by the subcommands that load a model (--model, --load-format, ...).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infer/core/thread_pool.h"
#include "infer/kernels/ops.h"
#include "infer/loader/lora.h"
#include "infer/loader/weights.h"

namespace infer::cli {

struct ModelArgs {
  std::string model;
  std::string load_format = "auto";            // auto | safetensors | dummy
  std::string weights_placement = "hugepage";  // hugepage | mmap
  uint64_t dummy_seed = 0;
  int threads = 0;  // 0: all available CPUs
  kernels::MatMulPrecision matmul_precision = kernels::MatMulPrecision::kF32;
  kernels::Quantization quantization = kernels::Quantization::kNone;
  kernels::QuantizedActivations quantized_activations = kernels::QuantizedActivations::kInt8;
  std::string lm_head_quantization = "auto";  // --lm-head-quantization
  std::vector<std::string> lora;              // --lora: PEFT adapter folders ("none": the base)
};

// add_threads=false leaves --threads to the command (bench takes a list); add_compute=false
// drops the options of commands that run the model (--matmul-precision) for ones that do not.
void AddModelOptions(CLI::App& command, ModelArgs& args, bool add_threads = true,
                     bool add_compute = true);
// --lora PATH (PEFT LoRA adapter folders) for the commands that run the model; `several` lets it
// repeat (bench: the rows of a batch take them in turn, "none" being the base model).
void AddLoraOption(CLI::App& command, ModelArgs& args, bool several = false);
// The adapters of --lora for a base of `config`, in order (null for "none"); throws infer::Error
// naming an adapter that cannot be loaded.
std::vector<std::shared_ptr<const LoraAdapter>> LoadLorasFromArgs(const ModelArgs& args,
                                                                  const ModelConfig& config);
// Parses "1,2,3" into ids; throws infer::Error naming the bad item.
std::vector<int32_t> ParseIdList(const std::string& text, const std::string& option);
// "4GiB", "512MiB", "2G", "1000000" (bytes; K/M/G/T are powers of 1024 as in vLLM's and
// llama.cpp's sizes, KB/MB/GB powers of 1000); throws infer::Error naming `option`.
int64_t ParseByteSize(const std::string& text, const std::string& option);
// Loads the model named by args, logging the load time.
LoadedModel LoadModelFromArgs(const ModelArgs& args, ThreadPool* pool);
// The output head's type as loaded: its quantization, or the checkpoint's dtype when it has none.
std::string OutputHeadType(const LoadedModel& loaded);
// The fields every report of a loaded model carries (inspect --json, bench): load_format,
// parameters, weight_dtype, weight_bytes, quantization, lm_head_quantization.
nlohmann::json LoadedWeightsJson(const ModelArgs& args, const LoadedModel& loaded);
// The model folder's last path component ("models/Qwen3-1.7B/" -> "Qwen3-1.7B"), for reports.
std::string ModelName(const std::string& path);

}  // namespace infer::cli
