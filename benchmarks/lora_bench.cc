// LoRA benchmark: what adapters add to a forward pass, timed against the base model in one
// process, the two alternating pass by pass (so the shared host's slow spells fall on both
// alike), on real-size random weights (--load-format dummy) and real PEFT adapters (from
// tests/lora/make_adapter.py, say). Three comparisons, each the median time of a pass:
// - prefill of --context tokens, one sequence: the base, then with adapter 1;
// - decode at a depth of --context tokens, one sequence: the base, then with adapter 1;
// - decode of a batch of --batch sequences: every row the base, then the rows taking the base
//   and each --lora adapter in turn (a mixed batch).
// The decoder is called directly (Decoder::Forward over a paged KV cache), as the engine's step
// calls it; the engine's scheduling and sampling cost the same with or without adapters. Prints
// a table; --report writes the JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "infer/core/error.h"
#include "infer/kernels/cpu/isa.h"
#include "infer/loader/lora.h"
#include "infer/loader/weights.h"
#include "infer/model/decoder.h"

namespace infer::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model;
  std::string quantization = "int8";
  int threads = 2;
  std::vector<std::string> loras;
  int64_t context = 128;
  int64_t batch = 16;
  int decode_passes = 200;
  int prefill_passes = 12;
  std::string report;
};

// One forward pass of `seqs` (their tokens and adapters set by the caller); seconds.
double TimePass(Decoder& decoder, std::vector<SequenceTokens>& seqs, PagedKvCache& cache,
                std::vector<float>& logits) {
  const auto start = Clock::now();
  decoder.Forward(seqs, cache, logits);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return Percentile(values, 0.5);
}

