// ggml's tensor blocks as a GGUF file stores them, read two ways: widened to f32 exactly as
// llama.cpp's gguf-py dequantizes them (the same f32 operations in the same order), and, for
// the types whose values an infer PackedMatrix type holds exactly, as that type's rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "infer/kernels/ops.h"

namespace infer {

// Whether DequantizeGgmlRow reads `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K).
bool CanDequantizeGgml(uint32_t type);
// `out.size()` values of one row (a whole number of the type's blocks) from its bytes.
void DequantizeGgmlRow(uint32_t type, std::span<const std::byte> row, std::span<float> out);

// The PackedMatrix type that holds a row of `type` exactly: Q8_0 -> int8 (d and q as they are),
// Q5_0 -> int8 (d and q - 16, in [-16, 15]),
// Q4_0 and Q4_1 -> int4 (Q4_0's d (q - 8) as d q + m with m = -8 d, exact in f16 and f32),
// Q5_1 -> int5 (d, m and the 5-bit q),
// Q4_K -> int4k (d, -dmin as the minimum step, the 6-bit scales), Q5_K -> int5k (the same, its
// 5-bit q), Q6_K -> int6k (d, the int8 scales, q - 32). nullopt for the others.
std::optional<kernels::Quantization> ExactQuantization(uint32_t type);
// One row of `type`'s blocks as that type's QuantizedRow (sized as FromQuantizedRows gives it).
// Throws infer::Error when a Q4_0 scale's -8 d overflows an f16.
void FillQuantizedRow(uint32_t type, std::span<const std::byte> row,
                      kernels::PackedMatrix::QuantizedRow& out);

}  // namespace infer
