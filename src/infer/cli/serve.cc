// `infer serve`: OpenAI's chat and completions API and the seed-format completions over HTTP,
// with /health and /metrics. SIGINT/SIGTERM shut it down gracefully: new requests get 503 while
// running ones have --shutdown-timeout seconds to finish, the rest end with an error event,
// then the process exits 0; a second signal exits at once.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "infer/cache/paged_kv_cache.h"
#include "infer/cli/generation_session.h"
#include "infer/cli/version.h"
#include "infer/core/error.h"
#include "infer/engine/engine.h"
#include "infer/kernels/cpu/isa.h"
#include "infer/kernels/ops.h"
#include "infer/server/http_server.h"
#include "infer/server/loading_server.h"

namespace infer::cli {
namespace {

struct ServeArgs {
  ModelArgs model;
  EngineConfig engine;
  server::ServerOptions server;
  std::string max_body_size = "4MiB";
  std::string responses_store_size = "64MiB";
  std::string served_model_name;
  std::string kv_cache_dtype = "bf16";
  std::string kv_cache_memory;
  std::string reasoning_parser = "auto";
  int64_t reasoning_budget = -1;
  std::string speculative_config;  // vLLM's --speculative-config JSON
  // Mode names as given; parsed into the configs' enums by RunServe.
  std::string batching_mode = "continuous";
  std::string scheduling_policy = "fcfs";
  std::string completions_format = "seed";
  std::string api_key_file;  // --api-key-file, read by ResolveApiKey
  // LoRA: --lora-modules arguments (NAME=PATH or vLLM's JSON form), --max-lora-rank.
  std::vector<std::string> lora_modules;
  int64_t max_lora_rank = 16;
};

// --enable-lora: the adapters of --lora-modules, loaded against the base (start-up stops at the
// first that cannot be: the message names it and the tensor at fault). Null without LoRA.
std::shared_ptr<server::LoraAdapters> LoadLoraModules(const ServeArgs& args,
                                                      const ModelConfig& config) {
  if (!args.engine.enable_lora) {
    INFER_CHECK(args.lora_modules.empty(), "--lora-modules needs --enable-lora");
    return nullptr;
  }
  INFER_CHECK(args.max_lora_rank >= 1, "--max-lora-rank must be at least 1, got {}",
              args.max_lora_rank);
  auto adapters =
      std::make_shared<server::LoraAdapters>(config, args.max_lora_rank, args.engine.model);
  for (const std::string& argument : args.lora_modules) {
    const server::LoraModule module = server::ParseLoraModule(argument);
    const auto adapter = adapters->Load(module);
    spdlog::info("LoRA adapter '{}' from {}: rank {}, alpha {}{}, {} ({:.1f} MiB)", module.name,
                 module.path, adapter->rank, adapter->alpha, adapter->rslora ? " (rsLoRA)" : "",
                 fmt::join(adapter->target_modules, ", "),
                 static_cast<double>(adapter->size_bytes) / 0x1p20);
  }
  return adapters;
}

// "off", or the adapters loaded at start and the limits.
std::string DescribeLora(const ServeArgs& args) {
  if (!args.server.lora_adapters) return "off";
  std::vector<std::string> names;
  for (const auto& entry : args.server.lora_adapters->List()) names.push_back(entry.adapter->name);
  return fmt::format("[{}] (max loras {}, max rank {}, runtime updates {})", fmt::join(names, ", "),
                     args.engine.max_loras, args.max_lora_rank,
                     args.server.allow_runtime_lora_updating ? "on" : "off");
}

// Signals are taken by one thread with sigwait (no async-signal-safety traps). It must be set up
// before any other thread starts so that every thread blocks them.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&signals_);
    for (int signal : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&signals_, signal);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server
    thread_ = std::thread([this] { Wait(); });
  }
  ~SignalWaiter() {
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
    if (shutdown_.joinable()) shutdown_.join();
  }
  // From now on the first SIGINT/SIGTERM shuts `server` down (before: the process exits).
  void Serve(server::HttpServer* server) { server_.store(server); }

