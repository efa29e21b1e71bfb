#include "infer/engine/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "infer/core/error.h"

namespace infer {
namespace {

// vLLM's bucket bounds for these histograms.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kLatencyBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                             5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTokenBuckets = {1,   2,    5,    10,   20,    50,    100,   200,
                                           500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};

// Prometheus float text: integers without a fraction, +Inf spelled as Prometheus wants.
std::string Number(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

// A label value with \, " and newlines escaped.
std::string Escape(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string_view model)
      : labels_(fmt::format("model_name=\"{}\"", Escape(model))) {}

  void Header(std::string_view name, std::string_view type, std::string_view help) {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(std::string_view name, double value, std::string_view extra_labels = {}) {
    text_ += fmt::format("{}{{{}{}{}}} {}\n", name, labels_, extra_labels.empty() ? "" : ",",
                         extra_labels, Number(value));
  }
  void Gauge(std::string_view name, std::string_view help, double value) {
    Header(name, "gauge", help);
    Sample(name, value);
  }
  // `name` ends in _total: in the text format a counter's family carries the suffix.
  void Counter(std::string_view name, std::string_view help, double value) {
    Header(name, "counter", help);
    Sample(name, value);
  }
  void Histo(std::string_view name, std::string_view help, const Histogram& histogram) {
    Header(name, "histogram", help);
    int64_t cumulative = 0;
    const std::string bucket = std::string(name) + "_bucket";
    for (size_t i = 0; i < histogram.bounds().size(); ++i) {
      cumulative += histogram.counts()[i];
      Sample(bucket, static_cast<double>(cumulative),
             fmt::format("le=\"{}\"", Number(histogram.bounds()[i])));
    }
    Sample(bucket, static_cast<double>(histogram.count()), "le=\"+Inf\"");
    Sample(std::string(name) + "_sum", histogram.sum());
    Sample(std::string(name) + "_count", static_cast<double>(histogram.count()));
  }
  std::string Take() { return std::move(text_); }

 private:
  std::string labels_;
  std::string text_;
};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  INFER_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds must be sorted");
}

void Histogram::Observe(double value) {
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[static_cast<size_t>(bucket)];
  sum_ += value;
  ++count_;
}

EngineMetrics::EngineMetrics()
    : request_success{{"stop", 0}, {"length", 0}, {"abort", 0}},
      time_to_first_token_s(kTtftBuckets),
      inter_token_latency_s(kItlBuckets),
      e2e_request_latency_s(kLatencyBuckets),
      request_queue_time_s(kLatencyBuckets),
      request_prompt_tokens(kTokenBuckets),
      request_generation_tokens(kTokenBuckets) {}

std::string PrometheusText(const EngineMetrics& metrics, std::string_view model_name,
                           const ComputeInfo& compute, const BuildInfo& build) {
  Writer out(model_name);
  if (!build.version.empty()) {
    out.Header("infer_build_info", "gauge",
               "The version and the git commit this server was built from (always 1).");
    out.Sample(
        "infer_build_info", 1,
        fmt::format("version=\"{}\",commit=\"{}\"", Escape(build.version), Escape(build.commit)));
  }
  if (!compute.isa.empty() && !compute.matmul_precision.empty()) {
    out.Header("infer_compute_info", "gauge",
               "The kernels' instruction set and matrix-product precision in use (always 1).");
    out.Sample("infer_compute_info", 1,
               fmt::format("isa=\"{}\",matmul_precision=\"{}\"", Escape(compute.isa),
                           Escape(compute.matmul_precision)));
  }
  out.Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
            static_cast<double>(metrics.num_requests_running));
  out.Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
            static_cast<double>(metrics.num_requests_waiting));
  out.Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
            metrics.kv_cache_usage);
  if (metrics.state_slots > 0) {
    out.Gauge("infer_state_slots_used",
              "Recurrent-state slots held by running sequences (models with linear attention).",
              static_cast<double>(metrics.state_slots_used));
    out.Gauge("infer_state_slots", "Recurrent-state slots for running sequences.",
              static_cast<double>(metrics.state_slots));
    out.Gauge("infer_state_snapshots",
              "Recurrent-state snapshots the prefix cache holds (or is taking).",
              static_cast<double>(metrics.state_snapshots));
    out.Gauge("infer_state_snapshot_slots", "Recurrent-state snapshots the prefix cache may hold.",
              static_cast<double>(metrics.state_snapshot_slots));
  }
  if (metrics.max_loras > 0) {
    // vLLM's: the value is when the labels were read.
    out.Header("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    out.Sample(
        "vllm:lora_requests_info", metrics.lora_info_time_s,
        fmt::format("max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"",
                    metrics.max_loras,
                    Escape(fmt::format("{}", fmt::join(metrics.running_lora_adapters, ","))),
                    Escape(fmt::format("{}", fmt::join(metrics.waiting_lora_adapters, ",")))));
  }
  out.Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
              static_cast<double>(metrics.prompt_tokens));
  out.Counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
              static_cast<double>(metrics.generation_tokens));
  out.Header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, count] : metrics.request_success) {
    out.Sample("vllm:request_success_total", static_cast<double>(count),
               fmt::format("finished_reason=\"{}\"", reason));
  }
  out.Counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
              static_cast<double>(metrics.num_preemptions));
  out.Counter("vllm:prefix_cache_queries_total",
              "Prefix cache queries, in terms of number of queried tokens.",
              static_cast<double>(metrics.prefix_cache_queries));
  out.Counter("vllm:prefix_cache_hits_total",
              "Prefix cache hits, in terms of number of cached tokens.",
              static_cast<double>(metrics.prefix_cache_hits));
  out.Counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.",
              static_cast<double>(metrics.spec_decode_num_drafts));
  out.Counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.",
              static_cast<double>(metrics.spec_decode_num_draft_tokens));
  out.Counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
              static_cast<double>(metrics.spec_decode_num_accepted_tokens));
  out.Histo("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            metrics.time_to_first_token_s);
  out.Histo("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            metrics.inter_token_latency_s);
  out.Histo("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            metrics.e2e_request_latency_s);
  out.Histo("vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", metrics.request_queue_time_s);
  out.Histo("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
            metrics.request_prompt_tokens);
  out.Histo("vllm:request_generation_tokens", "Number of generation tokens processed.",
            metrics.request_generation_tokens);
  return out.Take();
}

}  // namespace infer
