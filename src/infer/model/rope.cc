#include "infer/model/rope.h"

#include <cmath>
#include <numbers>

#include "infer/core/error.h"

namespace infer {

std::vector<double> RopeInverseFrequencies(const RopeConfig& rope, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] =
        1.0 / std::pow(rope.theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  }
  switch (rope.scaling) {
    case RopeScalingType::kDefault:
      break;
    case RopeScalingType::kLinear:
      for (double& f : inv_freq) f /= rope.factor;
      break;
    case RopeScalingType::kLlama3: {
      // Long wavelengths are slowed by `factor`, short ones kept, the band between blended
      // (transformers' _compute_llama3_parameters).
      const double old_context = static_cast<double>(rope.original_max_position_embeddings);
      const double low_freq_wavelen = old_context / rope.low_freq_factor;
      const double high_freq_wavelen = old_context / rope.high_freq_factor;
      for (double& f : inv_freq) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
          f /= rope.factor;
          continue;
        }
        const double smooth = (old_context / wavelen - rope.low_freq_factor) /
                              (rope.high_freq_factor - rope.low_freq_factor);
        f = (1.0 - smooth) * f / rope.factor + smooth * f;
      }
      break;
    }
  }
  if (!rope.frequency_factors.empty()) {
    INFER_CHECK(rope.frequency_factors.size() == inv_freq.size(),
                "rope: {} frequency factors for {} frequencies", rope.frequency_factors.size(),
                inv_freq.size());
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] /= rope.frequency_factors[i];
  }
  return inv_freq;
}

void RopeTables(const std::vector<double>& inv_freq, int64_t first_pos, int64_t num_tokens,
                std::vector<float>& cos, std::vector<float>& sin) {
  const auto half = static_cast<int64_t>(inv_freq.size());
  cos.resize(static_cast<size_t>(num_tokens * half));
  sin.resize(static_cast<size_t>(num_tokens * half));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const auto pos = static_cast<double>(first_pos + t);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[i];
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

}  // namespace infer
