// bench_serving: the serving benchmark (seed phase 4, section 10; engine v2), every mode side by
// side in one process. Loads the model once; runs each workload's requests one after another
// through generate() (the sequential baseline); then, for each engine mode the workload
// compares (continuous batching, static phase-4 batches, prefix caching off, preemption with
// the priority policy), makes a fresh Engine + HttpServer on 127.0.0.1 (any free port) over the
// same model and drives it with client threads reading the SSE streams. Reports TTFT, ITL and
// latency percentiles and output tok/s per mode beside the baseline's, the ratios between modes
// from the same run, and the acceptance checks of each workload.
//
// Workloads:
// - W1: 1 request, 256 prompt + 256 output tokens.
// - W2: 16 requests at once, prompts uniform in [32, 1024], max_tokens uniform in [64, 256].
// - W3: 48 requests with Poisson arrivals at 0.5 req/s (seeded exponential gaps, the first at
//   t = 0; the same schedule for every mode), prompts [32, 256], max_tokens [32, 128].
// - prefix: 16 requests at once sharing a 768-token prefix + 32 own tokens, max_tokens 64.
// - overload: 200 requests of prompt 64 + max_tokens 64 at once against a KV pool that holds 20
//   of them; preemption off (fcfs), then preemption on with the priority policy (odd requests
//   priority 1 = low, even ones 0). No baseline. Every request must end with all its tokens or
//   a clear 503 / error event; nothing lost or duplicated; RSS bounded.
// - soak: N small requests at concurrency C (continuous): none lost or duplicated, usage matches
//   the streamed tokens, no 503s, RSS flat; no baseline.
// Prints markdown tables; writes a JSON report per workload into benchmarks/reports/; --log
// appends an entry to benchmarks/log/SERVING_LOG.md. Exits 1 when a request failed or a
// soak/overload check did not hold (acceptance ratios are reported, not enforced).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "infer/cache/paged_kv_cache.h"
#include "infer/cli/common.h"
#include "infer/cli/generation_session.h"
#include "infer/core/error.h"
#include "infer/core/mapped_file.h"
#include "infer/engine/engine.h"
#include "infer/engine/generate.h"
#include "infer/kernels/cpu/isa.h"
#include "infer/server/http_server.h"
#include "testing/sse_client.h"

namespace infer {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr const char* kHost = "127.0.0.1";
constexpr int64_t kMaxPromptId = 32000;  // prompt ids are drawn from [0, min(vocab, this))
// The soak's small requests.
constexpr int64_t kSoakMinPrompt = 8, kSoakMaxPrompt = 64, kSoakMinOutput = 4, kSoakMaxOutput = 32;
// KV blocks beyond the workload's own in a workload-sized pool (the warmup request).
constexpr int64_t kSpareBlocks = 4;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

struct Options {
  cli::ModelArgs model;
  std::vector<std::string> workloads;
  int64_t max_num_seqs = EngineConfig{}.max_num_seqs;  // continuous modes
  int64_t static_max_num_seqs = 16;                    // static mode: the phase-4 batch size
  int64_t max_num_batched_tokens = EngineConfig{}.max_num_batched_tokens;
  int64_t max_waiting_requests = 64;
  int64_t max_model_len = 4096;
  double batch_wait_timeout_s = 0.05;
  std::string kv_cache_dtype = "bf16";
  int64_t block_size = EngineConfig{}.block_size;
  int64_t num_kv_blocks = 0;  // 0: every request of the workload fits at once (overload: its own)
  uint64_t seed = 0;
  bool no_baseline = false;
  int64_t w1_prompt = 256;
  int64_t w1_output = 256;
  int64_t w2_requests = 16;
  int64_t min_prompt = 32;
  int64_t max_prompt = 1024;
  int64_t min_output = 64;
  int64_t max_output = 256;
  int64_t w3_requests = 48;
  double w3_rate = 0.5;
  int64_t w3_min_prompt = 32;
  int64_t w3_max_prompt = 256;
  int64_t w3_min_output = 32;
  int64_t w3_max_output = 128;
  int64_t prefix_requests = 16;
  int64_t prefix_shared = 768;
  int64_t prefix_own = 32;
  int64_t prefix_output = 64;
  int64_t overload_requests = 200;
  int64_t overload_prompt = 64;
  int64_t overload_output = 64;
  int64_t overload_fit = 20;
  int64_t overload_max_waiting = 256;
  int64_t soak_requests = 1000;
  int64_t soak_concurrency = 16;
  double max_rss_growth_mib = 64.0;
  double request_timeout_s = 600.0;
  std::string out;
  bool no_report = false;
  bool log = false;
  std::string log_path = "benchmarks/log/SERVING_LOG.md";
  std::string command_line;
};

struct WorkloadRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;
  double arrival_s = 0.0;           // open-loop workloads: when it is sent
  std::optional<int64_t> priority;  // sent as the request's `priority` field when set
};

// One engine setup a workload is served with.
struct ModeSpec {
  std::string name;
  EngineConfig config;
};

enum class Kind { kStandard, kPrefix, kOverload, kSoak };

struct Workload {
  std::string name;
  std::string description;
  Kind kind = Kind::kStandard;
  // Closed loop: client threads, each sending its next request when one ends. Open loop: one
  // thread per request, sent at its arrival_s.
  int64_t concurrency = 1;
  bool open_loop = false;
  bool baseline = true;
  std::vector<WorkloadRequest> requests;
  std::vector<ModeSpec> modes;
};

// The outcome of one request, served or run through generate().
struct RequestRecord {
  bool ok = false;
  std::string error;  // why it is not ok
  int status = 0;     // HTTP status (0: no answer)
  double send_s = 0.0;
  double finish_s = 0.0;  // `done` event (or the end of the exchange), from the workload start
  double ttft_s = 0.0;
  double latency_s = 0.0;
  std::vector<double> itl_s;
  int64_t completion_tokens = 0;
  int64_t token_events = 0;
  int64_t terminal_events = 0;  // done + error
  bool got_done = false;
  bool got_error_event = false;
  bool event_after_terminal = false;
  bool usage_consistent = false;
  std::string finish_reason;
  std::vector<int32_t> token_ids;  // streamed ids (served) or generated ids (baseline)
};

struct PhaseResult {
  std::vector<RequestRecord> records;
  double wall_s = 0.0;
  // VmRSS before the first request and after each tenth of the requests (11 entries).
  std::vector<double> rss_mib;
  // Served: growth of the host's TcpExt ListenOverflows / TCPSynRetrans counters during the
  // workload (host-wide). A connection that overflowed the server's listen backlog has its SYN
  // retransmitted about 1 s later: it shows as a TTFT near 1 s.
  int64_t listen_overflows = 0;
  int64_t syn_retransmits = 0;
};

// What the model computed for one request of a served workload, from the forward calls.
struct RequestTrace {
  bool seen = false;
  int64_t computed_tokens = 0;         // tokens run through Forward (prefill + decode + recompute)
  int64_t prompt_tokens_computed = 0;  // of those, at prompt positions (recomputes included)
  int64_t recomputed_tokens = 0;       // at positions it had computed before (after preemption)
  int64_t rewinds = 0;  // times it restarted below what it had computed: preemptions that cost
};

struct TraceSummary {
  std::vector<RequestTrace> requests;  // by workload request
  int64_t sequences = 0;
  int64_t unmatched_sequences = 0;  // sequences whose tokens match no workload prompt
  int64_t computed_tokens = 0;
  int64_t prompt_tokens_computed = 0;
  int64_t recomputed_tokens = 0;
  int64_t rewinds = 0;
};

// Passes calls through to `inner` and records, per sequence, the token ranges every forward
// computed and the longest token list seen, to tell prefill from decode and recompute and to
// count preemptions per request (a sequence restarting below what it had computed).
class TraceModel final : public bench::ForwardingModel {
 public:
  using bench::ForwardingModel::ForwardingModel;

  void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override {
    inner_.Forward(steps, logits);
    std::lock_guard lock(mutex_);
    for (const SequenceStep& step : steps) {
      Sequence& seq = sequences_[step.seq_id];
      const auto end = static_cast<int64_t>(step.tokens.size());
      seq.spans.push_back({end - step.num_new, end});
      if (step.tokens.size() > seq.tokens.size()) {
        seq.tokens.assign(step.tokens.begin(), step.tokens.end());
      }
    }
  }

  void Reset() {
    std::lock_guard lock(mutex_);
    sequences_.clear();
  }

  // Matches each sequence to the workload request whose prompt starts its tokens and sums what
  // was computed for it.
  TraceSummary Summarize(const std::vector<WorkloadRequest>& requests) const {
    std::lock_guard lock(mutex_);
    TraceSummary summary;
    summary.requests.resize(requests.size());
    for (const auto& [seq_id, seq] : sequences_) {
      ++summary.sequences;
      std::optional<size_t> match;
      for (size_t i = 0; i < requests.size(); ++i) {
        const std::vector<int32_t>& prompt = requests[i].prompt;
        if (summary.requests[i].seen || prompt.size() > seq.tokens.size() ||
            !std::equal(prompt.begin(), prompt.end(), seq.tokens.begin())) {
          continue;
        }
        match = i;
        break;
      }
      RequestTrace trace;
      trace.seen = true;
      const auto prompt_len =
          match ? static_cast<int64_t>(requests[*match].prompt.size()) : int64_t{0};
      int64_t computed_end = 0;  // how far it had computed, at most
      int64_t last_end = 0;      // where its previous forward ended
      for (const auto& [begin, end] : seq.spans) {
        trace.computed_tokens += end - begin;
        trace.prompt_tokens_computed += std::max<int64_t>(0, std::min(end, prompt_len) - begin);
        // A restart below the previous forward's end is one preemption; the chunks that
        // recompute after it continue from each other.
        if (begin < last_end) ++trace.rewinds;
        if (begin < computed_end) trace.recomputed_tokens += std::min(end, computed_end) - begin;
        computed_end = std::max(computed_end, end);
        last_end = end;
      }
      summary.computed_tokens += trace.computed_tokens;
      summary.recomputed_tokens += trace.recomputed_tokens;
      summary.rewinds += trace.rewinds;
      if (match) {
        summary.prompt_tokens_computed += trace.prompt_tokens_computed;
        summary.requests[*match] = trace;
      } else {
        ++summary.unmatched_sequences;
      }
    }
    return summary;
  }

