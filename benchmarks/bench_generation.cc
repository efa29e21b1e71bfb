// bench_generation: end-to-end generate() on a model (real or --load-format dummy) with
// synthetic prompts of exact length: TTFT, prompt and decode throughput, per-step latency
// percentiles, memory and KV-cache bytes, with the cache, without it, or both (--compare).
// Prints a markdown table; writes a JSON report into benchmarks/reports/.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "infer/cli/common.h"
#include "infer/core/error.h"
#include "infer/core/mapped_file.h"
#include "infer/engine/decoder_model.h"
#include "infer/engine/generate.h"
#include "infer/kernels/cpu/isa.h"

namespace infer {
namespace {

using Json = nlohmann::ordered_json;
using kernels::ActiveIsa;
using kernels::IsaName;

struct BenchConfig {
  std::string name;
  int64_t prompt_tokens;
  int64_t gen_tokens;
  SamplingParams params;  // max_new_tokens = gen_tokens
};

SamplingParams Sampling(double temperature, std::optional<int64_t> top_k, double top_p,
                        double repetition_penalty) {
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.repetition_penalty = repetition_penalty;
  params.seed = 42;
  return params;
}

// The seven canonical configs, from short greedy to the full sampling pipeline.
std::vector<BenchConfig> CanonicalConfigs() {
  return {
      {"short-greedy", 64, 64, Sampling(0.0, std::nullopt, 1.0, 1.0)},
      {"short-sampled", 64, 64, Sampling(0.8, std::nullopt, 1.0, 1.0)},
      {"medium-greedy", 256, 256, Sampling(0.0, std::nullopt, 1.0, 1.0)},
      {"medium-top-p", 256, 256, Sampling(0.8, std::nullopt, 0.9, 1.0)},
      {"long-prompt", 1024, 64, Sampling(0.0, std::nullopt, 1.0, 1.0)},
      {"long-decode", 64, 512, Sampling(0.0, std::nullopt, 1.0, 1.0)},
      {"medium-full-pipeline", 256, 256, Sampling(0.8, 50, 0.9, 1.1)},
  };
}

std::vector<BenchConfig> Suite(const std::string& name) {
  std::vector<BenchConfig> all = CanonicalConfigs();
  if (name == "full") return all;
  if (name == "standard") return {all[0], all[2], all[6]};
  return {all[0]};  // quick
}

// Prompt ids of exactly `length`: a fixed passage encoded and repeated, or a fixed id pattern
// when the folder has no tokenizer.
std::vector<int32_t> SyntheticPrompt(const Tokenizer* tokenizer, int64_t vocab, int64_t length) {
  std::vector<int32_t> ids;
  if (tokenizer != nullptr) {
    const std::string passage =
        " The quick brown fox jumps over the lazy dog while the river runs past the old mill,"
        " and the miller counts the sacks of grain stacked by the door before the winter.";
    const std::vector<int32_t> start = tokenizer->Encode(passage, true);
    const std::vector<int32_t> body = tokenizer->Encode(passage, false);
    ids = start;
    while (static_cast<int64_t>(ids.size()) < length)
      ids.insert(ids.end(), body.begin(), body.end());
  } else {
    for (int64_t i = 0; i < length; ++i)
      ids.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  }
  ids.resize(static_cast<size_t>(length));
  return ids;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

double Mean(const std::vector<double>& values, size_t begin, size_t end) {
  if (end <= begin) return 0.0;
  double sum = 0.0;
  for (size_t i = begin; i < end; ++i) sum += values[i];
  return sum / static_cast<double>(end - begin);
}

struct Options {
  cli::ModelArgs model;
  std::string suite;
  int64_t prompt_tokens = 256;
  int64_t max_new_tokens = 256;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double repetition_penalty = 1.0;
  int warmup = 1;
  int trials = 3;
  bool use_kv_cache = true;
  bool compare = false;
  std::string report_dir = "benchmarks/reports";
  std::string tag;
};

Json RunConfig(bench::ProgressModel& model, const Tokenizer* tokenizer, const BenchConfig& config,
               bool use_cache, const Options& options) {
  SamplingParams params = config.params;
  params.max_new_tokens = config.gen_tokens;
  const std::vector<int32_t> prompt =
      SyntheticPrompt(tokenizer, model.vocab_size(), config.prompt_tokens);
  GenerateOptions generate_options;
  generate_options.use_kv_cache = use_cache;  // no EOS ids: every run generates gen_tokens
  std::vector<double> ttft_s, prompt_tok_s, decode_tok_s, wall_s;
  std::vector<double> steps_s;  // all decode steps of all trials, in step order per trial
  std::vector<double> first_trial_steps;
  for (int run = 0; run < options.warmup + options.trials; ++run) {
    const bool warmup = run < options.warmup;
    model.SetLabel(
        fmt::format("{} ({}) {} {}/{}", config.name, use_cache ? "cache" : "no cache",
                    warmup ? "warmup" : "trial", warmup ? run + 1 : run - options.warmup + 1,
                    warmup ? options.warmup : options.trials),
        config.gen_tokens);
    const GenerationOutput result = Generate(model, tokenizer, prompt, params, generate_options);
    if (warmup) continue;
    const GenerationTiming& timing = result.timing;
    ttft_s.push_back(timing.prefill_time_s);
    prompt_tok_s.push_back(static_cast<double>(result.prompt_tokens()) / timing.prefill_time_s);
    decode_tok_s.push_back(static_cast<double>(timing.decode_times_s.size()) /
                           std::max(timing.decode_time_s(), 1e-12));
    wall_s.push_back(timing.total_time_s());
    if (first_trial_steps.empty()) first_trial_steps = timing.decode_times_s;
    steps_s.insert(steps_s.end(), timing.decode_times_s.begin(), timing.decode_times_s.end());
  }
  bench::ClearProgressLine();
  std::vector<double> sorted = steps_s;
  std::sort(sorted.begin(), sorted.end());
  // Latency at the start and end of the generation shows whether steps grow with seq_len.
  const size_t tenth = std::max<size_t>(1, first_trial_steps.size() / 10);
  const size_t n = first_trial_steps.size();
  const auto min_it = std::min_element(first_trial_steps.begin(), first_trial_steps.end());
  const auto max_it = std::max_element(first_trial_steps.begin(), first_trial_steps.end());
  const auto step_seq_len = [&](auto it) {
    return config.prompt_tokens + 1 + (it - first_trial_steps.begin());
  };
  Json row;
  row["config"] = config.name;
  row["use_kv_cache"] = use_cache;
  row["prompt_tokens"] = config.prompt_tokens;
  row["generated_tokens"] = config.gen_tokens;
  row["temperature"] = params.temperature;
  row["top_k"] = params.top_k ? Json(*params.top_k) : Json(nullptr);
  row["top_p"] = params.top_p;
  row["repetition_penalty"] = params.repetition_penalty;
  row["seed"] = *params.seed;
  row["trials"] = options.trials;
  row["ttft_median_ms"] = Median(ttft_s) * 1e3;
  row["prompt_throughput_median_tps"] = Median(prompt_tok_s);
  row["decode_throughput_median_tps"] = Median(decode_tok_s);
  row["wall_time_median_s"] = Median(wall_s);
  row["per_step_latency_mean_ms"] = Mean(sorted, 0, sorted.size()) * 1e3;
  row["per_step_latency_p50_ms"] = bench::Percentile(sorted, 0.50) * 1e3;
  row["per_step_latency_p95_ms"] = bench::Percentile(sorted, 0.95) * 1e3;
  row["per_step_latency_p99_ms"] = bench::Percentile(sorted, 0.99) * 1e3;
  row["per_step_latency_min_ms"] = sorted.empty() ? 0.0 : sorted.front() * 1e3;
  row["per_step_latency_max_ms"] = sorted.empty() ? 0.0 : sorted.back() * 1e3;
  if (n > 0) {
    row["min_step_seq_len"] = step_seq_len(min_it);
    row["max_step_seq_len"] = step_seq_len(max_it);
    row["first_10pct_steps_mean_ms"] = Mean(first_trial_steps, 0, tenth) * 1e3;
    row["last_10pct_steps_mean_ms"] = Mean(first_trial_steps, n - tenth, n) * 1e3;
  }
  row["kv_cache_bytes"] = model.kv_cache_bytes();
  row["peak_rss_bytes"] = PeakRssBytes();
  return row;
}

void PrintTable(const Json& rows) {
  std::printf(
      "\n| config | cache | prompt | gen | TTFT ms | prompt tok/s | decode tok/s | step mean ms | "
      "P50 | P95 | P99 | min | max | first 10%% ms | last 10%% ms | KV MB |\n"
      "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const Json& row : rows) {
    std::printf(
        "| %s | %s | %lld | %lld | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | "
        "%.1f | %.1f | %.1f |\n",
        row["config"].get<std::string>().c_str(), row["use_kv_cache"].get<bool>() ? "on" : "off",
        row["prompt_tokens"].get<long long>(), row["generated_tokens"].get<long long>(),
        row["ttft_median_ms"].get<double>(), row["prompt_throughput_median_tps"].get<double>(),
        row["decode_throughput_median_tps"].get<double>(),
        row["per_step_latency_mean_ms"].get<double>(), row["per_step_latency_p50_ms"].get<double>(),
        row["per_step_latency_p95_ms"].get<double>(), row["per_step_latency_p99_ms"].get<double>(),
        row["per_step_latency_min_ms"].get<double>(), row["per_step_latency_max_ms"].get<double>(),
        row.value("first_10pct_steps_mean_ms", 0.0), row.value("last_10pct_steps_mean_ms", 0.0),
        static_cast<double>(row["kv_cache_bytes"].get<int64_t>()) / 1e6);
  }
}

int Run(const Options& options) {
  ThreadPool pool(options.model.threads);
  const LoadedModel loaded = cli::LoadModelFromArgs(options.model, &pool);
  const size_t post_load_rss = CurrentRssBytes();
  std::unique_ptr<Tokenizer> tokenizer;
  if (std::filesystem::is_regular_file(std::filesystem::path(loaded.path) / "tokenizer.json")) {
    tokenizer = Tokenizer::FromModelDir(loaded.path);
  }
  std::unique_ptr<LanguageModel> decoder =
      MakeDecoderModel(loaded, pool, options.model.matmul_precision);
  bench::ProgressModel model(*decoder);

  std::vector<BenchConfig> configs;
  if (!options.suite.empty()) {
    configs = Suite(options.suite);
  } else {
    SamplingParams params =
        Sampling(options.temperature,
                 options.top_k > 0 ? std::optional<int64_t>(options.top_k) : std::nullopt,
                 options.top_p, options.repetition_penalty);
    configs.push_back({"ad-hoc", options.prompt_tokens, options.max_new_tokens, params});
  }
  std::vector<bool> cache_modes;
  if (options.compare) {
    cache_modes = {true, false};
  } else {
    cache_modes = {options.use_kv_cache};
  }
  std::printf(
      "=== Generation benchmark ===\nmodel: %s (%s%s)\nthreads: %d, isa: %s, matmul precision %s\n"
      "post-load RSS: %.2f GB, huge-page resident: %.2f GB\n",
      loaded.path.c_str(), std::string(DTypeName(loaded.weight_dtype)).c_str(),
      options.model.load_format == "dummy" ? ", dummy weights" : "", pool.num_threads(),
      std::string(IsaName(ActiveIsa())).c_str(),
      std::string(kernels::MatMulPrecisionName(options.model.matmul_precision)).c_str(),
      static_cast<double>(post_load_rss) / 1e9, static_cast<double>(HugePageResidentBytes()) / 1e9);
  Json rows = Json::array();
  for (const BenchConfig& config : configs) {
    Json pair = Json::array();
    for (const bool use_cache : cache_modes) {
      pair.push_back(RunConfig(model, tokenizer.get(), config, use_cache, options));
    }
    if (pair.size() == 2) {
      const double speedup = pair[0]["decode_throughput_median_tps"].get<double>() /
                             pair[1]["decode_throughput_median_tps"].get<double>();
      pair[0]["decode_speedup_vs_no_cache"] = speedup;
      std::fprintf(stderr, "%s: KV-cache decode speedup %.2fx\n", config.name.c_str(), speedup);
    }
    for (Json& row : pair) rows.push_back(std::move(row));
  }
  PrintTable(rows);
  for (const Json& row : rows) {
    if (row.contains("decode_speedup_vs_no_cache")) {
      std::printf("%s: KV-cache decode %.2fx faster than uncached\n",
                  row["config"].get<std::string>().c_str(),
                  row["decode_speedup_vs_no_cache"].get<double>());
    }
  }
  const size_t peak_rss = PeakRssBytes();
  std::printf("peak RSS: %.2f GB\n", static_cast<double>(peak_rss) / 1e9);

  Json report;
  report["phase"] = 3;
  report["bench"] = "generation";
  report["model"] = loaded.path;
  report["load_format"] = options.model.load_format;
  report["dtype"] = DTypeName(loaded.weight_dtype);
  report["device"] = "cpu";
  report["cpu"] = bench::CommandOutput("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2");
  report["isa"] = IsaName(ActiveIsa());
  report["matmul_precision"] = kernels::MatMulPrecisionName(options.model.matmul_precision);
  report["threads"] = pool.num_threads();
  report["commit"] = bench::CommandOutput("git rev-parse --short HEAD 2>/dev/null");
  report["suite"] = options.suite.empty() ? "ad-hoc" : options.suite;
  report["warmup"] = options.warmup;
  report["post_load_rss_bytes"] = post_load_rss;
  report["peak_rss_bytes"] = peak_rss;
  report["weight_bytes"] = loaded.weight_bytes;
  const std::string timestamp = bench::UtcTime("%Y%m%dT%H%M%S");
  report["timestamp"] = timestamp;
  report["results"] = rows;
  if (!options.report_dir.empty()) {
    std::filesystem::create_directories(options.report_dir);
    const std::string name = std::filesystem::path(loaded.path).filename().string();
    const std::string path = fmt::format("{}/generation_{}_{}{}.json", options.report_dir, name,
                                         report["suite"].get<std::string>(),
                                         options.tag.empty() ? "" : "_" + options.tag);
    std::ofstream(path) << report.dump(2) << "\n";
    std::printf("report: %s\n", path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace infer

int main(int argc, char** argv) {
  infer::Options options;
  CLI::App app{"bench_generation: generate() throughput and latency"};
  infer::cli::AddModelOptions(app, options.model);
  app.add_option("--suite", options.suite, "Canonical configs: quick | standard | full")
      ->check(CLI::IsMember({"quick", "standard", "full"}));
  app.add_option("--prompt-tokens", options.prompt_tokens, "Synthetic prompt length (ad hoc)");
  app.add_option("--max-new-tokens", options.max_new_tokens, "Tokens to generate (ad hoc)");
  app.add_option("--temperature", options.temperature, "Ad hoc sampling (default greedy)");
  app.add_option("--top-k", options.top_k, "0 = off");
  app.add_option("--top-p", options.top_p);
  app.add_option("--repetition-penalty", options.repetition_penalty);
  app.add_option("--warmup", options.warmup, "Discarded runs per config")->capture_default_str();
  app.add_option("--trials", options.trials, "Measured runs per config")->capture_default_str();
  app.add_flag("--kv-cache,!--no-kv-cache", options.use_kv_cache, "Use the KV cache (default)");
  app.add_flag("--compare", options.compare, "Run with and without the cache; report speedup");
  app.add_option("--report-dir", options.report_dir, "JSON report folder ('' = none)")
      ->capture_default_str();
  app.add_option("--tag", options.tag, "Suffix of the report file name");
  return infer::bench::ParseAndRun(app, argc, argv, [&options] { return infer::Run(options); });
}