 private:
  void Wait() {
    for (int count = 0;;) {
      int signal = 0;
      if (sigwait(&signals_, &signal) != 0 || signal == SIGUSR1) return;
      server::HttpServer* server = server_.load();
      if (server == nullptr || ++count > 1) {
        std::fprintf(stderr, "infer serve: %s, exiting now\n", strsignal(signal));
        std::_Exit(128 + signal);
      }
      std::fprintf(stderr, "infer serve: %s, shutting down (again to exit now)\n",
                   strsignal(signal));
      shutdown_ = std::thread([server] { server->Shutdown("server shutting down"); });
    }
  }

  sigset_t signals_{};
  std::atomic<server::HttpServer*> server_{nullptr};
  std::thread thread_;
  std::thread shutdown_;
};

// The API key: --api-key, else the first line of --api-key-file, else $INFER_API_KEY, else the
// file named by $INFER_API_KEY_FILE (the systemd unit's environment file sets that); none of
// them: no key. A key file that cannot be read, or holds no key, stops start-up.
void ResolveApiKey(ServeArgs& args) {
  INFER_CHECK(args.server.api_key.empty() || args.api_key_file.empty(),
              "give --api-key or --api-key-file, not both");
  std::string file = args.api_key_file;
  if (args.server.api_key.empty() && file.empty()) {
    if (const char* key = std::getenv("INFER_API_KEY"); key != nullptr && *key != '\0') {
      args.server.api_key = key;
      return;
    }
    if (const char* path = std::getenv("INFER_API_KEY_FILE"); path != nullptr) file = path;
  }
  if (file.empty()) return;
  std::ifstream in(file);
  INFER_CHECK(in.is_open(), "API key file {}: cannot be read ({})", file, std::strerror(errno));
  std::string key;
  std::getline(in, key);
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.front()))) key.erase(0, 1);
  INFER_CHECK(!key.empty(), "API key file {}: its first line holds no key", file);
  args.server.api_key = key;
}

