#include "infer/cli/common.h"

#include <cctype>
#include <limits>
#include <utility>

#include <spdlog/spdlog.h>

#include <string>

#include "infer/core/error.h"

namespace infer::cli {

void AddModelOptions(CLI::App& command, ModelArgs& args, bool add_threads, bool add_compute) {
  command.add_option("--model", args.model, "Model folder or Hugging Face id (in the HF cache)")
      ->required();
  command
      .add_option("--load-format", args.load_format,
                  "auto/safetensors: read the checkpoint; dummy: random weights from config.json")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}))
      ->capture_default_str();
  command
      .add_option("--weights-placement", args.weights_placement,
                  "Norm and bias vectors (and an untied embedding): hugepage: a copy in 2 MiB "
                  "pages, the files are not read after load; mmap: zero-copy views of the files "
                  "(a file emptied while serving then crashes the process). Weight matrices are "
                  "always repacked into 2 MiB pages")
      ->check(CLI::IsMember({"mmap", "hugepage"}))
      ->capture_default_str();
  command.add_option("--dummy-seed", args.dummy_seed, "Seed of --load-format dummy weights")
      ->capture_default_str();
  command
      .add_option_function<std::string>(
          "--quantization,-q",
          [&args](const std::string& name) {
            args.quantization = kernels::ParseQuantization(name);
          },
          "Weight matrices quantized at load: none (the checkpoint's dtype); int8: 8.5 bits per "
          "weight, scale per 32 input channels (llama.cpp Q8_0); int4: 5 bits per weight, scale "
          "and minimum per 32 (llama.cpp Q4_1); int4k: 4.5 bits per weight, 6-bit scales and "
          "minimums per 32 in super-blocks of 256 (llama.cpp Q4_K); int6: 6.5 bits per weight, "
          "scale per 32 (near llama.cpp Q6_K). Activations are rounded to int8 per 32 and "
          "multiplied on the integer units (VNNI)")
      ->check(CLI::IsMember({"none", "int8", "int4", "int4k", "int6"}))
      ->default_str("none");
  command
      .add_option_function<std::string>(
          "--lm-head-quantization",
          [&args](const std::string& name) { args.lm_head_quantization = name; },
          "The output head (lm_head, or the tied embedding table) under --quantization: auto: "
          "int8 (as llama.cpp's Q8_0 files; int4 and int4k keep their head at int8 too); int8 or "
          "int6 (6.5 bits, as llama.cpp's 4-bit files keep Q6_K): that type; none: the "
          "checkpoint's dtype, more accurate logits for more bytes per token (Qwen3-1.7B int8: "
          "+16% bytes per token; its head is 18% of its weights)")
      ->check(CLI::IsMember({"auto", "none", "int8", "int6"}))
      ->default_str("auto");
  if (add_threads) {
    command.add_option("--threads", args.threads, "Compute threads (0: all CPUs)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
  }
  if (add_compute) {
    CLI::Option* precision =
        command
            .add_option_function<std::string>(
                "--matmul-precision",
                [&args](const std::string& name) {
                  args.matmul_precision = kernels::ParseMatMulPrecision(name);
                },
                "auto: bf16 where the CPU multiplies bf16 faster than f32 (AMX tiles: Intel "
                "Xeon from Sapphire Rapids on; AVX512_BF16 on AMD Zen 4 on), f32 elsewhere; f32: "
                "exact f32 products (matches a float64 reference to ~1e-5); bf16: round "
                "activations to bf16 before multiplying bf16 weights, as Hugging Face bf16 and "
                "llama.cpp do (about 2x faster prefill and batched decode on Zen 4, 4x on AMX)")
            ->check(CLI::IsMember({"auto", "f32", "bf16"}))
            ->default_str("auto");
    command
        .add_option_function<std::string>(
            "--quantized-activations",
            [&args](const std::string& name) {
              args.quantized_activations = kernels::ParseQuantizedActivations(name);
            },
            "How quantized weights (--quantization, GGUF files) meet the activations: int8: "
            "activations rounded to int8 per 32 channels, as llama.cpp does; int8x2: a second "
            "int8 plane for what the first leaves (about 16 bits, as weight-only W4A16 schemes "
            "keep them), so logits follow the dequantized weights as a float engine's would, for "
            "twice the integer work: prefill and batched decode about half as fast, one "
            "sequence's decode about 0.87x")
        ->check(CLI::IsMember({"int8", "int8x2"}))
        ->default_str("int8");
    command.parse_complete_callback([&args, precision] {
      if (precision->count() == 0) args.matmul_precision = kernels::AutoMatMulPrecision();
    });
  }
}

