// bench_serving: the serving benchmark of seed phase 4 (section 10), side by side with its
// baseline in one process. Loads the model once; runs each workload's requests one after
// another through generate() (the sequential baseline); then serves the same model over HTTP
// (Engine + HttpServer on 127.0.0.1, any free port) and drives it with one client thread per
// in-flight request, reading the SSE streams. Reports TTFT, ITL and latency percentiles and
// output tok/s beside the baseline's, with the ratio serving / baseline.
//
// Workloads: W1 (1 request, 256 prompt + 256 output tokens), W2 (16 concurrent requests, prompts
// uniform in [32, 1024], max_tokens uniform in [64, 256]), soak (N small requests at concurrency
// C: none lost or duplicated, usage matches the streamed tokens, no 503s, RSS flat; no baseline).
// Prints a markdown table; writes a JSON report per workload into benchmarks/reports/; --log
// appends an entry to benchmarks/log/SERVING_LOG.md. Exits 1 when a request failed or a soak
// check did not hold.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
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
#include "infer/cli/common.h"
#include "infer/cli/generation_session.h"
#include "infer/core/error.h"
#include "infer/core/mapped_file.h"
#include "infer/engine/engine.h"
#include "infer/engine/generate.h"
#include "infer/kernels/cpu/isa.h"
#include "infer/server/http_server.h"
#include "infer/server/sse_client.h"

