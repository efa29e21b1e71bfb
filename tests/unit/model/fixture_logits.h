// The fixtures' reference logits and the measures tests hold logits to: the worst row error
// (max_v |logit - ref| / max_v |ref|, the fixtures' README), top-1 agreement and KL.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "testing/paths.h"

namespace infer {

inline std::string FixtureDir(const std::string& arch) {
  return std::string(::infer::testing::FixturesDir()) + "/models/" + arch;
}

inline nlohmann::json Reference(const std::string& arch) {
  std::ifstream in(FixtureDir(arch) + "/reference.json");
  return nlohmann::json::parse(in);
}

inline std::vector<float> ReadF32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

// Worst row of max_v |a - ref| / max_v |ref|.
inline double WorstRowError(const float* actual, const float* reference, int64_t rows,
                            int64_t vocab) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double max_diff = 0, max_ref = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      max_diff =
          std::max(max_diff, std::abs(double(actual[r * vocab + v]) - reference[r * vocab + v]));
      max_ref = std::max(max_ref, std::abs(double(reference[r * vocab + v])));
    }
    worst = std::max(worst, max_diff / max_ref);
  }
  return worst;
}

inline int32_t Argmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

struct Accuracy {
  double worst_row_error = 0;  // max over positions of max_v |l - ref| / max_v |ref|
  double top1 = 0;             // fraction of positions whose argmax is the reference's
  double kl = 0;               // mean KL(softmax(ref) || softmax(l)), nats
};

inline Accuracy Measure(const std::vector<float>& logits, const std::vector<float>& ref,
                        int64_t rows, int64_t vocab) {
  Accuracy a;
  a.worst_row_error = WorstRowError(logits.data(), ref.data(), rows, vocab);
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits.data() + r * vocab;
    const float* e = ref.data() + r * vocab;
    a.top1 += Argmax(l, vocab) == Argmax(e, vocab) ? 1.0 : 0.0;
    const double l_max = *std::max_element(l, l + vocab);
    const double e_max = *std::max_element(e, e + vocab);
    double l_sum = 0, e_sum = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      l_sum += std::exp(l[v] - l_max);
      e_sum += std::exp(e[v] - e_max);
    }
    for (int64_t v = 0; v < vocab; ++v) {
      const double log_p = e[v] - e_max - std::log(e_sum);
      const double log_q = l[v] - l_max - std::log(l_sum);
      a.kl += std::exp(log_p) * (log_p - log_q);
    }
  }
  a.top1 /= static_cast<double>(rows);
  a.kl /= static_cast<double>(rows);
  return a;
}

}  // namespace infer
