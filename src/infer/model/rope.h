// RoPE frequencies and cos/sin tables in Hugging Face's rotate_half convention, with the
// default, linear and llama3 frequency scalings.
#pragma once

#include <cstdint>
#include <vector>

#include "infer/loader/model_config.h"

namespace infer {

// inv_freq[i] = 1 / theta^(2i / head_dim) for i < head_dim / 2, then scaled per `rope`.
// Computed in double: the references are float64 (HF's float32 tables differ by ~3e-6 of
// the logit scale).
std::vector<double> RopeInverseFrequencies(const RopeConfig& rope, int64_t head_dim);

// cos/sin tables [num_tokens, head_dim / 2] for positions first_pos .. first_pos + num_tokens - 1.
void RopeTables(const std::vector<double>& inv_freq, int64_t first_pos, int64_t num_tokens,
                std::vector<float>& cos, std::vector<float>& sin);

}  // namespace infer