 private:
  struct Sequence {
    std::vector<std::pair<int64_t, int64_t>> spans;  // [begin, end) positions per forward
    std::vector<int32_t> tokens;                     // the longest token list seen
  };
  mutable std::mutex mutex_;
  std::map<int64_t, Sequence> sequences_;
};

// TcpExt counters of /proc/net/netstat by name (-1 when unreadable).
int64_t TcpExtCounter(const std::string& name) {
  std::ifstream file("/proc/net/netstat");
  std::string header, values;
  while (std::getline(file, header) && std::getline(file, values)) {
    if (header.rfind("TcpExt:", 0) != 0) continue;
    std::istringstream names(header), numbers(values);
    std::string key, value;
    while (names >> key && numbers >> value) {
      if (key == name) return std::stoll(value);
    }
  }
  return -1;
}

std::vector<int32_t> RandomPrompt(std::mt19937_64& rng, int64_t vocab, int64_t length) {
  std::uniform_int_distribution<int32_t> id(
      0, static_cast<int32_t>(std::min(vocab, kMaxPromptId) - 1));
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (int32_t& value : ids) value = id(rng);
  return ids;
}

int64_t Uniform(std::mt19937_64& rng, int64_t low, int64_t high) {
  return std::uniform_int_distribution<int64_t>(low, high)(rng);
}

int64_t BlocksFor(int64_t tokens, int64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

// Enough blocks for every request of the workload at once (and the warmup).
int64_t WorkloadBlocks(const Workload& workload, int64_t block_size) {
  int64_t blocks = kSpareBlocks;
  for (const WorkloadRequest& request : workload.requests) {
    blocks +=
        BlocksFor(static_cast<int64_t>(request.prompt.size()) + request.max_tokens, block_size);
  }
  return blocks;
}

// Distinct prompt tokens: the nodes of the token trie of all prompts (a shared prefix once).
int64_t UniquePromptTokens(const Workload& workload) {
  std::vector<const std::vector<int32_t>*> prompts;
  for (const WorkloadRequest& request : workload.requests) prompts.push_back(&request.prompt);
  std::sort(prompts.begin(), prompts.end(), [](const auto* a, const auto* b) { return *a < *b; });
  int64_t unique = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    size_t common = 0;
    if (i > 0) {
      const auto mismatch = std::mismatch(prompts[i]->begin(), prompts[i]->end(),
                                          prompts[i - 1]->begin(), prompts[i - 1]->end());
      common = static_cast<size_t>(mismatch.first - prompts[i]->begin());
    }
    unique += static_cast<int64_t>(prompts[i]->size() - common);
  }
  return unique;
}

EngineConfig BaseConfig(const Options& options, const std::string& model_name) {
  EngineConfig config;
  config.model = model_name;
  config.max_model_len = options.max_model_len;
  config.max_num_seqs = options.max_num_seqs;
  config.max_num_batched_tokens = options.max_num_batched_tokens;
  config.max_waiting_requests = options.max_waiting_requests;
  config.batch_wait_timeout_s = options.batch_wait_timeout_s;
  config.seed = options.seed;
  config.block_size = options.block_size;
  config.kv_cache_dtype = ParseKvCacheDType(options.kv_cache_dtype);
  return config;
}

ModeSpec ContinuousMode(const EngineConfig& base) { return {"continuous", base}; }

ModeSpec StaticMode(const EngineConfig& base, const Options& options) {
  ModeSpec mode{"static", base};
  mode.config.batching_mode = BatchingMode::kStatic;
  mode.config.max_num_seqs = options.static_max_num_seqs;
  return mode;
}

Workload MakeWorkload(const std::string& name, const Options& options, int64_t vocab,
                      int64_t max_len, const EngineConfig& base) {
  Workload workload;
  workload.name = name;
  if (name == "W1") {
    std::mt19937_64 rng(options.seed);
    workload.description =
        fmt::format("1 request, prompt {}, max_tokens {}", options.w1_prompt, options.w1_output);
    workload.requests.push_back({RandomPrompt(rng, vocab, options.w1_prompt), options.w1_output});
  } else if (name == "W2") {
    std::mt19937_64 rng(options.seed + 1);
    workload.concurrency = options.w2_requests;
    workload.description = fmt::format(
        "{} concurrent requests, prompt [{}, {}], max_tokens [{}, {}]", options.w2_requests,
        options.min_prompt, options.max_prompt, options.min_output, options.max_output);
    for (int64_t i = 0; i < options.w2_requests; ++i) {
      const int64_t prompt = Uniform(rng, options.min_prompt, options.max_prompt);
      const int64_t output = Uniform(rng, options.min_output, options.max_output);
      workload.requests.push_back({RandomPrompt(rng, vocab, prompt), output});
    }
  } else if (name == "W3") {
    std::mt19937_64 rng(options.seed + 5);
    workload.open_loop = true;
    workload.concurrency = options.w3_requests;
    workload.description = fmt::format(
        "{} requests, Poisson arrivals at {} req/s (seeded; first at t = 0), prompt [{}, {}], "
        "max_tokens [{}, {}]",
        options.w3_requests, options.w3_rate, options.w3_min_prompt, options.w3_max_prompt,
        options.w3_min_output, options.w3_max_output);
    std::exponential_distribution<double> gap(options.w3_rate);
    double arrival = 0.0;
    for (int64_t i = 0; i < options.w3_requests; ++i) {
      if (i > 0) arrival += gap(rng);
      const int64_t prompt = Uniform(rng, options.w3_min_prompt, options.w3_max_prompt);
      const int64_t output = Uniform(rng, options.w3_min_output, options.w3_max_output);
      workload.requests.push_back({RandomPrompt(rng, vocab, prompt), output, arrival});
    }
  } else if (name == "prefix") {
    std::mt19937_64 rng(options.seed + 6);
    workload.kind = Kind::kPrefix;
    workload.concurrency = options.prefix_requests;
    workload.description = fmt::format(
        "{} requests at once, a shared {}-token prefix + {} own tokens each, max_tokens {}",
        options.prefix_requests, options.prefix_shared, options.prefix_own, options.prefix_output);
    const std::vector<int32_t> shared = RandomPrompt(rng, vocab, options.prefix_shared);
    for (int64_t i = 0; i < options.prefix_requests; ++i) {
      std::vector<int32_t> prompt = shared;
      const std::vector<int32_t> own = RandomPrompt(rng, vocab, options.prefix_own);
      prompt.insert(prompt.end(), own.begin(), own.end());
      workload.requests.push_back({std::move(prompt), options.prefix_output});
    }
  } else if (name == "overload") {
    std::mt19937_64 rng(options.seed + 7);
    workload.kind = Kind::kOverload;
    workload.baseline = false;
    workload.concurrency = options.overload_requests;
    workload.description = fmt::format(
        "{} requests at once, prompt {}, max_tokens {}, KV pool for {} of them; odd requests "
        "priority 1 (low), even 0",
        options.overload_requests, options.overload_prompt, options.overload_output,
        options.overload_fit);
    for (int64_t i = 0; i < options.overload_requests; ++i) {
      workload.requests.push_back(
          {RandomPrompt(rng, vocab, options.overload_prompt), options.overload_output, 0.0, i % 2});
    }
  } else {
    std::mt19937_64 rng(options.seed + 2);
    workload.kind = Kind::kSoak;
    workload.baseline = false;
    workload.concurrency = options.soak_concurrency;
    workload.description =
        fmt::format("{} requests at concurrency {}, prompt [{}, {}], max_tokens [{}, {}]",
                    options.soak_requests, options.soak_concurrency, kSoakMinPrompt, kSoakMaxPrompt,
                    kSoakMinOutput, kSoakMaxOutput);
    for (int64_t i = 0; i < options.soak_requests; ++i) {
      const int64_t prompt = Uniform(rng, kSoakMinPrompt, kSoakMaxPrompt);
      const int64_t output = Uniform(rng, kSoakMinOutput, kSoakMaxOutput);
      workload.requests.push_back({RandomPrompt(rng, vocab, prompt), output});
    }
  }
  INFER_CHECK(!workload.requests.empty(), "{}: no requests", name);
  for (const WorkloadRequest& request : workload.requests) {
    const auto total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
    INFER_CHECK(!request.prompt.empty() && request.max_tokens >= 1 && total <= max_len,
                "{}: a request of prompt {} + max_tokens {} does not fit max_model_len {} (lower "
                "the lengths or raise --max-model-len)",
                name, request.prompt.size(), request.max_tokens, max_len);
  }

  // The engine modes it is served with, each on a fresh engine.
  EngineConfig sized = base;
  sized.num_blocks = options.num_kv_blocks > 0 ? options.num_kv_blocks
                                               : WorkloadBlocks(workload, options.block_size);
  switch (workload.kind) {
    case Kind::kStandard:
      workload.modes = {ContinuousMode(sized), StaticMode(sized, options)};
      break;
    case Kind::kPrefix: {
      ModeSpec off{"continuous-no-prefix-cache", sized};
      off.config.enable_prefix_caching = false;
      workload.modes = {ContinuousMode(sized), off, StaticMode(sized, options)};
      break;
    }
    case Kind::kOverload: {
      EngineConfig config = base;
      const WorkloadRequest& first = workload.requests.front();
      config.num_blocks = options.overload_fit *
                          BlocksFor(static_cast<int64_t>(first.prompt.size()) + first.max_tokens,
                                    options.block_size);
      config.max_waiting_requests = options.overload_max_waiting;
      ModeSpec preempt{"continuous-preempt-priority", config};
      preempt.config.enable_preemption = true;
      preempt.config.scheduler_policy = SchedulerPolicy::kPriority;
      workload.modes = {{"continuous", config}, preempt};
      break;
    }
    case Kind::kSoak:
      workload.modes = {ContinuousMode(sized)};
      break;
  }
  for (ModeSpec& mode : workload.modes) mode.config.Validate();
  return workload;
}