int Run(const Args& args) {
  ThreadPool pool(args.threads);
  LoadOptions options;
  options.dummy = true;
  options.pool = &pool;
  options.quantization = kernels::ParseQuantization(args.quantization);
  const LoadedModel model = LoadModel(args.model, options);
  INFER_CHECK(!args.loras.empty(), "give at least one --lora");
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  for (const std::string& path : args.loras) {
    adapters.push_back(LoadLoraAdapter(path, path, model.config, 1 << 20));
  }
  Decoder decoder(model, pool);
  const int64_t block = 16;
  const int64_t blocks_per_seq = (args.context + 1 + block - 1) / block;
  PagedKvCache cache =
      PagedKvCache::FromModelConfig(model.config, blocks_per_seq * args.batch, block, DType::kBF16);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(args.batch));
  for (int64_t s = 0; s < args.batch; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) {
      tables[static_cast<size_t>(s)].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    }
  }
  std::vector<int32_t> prompt(static_cast<size_t>(args.context));
  for (size_t i = 0; i < prompt.size(); ++i) {
    prompt[i] =
        static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(model.config.vocab_size));
  }
  const std::vector<int32_t> next = {42};
  std::vector<float> logits;
  // Every sequence's prompt in the cache first (the decode passes read it).
  for (int64_t s = 0; s < args.batch; ++s) {
    std::vector<SequenceTokens> seqs = {{prompt, 0, tables[static_cast<size_t>(s)]}};
    decoder.Forward(seqs, cache, logits);
  }
  const LoraAdapter* first = adapters.front().get();
  // Alternates passes of `base` and `adapted` (each a set of sequences) `passes` times; the
  // median seconds of each.
  const auto compare = [&](const char* what, std::vector<SequenceTokens> base,
                           std::vector<SequenceTokens> adapted, int passes) {
    std::vector<double> base_s, adapted_s;
    for (int i = 0; i < passes; ++i) {
      base_s.push_back(TimePass(decoder, base, cache, logits));
      adapted_s.push_back(TimePass(decoder, adapted, cache, logits));
      if (i % 10 == 9) std::fprintf(stderr, "\r%s: pass %d/%d   ", what, i + 1, passes);
    }
    ClearProgressLine();
    return std::pair(Median(base_s), Median(adapted_s));
  };
  const auto sequence = [&](std::span<const int32_t> tokens, int64_t first_pos, int64_t s,
                            const LoraAdapter* lora) {
    SequenceTokens seq{tokens, first_pos, tables[static_cast<size_t>(s)]};
    seq.lora = lora;
    return seq;
  };
  // Prefill: the prompt again at position 0 (the same positions rewritten).
  const auto prefill = compare("prefill", {sequence(prompt, 0, 0, nullptr)},
                               {sequence(prompt, 0, 0, first)}, args.prefill_passes);
  // Decode at depth `context`: one new token at position `context` (the same slot each pass).
  const auto decode = compare("decode", {sequence(next, args.context, 0, nullptr)},
                              {sequence(next, args.context, 0, first)}, args.decode_passes);
  std::vector<SequenceTokens> base_batch, mixed_batch;
  for (int64_t s = 0; s < args.batch; ++s) {
    base_batch.push_back(sequence(next, args.context, s, nullptr));
    // Rows take the base and each adapter in turn.
    const auto turn = static_cast<size_t>(s) % (adapters.size() + 1);
    mixed_batch.push_back(
        sequence(next, args.context, s, turn == 0 ? nullptr : adapters[turn - 1].get()));
  }
  const auto batched = compare("batch", base_batch, mixed_batch, args.decode_passes / 4);

  const auto row = [](const char* what, std::pair<double, double> times, int64_t tokens) {
    return nlohmann::json{{"what", what},
                          {"base_ms", times.first * 1e3},
                          {"lora_ms", times.second * 1e3},
                          {"base_tok_s", static_cast<double>(tokens) / times.first},
                          {"lora_tok_s", static_cast<double>(tokens) / times.second},
                          {"lora_over_base_tok_s", times.first / times.second}};
  };
  const nlohmann::json results = nlohmann::json::array(
      {row("prefill", prefill, args.context), row("decode b1", decode, 1),
       row(fmt::format("decode b{} mixed", args.batch).c_str(), batched, args.batch)});
  std::printf("| pass | base ms | with adapters ms | base tok/s | with adapters tok/s | ratio |\n");
  std::printf("| --- | --: | --: | --: | --: | --: |\n");
  for (const auto& r : results) {
    std::printf("| %s | %.2f | %.2f | %.1f | %.1f | %.3f |\n", r["what"].get<std::string>().c_str(),
                r["base_ms"].get<double>(), r["lora_ms"].get<double>(),
                r["base_tok_s"].get<double>(), r["lora_tok_s"].get<double>(),
                r["lora_over_base_tok_s"].get<double>());
  }
  nlohmann::json adapters_json = nlohmann::json::array();
  for (const auto& adapter : adapters) {
    adapters_json.push_back({{"path", adapter->path},
                             {"rank", adapter->rank},
                             {"targets", adapter->target_modules},
                             {"bytes", adapter->size_bytes},
                             {"dtype", DTypeName(adapter->Delta(0, LoraTarget::kQ).defined()
                                                     ? adapter->Delta(0, LoraTarget::kQ).a.dtype()
                                                     : DType::kF32)}});
  }
  const nlohmann::json report = {{"cpu", CpuDescription()},
                                 {"isa", kernels::IsaName(kernels::ActiveIsa())},
                                 {"model", args.model},
                                 {"quantization", args.quantization},
                                 {"threads", pool.num_threads()},
                                 {"context", args.context},
                                 {"batch", args.batch},
                                 {"decode_passes", args.decode_passes},
                                 {"prefill_passes", args.prefill_passes},
                                 {"adapters", adapters_json},
                                 {"timestamp", UtcTime("%Y-%m-%dT%H:%M:%SZ")},
                                 {"results", results}};
  if (!args.report.empty()) {
    std::ofstream out(args.report);
    INFER_CHECK(out.good(), "--report {}: cannot open for writing", args.report);
    out << report.dump(2) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace infer::bench

int main(int argc, char** argv) {
  CLI::App app{"LoRA adapters' cost against the base model, passes alternating"};
  infer::bench::Args args;
  app.add_option("--model", args.model, "Model folder (config.json; dummy weights)")->required();
  app.add_option("-q,--quantization", args.quantization, "Weights: none, int8, int4, int4k")
      ->capture_default_str();
  app.add_option("--threads", args.threads, "Threads")->capture_default_str();
  app.add_option("--lora", args.loras, "PEFT adapter folders (the first alone at batch 1)")
      ->required();
  app.add_option("--context", args.context, "Prompt tokens (prefill) and decode depth")
      ->capture_default_str();
  app.add_option("--batch", args.batch, "Rows of the mixed batch")->capture_default_str();
  app.add_option("--decode-passes", args.decode_passes, "Alternations of batch-1 decode passes")
      ->capture_default_str();
  app.add_option("--prefill-passes", args.prefill_passes, "Alternations of prefill passes")
      ->capture_default_str();
  app.add_option("--report", args.report, "Also write the JSON report to this file");
  return infer::bench::ParseAndRun(app, argc, argv, [&] { return infer::bench::Run(args); });
}
