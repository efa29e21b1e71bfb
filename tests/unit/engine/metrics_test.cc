// Histograms keep Prometheus' cumulative "le" semantics (a value equal to a bound counts in that
// bucket), and the exposition follows the text format: HELP/TYPE per family, counters' families
// named with _total, histogram buckets cumulative and closed by +Inf, labels escaped.
#include "infer/engine/metrics.h"

#include <gtest/gtest.h>

namespace infer {
namespace {

TEST(MetricsTest, HistogramBucketsAreLessOrEqual) {
  Histogram histogram({0.1, 1.0});
  for (const double value : {0.05, 0.1, 0.5, 1.0, 3.0}) histogram.Observe(value);
  EXPECT_EQ(histogram.counts(), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(histogram.count(), 5);
  EXPECT_DOUBLE_EQ(histogram.sum(), 4.65);
}

TEST(MetricsTest, PrometheusTextShape) {
  EngineMetrics metrics;
  metrics.generation_tokens = 7;
  metrics.request_success["length"] = 2;
  metrics.time_to_first_token_s.Observe(0.003);
  metrics.time_to_first_token_s.Observe(100.0);
  const std::string text = PrometheusText(metrics, R"(a"b\c)");
  const std::string model = R"(model_name="a\"b\\c")";
  EXPECT_NE(text.find("# TYPE vllm:generation_tokens_total counter\n"
                      "vllm:generation_tokens_total{" +
                      model + "} 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("vllm:request_success_total{" + model + R"(,finished_reason="length"} 2)"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE vllm:time_to_first_token_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{" + model + R"(,le="0.001"} 0)"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{" + model + R"(,le="0.005"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{" + model + R"(,le="80"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{" + model + R"(,le="160"} 2)"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{" + model + R"(,le="+Inf"} 2)"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_count{" + model + "} 2\n"),
            std::string::npos);
}

}  // namespace
}  // namespace infer