SamplingParams GreedyParams(int64_t max_tokens, uint64_t seed) {
  SamplingParams params;
  params.temperature = 0.0;
  params.top_p = 1.0;
  params.repetition_penalty = 1.0;
  params.max_new_tokens = max_tokens;
  params.seed = seed;
  return params;
}

GenerateOptions BaselineOptions(const cli::GenerationSession& session, const Options& options) {
  GenerateOptions generate_options;
  generate_options.eos_token_ids = session.eos_token_ids();
  generate_options.kv_cache_dtype = ParseKvCacheDType(options.kv_cache_dtype);
  generate_options.max_num_batched_tokens = options.max_num_batched_tokens;
  return generate_options;
}

// The workload's requests one after another through generate() (each on its own engine, so no
// prefix cache carries over), greedy, same EOS ids as the served modes.
PhaseResult RunBaseline(const Workload& workload, cli::GenerationSession& session,
                        const Options& options) {
  bench::ProgressModel model(session.model());
  const GenerateOptions generate_options = BaselineOptions(session, options);
  PhaseResult phase;
  const auto start = Clock::now();
  const size_t n = workload.requests.size();
  for (size_t i = 0; i < n; ++i) {
    const WorkloadRequest& request = workload.requests[i];
    model.SetLabel(fmt::format("baseline {}: request {}/{} (prompt {}, max_tokens {})",
                               workload.name, i + 1, n, request.prompt.size(), request.max_tokens));
    RequestRecord record;
    record.send_s = SecondsSince(start);
    try {
      const GenerationOutput result =
          Generate(model, session.tokenizer(), request.prompt,
                   GreedyParams(request.max_tokens, options.seed), generate_options);
      record.finish_s = SecondsSince(start);
      record.ok = true;
      record.latency_s = record.finish_s - record.send_s;
      record.ttft_s = result.timing.prefill_time_s;
      record.itl_s = result.timing.decode_times_s;
      record.completion_tokens = result.generated_tokens();
      record.token_ids = result.token_ids;
      record.finish_reason = FinishReasonName(result.finish_reason.value_or(FinishReason::kLength));
    } catch (const std::exception& e) {
      record.finish_s = SecondsSince(start);
      record.error = e.what();
    }
    phase.records.push_back(std::move(record));
    bench::ClearProgressLine();
    std::fprintf(stderr, "baseline %s: %zu/%zu done, %.1f s\n", workload.name.c_str(), i + 1, n,
                 SecondsSince(start));
  }
  phase.wall_s = SecondsSince(start);
  return phase;
}

bool IsEos(const std::vector<int32_t>& eos_ids, int32_t id) {
  return std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end();
}

// Reads one completion's SSE stream: timings, and the checks that nothing was lost or
// duplicated (exactly one terminal event, last; usage.completion_tokens equal to the token
// events, counting a final EOS token that carried no text and so no event).
RequestRecord AnalyzeResponse(const server::CompletionResult& result,
                              const WorkloadRequest& request, const std::vector<int32_t>& eos_ids,
                              int64_t vocab) {
  RequestRecord record;
  record.status = result.status;
  if (!result.transport_error.empty()) {
    record.error = "transport: " + result.transport_error;
    return record;
  }
  if (result.status != 200) {
    record.error = fmt::format("HTTP {}: {}", result.status, result.body.substr(0, 200));
    return record;
  }
  std::optional<double> last_token_s, first_token_s, done_s;
  int64_t usage_prompt = -1;
  std::string problem;
  for (size_t i = 0; i < result.events.size(); ++i) {
    const server::SseEvent& event = result.events[i];
    const double t = result.event_times_s[i];
    if (event.event != "token" && event.event != "done" && event.event != "error") continue;
    if (record.terminal_events > 0) record.event_after_terminal = true;
    const Json data = Json::parse(event.data, nullptr, /*allow_exceptions=*/false);
    if (data.is_discarded() || !data.is_object()) {
      if (problem.empty()) problem = fmt::format("bad {} event data: {}", event.event, event.data);
      if (event.event != "token") ++record.terminal_events;
      continue;
    }
    if (event.event == "token") {
      ++record.token_events;
      const auto id = data.find("token_id");
      if (id == data.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() >= vocab) {
        if (problem.empty()) problem = "token event without a valid token_id: " + event.data;
      } else {
        record.token_ids.push_back(id->get<int32_t>());
      }
      if (last_token_s) record.itl_s.push_back(t - *last_token_s);
      if (!first_token_s) first_token_s = t;
      last_token_s = t;
    } else if (event.event == "done") {
      ++record.terminal_events;
      record.got_done = true;
      done_s = t;
      try {
        record.finish_reason = data.value("finish_reason", "");
        const Json usage = data.value("usage", Json::object());
        record.completion_tokens = usage.value("completion_tokens", int64_t{-1});
        usage_prompt = usage.value("prompt_tokens", int64_t{-1});
      } catch (const std::exception&) {
        if (problem.empty()) problem = "bad done event: " + event.data;
      }
    } else {
      ++record.terminal_events;
      record.got_error_event = true;
      const auto message = data.find("error");
      if (problem.empty()) {
        problem = "error event: " + (message != data.end() && message->is_string()
                                         ? message->get<std::string>()
                                         : event.data);
      }
    }
  }
  record.finish_s =
      done_s.value_or(result.event_times_s.empty() ? 0.0 : result.event_times_s.back());
  if (done_s) {
    record.latency_s = *done_s;
    record.ttft_s = first_token_s.value_or(*done_s);  // a lone EOS token streams no token event
    const bool eos_without_event =
        record.finish_reason == "eos" &&
        (record.token_ids.empty() || !IsEos(eos_ids, record.token_ids.back()));
    const int64_t expected_events = record.completion_tokens - (eos_without_event ? 1 : 0);
    record.usage_consistent =
        record.token_events == expected_events &&
        usage_prompt == static_cast<int64_t>(request.prompt.size()) &&
        record.completion_tokens >= 1 && record.completion_tokens <= request.max_tokens &&
        (record.finish_reason != "length" || record.completion_tokens == request.max_tokens);
    if (!record.usage_consistent && problem.empty()) {
      problem = fmt::format(
          "usage mismatch: completion_tokens {} (finish {}, max_tokens {}), {} token events, "
          "prompt_tokens {} (sent {})",
          record.completion_tokens, record.finish_reason, request.max_tokens, record.token_events,
          usage_prompt, request.prompt.size());
    }
  }
  if (problem.empty() && record.terminal_events == 0) problem = "stream ended without done";
  if (problem.empty() && record.terminal_events > 1) {
    problem = fmt::format("{} terminal events", record.terminal_events);
  }
  if (problem.empty() && record.event_after_terminal) problem = "events after done";
  record.ok = problem.empty();
  record.error = problem;
  return record;
}

struct ServeTarget {
  int port = 0;
  std::string served_model;
  int64_t vocab = 0;
  std::vector<int32_t> eos_ids;
};

std::string RequestBody(const ServeTarget& target, const WorkloadRequest& request, uint64_t seed) {
  Json body = {{"model", target.served_model},
               {"prompt", request.prompt},
               {"max_tokens", request.max_tokens},
               {"temperature", 0.0},
               {"top_p", 1.0},
               {"repetition_penalty", 1.0},
               {"seed", seed},
               {"stream", true}};
  if (request.priority) body["priority"] = *request.priority;
  return body.dump();
}