void RunServe(ServeArgs& args) {
  SignalWaiter signals;
  ResolveApiKey(args);
  if (args.server.replica_id.empty()) {
    const char* id = std::getenv("INFER_REPLICA_ID");
    char host[256] = {};
    args.server.replica_id =
        id != nullptr && *id != '\0'
            ? std::string(id)
            : fmt::format("{}-{}", gethostname(host, sizeof(host) - 1) == 0 ? host : "infer",
                          getpid());
  }
  std::string log_id;  // '%' starts a spdlog pattern flag
  for (const char c : args.server.replica_id)
    log_id += c == '%' ? std::string("%%") : std::string(1, c);
  spdlog::default_logger()->set_pattern(fmt::format("[%H:%M:%S.%e] [{}] [%^%l%$] %v", log_id));
  args.engine.model = args.served_model_name.empty() ? args.model.model : args.served_model_name;
  args.engine.kv_cache_dtype = ParseKvCacheDType(args.kv_cache_dtype);
  if (!args.kv_cache_memory.empty()) {
    args.engine.kv_cache_memory_bytes = ParseByteSize(args.kv_cache_memory, "--kv-cache-memory");
    INFER_CHECK(args.engine.kv_cache_memory_bytes > 0, "--kv-cache-memory must be positive");
  }
  const int64_t max_body = ParseByteSize(args.max_body_size, "--max-body-size");
  INFER_CHECK(max_body > 0, "--max-body-size must be positive");
  args.server.max_body_bytes = static_cast<size_t>(max_body);
  const int64_t store_bytes = ParseByteSize(args.responses_store_size, "--responses-store-size");
  INFER_CHECK(store_bytes >= 0, "--responses-store-size must not be negative");
  args.server.responses_store_bytes = static_cast<size_t>(store_bytes);
  args.engine.batching_mode = ParseBatchingMode(args.batching_mode);
  args.engine.scheduler_policy = ParseSchedulerPolicy(args.scheduling_policy);
  args.server.completions_format = args.completions_format == "openai"
                                       ? server::CompletionsFormat::kOpenAi
                                       : server::CompletionsFormat::kSeed;
  args.engine.speculative = ResolveSpeculativeConfig(args.speculative_config);
  args.engine.Validate();
  // The port answers 503 "loading" until the model is ready.
  server::LoadingServer loading(args.server.host, args.server.port, args.server.replica_id,
                                args.server.keep_alive_timeout_s);
  args.server.port = loading.port();
  std::fprintf(stderr, "infer serve: loading; /health answers 503 on http://%s:%d until ready\n",
               args.server.host.c_str(), args.server.port);
  GenerationSession session(args.model);
  args.server.lora_adapters = LoadLoraModules(args, session.loaded().config);
  args.server.default_sampling = SamplingParamsFromGenerationConfig(session.loaded().generation);
  if (args.reasoning_budget >= 0) {
    args.server.default_sampling.thinking_token_budget = args.reasoning_budget;
  }
  const ChatTemplate* chat_template = nullptr;
  if (session.tokenizer() != nullptr) {
    try {
      chat_template = &session.chat_template();
    } catch (const Error& e) {
      spdlog::warn("no chat template, /v1/chat/completions will answer 400: {}", e.what());
    }
  }
  if (args.reasoning_parser == "auto") {
    // Models that think in <think>...</think> (Qwen3) have both tags in their vocabulary.
    const Tokenizer* tokenizer = session.tokenizer();
    const bool thinks =
        tokenizer != nullptr && tokenizer->TokenToId("<think>") && tokenizer->TokenToId("</think>");
    args.reasoning_parser = thinks ? "qwen3" : "none";
  }
  args.server.reasoning_parser = args.reasoning_parser == "qwen3" ? server::ReasoningParser::kQwen3
                                                                  : server::ReasoningParser::kNone;
  Engine engine(args.engine, session.model(), session.tokenizer(), session.eos_token_ids(),
                chat_template);
  engine.IndexVocabularyInBackground();
  const KvCacheInfo& kv = engine.kv_cache();
  const int64_t max_len = std::min(args.engine.max_model_len, session.model().context_length());
  std::fprintf(stderr,
               "infer serve: KV cache %lld blocks x %lld tokens = %lld tokens (%.2f GiB, %s); "
               "maximum concurrency for %lld tokens per request: %.2fx\n",
               static_cast<long long>(kv.num_blocks), static_cast<long long>(kv.block_size),
               static_cast<long long>(kv.capacity_tokens()), static_cast<double>(kv.bytes) / 0x1p30,
               std::string(DTypeName(kv.dtype)).c_str(), static_cast<long long>(max_len),
               engine.max_concurrency());
  loading.Stop();
  args.server.compute = {std::string(kernels::IsaName(kernels::ActiveIsa())),
                         std::string(kernels::MatMulPrecisionName(args.model.matmul_precision))};
  args.server.build = {std::string(Version()), std::string(Commit())};
  server::HttpServer http(engine, args.server);
  const int port = http.Bind();
  std::fprintf(
      stderr,
      "infer serve: listening on http://%s:%d (infer %s, commit %s; model \"%s\", %s batching, "
      "%s policy, max num seqs %lld, max waiting %lld, prefix caching %s, preemption %s; "
      "/v1/completions format %s, reasoning parser %s, reasoning budget %s, "
      "speculative decoding %s, LoRA %s, replica %s; isa %s, matmul precision %s, quantized "
      "activations %s)\n",
      args.server.host.c_str(), port, args.server.build.version.c_str(),
      args.server.build.commit.c_str(), args.engine.model.c_str(), args.batching_mode.c_str(),
      args.scheduling_policy.c_str(), static_cast<long long>(args.engine.max_num_seqs),
      static_cast<long long>(args.engine.max_waiting_requests),
      args.engine.enable_prefix_caching ? "on" : "off",
      args.engine.enable_preemption ? "on" : "off", args.completions_format.c_str(),
      args.reasoning_parser.c_str(),
      args.reasoning_budget >= 0 ? std::to_string(args.reasoning_budget).c_str() : "off",
      DescribeSpeculativeConfig(args.engine.speculative).c_str(), DescribeLora(args).c_str(),
      args.server.replica_id.c_str(), args.server.compute.isa.c_str(),
      args.server.compute.matmul_precision.c_str(),
      std::string(kernels::QuantizedActivationsName(args.model.quantized_activations)).c_str());
  std::fflush(stderr);
  signals.Serve(&http);
  http.Run();
  std::fprintf(stderr, "infer serve: stopped\n");
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* command = app.add_subcommand(
      "serve",
      "HTTP server: OpenAI chat, completions and Responses, Anthropic Messages, /metrics, "
      "/health and a web chat page");
  AddModelOptions(*command, args->model);
  command->add_option("--host", args->server.host, "Address to listen on")->capture_default_str();
  command->add_option("--port", args->server.port, "Port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command->add_option("--served-model-name", args->served_model_name,
                      "The model name clients must send (default: the --model value)");
  EngineConfig& engine = args->engine;
  command
      ->add_option("--max-num-seqs,--max-batch-size", engine.max_num_seqs,
                   "Most requests running at once (static: per batch)")
      ->capture_default_str();
  command
      ->add_option("--max-num-batched-tokens", engine.max_num_batched_tokens,
                   "Most tokens per step: decode tokens plus prefill chunks")
      ->capture_default_str();
  command
      ->add_option("--max-waiting-requests", engine.max_waiting_requests,
                   "Queued requests beyond this get HTTP 503")
      ->capture_default_str();
  command
      ->add_option("--max-model-len,--max-seq-len", engine.max_model_len,
                   "Longest prompt + max_tokens of a request (also capped by the model)")
      ->capture_default_str();
  command
      ->add_option("--batching-mode", args->batching_mode,
                   "continuous (admit and retire every step) or static (phase-4 batches)")
      ->check(CLI::IsMember({"continuous", "static"}))
      ->capture_default_str();
  command
      ->add_option("--scheduling-policy", args->scheduling_policy,
                   "fcfs, or priority (the request's priority field; lower runs first)")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->capture_default_str();
  command
      ->add_option("--batch-wait-timeout", engine.batch_wait_timeout_s,
                   "Static batching: seconds a forming batch waits to fill")
      ->capture_default_str();
  command->add_option("--block-size", engine.block_size, "Tokens per KV block (multiple of 16)")
      ->capture_default_str();
  command
      ->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                   "KV cache dtype: bf16 (half the memory) or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  command->add_option("--kv-cache-memory", args->kv_cache_memory,
                      "KV cache budget, e.g. 4GiB (default: half the free memory, at most what "
                      "max-num-seqs requests of max-model-len need)");
  command->add_option("--num-kv-blocks,--num-gpu-blocks-override", engine.num_blocks,
                      "KV blocks in the pool (overrides --kv-cache-memory)");
  command->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching",
                    engine.enable_prefix_caching,
                    "Reuse the KV of cached prompt prefixes (default: on)");
  command
      ->add_option("--state-snapshots", engine.state_snapshot_slots,
                   "Models with recurrent state (Qwen3.5): state snapshots the prefix cache "
                   "holds, each the size of one sequence's state (default: max-num-seqs, at "
                   "most 16; 0: no prefix caching for them)")
      ->check(CLI::NonNegativeNumber);
  command->add_flag("--enable-jump-forward,!--no-jump-forward", engine.enable_jump_forward,
                    "Structured output: emit the tokens the grammar forces (fixed keys, "
                    "punctuation) without a sampling step each (default: on)");
  command->add_flag("--enable-preemption,!--no-enable-preemption", engine.enable_preemption,
                    "Take KV blocks as requests grow and preempt (recompute) the lowest-priority "
                    "request when they run out; off: reserve prompt + max_tokens at admission "
                    "(default: off)");
  command->add_option("--seed", args->engine.seed, "Default seed of requests that give none");
  command
      ->add_option("--http-threads", args->server.http_threads,
                   "HTTP worker threads = requests served at once; more get 503 at once; idle "
                   "connections hold none (0: max batch + max waiting + 16)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  command
      ->add_option("--timeout", args->server.read_timeout_s,
                   "Seconds a request's headers may take in all, and a client may stall in the "
                   "middle of its body or accept nothing of the response, before it is "
                   "disconnected (its request cancelled)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command
      ->add_option("--timeout-keep-alive", args->server.keep_alive_timeout_s,
                   "Seconds a connection (new or kept alive) may wait for a request to start")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command
      ->add_option("--shutdown-timeout", args->server.shutdown_timeout_s,
                   "On SIGTERM/SIGINT: seconds running requests may go on to finish while new "
                   "ones get 503 and /health says draining; then the rest end with an error "
                   "event (0: at once)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command
      ->add_option("--max-body-size", args->max_body_size,
                   "Largest request body (e.g. 4MiB); larger ones get 413 unread")
      ->capture_default_str();
  command
      ->add_option("--responses-store-entries", args->server.responses_store_entries,
                   "Responses API: stored responses kept (store: true) for GET /v1/responses/ID "
                   "and previous_response_id; the oldest are evicted first (0: none kept)")
      ->capture_default_str();
  command
      ->add_option("--responses-store-size", args->responses_store_size,
                   "Responses API: bytes of stored responses' JSON kept (e.g. 64MiB); the oldest "
                   "are evicted first")
      ->capture_default_str();
  command->add_option("--api-key", args->server.api_key,
                      "Require \"Authorization: Bearer KEY\" on /v1/* and /metrics (401 "
                      "otherwise; /health stays open). Default: $INFER_API_KEY, else none");
  command->add_option("--api-key-file", args->api_key_file,
                      "Read the API key from the first line of this file (default: "
                      "$INFER_API_KEY_FILE, when neither key is given)");
  command->add_option("--replica-id", args->server.replica_id,
                      "Name of this replica: the X-Replica-Id header of every response and the "
                      "log prefix (default: $INFER_REPLICA_ID, else HOSTNAME-PID)");
  command
      ->add_option("--completions-format", args->completions_format,
                   "What POST /v1/completions speaks: seed (the phase-4 event stream: event: "
                   "token / done / error) or openai (OpenAI's text_completion, JSON or "
                   "stream); /v1/chat/completions is always OpenAI's")
      ->check(CLI::IsMember({"seed", "openai"}))
      ->capture_default_str();
  command
      ->add_option("--reasoning-parser", args->reasoning_parser,
                   "qwen3: chat replies' <think>...</think> text goes to reasoning_content; "
                   "none: it stays in content; auto: qwen3 when the vocabulary has both tags")
      ->check(CLI::IsMember({"auto", "qwen3", "none"}))
      ->capture_default_str();
  AddReasoningBudgetOption(*command, args->reasoning_budget,
                           "Default thinking budget of requests that give none "
                           "(thinking_token_budget, Anthropic's thinking.budget_tokens): after "
                           "this many tokens inside <think>...</think> the block's end is forced; "
                           "0 ends it at once, -1 is unbounded");
  AddSpeculativeConfigOption(*command, args->speculative_config);
  command->add_flag("--enable-lora", args->engine.enable_lora,
                    "Serve LoRA adapters: a request names one by its `model`");
  command
      ->add_option("--lora-modules", args->lora_modules,
                   "LoRA adapters to serve, each NAME=PATH or {\"name\": ..., \"path\": ..., "
                   "\"base_model_name\": ...}; PATH a PEFT adapter folder "
                   "(adapter_config.json, adapter_model.safetensors) or a Hugging Face id in the "
                   "HF cache")
      ->expected(1, -1);
  command
      ->add_option("--max-loras", args->engine.max_loras,
                   "Most distinct adapters among the running requests (others wait; vLLM's "
                   "default is 1, every adapter here stays in memory)")
      ->capture_default_str();
  command
      ->add_option("--max-lora-rank", args->max_lora_rank, "Adapters of a higher rank are refused")
      ->capture_default_str();
  command->add_flag("--allow-runtime-lora-updating", args->server.allow_runtime_lora_updating,
                    "Serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (also with "
                    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)");
  command->callback([args] {
    if (const char* allow = std::getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING");
        allow != nullptr && (std::string(allow) == "1" || std::string(allow) == "true" ||
                             std::string(allow) == "True")) {
      args->server.allow_runtime_lora_updating = true;
    }
    RunServe(*args);
  });
}

}  // namespace infer::cli