namespace infer {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr const char* kHost = "127.0.0.1";
constexpr int64_t kMaxPromptId = 32000;  // prompt ids are drawn from [0, min(vocab, this))
// The soak's small requests.
constexpr int64_t kSoakMinPrompt = 8, kSoakMaxPrompt = 64, kSoakMinOutput = 4, kSoakMaxOutput = 32;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

struct Options {
  cli::ModelArgs model;
  std::vector<std::string> workloads;
  int64_t max_batch_size = 16;
  int64_t max_num_batched_tokens = EngineConfig{}.max_num_batched_tokens;
  int64_t max_waiting_requests = 64;
  int64_t max_seq_len = 4096;
  double batch_wait_timeout_s = 0.05;
  uint64_t seed = 0;
  bool no_baseline = false;
  int64_t w1_prompt = 256;
  int64_t w1_output = 256;
  int64_t w2_requests = 16;
  int64_t min_prompt = 32;
  int64_t max_prompt = 1024;
  int64_t min_output = 64;
  int64_t max_output = 256;
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
};

struct Workload {
  std::string name;
  std::string description;
  int64_t concurrency = 1;  // client threads, each sending its next request when one ends
  bool soak = false;
  std::vector<WorkloadRequest> requests;
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
  bool event_after_terminal = false;
  bool usage_consistent = false;
  std::string finish_reason;
  std::vector<int32_t> token_ids;  // streamed ids (served) or generated ids (baseline)
};

struct PhaseResult {
  std::vector<RequestRecord> records;
  double wall_s = 0.0;
  // Soak: VmRSS before the first request and after each tenth of the requests (11 entries).
  std::vector<double> rss_mib;
  // Served: growth of the host's TcpExt ListenOverflows / TCPSynRetrans counters during the
  // workload (host-wide). A connection that overflowed the server's listen backlog has its SYN
  // retransmitted about 1 s later: it shows as a TTFT near 1 s and can miss the batch.
  int64_t listen_overflows = 0;
  int64_t syn_retransmits = 0;
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

Workload MakeWorkload(const std::string& name, const Options& options, int64_t vocab,
                      int64_t max_len) {
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
  } else {
    std::mt19937_64 rng(options.seed + 2);
    workload.soak = true;
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
                "{}: a request of prompt {} + max_tokens {} does not fit max_seq_len {} (lower "
                "the lengths or raise --max-seq-len)",
                name, request.prompt.size(), request.max_tokens, max_len);
  }
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

// The workload's requests one after another through generate(), greedy, same EOS ids as the
// engine.
PhaseResult RunBaseline(const Workload& workload, cli::GenerationSession& session,
                        const Options& options) {
  bench::ProgressModel model(session.model());
  GenerateOptions generate_options;
  generate_options.eos_token_ids = session.eos_token_ids();
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
      const GenerationResult result =
          Generate(model, session.tokenizer(), request.prompt,
                   GreedyParams(request.max_tokens, options.seed), generate_options);
      record.finish_s = SecondsSince(start);
      record.ok = true;
      record.latency_s = record.finish_s - record.send_s;
      record.ttft_s = result.timing.prefill_time_s;
      record.itl_s = result.timing.decode_times_s;
      record.completion_tokens = result.generated_tokens;
      record.token_ids = result.token_ids;
      record.finish_reason = FinishReasonName(result.finish_reason);
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
  const Json body = {{"model", target.served_model},
                     {"prompt", request.prompt},
                     {"max_tokens", request.max_tokens},
                     {"temperature", 0.0},
                     {"top_p", 1.0},
                     {"repetition_penalty", 1.0},
                     {"seed", seed},
                     {"stream", true}};
  return body.dump();
}

// Sends the workload's requests from `concurrency` client threads, each sending its next request
// when its previous one ends; prints progress from this thread.
PhaseResult ServeWorkload(const Workload& workload, const ServeTarget& target,
                          const Options& options) {
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
  const auto client = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
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
    }
  };
  std::vector<std::thread> clients;
  const auto num_clients = static_cast<size_t>(std::max<int64_t>(1, workload.concurrency));
  for (size_t c = 0; c < std::min(num_clients, n); ++c) clients.emplace_back(client);
  {
    std::unique_lock lock(mutex);
    while (!all_done.wait_for(lock, std::chrono::seconds(1), [&] { return completed == n; })) {
      std::fprintf(stderr, "\r  serving %s: %zu/%zu done, %lld tokens streamed, %.1f s   ",
                   workload.name.c_str(), completed, n,
                   static_cast<long long>(tokens_streamed.load()), SecondsSince(start));
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
  std::fprintf(stderr, "serving %s: %zu/%zu done, %.1f s\n", workload.name.c_str(), n, n,
               SecondsSince(start));
  return phase;
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

Json RequestsJson(const Workload& workload, const PhaseResult& serving,
                  const PhaseResult* baseline) {
  Json rows = Json::array();
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    const RequestRecord& record = serving.records[i];
    Json row;
    row["prompt_tokens"] = workload.requests[i].prompt.size();
    row["max_tokens"] = workload.requests[i].max_tokens;
    row["ok"] = record.ok;
    if (!record.ok) row["error"] = record.error;
    row["status"] = record.status;
    row["completion_tokens"] = record.completion_tokens;
    row["token_events"] = record.token_events;
    row["finish_reason"] = record.finish_reason;
    row["send_ms"] = record.send_s * 1e3;
    row["ttft_ms"] = record.ttft_s * 1e3;
    row["latency_ms"] = record.latency_s * 1e3;
    if (baseline != nullptr) {
      const RequestRecord& base = baseline->records[i];
      row["baseline_ok"] = base.ok;
      row["baseline_completion_tokens"] = base.completion_tokens;
      row["baseline_ttft_ms"] = base.ttft_s * 1e3;
      row["baseline_latency_ms"] = base.latency_s * 1e3;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// Greedy both ways: the served tokens should be generate()'s (the streamed ids omit a final
// EOS that had no text). Informational: batched and single-row arithmetic may differ in the
// last bits, which can flip a near-tie.
int64_t IdenticalOutputs(const PhaseResult& serving, const PhaseResult& baseline) {
  int64_t same = 0;
  for (size_t i = 0; i < serving.records.size(); ++i) {
    const RequestRecord& served = serving.records[i];
    const RequestRecord& base = baseline.records[i];
    if (!served.ok || !base.ok || served.completion_tokens != base.completion_tokens ||
        served.token_ids.size() > base.token_ids.size()) {
      continue;
    }
    if (std::equal(served.token_ids.begin(), served.token_ids.end(), base.token_ids.begin()))
      ++same;
  }
  return same;
}

struct SoakChecks {
  int64_t lost = 0;        // no HTTP answer, or no done or error event
  int64_t duplicated = 0;  // several terminal events, or events after done
  int64_t usage_mismatch = 0;
  int64_t failed = 0;
  int64_t http_503 = 0;
  bool allow_503 = false;
  double rss_at_10pct_mib = 0.0;
  double rss_at_end_mib = 0.0;
  double rss_growth_mib = 0.0;
  double rss_limit_mib = 0.0;
  bool pass = false;
};

SoakChecks CheckSoak(const Workload& workload, const PhaseResult& phase, const Options& options) {
  SoakChecks checks;
  for (const RequestRecord& record : phase.records) {
    if (record.status == 503) ++checks.http_503;
    if (!record.ok) ++checks.failed;
    // No HTTP answer (the connection failed), or a stream that ended without done / error.
    if (record.status == 0 || (record.status == 200 && record.terminal_events == 0)) ++checks.lost;
    if (record.status != 200) continue;
    if (record.terminal_events > 1 || record.event_after_terminal) ++checks.duplicated;
    if (record.got_done && !record.usage_consistent) ++checks.usage_mismatch;
  }
  checks.allow_503 = workload.concurrency > options.max_waiting_requests;
  checks.rss_at_10pct_mib = phase.rss_mib[1];
  checks.rss_at_end_mib = phase.rss_mib[10];
  checks.rss_growth_mib = checks.rss_at_end_mib - checks.rss_at_10pct_mib;
  checks.rss_limit_mib = options.max_rss_growth_mib;
  const int64_t failed_not_503 = checks.failed - (checks.allow_503 ? checks.http_503 : 0);
  checks.pass = checks.lost == 0 && checks.duplicated == 0 && checks.usage_mismatch == 0 &&
                failed_not_503 == 0 && (checks.allow_503 || checks.http_503 == 0) &&
                checks.rss_growth_mib <= checks.rss_limit_mib;
  return checks;
}

Json SoakJson(const SoakChecks& checks, const PhaseResult& phase) {
  Json json;
  json["pass"] = checks.pass;
  json["lost"] = checks.lost;
  json["duplicated"] = checks.duplicated;
  json["usage_mismatch"] = checks.usage_mismatch;
  json["failed"] = checks.failed;
  json["http_503"] = checks.http_503;
  json["http_503_allowed"] = checks.allow_503;
  json["rss_mib_by_tenth"] = phase.rss_mib;  // before the first request, then after each tenth
  json["rss_at_10pct_mib"] = checks.rss_at_10pct_mib;
  json["rss_at_end_mib"] = checks.rss_at_end_mib;
  json["rss_growth_mib"] = checks.rss_growth_mib;
  json["rss_growth_limit_mib"] = checks.rss_limit_mib;
  return json;
}

std::string SoakLine(const std::string& name, int64_t requests, const SoakChecks& checks) {
  return fmt::format(
      "{}: {} requests: {} lost, {} duplicated, {} usage mismatches, {} failed, {} HTTP 503{}; "
      "RSS {:.1f} MiB at 10% -> {:.1f} MiB at end ({:+.1f} MiB, limit {:.0f}): {}",
      name, requests, checks.lost, checks.duplicated, checks.usage_mismatch, checks.failed,
      checks.http_503, checks.allow_503 ? " (allowed: concurrency > max_waiting)" : "",
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

std::vector<std::string> ExpandWorkloads(const std::vector<std::string>& names) {
  std::vector<std::string> expanded;
  const auto add = [&](const std::string& name) {
    if (std::find(expanded.begin(), expanded.end(), name) == expanded.end())
      expanded.push_back(name);
  };
  for (const std::string& name : names) {
    if (name == "all") {
      add("W1");
      add("W2");
    } else {
      add(name);
    }
  }
  if (expanded.empty()) expanded = {"W1", "W2"};
  return expanded;
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

constexpr char kLogHeader[] = R"(# Serving benchmark log

`benchmarks/bench_serving` (seed phase 4, section 10) serves a model over HTTP inside its own
process and measures it beside a sequential `generate()` baseline on the same prompts, in one
run, so the ratio does not depend on how busy the machine was on another day. Entries are
appended, oldest first. JSON reports are in `benchmarks/reports/serving-*.json`.

How to read the table:
- **mode**: `serving` = POST /v1/completions with token-id prompts, streaming SSE, one client
  thread per in-flight request; `baseline` = the same prompts one after another through
  `generate()`. Greedy both ways, same EOS ids, so both generate the same tokens.
- **wall s**: serving, first send to last `done` event; baseline, the whole sequential loop.
  **output tok/s** = completion tokens of the requests that succeeded / wall s.
- **TTFT**: send to first `token` event (baseline: prefill plus first sample). **ITL**: gap
  between consecutive `token` events of a request (baseline: decode step time). **latency**:
  send to `done` (baseline: the `generate()` call). P50 / P95 / P99 in ms, over requests (ITL:
  over all gaps of all requests).
- **ratio** = serving output tok/s / baseline output tok/s. Exit criterion 3 wants W2 > 1.
- Workloads: **W1** 1 request, prompt 256, max_tokens 256 (serving overhead of one request);
  **W2** 16 concurrent requests, prompts uniform in [32, 1024], max_tokens uniform in [64, 256];
  **soak** N requests (prompt 8-64, max_tokens 4-32) at concurrency C, no baseline: PASS when
  every request ends with exactly one `done` and nothing after it, usage.completion_tokens
  equals the streamed `token` events (a final EOS without text streams none), no 503s
  (concurrency <= max_waiting_requests), and VmRSS grows at most the limit between 10% and 100%
  of the requests.
- The host is shared: compare ratios measured in one run, not numbers across days.
)";

int Run(const Options& options) {
  const std::vector<std::string> names = ExpandWorkloads(options.workloads);
  cli::GenerationSession session(options.model);
  LanguageModel& model = session.model();
  const LoadedModel& loaded = session.loaded();
  const std::string model_name = cli::ModelName(loaded.path);
  const int64_t max_len = std::min(options.max_seq_len, model.context_length());
  std::vector<Workload> workloads;
  workloads.reserve(names.size());
  for (const std::string& name : names) {
    workloads.push_back(MakeWorkload(name, options, model.vocab_size(), max_len));
  }
  const int threads = options.model.threads > 0
                          ? options.model.threads
                          : static_cast<int>(std::thread::hardware_concurrency());
  const std::string isa(kernels::IsaName(kernels::ActiveIsa()));
  const std::string precision(kernels::MatMulPrecisionName(options.model.matmul_precision));
  std::printf(
      "=== Serving benchmark ===\nmodel: %s (%s%s), vocab %lld, EOS ids %zu\nthreads: %d, isa: "
      "%s, matmul precision %s\nengine: max_batch_size %lld, max_num_batched_tokens %lld, "
      "max_waiting_requests %lld, batch_wait_timeout %.3f s, max_seq_len %lld\n",
      loaded.path.c_str(), std::string(DTypeName(loaded.weight_dtype)).c_str(),
      options.model.load_format == "dummy" ? ", dummy weights" : "",
      static_cast<long long>(model.vocab_size()), session.eos_token_ids().size(), threads,
      isa.c_str(), precision.c_str(), static_cast<long long>(options.max_batch_size),
      static_cast<long long>(options.max_num_batched_tokens),
      static_cast<long long>(options.max_waiting_requests), options.batch_wait_timeout_s,
      static_cast<long long>(max_len));
  for (const Workload& workload : workloads) {
    std::printf("%s: %s\n", workload.name.c_str(), workload.description.c_str());
  }
  std::fflush(stdout);

  // Baselines first, while nothing else uses the model.
  std::vector<std::optional<PhaseResult>> baselines(workloads.size());
  const bool any_baseline =
      !options.no_baseline &&
      std::any_of(workloads.begin(), workloads.end(), [](const Workload& w) { return !w.soak; });
  if (any_baseline) {
    std::mt19937_64 rng(options.seed + 3);
    GenerateOptions warmup_options;
    warmup_options.eos_token_ids = session.eos_token_ids();
    Generate(model, session.tokenizer(), RandomPrompt(rng, model.vocab_size(), 8),
             GreedyParams(4, options.seed), warmup_options);
    for (size_t i = 0; i < workloads.size(); ++i) {
      if (!workloads[i].soak) baselines[i] = RunBaseline(workloads[i], session, options);
    }
  }

  // Then the server over the same model.
  EngineConfig config;
  config.model = model_name;
  config.max_seq_len = options.max_seq_len;
  config.max_batch_size = options.max_batch_size;
  config.max_num_batched_tokens = options.max_num_batched_tokens;
  config.max_waiting_requests = options.max_waiting_requests;
  config.batch_wait_timeout_s = options.batch_wait_timeout_s;
  config.seed = options.seed;
  config.Validate();
  Engine engine(config, model, session.tokenizer(), session.eos_token_ids());
  server::ServerOptions server_options;
  server_options.host = kHost;
  server_options.port = 0;
  std::vector<PhaseResult> served;
  {
    ServerThread server(engine, server_options);
    const ServeTarget target{server.port(), model_name, model.vocab_size(),
                             session.eos_token_ids()};
    std::fprintf(stderr, "serving %s on %s:%d\n", model_name.c_str(), kHost, target.port);
    std::mt19937_64 rng(options.seed + 4);
    const WorkloadRequest warmup{RandomPrompt(rng, model.vocab_size(), 8), 4};
    const RequestRecord warm = AnalyzeResponse(
        server::PostCompletion(kHost, target.port, RequestBody(target, warmup, options.seed), {},
                               options.request_timeout_s),
        warmup, target.eos_ids, target.vocab);
    if (!warm.ok)
      std::fprintf(stderr, "warning: the warmup request failed: %s\n", warm.error.c_str());
    for (const Workload& workload : workloads) {
      served.push_back(ServeWorkload(workload, target, options));
    }
    server.Stop();
  }

  // Results.
  const std::string timestamp = bench::UtcTime("%Y%m%dT%H%M%SZ");
  const std::string commit = bench::CommandOutput("git rev-parse --short HEAD 2>/dev/null");
  const std::string cpu = bench::CommandOutput("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2");
  std::string table = TableHeader();
  std::vector<std::string> notes;
  std::vector<std::string> report_paths;
  bool all_ok = true;
  for (size_t i = 0; i < workloads.size(); ++i) {
    const Workload& workload = workloads[i];
    const PhaseResult& serving = served[i];
    const PhaseResult* baseline = baselines[i] ? &*baselines[i] : nullptr;
    const Json serving_summary = Summarize(serving);
    table += TableRow(workload.name, "serving", serving_summary);
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
    report["commit"] = commit;
    report["command"] = options.command_line;
    report["timestamp"] = timestamp;
    report["seed"] = options.seed;
    report["engine"] = {{"max_batch_size", config.max_batch_size},
                        {"max_num_batched_tokens", config.max_num_batched_tokens},
                        {"max_waiting_requests", config.max_waiting_requests},
                        {"batch_wait_timeout_s", config.batch_wait_timeout_s},
                        {"max_seq_len", config.max_seq_len},
                        {"batching_mode", config.batching_mode}};
    report["concurrency"] = workload.concurrency;
    report["serving"] = serving_summary;
    report["host_listen_overflows"] = serving.listen_overflows;
    report["host_syn_retransmits"] = serving.syn_retransmits;
    if (serving.listen_overflows > 0) {
      notes.push_back(fmt::format(
          "{}: the host counted {} listen-backlog overflows and {} SYN retransmits while it was "
          "served: those connections waited ~1 s to connect (TTFT near 1 s, possibly a later "
          "batch)",
          workload.name, serving.listen_overflows, serving.syn_retransmits));
    }
    if (serving_summary["failed"].get<int64_t>() > 0) {
      if (!workload.soak) all_ok = false;  // the soak's checks decide for it (503s may be allowed)
      for (const RequestRecord& record : serving.records) {
        if (!record.ok) {
          notes.push_back(fmt::format("{}: FAILED requests: {} (first: {})", workload.name,
                                      serving_summary["failed"].get<int64_t>(), record.error));
          break;
        }
      }
    }
    if (baseline != nullptr) {
      const Json baseline_summary = Summarize(*baseline);
      table += TableRow(workload.name, "baseline", baseline_summary);
      report["baseline"] = baseline_summary;
      const double base_tps = baseline_summary["output_tok_s"].get<double>();
      const double serve_tps = serving_summary["output_tok_s"].get<double>();
      const double ratio = base_tps > 0.0 ? serve_tps / base_tps : 0.0;
      const int64_t identical = IdenticalOutputs(serving, *baseline);
      report["ratio_output_tok_s"] = ratio;
      report["ratio_wall_baseline_over_serving"] =
          serving.wall_s > 0.0 ? baseline->wall_s / serving.wall_s : 0.0;
      report["greedy_outputs_identical"] = identical;
      notes.push_back(fmt::format(
          "{}: serving / baseline output tok/s = **{:.2f}x** ({:.2f} vs {:.2f} tok/s; wall {:.2f} "
          "s vs {:.2f} s); greedy outputs identical to generate(): {}/{}",
          workload.name, ratio, serve_tps, base_tps, serving.wall_s, baseline->wall_s, identical,
          workload.requests.size()));
      if (baseline_summary["failed"].get<int64_t>() > 0) {
        all_ok = false;
        notes.push_back(fmt::format("{}: FAILED baseline requests: {}", workload.name,
                                    baseline_summary["failed"].get<int64_t>()));
      }
    } else {
      report["baseline"] = nullptr;
    }
    if (workload.soak) {
      const SoakChecks checks = CheckSoak(workload, serving, options);
      report["soak"] = SoakJson(checks, serving);
      notes.push_back(
          SoakLine(workload.name, static_cast<int64_t>(workload.requests.size()), checks));
      all_ok = all_ok && checks.pass;
    }
    report["peak_rss_bytes"] = PeakRssBytes();
    report["requests"] = RequestsJson(workload, serving, baseline);
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

  std::printf("\n%s\n", table.c_str());
  for (const std::string& note : notes) std::printf("- %s\n", note.c_str());
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
    log << fmt::format("\n## {} — {} on {} (commit {})\n\n```\n{}\n```\n\n",
                       bench::UtcTime("%Y-%m-%d %H:%M UTC"), names_text, model_name,
                       commit.empty() ? "?" : commit, options.command_line);
    log << fmt::format(
        "{} ({} hardware threads), --threads {}, {}, matmul precision {}, {}{}. Engine: "
        "max_batch_size {}, max_num_batched_tokens {}, max_waiting_requests {}, "
        "batch_wait_timeout {} s, seed {}.\n\n",
        cpu, std::thread::hardware_concurrency(), threads, isa, precision,
        DTypeName(loaded.weight_dtype),
        options.model.load_format == "dummy" ? " dummy weights" : " weights", config.max_batch_size,
        config.max_num_batched_tokens, config.max_waiting_requests, config.batch_wait_timeout_s,
        options.seed);
    for (const Workload& workload : workloads) {
      log << fmt::format("- {}: {}\n", workload.name, workload.description);
    }
    log << "\n" << table << "\n";
    for (const std::string& note : notes) log << "- " << note << "\n";
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
  CLI::App app{"bench_serving: HTTP serving throughput and latency beside sequential generate()"};
  infer::cli::AddModelOptions(app, options.model);
  app.add_option("--workload", options.workloads,
                 "W1 | W2 | soak | all (= W1, W2); repeatable (default all)")
      ->check(CLI::IsMember({"W1", "W2", "soak", "all"}));
  app.add_option("--max-batch-size", options.max_batch_size, "Engine: requests per static batch")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", options.max_num_batched_tokens,
                 "Engine: most prompt tokens per prefill call")
      ->capture_default_str();
  app.add_option("--max-waiting-requests", options.max_waiting_requests,
                 "Engine: queued requests beyond this get 503")
      ->capture_default_str();
  app.add_option("--batch-wait-timeout", options.batch_wait_timeout_s,
                 "Engine: seconds a forming batch waits to fill")
      ->capture_default_str();
  app.add_option("--max-seq-len", options.max_seq_len, "Engine max_seq_len")->capture_default_str();
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
  app.add_option("--requests", options.soak_requests, "Soak requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency", options.soak_concurrency, "Soak requests in flight")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-rss-growth-mib", options.max_rss_growth_mib,
                 "Soak: most VmRSS growth from 10% to 100% of the requests")
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
        options.w1_prompt < 1 || options.w1_output < 1) {
      throw CLI::ValidationError("lengths", "need 1 <= min <= max for prompts and outputs");
    }
    return infer::Run(options);
  });
}