// Sends the workload's requests (closed loop: `concurrency` client threads, each sending its
// next request when its previous one ends; open loop: one thread per request, at its arrival
// time); prints progress from this thread.
PhaseResult ServeWorkload(const Workload& workload, const ServeTarget& target,
                          const Options& options, const std::string& label) {
  const size_t n = workload.requests.size();
  std::vector<std::string> bodies;
  for (const WorkloadRequest& request : workload.requests) {
    bodies.push_back(RequestBody(target, request, options.seed));
  }
  PhaseResult phase;
  phase.records.resize(n);
  phase.rss_mib.assign(11, 0.0);
  phase.rss_mib[0] = Mib(CurrentRssBytes());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> tokens_streamed{0};
  std::mutex mutex;
  std::condition_variable all_done;
  size_t completed = 0;
  const int64_t overflows_before = TcpExtCounter("ListenOverflows");
  const int64_t retransmits_before = TcpExtCounter("TCPSynRetrans");
  const auto start = Clock::now();
  const auto send = [&](size_t i) {
    RequestRecord record;
    const double send_s = SecondsSince(start);
    try {
      const server::CompletionResult result = server::PostCompletion(
          kHost, target.port, bodies[i],
          [&](const server::SseEvent& event) {
            if (event.event == "token") tokens_streamed.fetch_add(1);
            return true;
          },
          options.request_timeout_s);
      record = AnalyzeResponse(result, workload.requests[i], target.eos_ids, target.vocab);
    } catch (const std::exception& e) {
      record.error = fmt::format("client: {}", e.what());
    }
    record.send_s = send_s;
    if (record.finish_s > 0.0) {
      record.finish_s += send_s;
    } else {
      record.finish_s = SecondsSince(start);
    }
    std::lock_guard lock(mutex);
    phase.records[i] = std::move(record);
    ++completed;
    for (size_t tenth = 1; tenth <= 10; ++tenth) {
      if (completed == (tenth * n + 9) / 10) phase.rss_mib[tenth] = Mib(CurrentRssBytes());
    }
    if (completed == n) all_done.notify_all();
  };
  std::vector<std::thread> clients;
  if (workload.open_loop) {
    for (size_t i = 0; i < n; ++i) {
      clients.emplace_back([&, i] {
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(workload.requests[i].arrival_s)));
        send(i);
      });
    }
  } else {
    const auto num_clients = static_cast<size_t>(std::max<int64_t>(1, workload.concurrency));
    for (size_t c = 0; c < std::min(num_clients, n); ++c) {
      clients.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < n;) send(i);
      });
    }
  }
  {
    std::unique_lock lock(mutex);
    while (!all_done.wait_for(lock, std::chrono::seconds(1), [&] { return completed == n; })) {
      std::fprintf(stderr, "\r  serving %s: %zu/%zu done, %lld tokens streamed, %.1f s   ",
                   label.c_str(), completed, n, static_cast<long long>(tokens_streamed.load()),
                   SecondsSince(start));
      std::fflush(stderr);
    }
  }
  for (std::thread& thread : clients) thread.join();
  phase.listen_overflows = TcpExtCounter("ListenOverflows") - overflows_before;
  phase.syn_retransmits = TcpExtCounter("TCPSynRetrans") - retransmits_before;
  phase.wall_s = 0.0;
  double first_send = phase.records.empty() ? 0.0 : phase.records.front().send_s;
  for (const RequestRecord& record : phase.records) {
    phase.wall_s = std::max(phase.wall_s, record.finish_s);
    first_send = std::min(first_send, record.send_s);
  }
  phase.wall_s -= first_send;
  bench::ClearProgressLine();
  std::fprintf(stderr, "serving %s: %zu/%zu done, %.1f s\n", label.c_str(), n, n,
               SecondsSince(start));
  return phase;
}

