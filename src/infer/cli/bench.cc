// `infer bench`: llama-bench-style prefill (ppN) and decode (tgN) throughput on a model (real or
// --load-format dummy), with warm-up, repetitions and mean +- sd. It runs through the engine
// (Generate): ppN is one prefill step of N tokens, tgN the N decode steps after it, so tgN is
// measured at a depth of N prompt tokens (pp1 gives decode at depth ~0). --parallel B runs B
// sequences together (llama-batched-bench's -npl): their B prompts of N tokens in one prefill
// step, then B rows per decode step; its t/s are the batch's (all B rows' tokens per second).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "infer/cache/paged_kv_cache.h"
#include "infer/cli/common.h"
#include "infer/cli/generation_session.h"
#include "infer/core/error.h"
#include "infer/core/mapped_file.h"
#include "infer/engine/decoder_model.h"
#include "infer/engine/generate.h"
#include "infer/kernels/cpu/isa.h"

namespace infer::cli {

namespace {

struct BenchArgs {
  ModelArgs model;
  std::vector<int64_t> prompt_tokens = {512};
  int64_t gen_tokens = 128;
  std::vector<int> threads = {0};
  std::vector<int64_t> parallel = {1};
  int repetitions = 5;
  bool as_json = false;
  std::string report;
  std::string kv_cache_dtype = "bf16";
  std::string speculative_config;  // vLLM's JSON; empty: off
};

struct Stats {
  double mean = 0, sd = 0;
};

Stats Summarize(const std::vector<double>& values) {
  Stats stats;
  if (values.empty()) return stats;
  stats.mean =
      std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  double sum_sq = 0;
  for (double v : values) sum_sq += (v - stats.mean) * (v - stats.mean);
  stats.sd = values.size() > 1 ? std::sqrt(sum_sq / static_cast<double>(values.size() - 1)) : 0.0;
  return stats;
}

// The table's mark of a batch of B sequences: " xB" (none for one).
std::string BatchSuffix(int64_t parallel) {
  return parallel == 1 ? std::string() : fmt::format(" x{}", parallel);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Deterministic pseudo-random token ids (no tokenizer needed); `stream` picks one of several
// distinct prompts (a batch's rows share no prefix).
std::vector<int32_t> SyntheticPrompt(int64_t length, int64_t vocab, uint64_t stream = 0) {
  std::vector<int32_t> ids(static_cast<size_t>(length));
  uint64_t state = 0x243f6a8885a308d3ull + stream * 0x9e3779b97f4a7c15ull;
  for (auto& id : ids) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

// Streams a buffer of `bytes` with the pool: what decode's weight reads can reach.
double ProbeReadBandwidthGbS(ThreadPool& pool, size_t bytes) {
  Tensor buffer =
      Tensor::Empty(DType::kF32, {static_cast<int64_t>(bytes / 4)}, /*huge_pages=*/true);
  std::fill_n(buffer.data<float>(), buffer.numel(), 1.0F);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> sums(static_cast<size_t>(pool.num_threads()), 0.0);
    const auto start = std::chrono::steady_clock::now();
    pool.RunTasks(pool.num_threads(), [&](int task) {
      const int64_t chunk = buffer.numel() / pool.num_threads();
      const float* data = buffer.data<float>() + task * chunk;
      float acc[16] = {};
      for (int64_t i = 0; i + 16 <= chunk; i += 16) {
        for (int j = 0; j < 16; ++j) acc[j] += data[i + j];
      }
      sums[static_cast<size_t>(task)] = std::accumulate(acc, acc + 16, 0.0);
    });
    best = std::max(best, static_cast<double>(bytes) / Seconds(start) / 1e9);
  }
  return best;
}

void RunBench(const BenchArgs& args) {
  INFER_CHECK(args.repetitions >= 1, "--repetitions must be at least 1");
  INFER_CHECK(args.gen_tokens >= 1, "--gen-tokens must be at least 1");
  for (int64_t n : args.prompt_tokens) INFER_CHECK(n >= 1, "--prompt-tokens must be at least 1");
  int max_threads = 0;
  for (int t : args.threads) max_threads = std::max(max_threads, t == 0 ? AvailableCpus() : t);
  ThreadPool load_pool(max_threads);
  LoadedModel loaded = LoadModelFromArgs(args.model, &load_pool);
  const ModelConfig& config = loaded.config;
  const int64_t max_prompt =
      *std::max_element(args.prompt_tokens.begin(), args.prompt_tokens.end());
  INFER_CHECK(max_prompt + args.gen_tokens <= config.max_position_embeddings,
              "--prompt-tokens + --gen-tokens ({}) exceed the model's context ({})",
              max_prompt + args.gen_tokens, config.max_position_embeddings);
  // The read-bandwidth probe runs before and after the measurements; the ceiling is the
  // better of the two (the host is shared: one probe alone can under-read).
  const double probe_before_gb_s = ProbeReadBandwidthGbS(load_pool, size_t{1} << 30);
  // What one row's decode step reads (a mixture of experts: its chosen experts only; a step of
  // several rows reads the union of theirs, so decode_gb_s undercounts there).
  const double weight_gb = static_cast<double>(loaded.weight_bytes) / 1e9;
  const double weight_gb_per_token = static_cast<double>(loaded.weight_bytes_per_token) / 1e9;
  const std::string isa(kernels::IsaName(kernels::ActiveIsa()));
  const double huge_page_fraction = static_cast<double>(HugePageResidentBytes()) /
                                    static_cast<double>(std::max<int64_t>(1, loaded.weight_bytes));
  const auto rss_after_load = static_cast<int64_t>(CurrentRssBytes());
  // The weights' type as the table shows it: the checkpoint dtype or the quantization.
  const std::string weight_type = loaded.quantization == kernels::Quantization::kNone
                                      ? std::string(DTypeName(loaded.weight_dtype))
                                      : std::string(kernels::QuantizationName(loaded.quantization));
  // (The head's type, where it is not the int8 that auto gives; the activations' rounding, where
  // it is not int8.)
  std::string head_note = loaded.quantization != kernels::Quantization::kNone &&
                                  loaded.head_quantization != kernels::Quantization::kInt8
                              ? fmt::format(" (output head {})", OutputHeadType(loaded))
                              : "";
  if (loaded.quantization != kernels::Quantization::kNone &&
      args.model.quantized_activations != kernels::QuantizedActivations::kInt8) {
    head_note += fmt::format(" (activations {})",
                             kernels::QuantizedActivationsName(args.model.quantized_activations));
  }

  const SpeculativeConfig options_speculative = ResolveSpeculativeConfig(args.speculative_config);
  const std::vector<std::shared_ptr<const LoraAdapter>> adapters =
      LoadLorasFromArgs(args.model, config);
  // What the rows run with: --lora's adapters in turn ("none" the base), for the table.
  std::string lora_note;
  for (const auto& adapter : adapters) {
    lora_note += fmt::format("{}{}", lora_note.empty() ? " (LoRA " : ", ",
                             adapter ? fmt::format("r{}", adapter->rank) : "none");
  }
  if (!lora_note.empty()) lora_note += ")";
  nlohmann::json results = nlohmann::json::array();
  // One line of the table: model, params, dtype, threads, test, t/s.
  auto row = [](const auto&... cells) {
    return fmt::format("| {:<24} | {:>7} | {:>5} | {:>7} | {:>9} | {:>18} |\n", cells...);
  };
  std::string table = row("model", "params", "dtype", "threads", "test", "t/s");
  table += fmt::format("| {:-<24} | {:->7} | {:->5} | {:->7} | {:->9} | {:->18} |\n", "", "", "",
                       "", "", "");
  const std::string params =
      fmt::format("{:.2f}B", static_cast<double>(ParameterCount(config)) / 1e9);
  for (int requested_threads : args.threads) {
    ThreadPool pool(requested_threads);
    const std::unique_ptr<LanguageModel> model = MakeDecoderModel(
        loaded, pool, args.model.matmul_precision, args.model.quantized_activations);
    SamplingParams greedy;
    greedy.temperature = 0.0;
    GenerateOptions options;  // no EOS ids: every run generates all its tokens
    options.kv_cache_dtype = ParseKvCacheDType(args.kv_cache_dtype);
    options.speculative = options_speculative;
    {  // Warm-up: touches every weight page and sizes the scratch buffers.
      greedy.max_new_tokens = 4;
      Generate(*model, nullptr, SyntheticPrompt(16, config.vocab_size), greedy, options);
    }
    greedy.max_new_tokens = args.gen_tokens + 1;  // the first token ends the prefill step
    for (int64_t prompt_tokens : args.prompt_tokens) {
      for (int64_t parallel : args.parallel) {
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t row = 0; row < parallel; ++row) {
          prompts.push_back(
              SyntheticPrompt(prompt_tokens, config.vocab_size, static_cast<uint64_t>(row)));
        }
        // Every prompt in one step; the rows then decode together, step after step.
        options.max_num_batched_tokens = prompt_tokens * parallel;
        options.loras.clear();
        for (int64_t row = 0; row < parallel && !adapters.empty(); ++row) {
          options.loras.push_back(adapters[static_cast<size_t>(row) % adapters.size()]);
        }
        std::vector<double> prefill_tok_s, decode_tok_s;
        int64_t decode_steps = 0, decoded_total = 0;
        for (int rep = 0; rep < args.repetitions; ++rep) {
          const std::vector<GenerationOutput> rows =
              GenerateBatch(*model, nullptr, prompts, {greedy}, options);
          // The batch's time is its slowest row's (the rows share every step).
          double prefill_s = 0, decode_s = 0;
          int64_t decoded = 0;
          for (const GenerationOutput& row : rows) {
            prefill_s = std::max(prefill_s, row.timing.prefill_time_s);
            decode_s = std::max(decode_s, row.timing.decode_time_s());
            decoded += static_cast<int64_t>(row.timing.decode_times_s.size());
            // Tokens of one step share its time: a gap of 0 is a kept draft token.
            decode_steps +=
                std::count_if(row.timing.decode_times_s.begin(), row.timing.decode_times_s.end(),
                              [](double gap) { return gap > 0; });
          }
          decoded_total += decoded;
          prefill_tok_s.push_back(static_cast<double>(prompt_tokens * parallel) / prefill_s);
          decode_tok_s.push_back(static_cast<double>(decoded) / decode_s);
          if (!args.as_json) {
            std::fprintf(stderr, "\r%s threads=%d pp%lld%s rep %d/%d: %.1f / %.1f tok/s   ",
                         ModelName(loaded.path).c_str(), pool.num_threads(),
                         static_cast<long long>(prompt_tokens), BatchSuffix(parallel).c_str(),
                         rep + 1, args.repetitions, prefill_tok_s.back(), decode_tok_s.back());
          }
        }
        if (!args.as_json) std::fprintf(stderr, "\n");
        const Stats prefill = Summarize(prefill_tok_s);
        const Stats decode = Summarize(decode_tok_s);
        table += row(ModelName(loaded.path), params, weight_type, pool.num_threads(),
                     fmt::format("pp{}{}", prompt_tokens, BatchSuffix(parallel)),
                     fmt::format("{:.2f} ± {:.2f}", prefill.mean, prefill.sd));
        table += row(ModelName(loaded.path), params, weight_type, pool.num_threads(),
                     fmt::format("tg{}{}", args.gen_tokens, BatchSuffix(parallel)),
                     fmt::format("{:.2f} ± {:.2f}", decode.mean, decode.sd));
        results.push_back(
            {{"threads", pool.num_threads()},
             {"prompt_tokens", prompt_tokens},
             {"gen_tokens", args.gen_tokens},
             {"parallel", parallel},
             {"repetitions", args.repetitions},
             {"prefill_tok_s", prefill.mean},
             {"prefill_tok_s_sd", prefill.sd},
             {"decode_tok_s", decode.mean},
             {"decode_tok_s_sd", decode.sd},
             {"prefill_tok_s_samples", prefill_tok_s},
             {"decode_tok_s_samples", decode_tok_s},
             // Tokens a sequence's decode step gave, on average (above 1 only when
             // speculative drafts were kept).
             {"tokens_per_decode_step",
              static_cast<double>(decoded_total) /
                  static_cast<double>(std::max<int64_t>(1, decode_steps))},
             // (a decode step reads the weights once for all its rows)
             {"decode_gb_s", decode.mean / static_cast<double>(parallel) * weight_gb_per_token}});
      }
    }
  }
  const double probe_after_gb_s = ProbeReadBandwidthGbS(load_pool, size_t{1} << 30);
  const double bandwidth_gb_s = std::max(probe_before_gb_s, probe_after_gb_s);
  for (auto& result : results) {
    result["decode_fraction_of_ceiling"] = result["decode_gb_s"].get<double>() / bandwidth_gb_s;
  }
  const std::time_t now = std::time(nullptr);
  char timestamp[32];
  std::strftime(timestamp, sizeof(timestamp), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json report = results.front();
  report.update(LoadedWeightsJson(args.model, loaded));
  report.update({{"model", ModelName(loaded.path)},
                 {"model_path", loaded.path},
                 {"weights_placement", args.model.weights_placement},
                 {"rss_after_load_bytes", rss_after_load},
                 {"isa", isa},
                 {"matmul_precision", kernels::MatMulPrecisionName(args.model.matmul_precision)},
                 {"quantized_activations",
                  kernels::QuantizedActivationsName(args.model.quantized_activations)},
                 {"kv_cache_dtype", args.kv_cache_dtype},
                 {"speculative", DescribeSpeculativeConfig(options_speculative)},
                 {"lora", args.model.lora},
                 {"huge_page_fraction", huge_page_fraction},
                 {"read_bandwidth_gb_s", bandwidth_gb_s},
                 {"read_bandwidth_before_gb_s", probe_before_gb_s},
                 {"read_bandwidth_after_gb_s", probe_after_gb_s},
                 {"weight_bytes_per_token", loaded.weight_bytes_per_token},
                 {"decode_ceiling_tok_s", bandwidth_gb_s / weight_gb_per_token},
                 {"timestamp", timestamp},
                 {"results", results}});
  if (!args.report.empty()) {
    std::ofstream out(args.report);
    INFER_CHECK(out.good(), "--report {}: cannot open for writing", args.report);
    out << report.dump(2) << "\n";
  }
  if (args.as_json) {
    std::printf("%s\n", report.dump(2).c_str());
    return;
  }
  std::printf("%s", table.c_str());
  std::printf(
      "\nisa %s, matmul precision %s, weights %s%s%s %.3f GB (%.0f%% in huge pages, %.3f GB read "
      "per token), RSS after load %.3f GB, read bandwidth %.1f GB/s (probes before / after: %.1f "
      "/ %.1f) -> decode ceiling %.1f tok/s\n",
      isa.c_str(), std::string(kernels::MatMulPrecisionName(args.model.matmul_precision)).c_str(),
      weight_type.c_str(), head_note.c_str(), lora_note.c_str(), weight_gb,
      100.0 * huge_page_fraction, weight_gb_per_token, static_cast<double>(rss_after_load) / 1e9,
      bandwidth_gb_s, probe_before_gb_s, probe_after_gb_s, bandwidth_gb_s / weight_gb_per_token);
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto* command = app.add_subcommand("bench", "Prefill and decode throughput (llama-bench style)");
  auto args = std::make_shared<BenchArgs>();
  AddModelOptions(*command, args->model, /*add_threads=*/false);
  AddLoraOption(*command, args->model, /*several=*/true);
  command->add_option("--prompt-tokens", args->prompt_tokens, "Prompt lengths (ppN), e.g. 128,512")
      ->delimiter(',')
      ->capture_default_str();
  command->add_option("--gen-tokens", args->gen_tokens, "Generated tokens (tgN)")
      ->capture_default_str();
  command->add_option("--threads", args->threads, "Thread counts, e.g. 1,2 (0: all CPUs)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  command
      ->add_option("--parallel", args->parallel,
                   "Sequences run together, e.g. 1,4,8 (llama-batched-bench's -npl); t/s are the "
                   "batch's")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command->add_option("--repetitions", args->repetitions, "Timed repetitions per test")
      ->capture_default_str();
  command->add_option("--kv-cache-dtype", args->kv_cache_dtype, "KV cache dtype: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  AddSpeculativeConfigOption(*command, args->speculative_config);
  command->add_flag("--json", args->as_json, "Print one JSON object");
  command->add_option("--report", args->report, "Also write the JSON report to this file");
  command->callback([args] { RunBench(*args); });
}

}  // namespace infer::cli
