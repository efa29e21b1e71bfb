// Tokenizer benchmark: tokenizer.json load time and single-thread encode throughput (MB/s,
// tokens/s) per model on the 1 MiB English and mixed-script texts; prints a markdown table and
// optionally writes JSON (see benchmarks/hf_tokenizer_bench.mjs for Hugging Face's numbers).
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  INFER_CHECK(file.good(), "cannot open {}", path.string());
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

struct Stats {
  double mean = 0, stddev = 0;
};

Stats Summarize(const std::vector<double>& values) {
  Stats stats;
  for (double v : values) stats.mean += v;
  stats.mean /= values.size();
  for (double v : values) stats.stddev += (v - stats.mean) * (v - stats.mean);
  stats.stddev = values.size() > 1 ? std::sqrt(stats.stddev / (values.size() - 1)) : 0;
  return stats;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infer tokenizer benchmark"};
  std::string tokenizers_dir = ".cache/tokenizers";
  std::string text_dir = "tests/fixtures/tokenizer/bench";
  std::vector<std::string> models = {"llama3", "qwen3", "gemma3"};
  std::vector<std::string> texts = {"english_1mib.txt", "mixed_1mib.txt"};
  int repetitions = 5;
  std::string json_path;
  std::string compare_path;
  app.add_option("--tokenizers-dir", tokenizers_dir, "folder with <model>/tokenizer.json");
  app.add_option("--text-dir", text_dir, "folder with the benchmark texts");
  app.add_option("--models", models, "model keys");
  app.add_option("--texts", texts, "text file names");
  app.add_option("--repetitions", repetitions, "timed encodes per text")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the results as JSON to this file");
  app.add_option("--compare", compare_path,
                 "JSON from benchmarks/hf_tokenizer_bench.mjs: adds infer/HF speed ratios");
  CLI11_PARSE(app, argc, argv);

  try {
    // (model, text) -> HF encode MB/s, when --compare is given.
    std::map<std::pair<std::string, std::string>, double> hf_mb_s;
    if (!compare_path.empty()) {
      const auto hf = nlohmann::json::parse(ReadFile(compare_path));
      for (const auto& row : hf.at("results"))
        hf_mb_s[{row.at("model"), row.at("text")}] = row.at("encode_mb_s").get<double>();
    }
    nlohmann::ordered_json report;
    report["benchmark"] = "tokenizer_encode";
    report["threads"] = 1;
    report["repetitions"] = repetitions;
    report["results"] = nlohmann::json::array();
    std::cout << "| model | text | load_ms | MB/s | stddev | Mtok/s | tokens | HF MB/s | ratio |\n"
              << "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const std::string& model : models) {
      const auto path = std::filesystem::path(tokenizers_dir) / model / "tokenizer.json";
      const auto load_start = Clock::now();
      auto tokenizer = infer::Tokenizer::FromFile(path);
      const double load_s = SecondsSince(load_start);
      for (const std::string& text_name : texts) {
        const std::string text = ReadFile(std::filesystem::path(text_dir) / text_name);
        size_t num_tokens = tokenizer->Encode(text, false).size();  // warm-up (fills caches)
        std::vector<double> mb_s;
        for (int r = 0; r < repetitions; ++r) {
          const auto start = Clock::now();
          num_tokens = tokenizer->Encode(text, false).size();
          mb_s.push_back(text.size() / 1e6 / SecondsSince(start));
        }
        const Stats stats = Summarize(mb_s);
        const double tok_s = stats.mean * 1e6 / text.size() * num_tokens;
        const auto hf = hf_mb_s.find({model, text_name});
        const double hf_speed = hf == hf_mb_s.end() ? 0.0 : hf->second;
        std::cout << fmt::format(
            "| {} | {} | {:.0f} | {:.2f} | {:.2f} | {:.3f} | {} | {} | {} |\n", model, text_name,
            load_s * 1e3, stats.mean, stats.stddev, tok_s / 1e6, num_tokens,
            hf_speed > 0 ? fmt::format("{:.2f}", hf_speed) : "-",
            hf_speed > 0 ? fmt::format("{:.1f}x", stats.mean / hf_speed) : "-");
        nlohmann::ordered_json row = {{"model", model},
                                      {"text", text_name},
                                      {"text_bytes", text.size()},
                                      {"num_tokens", num_tokens},
                                      {"load_time_s", load_s},
                                      {"encode_mb_s", stats.mean},
                                      {"encode_mb_s_stddev", stats.stddev},
                                      {"encode_tok_s", tok_s}};
        if (hf_speed > 0) {
          row["hf_encode_mb_s"] = hf_speed;
          row["speed_ratio_vs_hf"] = stats.mean / hf_speed;
        }
        report["results"].push_back(row);
      }
    }
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << report.dump(2) << "\n";
    }
  } catch (const infer::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