// Runs Engine + HttpServer on a thread; Stop() (or the destructor) shuts it down and joins.
class ServerThread {
 public:
  ServerThread(Engine& engine, server::ServerOptions options)
      : server_(engine, std::move(options)) {
    port_ = server_.Bind();
    thread_ = std::thread([this] {
      try {
        server_.Run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "server: %s\n", e.what());
      }
    });
    const auto start = Clock::now();
    while (server::HttpGet(kHost, port_, "/health").first != 200) {
      INFER_CHECK(SecondsSince(start) < 30.0, "the server on port {} did not answer /health",
                  port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServerThread() { Stop(); }
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;

  int port() const { return port_; }
  void Stop() {
    if (!thread_.joinable()) return;
    server_.Shutdown("benchmark finished", 5.0);
    thread_.join();
  }

 private:
  server::HttpServer server_;
  int port_ = 0;
  std::thread thread_;
};

struct ModeResult {
  ModeSpec mode;
  PhaseResult phase;
  SchedulerStats stats;  // of the workload's requests (the warmup's subtracted)
  KvCacheInfo kv;
  Json kv_summary;  // Engine::KvCacheSummaryJson after the workload
  TraceSummary trace;
};

// The engine's steps end after their outputs are delivered: wait until it is idle so that its
// counters include the last step.
void WaitIdle(const Engine& engine) {
  const auto start = Clock::now();
  while (engine.HasWork() && SecondsSince(start) < 30.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

SchedulerStats StatsSince(const SchedulerStats& now, const SchedulerStats& before) {
  return {now.prompt_tokens - before.prompt_tokens,
          now.cached_prompt_tokens - before.cached_prompt_tokens,
          now.computed_tokens - before.computed_tokens, now.preemptions - before.preemptions};
}

// One mode: a fresh engine (its own KV pool and prefix cache) and server, a warmup request,
// then the workload.
ModeResult RunMode(const Workload& workload, const ModeSpec& mode, TraceModel& model,
                   const cli::GenerationSession& session, const Options& options) {
  ModeResult result;
  result.mode = mode;
  Engine engine(mode.config, model, session.tokenizer(), session.eos_token_ids());
  result.kv = engine.kv_cache();
  server::ServerOptions server_options;
  server_options.host = kHost;
  server_options.port = 0;
  const std::string label = fmt::format("{} [{}]", workload.name, mode.name);
  {
    ServerThread server(engine, server_options);
    const ServeTarget target{server.port(), mode.config.model, model.vocab_size(),
                             session.eos_token_ids()};
    std::fprintf(stderr, "serving %s on %s:%d: %s batching, max_num_seqs %lld, %lld KV blocks\n",
                 label.c_str(), kHost, target.port,
                 std::string(BatchingModeName(mode.config.batching_mode)).c_str(),
                 static_cast<long long>(mode.config.max_num_seqs),
                 static_cast<long long>(result.kv.num_blocks));
    std::mt19937_64 rng(options.seed + 4);
    const WorkloadRequest warmup{RandomPrompt(rng, model.vocab_size(), 8), 4};
    const RequestRecord warm = AnalyzeResponse(
        server::PostCompletion(kHost, target.port, RequestBody(target, warmup, options.seed), {},
                               options.request_timeout_s),
        warmup, target.eos_ids, target.vocab);
    if (!warm.ok) {
      std::fprintf(stderr, "warning: the warmup request failed: %s\n", warm.error.c_str());
    }
    WaitIdle(engine);
    const SchedulerStats before = engine.stats();
    model.Reset();
    result.phase = ServeWorkload(workload, target, options, label);
    WaitIdle(engine);
    result.stats = StatsSince(engine.stats(), before);
    result.kv_summary = Json::parse(engine.KvCacheSummaryJson(), nullptr, false);
    server.Stop();
  }
  result.trace = model.Summarize(workload.requests);
  return result;
}

// {count, mean_ms, p50_ms, p95_ms, p99_ms, max_ms} of values in seconds.
Json MsStats(std::vector<double> values_s) {
  std::sort(values_s.begin(), values_s.end());
  double sum = 0.0;
  for (const double value : values_s) sum += value;
  Json stats;
  stats["count"] = values_s.size();
  stats["mean_ms"] = values_s.empty() ? 0.0 : sum / static_cast<double>(values_s.size()) * 1e3;
  stats["p50_ms"] = bench::Percentile(values_s, 0.50) * 1e3;
  stats["p95_ms"] = bench::Percentile(values_s, 0.95) * 1e3;
  stats["p99_ms"] = bench::Percentile(values_s, 0.99) * 1e3;
  stats["max_ms"] = values_s.empty() ? 0.0 : values_s.back() * 1e3;
  return stats;
}

Json Summarize(const PhaseResult& phase) {
  std::vector<double> ttft, itl, latency;
  int64_t ok = 0, http_503 = 0, completion_tokens = 0;
  for (const RequestRecord& record : phase.records) {
    if (record.status == 503) ++http_503;
    if (!record.ok) continue;
    ++ok;
    completion_tokens += record.completion_tokens;
    ttft.push_back(record.ttft_s);
    latency.push_back(record.latency_s);
    itl.insert(itl.end(), record.itl_s.begin(), record.itl_s.end());
  }
  Json summary;
  summary["requests"] = phase.records.size();
  summary["ok"] = ok;
  summary["failed"] = static_cast<int64_t>(phase.records.size()) - ok;
  summary["http_503"] = http_503;
  summary["completion_tokens"] = completion_tokens;
  summary["wall_s"] = phase.wall_s;
  summary["output_tok_s"] =
      phase.wall_s > 0.0 ? static_cast<double>(completion_tokens) / phase.wall_s : 0.0;
  summary["ttft"] = MsStats(ttft);
  summary["itl"] = MsStats(itl);
  summary["latency"] = MsStats(latency);
  return summary;
}

Json EngineJson(const EngineConfig& config, const KvCacheInfo& kv) {
  return {{"batching_mode", BatchingModeName(config.batching_mode)},
          {"scheduler_policy", SchedulerPolicyName(config.scheduler_policy)},
          {"max_num_seqs", config.max_num_seqs},
          {"max_num_batched_tokens", config.max_num_batched_tokens},
          {"max_waiting_requests", config.max_waiting_requests},
          {"batch_wait_timeout_s", config.batch_wait_timeout_s},
          {"max_model_len", config.max_model_len},
          {"block_size", config.block_size},
          {"num_blocks", kv.num_blocks},
          {"kv_cache_bytes", kv.bytes},
          {"kv_cache_dtype", DTypeName(config.kv_cache_dtype)},
          {"enable_prefix_caching", config.enable_prefix_caching},
          {"enable_preemption", config.enable_preemption}};
}

// Prompt tokens the engine computed, from its counters: every computed token is a prompt
// token, or the input of a decode step (each generated token but the last). Exact without
// preemption (a recompute runs generated tokens again) and when every request succeeded.
std::optional<int64_t> PromptTokensFromStats(const ModeResult& result) {
  if (result.stats.preemptions > 0) return std::nullopt;
  int64_t decode_inputs = 0;
  for (const RequestRecord& record : result.phase.records) {
    if (!record.ok) return std::nullopt;
    decode_inputs += record.completion_tokens - 1;
  }
  return result.stats.computed_tokens - decode_inputs;
}

Json ComputeJson(const ModeResult& result, int64_t unique_prompt_tokens) {
  const SchedulerStats& stats = result.stats;
  const TraceSummary& trace = result.trace;
  Json json;
  json["engine_prompt_tokens"] = stats.prompt_tokens;
  json["engine_cached_prompt_tokens"] = stats.cached_prompt_tokens;
  json["engine_computed_tokens"] = stats.computed_tokens;
  json["engine_preemptions"] = stats.preemptions;
  json["prefix_cache_hit_rate"] = stats.prompt_tokens > 0
                                      ? static_cast<double>(stats.cached_prompt_tokens) /
                                            static_cast<double>(stats.prompt_tokens)
                                      : 0.0;
  json["prompt_tokens_computed"] = trace.prompt_tokens_computed;
  const std::optional<int64_t> from_stats = PromptTokensFromStats(result);
  json["prompt_tokens_computed_from_engine_stats"] = from_stats ? Json(*from_stats) : Json(nullptr);
  json["unique_prompt_tokens"] = unique_prompt_tokens;
  json["computed_over_unique"] = unique_prompt_tokens > 0
                                     ? static_cast<double>(trace.prompt_tokens_computed) /
                                           static_cast<double>(unique_prompt_tokens)
                                     : 0.0;
  json["forward_tokens"] = trace.computed_tokens;
  json["recomputed_tokens"] = trace.recomputed_tokens;
  json["preemptions_with_recompute"] = trace.rewinds;
  json["traced_sequences"] = trace.sequences;
  json["unmatched_sequences"] = trace.unmatched_sequences;
  return json;
}

// Greedy both ways: the served tokens should be the reference's (the streamed ids omit a final
// EOS that had no text; generate() keeps it).
bool SameOutput(const RequestRecord& served, const RequestRecord& reference) {
  if (!served.ok || !reference.ok || served.completion_tokens != reference.completion_tokens)
    return false;
  const bool served_shorter = served.token_ids.size() <= reference.token_ids.size();
  const std::vector<int32_t>& shorter = served_shorter ? served.token_ids : reference.token_ids;
  const std::vector<int32_t>& longer = served_shorter ? reference.token_ids : served.token_ids;
  return longer.size() - shorter.size() <= 1 &&
         std::equal(shorter.begin(), shorter.end(), longer.begin());
}

int64_t IdenticalOutputs(const PhaseResult& served, const PhaseResult& reference) {
  int64_t same = 0;
  for (size_t i = 0; i < served.records.size(); ++i) {
    if (SameOutput(served.records[i], reference.records[i])) ++same;
  }
  return same;
}

struct SoakChecks {
  int64_t lost = 0;        // no HTTP answer, or no done or error event
  int64_t duplicated = 0;  // several terminal events, or events after done
  int64_t usage_mismatch = 0;
  int64_t failed = 0;
  int64_t http_503 = 0;
  int64_t error_events = 0;  // streams that ended with a clear `error` event
  bool allow_503 = false;
  bool allow_error_events = false;
  double rss_at_10pct_mib = 0.0;
  double rss_at_end_mib = 0.0;
  double rss_growth_mib = 0.0;
  double rss_limit_mib = 0.0;
  bool pass = false;
};

// Soak and overload: every request answered exactly once and consistently; 503s (and, in the
// overload, clear error events) only where allowed; RSS growth from 10% to 100% of the requests
// within the limit.
SoakChecks CheckServed(const PhaseResult& phase, const Options& options, bool allow_503,
                       bool allow_error_events) {
  SoakChecks checks;
  for (const RequestRecord& record : phase.records) {
    if (record.status == 503) ++checks.http_503;
    if (!record.ok) ++checks.failed;
    // No HTTP answer (the connection failed), or a stream that ended without done / error.
    if (record.status == 0 || (record.status == 200 && record.terminal_events == 0)) ++checks.lost;
    if (record.status != 200) continue;
    if (record.terminal_events > 1 || record.event_after_terminal) ++checks.duplicated;
    if (record.got_done && !record.usage_consistent) ++checks.usage_mismatch;
    if (record.got_error_event && record.terminal_events == 1 && !record.event_after_terminal)
      ++checks.error_events;
  }
  checks.allow_503 = allow_503;
  checks.allow_error_events = allow_error_events;
  checks.rss_at_10pct_mib = phase.rss_mib[1];
  checks.rss_at_end_mib = phase.rss_mib[10];
  checks.rss_growth_mib = checks.rss_at_end_mib - checks.rss_at_10pct_mib;
  checks.rss_limit_mib = options.max_rss_growth_mib;
  const int64_t failed_other = checks.failed - (checks.allow_503 ? checks.http_503 : 0) -
                               (checks.allow_error_events ? checks.error_events : 0);
  checks.pass = checks.lost == 0 && checks.duplicated == 0 && checks.usage_mismatch == 0 &&
                failed_other == 0 && (checks.allow_503 || checks.http_503 == 0) &&
                checks.rss_growth_mib <= checks.rss_limit_mib;
  return checks;
}

Json ChecksJson(const SoakChecks& checks, const PhaseResult& phase) {
  Json json;
  json["pass"] = checks.pass;
  json["lost"] = checks.lost;
  json["duplicated"] = checks.duplicated;
  json["usage_mismatch"] = checks.usage_mismatch;
  json["failed"] = checks.failed;
  json["http_503"] = checks.http_503;
  json["http_503_allowed"] = checks.allow_503;
  json["error_events"] = checks.error_events;
  json["error_events_allowed"] = checks.allow_error_events;
  json["rss_mib_by_tenth"] = phase.rss_mib;  // before the first request, then after each tenth
  json["rss_at_10pct_mib"] = checks.rss_at_10pct_mib;
  json["rss_at_end_mib"] = checks.rss_at_end_mib;
  json["rss_growth_mib"] = checks.rss_growth_mib;
  json["rss_growth_limit_mib"] = checks.rss_limit_mib;
  return json;
}

std::string ChecksLine(const std::string& label, int64_t requests, const SoakChecks& checks) {
  return fmt::format(
      "{}: {} requests: {} completed, {} lost, {} duplicated, {} usage mismatches, {} HTTP "
      "503{}, {} error events{}, {} failed in all; RSS {:.1f} MiB at 10% -> {:.1f} MiB at end "
      "({:+.1f} MiB, limit {:.0f}): {}",
      label, requests, requests - checks.failed, checks.lost, checks.duplicated,
      checks.usage_mismatch, checks.http_503, checks.allow_503 ? " (allowed)" : "",
      checks.error_events, checks.allow_error_events ? " (allowed)" : "", checks.failed,
      checks.rss_at_10pct_mib, checks.rss_at_end_mib, checks.rss_growth_mib, checks.rss_limit_mib,
      checks.pass ? "PASS" : "FAIL");
}

std::string TableHeader() {
  return "| workload | mode | requests | failed | wall s | output tokens | output tok/s | "
         "TTFT P50 / P95 / P99 ms | ITL P50 / P95 / P99 ms | latency P50 / P95 / P99 ms |\n"
         "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n";
}

std::string TableRow(const std::string& workload, const std::string& mode, const Json& s) {
  const auto triple = [](const Json& stats) {
    return fmt::format("{:.1f} / {:.1f} / {:.1f}", stats["p50_ms"].get<double>(),
                       stats["p95_ms"].get<double>(), stats["p99_ms"].get<double>());
  };
  return fmt::format("| {} | {} | {} | {} | {:.2f} | {} | {:.2f} | {} | {} | {} |\n", workload,
                     mode, s["requests"].get<int64_t>(), s["failed"].get<int64_t>(),
                     s["wall_s"].get<double>(), s["completion_tokens"].get<int64_t>(),
                     s["output_tok_s"].get<double>(), triple(s["ttft"]), triple(s["itl"]),
                     triple(s["latency"]));
}

double TtftMs(const Json& summary, const char* percentile) {
  return summary["ttft"][percentile].get<double>();
}

double Ratio(double numerator, double denominator) {
  return denominator > 0.0 ? numerator / denominator : 0.0;
}

// One acceptance point: `value` against `threshold` (at least, or at most).
struct Acceptance {
  std::string workload;
  std::string check;
  double value = 0.0;
  double threshold = 0.0;
  bool at_least = true;
  std::string detail;
  bool met() const { return at_least ? value >= threshold : value <= threshold; }
};

Json AcceptanceJson(const Acceptance& a) {
  return {{"check", a.check},       {"value", a.value}, {"threshold", a.threshold},
          {"at_least", a.at_least}, {"met", a.met()},   {"detail", a.detail}};
}

std::string AcceptanceLine(const Acceptance& a) {
  return fmt::format("{}: {} = **{:.2f}** ({} {:.2f}; {}): {}", a.workload, a.check, a.value,
                     a.at_least ? ">=" : "<=", a.threshold, a.detail, a.met() ? "MET" : "NOT MET");
}

std::vector<std::string> ExpandWorkloads(const std::vector<std::string>& names) {
  std::vector<std::string> expanded;
  const auto add = [&](const std::string& name) {
    if (std::find(expanded.begin(), expanded.end(), name) == expanded.end())
      expanded.push_back(name);
  };
  for (const std::string& name : names) {
    if (name == "all") {
      for (const char* each : {"W1", "W2", "W3", "prefix", "overload"}) add(each);
    } else {
      add(name);
    }
  }
  if (expanded.empty()) expanded = {"W1", "W2", "W3", "prefix", "overload"};
  return expanded;
}

constexpr char kLogHeader[] = R"(# Serving benchmark log

`benchmarks/bench_serving` serves a model over HTTP inside its own process and measures it
beside a sequential `generate()` baseline on the same prompts, in one run, so ratios do not
depend on how busy the machine was on another day. Entries are appended, oldest first. JSON
reports are in `benchmarks/reports/serving-*.json`.

How to read the table:
- **mode**: `continuous`, `static`, `continuous-no-prefix-cache`, `continuous-preempt-priority`
  = POST /v1/completions with token-id prompts, streaming SSE, on a fresh engine of that
  batching mode; `baseline` = the same prompts one after another through `generate()`. Greedy
  everywhere, same EOS ids, so all generate the same tokens.
- **wall s**: serving, first send to last `done` event; baseline, the whole sequential loop.
  **output tok/s** = completion tokens of the requests that succeeded / wall s.
- **TTFT**: send to first `token` event (baseline: prefill plus first sample). **ITL**: gap
  between consecutive `token` events of a request (baseline: decode step time). **latency**:
  send to `done` (baseline: the `generate()` call). P50 / P95 / P99 in ms, over requests (ITL:
  over all gaps of all requests).
- **prompt tokens computed**: tokens at prompt positions the model's forward ran, counted per
  sequence from the forward calls (recomputes after preemption included); without preemption it
  equals the engine's computed_tokens - sum(completion_tokens - 1).
- The host is shared: compare ratios measured in one run, not numbers across days.
)";

int Run(const Options& options) {
  const std::vector<std::string> names = ExpandWorkloads(options.workloads);
  cli::GenerationSession session(options.model);
  LanguageModel& base_model = session.model();
  TraceModel model(base_model);
  const LoadedModel& loaded = session.loaded();
  const std::string model_name = cli::ModelName(loaded.path);
  const int64_t max_len = std::min(options.max_model_len, model.context_length());
  const EngineConfig base = BaseConfig(options, model_name);
  std::vector<Workload> workloads;
  workloads.reserve(names.size());
  for (const std::string& name : names) {
    workloads.push_back(MakeWorkload(name, options, model.vocab_size(), max_len, base));
  }
  const int threads = options.model.threads > 0
                          ? options.model.threads
                          : static_cast<int>(std::thread::hardware_concurrency());
  const std::string isa(kernels::IsaName(kernels::ActiveIsa()));
  const std::string precision(kernels::MatMulPrecisionName(options.model.matmul_precision));
  const std::string cpu = bench::CpuDescription();
  std::printf(
      "=== Serving benchmark ===\nmodel: %s (%s%s), vocab %lld, EOS ids %zu\ncpu: %s\nthreads: "
      "%d, isa: %s, matmul precision %s\nengine: max_num_seqs %lld (static %lld), "
      "max_num_batched_tokens %lld, max_waiting_requests %lld, batch_wait_timeout %.3f s, "
      "max_model_len %lld, KV %s blocks of %lld\n",
      loaded.path.c_str(), std::string(DTypeName(loaded.weight_dtype)).c_str(),
      options.model.load_format == "dummy" ? ", dummy weights" : "",
      static_cast<long long>(model.vocab_size()), session.eos_token_ids().size(), cpu.c_str(),
      threads, isa.c_str(), precision.c_str(), static_cast<long long>(options.max_num_seqs),
      static_cast<long long>(options.static_max_num_seqs),
      static_cast<long long>(options.max_num_batched_tokens),
      static_cast<long long>(options.max_waiting_requests), options.batch_wait_timeout_s,
      static_cast<long long>(max_len), options.kv_cache_dtype.c_str(),
      static_cast<long long>(options.block_size));
  for (const Workload& workload : workloads) {
    std::printf("%s: %s\n", workload.name.c_str(), workload.description.c_str());
  }
  std::fflush(stdout);

  // Baselines first, while nothing else uses the model.
  std::vector<std::optional<PhaseResult>> baselines(workloads.size());
  const bool any_baseline =
      !options.no_baseline &&
      std::any_of(workloads.begin(), workloads.end(), [](const Workload& w) { return w.baseline; });
  if (any_baseline) {
    std::mt19937_64 rng(options.seed + 3);
    Generate(base_model, session.tokenizer(), RandomPrompt(rng, model.vocab_size(), 8),
             GreedyParams(4, options.seed), BaselineOptions(session, options));
    for (size_t i = 0; i < workloads.size(); ++i) {
      if (workloads[i].baseline) baselines[i] = RunBaseline(workloads[i], session, options);
    }
  }

  // Then each mode of each workload on a fresh engine and server over the same model.
  std::vector<std::vector<ModeResult>> served(workloads.size());
  for (size_t i = 0; i < workloads.size(); ++i) {
    for (const ModeSpec& mode : workloads[i].modes) {
      served[i].push_back(RunMode(workloads[i], mode, model, session, options));
    }
  }

  // Results.
  const std::string timestamp = bench::UtcTime("%Y%m%dT%H%M%SZ");
  const std::string commit = bench::CommandOutput("git rev-parse --short HEAD 2>/dev/null");
  const std::string dirty =
      bench::CommandOutput("git status --porcelain --untracked-files=no 2>/dev/null").empty()
          ? ""
          : "+uncommitted";
  std::string table = TableHeader();
  std::string extra_tables;
  std::vector<std::string> notes;
  std::vector<Acceptance> acceptance;
  std::vector<std::string> report_paths;
  bool all_ok = true;
  for (size_t w = 0; w < workloads.size(); ++w) {
    const Workload& workload = workloads[w];
    const std::vector<ModeResult>& modes = served[w];
    const PhaseResult* baseline = baselines[w] ? &*baselines[w] : nullptr;
    const int64_t n = static_cast<int64_t>(workload.requests.size());
    const int64_t unique_prompt = UniquePromptTokens(workload);
    Json report;
    report["phase"] = 4;
    report["bench"] = "serving";
    report["workload"] = workload.name;
    report["description"] = workload.description;
    report["model"] = loaded.path;
    report["served_model"] = model_name;
    report["load_format"] = options.model.load_format;
    report["dtype"] = DTypeName(loaded.weight_dtype);
    report["device"] = "cpu";
    report["cpu"] = cpu;
    report["hardware_threads"] = std::thread::hardware_concurrency();
    report["isa"] = isa;
    report["matmul_precision"] = precision;
    report["threads"] = threads;
    report["commit"] = commit + dirty;
    report["command"] = options.command_line;
    report["timestamp"] = timestamp;
    report["seed"] = options.seed;
    report["concurrency"] = workload.concurrency;
    report["open_loop"] = workload.open_loop;
    report["unique_prompt_tokens"] = unique_prompt;

    std::map<std::string, Json> summaries;
    Json modes_json = Json::object();
    for (const ModeResult& result : modes) {
      const std::string& name = result.mode.name;
      const Json summary = Summarize(result.phase);
      summaries[name] = summary;
      table += TableRow(workload.name, name, summary);
      Json mode_json;
      mode_json["engine"] = EngineJson(result.mode.config, result.kv);
      mode_json["summary"] = summary;
      mode_json["compute"] = ComputeJson(result, unique_prompt);
      mode_json["kv_cache_after"] = result.kv_summary;
      mode_json["host_listen_overflows"] = result.phase.listen_overflows;
      mode_json["host_syn_retransmits"] = result.phase.syn_retransmits;
      if (result.phase.listen_overflows > 0) {
        notes.push_back(fmt::format(
            "{} [{}]: the host counted {} listen-backlog overflows and {} SYN retransmits while "
            "it was served: those connections waited ~1 s to connect",
            workload.name, name, result.phase.listen_overflows, result.phase.syn_retransmits));
      }
      const int64_t failed = summary["failed"].get<int64_t>();
      if (failed > 0 && workload.kind != Kind::kSoak && workload.kind != Kind::kOverload) {
        all_ok = false;
        for (const RequestRecord& record : result.phase.records) {
          if (!record.ok) {
            notes.push_back(fmt::format("{} [{}]: FAILED requests: {} (first: {})", workload.name,
                                        name, failed, record.error));
            break;
          }
        }
      }
      if (baseline != nullptr) {
        const int64_t identical = IdenticalOutputs(result.phase, *baseline);
        mode_json["greedy_outputs_identical_to_generate"] = identical;
        mode_json["ratio_output_tok_s_over_baseline"] =
            Ratio(summary["output_tok_s"].get<double>(),
                  Summarize(*baseline)["output_tok_s"].get<double>());
      }
      if (workload.kind == Kind::kSoak || workload.kind == Kind::kOverload) {
        const bool overload = workload.kind == Kind::kOverload;
        const SoakChecks checks = CheckServed(
            result.phase, options,
            overload || workload.concurrency > result.mode.config.max_waiting_requests, overload);
        mode_json["checks"] = ChecksJson(checks, result.phase);
        notes.push_back(ChecksLine(fmt::format("{} [{}]", workload.name, name), n, checks));
        all_ok = all_ok && checks.pass;
      }
      modes_json[name] = std::move(mode_json);
    }
    report["modes"] = std::move(modes_json);

    // Baseline, and every mode's ratio to it.
    if (baseline != nullptr) {
      const Json baseline_summary = Summarize(*baseline);
      table += TableRow(workload.name, "baseline", baseline_summary);
      report["baseline"] = baseline_summary;
      const double base_tps = baseline_summary["output_tok_s"].get<double>();
      std::string ratios, identical;
      for (const ModeResult& result : modes) {
        const Json& summary = summaries[result.mode.name];
        ratios +=
            fmt::format("{}{} {:.2f}x ({:.2f} tok/s, wall {:.2f} s)", ratios.empty() ? "" : "; ",
                        result.mode.name, Ratio(summary["output_tok_s"].get<double>(), base_tps),
                        summary["output_tok_s"].get<double>(), result.phase.wall_s);
        identical += fmt::format("{}{} {}/{}", identical.empty() ? "" : ", ", result.mode.name,
                                 IdenticalOutputs(result.phase, *baseline), n);
      }
      notes.push_back(fmt::format(
          "{}: output tok/s over the baseline's ({:.2f} tok/s, wall {:.2f} s): {}; greedy outputs "
          "identical to generate(): {}",
          workload.name, base_tps, baseline->wall_s, ratios, identical));
      if (baseline_summary["failed"].get<int64_t>() > 0) {
        all_ok = false;
        notes.push_back(fmt::format("{}: FAILED baseline requests: {}", workload.name,
                                    baseline_summary["failed"].get<int64_t>()));
      }
    } else {
      report["baseline"] = nullptr;
    }

    // Ratios between modes, and the acceptance points.
    Json ratios_json = Json::object();
    std::vector<Acceptance> checks;
    if (summaries.count("continuous") != 0 && summaries.count("static") != 0) {
      const Json& c = summaries["continuous"];
      const Json& s = summaries["static"];
      const double p50 = Ratio(TtftMs(s, "p50_ms"), TtftMs(c, "p50_ms"));
      const double p99 = Ratio(TtftMs(s, "p99_ms"), TtftMs(c, "p99_ms"));
      const double tps = Ratio(c["output_tok_s"].get<double>(), s["output_tok_s"].get<double>());
      ratios_json["ttft_p50_static_over_continuous"] = p50;
      ratios_json["ttft_p99_static_over_continuous"] = p99;
      ratios_json["output_tok_s_continuous_over_static"] = tps;
      const std::string p50_detail = fmt::format("static {:.0f} ms / continuous {:.0f} ms",
                                                 TtftMs(s, "p50_ms"), TtftMs(c, "p50_ms"));
      const std::string p99_detail = fmt::format("static {:.0f} ms / continuous {:.0f} ms",
                                                 TtftMs(s, "p99_ms"), TtftMs(c, "p99_ms"));
      const std::string tps_detail =
          fmt::format("continuous {:.2f} / static {:.2f} tok/s", c["output_tok_s"].get<double>(),
                      s["output_tok_s"].get<double>());
      if (workload.name == "W2") {
        checks.push_back(
            {workload.name, "TTFT P50 static / continuous", p50, 1.5, true, p50_detail});
        checks.push_back(
            {workload.name, "output tok/s continuous / static", tps, 1.0, true, tps_detail});
      } else if (workload.name == "W3") {
        checks.push_back(
            {workload.name, "TTFT P99 static / continuous", p99, 4.0, true, p99_detail});
      } else {
        notes.push_back(fmt::format(
            "{}: TTFT P50 static / continuous {:.2f}x ({}); P99 {:.2f}x; output tok/s continuous "
            "/ static {:.2f}x",
            workload.name, p50, p50_detail, p99, tps));
      }
    }
    if (workload.kind == Kind::kPrefix) {
      extra_tables += fmt::format(
          "\n| {} mode | TTFT P50 ms | prompt tokens computed | unique prompt tokens | computed / "
          "unique | prefix-cache hit rate |\n|---|--:|--:|--:|--:|--:|\n",
          workload.name);
      for (const ModeResult& result : modes) {
        const Json compute = ComputeJson(result, unique_prompt);
        extra_tables += fmt::format("| {} | {:.1f} | {} | {} | {:.3f} | {:.3f} |\n",
                                    result.mode.name, TtftMs(summaries[result.mode.name], "p50_ms"),
                                    compute["prompt_tokens_computed"].get<int64_t>(), unique_prompt,
                                    compute["computed_over_unique"].get<double>(),
                                    compute["prefix_cache_hit_rate"].get<double>());
      }
      if (baseline != nullptr) {
        int64_t baseline_prompt = 0;
        for (const WorkloadRequest& request : workload.requests)
          baseline_prompt += static_cast<int64_t>(request.prompt.size());
        extra_tables += fmt::format("| baseline | {:.1f} | {} | {} | {:.3f} | 0.000 |\n",
                                    TtftMs(Summarize(*baseline), "p50_ms"), baseline_prompt,
                                    unique_prompt, Ratio(baseline_prompt, unique_prompt));
      }
      const ModeResult* on = nullptr;
      const ModeResult* off = nullptr;
      for (const ModeResult& result : modes) {
        if (result.mode.name == "continuous") on = &result;
        if (result.mode.name == "continuous-no-prefix-cache") off = &result;
      }
      if (on != nullptr && off != nullptr) {
        const Json compute_on = ComputeJson(*on, unique_prompt);
        const double over_unique = compute_on["computed_over_unique"].get<double>();
        checks.push_back(
            {workload.name, "prompt tokens computed / unique (prefix caching on)", over_unique, 1.2,
             false,
             fmt::format("{} computed / {} unique; hit rate {:.3f}",
                         compute_on["prompt_tokens_computed"].get<int64_t>(), unique_prompt,
                         compute_on["prefix_cache_hit_rate"].get<double>())});
        const double on_p50 = TtftMs(summaries["continuous"], "p50_ms");
        const double off_p50 = TtftMs(summaries["continuous-no-prefix-cache"], "p50_ms");
        const double ratio = Ratio(off_p50, on_p50);
        ratios_json["ttft_p50_cache_off_over_on"] = ratio;
        checks.push_back({workload.name, "TTFT P50 prefix caching off / on", ratio, 4.0, true,
                          fmt::format("off {:.0f} ms / on {:.0f} ms", off_p50, on_p50)});
      }
    }
    if (workload.kind == Kind::kOverload) {
      extra_tables += fmt::format(
          "\n| {} mode | priority | requests | completed | HTTP 503 | TTFT P50 / P99 ms | latency "
          "P50 / P99 ms | mean finish s | requests preempted | preemptions (recompute) | "
          "recomputed tokens |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
          workload.name);
      Json by_priority = Json::object();
      for (const ModeResult& result : modes) {
        Json per_mode = Json::object();
        for (const int64_t priority : {int64_t{0}, int64_t{1}}) {
          std::vector<double> ttft, latency;
          int64_t count = 0, completed = 0, http_503 = 0, preempted = 0, rewinds = 0,
                  recomputed = 0;
          double finish_sum = 0.0;
          for (size_t i = 0; i < workload.requests.size(); ++i) {
            if (workload.requests[i].priority.value_or(0) != priority) continue;
            const RequestRecord& record = result.phase.records[i];
            const RequestTrace& trace = result.trace.requests[i];
            ++count;
            if (record.status == 503) ++http_503;
            if (trace.rewinds > 0) ++preempted;
            rewinds += trace.rewinds;
            recomputed += trace.recomputed_tokens;
            if (!record.ok) continue;
            ++completed;
            ttft.push_back(record.ttft_s);
            latency.push_back(record.latency_s);
            finish_sum += record.finish_s;
          }
          const Json ttft_stats = MsStats(ttft);
          const Json latency_stats = MsStats(latency);
          const double mean_finish =
              completed > 0 ? finish_sum / static_cast<double>(completed) : 0.0;
          per_mode[std::to_string(priority)] = {{"requests", count},
                                                {"completed", completed},
                                                {"http_503", http_503},
                                                {"ttft", ttft_stats},
                                                {"latency", latency_stats},
                                                {"mean_finish_s", mean_finish},
                                                {"requests_preempted", preempted},
                                                {"preemptions_with_recompute", rewinds},
                                                {"recomputed_tokens", recomputed}};
          extra_tables += fmt::format(
              "| {} | {} | {} | {} | {} | {:.0f} / {:.0f} | {:.0f} / {:.0f} | {:.2f} | {} | {} | "
              "{} |\n",
              result.mode.name, priority, count, completed, http_503,
              ttft_stats["p50_ms"].get<double>(), ttft_stats["p99_ms"].get<double>(),
              latency_stats["p50_ms"].get<double>(), latency_stats["p99_ms"].get<double>(),
              mean_finish, preempted, rewinds, recomputed);
        }
        by_priority[result.mode.name] = std::move(per_mode);
        notes.push_back(fmt::format(
            "{} [{}]: engine preemptions {} ({} of them cost a recompute, {} tokens recomputed); "
            "{} KV blocks ({} tokens)",
            workload.name, result.mode.name, result.stats.preemptions, result.trace.rewinds,
            result.trace.recomputed_tokens, result.kv.num_blocks, result.kv.capacity_tokens()));
      }
      report["by_priority"] = std::move(by_priority);
      if (modes.size() == 2) {
        int64_t both_ok = 0, same = 0;
        for (size_t i = 0; i < workload.requests.size(); ++i) {
          const RequestRecord& a = modes[0].phase.records[i];
          const RequestRecord& b = modes[1].phase.records[i];
          if (!a.ok || !b.ok) continue;
          ++both_ok;
          if (SameOutput(a, b)) ++same;
        }
        report["greedy_outputs_identical_across_modes"] = same;
        report["completed_in_both_modes"] = both_ok;
        notes.push_back(fmt::format(
            "{}: greedy outputs identical between {} and {} (preemption recomputes must not change "
            "them): {}/{} requests completed in both",
            workload.name, modes[0].mode.name, modes[1].mode.name, same, both_ok));
        if (same != both_ok) all_ok = false;
      }
    }
    report["ratios"] = std::move(ratios_json);
    Json acceptance_json = Json::array();
    for (const Acceptance& check : checks) {
      acceptance_json.push_back(AcceptanceJson(check));
      acceptance.push_back(check);
    }
    report["acceptance"] = std::move(acceptance_json);
    report["peak_rss_bytes"] = PeakRssBytes();

    // Per request: its shape and what each mode (and the baseline) made of it.
    Json rows = Json::array();
    for (size_t i = 0; i < workload.requests.size(); ++i) {
      const WorkloadRequest& request = workload.requests[i];
      Json row;
      row["prompt_tokens"] = request.prompt.size();
      row["max_tokens"] = request.max_tokens;
      if (workload.open_loop) row["arrival_ms"] = request.arrival_s * 1e3;
      if (request.priority) row["priority"] = *request.priority;
      for (const ModeResult& result : modes) {
        const RequestRecord& record = result.phase.records[i];
        const RequestTrace& trace = result.trace.requests[i];
        Json served_row;
        served_row["ok"] = record.ok;
        if (!record.ok) served_row["error"] = record.error;
        served_row["status"] = record.status;
        served_row["completion_tokens"] = record.completion_tokens;
        served_row["finish_reason"] = record.finish_reason;
        served_row["send_ms"] = record.send_s * 1e3;
        served_row["ttft_ms"] = record.ttft_s * 1e3;
        served_row["latency_ms"] = record.latency_s * 1e3;
        served_row["finish_ms"] = record.finish_s * 1e3;
        served_row["prompt_tokens_computed"] = trace.prompt_tokens_computed;
        served_row["preemptions_with_recompute"] = trace.rewinds;
        if (baseline != nullptr) {
          served_row["identical_to_generate"] = SameOutput(record, baseline->records[i]);
        }
        row[result.mode.name] = std::move(served_row);
      }
      if (baseline != nullptr) {
        const RequestRecord& base = baseline->records[i];
        row["baseline"] = {{"ok", base.ok},
                           {"completion_tokens", base.completion_tokens},
                           {"ttft_ms", base.ttft_s * 1e3},
                           {"latency_ms", base.latency_s * 1e3}};
      }
      rows.push_back(std::move(row));
    }
    report["requests"] = std::move(rows);

    if (!options.no_report) {
      std::string path;
      if (options.out.empty()) {
        path = fmt::format("benchmarks/reports/serving-{}-{}-{}.json", model_name, workload.name,
                           timestamp);
      } else if (workloads.size() == 1) {
        path = options.out;
      } else {
        const std::filesystem::path out(options.out);
        path = (out.parent_path() /
                (out.stem().string() + "-" + workload.name + out.extension().string()))
                   .string();
      }
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      std::ofstream(path) << report.dump(2) << "\n";
      report_paths.push_back(path);
    }
  }

  std::string acceptance_text;
  for (const Acceptance& check : acceptance) acceptance_text += "- " + AcceptanceLine(check) + "\n";
  std::printf("\n%s%s\n", table.c_str(), extra_tables.c_str());
  for (const std::string& note : notes) std::printf("- %s\n", note.c_str());
  if (!acceptance_text.empty()) std::printf("\nAcceptance:\n%s", acceptance_text.c_str());
  std::printf("peak RSS: %.2f GB\n", static_cast<double>(PeakRssBytes()) / 1e9);
  for (const std::string& path : report_paths) std::printf("report: %s\n", path.c_str());

  if (options.log) {
    const std::filesystem::path log_path(options.log_path);
    const bool exists = std::filesystem::exists(log_path);
    if (!log_path.parent_path().empty())
      std::filesystem::create_directories(log_path.parent_path());
    std::ofstream log(log_path, std::ios::app);
    if (!exists) log << kLogHeader;
    std::string names_text;
    for (const std::string& name : names) names_text += (names_text.empty() ? "" : ", ") + name;
    log << fmt::format("\n## {} — {} on {} (commit {}{})\n\n```\n{}\n```\n\n",
                       bench::UtcTime("%Y-%m-%d %H:%M UTC"), names_text, model_name,
                       commit.empty() ? "?" : commit, dirty, options.command_line);
    log << fmt::format(
        "{}, {} hardware threads, --threads {}, {}, matmul precision {}, {}{}. Engine: "
        "max_num_seqs {} (static {}), max_num_batched_tokens {}, max_waiting_requests {}, "
        "batch_wait_timeout {} s, KV cache {} in blocks of {}, seed {}.\n\n",
        cpu, std::thread::hardware_concurrency(), threads, isa, precision,
        DTypeName(loaded.weight_dtype),
        options.model.load_format == "dummy" ? " dummy weights" : " weights", options.max_num_seqs,
        options.static_max_num_seqs, options.max_num_batched_tokens, options.max_waiting_requests,
        options.batch_wait_timeout_s, options.kv_cache_dtype, options.block_size, options.seed);
    for (size_t w = 0; w < workloads.size(); ++w) {
      std::string modes_text;
      for (const ModeResult& result : served[w]) {
        modes_text += fmt::format("{}{} ({} KV blocks)", modes_text.empty() ? "" : ", ",
                                  result.mode.name, result.kv.num_blocks);
      }
      log << fmt::format("- {}: {}; modes: {}\n", workloads[w].name, workloads[w].description,
                         modes_text);
    }
    log << "\n" << table << extra_tables << "\n";
    for (const std::string& note : notes) log << "- " << note << "\n";
    if (!acceptance_text.empty()) log << "\nAcceptance:\n\n" << acceptance_text;
    log << "\n";
    for (const std::string& path : report_paths) log << "- report: `" << path << "`\n";
    std::printf("log: %s\n", options.log_path.c_str());
  }
  if (!all_ok) std::fprintf(stderr, "bench_serving: FAILED (see above)\n");
  return all_ok ? 0 : 1;
}

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos) return arg;
  std::string quoted = "'";
  for (const char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace
}  // namespace infer

int main(int argc, char** argv) {
  infer::Options options;
  for (int i = 0; i < argc; ++i) {
    options.command_line += (i == 0 ? "" : " ") + infer::ShellQuote(argv[i]);
  }
  CLI::App app{
      "bench_serving: HTTP serving (continuous and static batching, prefix caching, preemption) "
      "beside sequential generate()"};
  infer::cli::AddModelOptions(app, options.model);
  app.add_option("--workload", options.workloads,
                 "W1 | W2 | W3 | prefix | overload | soak | all (= W1, W2, W3, prefix, overload); "
                 "repeatable (default all)")
      ->check(CLI::IsMember({"W1", "W2", "W3", "prefix", "overload", "soak", "all"}));
  app.add_option("--max-num-seqs,--max-batch-size", options.max_num_seqs,
                 "Engine, continuous modes: most requests running at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--static-max-num-seqs", options.static_max_num_seqs,
                 "Engine, static mode: requests per batch (phase 4's max_batch_size)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-num-batched-tokens", options.max_num_batched_tokens,
                 "Engine: most tokens per step (decode tokens plus prefill chunks)")
      ->capture_default_str();
  app.add_option("--max-waiting-requests", options.max_waiting_requests,
                 "Engine: queued requests beyond this get 503 (overload: --overload-max-waiting)")
      ->capture_default_str();
  app.add_option("--batch-wait-timeout", options.batch_wait_timeout_s,
                 "Engine, static mode: seconds a forming batch waits to fill")
      ->capture_default_str();
  app.add_option("--max-model-len,--max-seq-len", options.max_model_len, "Engine max_model_len")
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", options.kv_cache_dtype, "KV cache dtype (also the baseline's)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  app.add_option("--block-size", options.block_size, "Tokens per KV block")->capture_default_str();
  app.add_option("--num-kv-blocks", options.num_kv_blocks,
                 "KV blocks per engine (0: enough for every request of the workload at once; "
                 "overload: --overload-fit requests' worth)")
      ->capture_default_str();
  app.add_option("--seed", options.seed, "Workload and sampling seed")->capture_default_str();
  app.add_flag("--no-baseline", options.no_baseline, "Skip the sequential generate() baseline");
  app.add_option("--w1-prompt", options.w1_prompt, "W1 prompt tokens")->capture_default_str();
  app.add_option("--w1-output", options.w1_output, "W1 max_tokens")->capture_default_str();
  app.add_option("--w2-requests", options.w2_requests, "W2 concurrent requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--min-prompt", options.min_prompt, "W2 shortest prompt")->capture_default_str();
  app.add_option("--max-prompt", options.max_prompt, "W2 longest prompt")->capture_default_str();
  app.add_option("--min-output", options.min_output, "W2 smallest max_tokens")
      ->capture_default_str();
  app.add_option("--max-output", options.max_output, "W2 largest max_tokens")
      ->capture_default_str();
  app.add_option("--w3-requests", options.w3_requests, "W3 requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--w3-rate", options.w3_rate, "W3 Poisson arrival rate, requests/s")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--w3-min-prompt", options.w3_min_prompt, "W3 shortest prompt")
      ->capture_default_str();
  app.add_option("--w3-max-prompt", options.w3_max_prompt, "W3 longest prompt")
      ->capture_default_str();
  app.add_option("--w3-min-output", options.w3_min_output, "W3 smallest max_tokens")
      ->capture_default_str();
  app.add_option("--w3-max-output", options.w3_max_output, "W3 largest max_tokens")
      ->capture_default_str();
  app.add_option("--prefix-requests", options.prefix_requests, "prefix: requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--prefix-shared", options.prefix_shared, "prefix: shared prefix tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--prefix-own", options.prefix_own, "prefix: own tokens per request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--prefix-output", options.prefix_output, "prefix: max_tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--overload-requests", options.overload_requests, "overload: requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--overload-prompt", options.overload_prompt, "overload: prompt tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--overload-output", options.overload_output, "overload: max_tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--overload-fit", options.overload_fit,
                 "overload: requests the KV pool holds at once (prompt + max_tokens each)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--overload-max-waiting", options.overload_max_waiting,
                 "overload: engine max_waiting_requests (fewer than the requests: 503s)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--requests", options.soak_requests, "Soak requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency", options.soak_concurrency, "Soak requests in flight")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-rss-growth-mib", options.max_rss_growth_mib,
                 "Soak, overload: most VmRSS growth from 10% to 100% of the requests")
      ->capture_default_str();
  app.add_option("--request-timeout", options.request_timeout_s, "Client read timeout, seconds")
      ->capture_default_str();
  app.add_option("--out", options.out,
                 "JSON report path (default benchmarks/reports/serving-<model>-<workload>-<UTC>"
                 ".json; with several workloads, -<workload> is added)");
  app.add_flag("--no-report", options.no_report, "Write no JSON report");
  app.add_flag("--log", options.log, "Append an entry to the serving log");
  app.add_option("--log-file", options.log_path, "The serving log")->capture_default_str();
  return infer::bench::ParseAndRun(app, argc, argv, [&options] {
    if (options.min_prompt < 1 || options.min_prompt > options.max_prompt ||
        options.min_output < 1 || options.min_output > options.max_output ||
        options.w3_min_prompt < 1 || options.w3_min_prompt > options.w3_max_prompt ||
        options.w3_min_output < 1 || options.w3_min_output > options.w3_max_output ||
        options.w1_prompt < 1 || options.w1_output < 1) {
      throw CLI::ValidationError("lengths", "need 1 <= min <= max for prompts and outputs");
    }
    return infer::Run(options);
  });
}