int64_t ParseByteSize(const std::string& text, const std::string& option) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    Fail("{} '{}': expected a size such as 4GiB, 512MiB or 1000000", option, text);
  }
  std::string unit = text.substr(end);
  std::erase(unit, ' ');
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1.0},       {"B", 1.0},    {"K", 0x1p10},   {"KIB", 0x1p10}, {"M", 0x1p20},
      {"MIB", 0x1p20}, {"G", 0x1p30}, {"GIB", 0x1p30}, {"T", 0x1p40},   {"TIB", 0x1p40},
      {"KB", 1e3},     {"MB", 1e6},   {"GB", 1e9},     {"TB", 1e12}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bytes = value * scale;
    INFER_CHECK(bytes >= 0 && bytes < 0x1p62, "{} '{}' is out of range", option, text);
    return static_cast<int64_t>(bytes);
  }
  Fail("{} '{}': unknown unit '{}' (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)", option, text,
       unit);
}

std::vector<int32_t> ParseIdList(const std::string& text, const std::string& option) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    INFER_CHECK(used == item.size() && !item.empty() && value >= 0 && value <= INT32_MAX,
                "{}: '{}' is not a token id (a non-negative integer)", option, item);
    ids.push_back(static_cast<int32_t>(value));
    start = end + 1;
  }
  return ids;
}

void AddLoraOption(CLI::App& command, ModelArgs& args, bool several) {
  CLI::Option* option = command.add_option(
      "--lora", args.lora,
      several ? "PEFT LoRA adapter folders (adapter_config.json, adapter_model.safetensors) or HF "
                "ids; the rows of a batch take them in turn, \"none\" being the base model"
              : "A PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) or "
                "HF id, applied beside the base weights");
  if (!several) option->expected(1);
}

std::vector<std::shared_ptr<const LoraAdapter>> LoadLorasFromArgs(const ModelArgs& args,
                                                                  const ModelConfig& config) {
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  for (const std::string& path : args.lora) {
    // No rank limit here: only a server bounds what a client may load.
    adapters.push_back(
        path == "none" ? nullptr
                       : LoadLoraAdapter(path, path, config, std::numeric_limits<int64_t>::max()));
  }
  return adapters;
}

LoadedModel LoadModelFromArgs(const ModelArgs& args, ThreadPool* pool) {
  LoadOptions options;
  options.dummy = args.load_format == "dummy";
  options.dummy_seed = args.dummy_seed;
  options.placement = args.weights_placement == "hugepage" ? WeightPlacement::kHugePageCopy
                                                           : WeightPlacement::kMmap;
  options.pool = pool;
  options.quantization = args.quantization;
  options.head = args.lm_head_quantization == "none"   ? LoadOptions::Head::kUnquantized
                 : args.lm_head_quantization == "int8" ? LoadOptions::Head::kInt8
                 : args.lm_head_quantization == "int6" ? LoadOptions::Head::kInt6
                                                       : LoadOptions::Head::kDefault;
  LoadedModel loaded = LoadModel(args.model, options);
  spdlog::debug("loaded {} in {:.3f} s", loaded.path, loaded.load_time_s);
  return loaded;
}

std::string OutputHeadType(const LoadedModel& loaded) {
  return std::string(loaded.head_quantization == kernels::Quantization::kNone
                         ? DTypeName(loaded.weight_dtype)
                         : kernels::QuantizationName(loaded.head_quantization));
}

nlohmann::json LoadedWeightsJson(const ModelArgs& args, const LoadedModel& loaded) {
  return {{"load_format", args.load_format},
          {"parameters", ParameterCount(loaded.config)},
          {"weight_dtype", DTypeName(loaded.weight_dtype)},
          {"weight_bytes", loaded.weight_bytes},
          {"quantization", kernels::QuantizationName(loaded.quantization)},
          {"lm_head_quantization", kernels::QuantizationName(loaded.head_quantization)}};
}

std::string ModelName(const std::string& path) {
  std::string name = path;
  while (!name.empty() && name.back() == '/') name.pop_back();
  const auto slash = name.find_last_of('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

}  // namespace infer::cli
