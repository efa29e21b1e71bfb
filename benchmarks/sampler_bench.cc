// Sampler benchmark: the time of one draw (Sampler::Sample on one row of logits) at the
// vocabulary sizes and default sampling settings of the three dev models, beside greedy
// (argmax), on flat rows (random-weight models: the nucleus is most of the vocabulary) and
// peaked ones (a trained model's: a few likely tokens over a long tail). Mean, median and p99 in
// microseconds over --draws draws; a decode step's time divided into these gives the sampling
// stage's share of a step. Prints a markdown table; --report writes the JSON. Single thread.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infer/engine/sampler.h"
#include "infer/engine/sampling_params.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Setting {
  std::string name;
  double temperature;
  double top_p;
  std::optional<int64_t> top_k;
};

struct Model {
  std::string name;
  size_t vocab;
  Setting defaults;  // generation_config.json's
};

// Rows of logits: `flat` ~ N(0, 1); `peaked` ~ N(0, 2) with 8 tokens raised by 12-20.
std::vector<std::vector<float>> Rows(size_t vocab, bool peaked, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0F, peaked ? 2.0F : 1.0F);
  std::uniform_int_distribution<size_t> pick(0, vocab - 1);
  std::vector<std::vector<float>> rows(count, std::vector<float>(vocab));
  for (auto& row : rows) {
    for (float& logit : row) logit = normal(rng);
    if (peaked) {
      for (int i = 0; i < 8; ++i) row[pick(rng)] += 12.0F + static_cast<float>(i);
    }
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Sampler::Sample time per draw at the dev models' default settings"};
  int draws = 200;
  std::string report_path;
  app.add_option("--draws", draws, "Draws timed per row kind and setting")->capture_default_str();
  app.add_option("--report", report_path, "Also write the JSON report to this file");
  std::string only;
  app.add_option("--model", only, "Time only the model whose name contains this");
  CLI11_PARSE(app, argc, argv);

  const std::vector<Model> models = {
      {"Llama-3.2-1B-Instruct", 128256, {"defaults (t 0.6, p 0.9)", 0.6, 0.9, std::nullopt}},
      {"Qwen3-1.7B", 151936, {"defaults (t 0.6, k 20, p 0.95)", 0.6, 0.95, 20}},
      {"gemma-3-1b-it", 262144, {"defaults (t 1, k 64, p 0.95)", 1.0, 0.95, 64}},
  };
  nlohmann::json results = nlohmann::json::array();
  std::string table = fmt::format("| {:<22} | {:<6} | {:<31} | {:>9} | {:>9} | {:>9} |\n", "model",
                                  "row", "sampling", "mean us", "median us", "p99 us");
  table += fmt::format("| {:-<22} | {:-<6} | {:-<31} | {:->9} | {:->9} | {:->9} |\n", "", "", "",
                       "", "", "");
  for (const Model& model : models) {
    if (model.name.find(only) == std::string::npos) continue;
    const std::vector<Setting> settings = {{"greedy", 0.0, 1.0, std::nullopt},
                                           model.defaults,
                                           {"t 1, p 0.95", 1.0, 0.95, std::nullopt}};
    for (const bool peaked : {false, true}) {
      const auto rows = Rows(model.vocab, peaked, 16, model.vocab);
      for (const Setting& setting : settings) {
        infer::SamplingParams params;
        params.temperature = setting.temperature;
        params.top_p = setting.top_p;
        params.top_k = setting.top_k;
        params.seed = 1;
        infer::Sampler sampler(params);
        std::vector<double> us;
        std::vector<float> logits;
        for (int draw = 0; draw < draws; ++draw) {
          logits = rows[static_cast<size_t>(draw) % rows.size()];
          const auto start = Clock::now();
          (void)sampler.Sample(logits);
          us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
        }
        std::sort(us.begin(), us.end());
        double mean = 0;
        for (const double t : us) mean += t / static_cast<double>(us.size());
        const double p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];
        const double median = us[us.size() / 2];
        const std::string row = peaked ? "peaked" : "flat";
        table += fmt::format("| {:<22} | {:<6} | {:<31} | {:>9.1f} | {:>9.1f} | {:>9.1f} |\n",
                             model.name, row, setting.name, mean, median, p99);
        results.push_back({{"model", model.name},
                           {"vocab", model.vocab},
                           {"row", row},
                           {"sampling", setting.name},
                           {"mean_us", mean},
                           {"median_us", median},
                           {"p99_us", p99}});
      }
    }
  }
  std::cout << table;
  if (!report_path.empty()) {
    std::ofstream(report_path) << nlohmann::json{{"draws", draws}, {"results", results}}.dump(2)
                               << "\n";
  }
  return 0;
}
