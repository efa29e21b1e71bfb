// `infer logits`: float32 logits for every position of a prompt, [n_prompt, vocab]
// row-major little-endian, for comparison with reference implementations.
#include <cstdio>
#include <fstream>

#include "infer/cli/common.h"
#include "infer/core/error.h"
#include "infer/model/decoder.h"

namespace infer::cli {

namespace {

struct LogitsArgs {
  ModelArgs model;
  std::string prompt_ids;
  std::string out;
  bool no_kv_cache = false;
};

void RunLogits(const LogitsArgs& args) {
  const std::vector<int32_t> ids = ParseIdList(args.prompt_ids, "--prompt-ids");
  ThreadPool pool(args.model.threads);
  LoadedModel loaded = LoadModelFromArgs(args.model, &pool);
  Decoder decoder(loaded, pool, args.model.matmul_precision, args.model.quantized_activations);
  const auto adapters = LoadLorasFromArgs(args.model, loaded.config);
  const LoraAdapter* lora = adapters.empty() ? nullptr : adapters.front().get();
  std::vector<float> logits;
  if (args.no_kv_cache) {
    decoder.ForwardUncached(ids, LogitsMode::kAllPositions, logits, lora);
  } else {
    PagedKvCache cache = decoder.MakeSequenceCache(static_cast<int64_t>(ids.size()));
    decoder.Forward(ids, 0, cache, LogitsMode::kAllPositions, logits, lora);
  }
  std::ofstream out(args.out, std::ios::binary | std::ios::trunc);
  INFER_CHECK(out.good(), "--out {}: cannot open for writing", args.out);
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  INFER_CHECK(out.good(), "--out {}: write failed", args.out);
  std::fprintf(stderr, "wrote [%zu, %lld] float32 logits to %s\n", ids.size(),
               static_cast<long long>(decoder.vocab_size()), args.out.c_str());
}

}  // namespace

void AddLogitsCommand(CLI::App& app) {
  auto* command = app.add_subcommand("logits", "Write float32 logits of every prompt position");
  auto args = std::make_shared<LogitsArgs>();
  AddModelOptions(*command, args->model);
  AddLoraOption(*command, args->model);
  command->add_option("--prompt-ids", args->prompt_ids, "Comma-separated token ids")->required();
  command->add_option("--out", args->out, "Output file: [n_prompt, vocab] f32 little-endian")
      ->required();
  command->add_flag("--no-kv-cache", args->no_kv_cache, "Use the uncached path (the oracle)");
  command->callback([args] { RunLogits(*args); });
}

}  // namespace infer::cli
