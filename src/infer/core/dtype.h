// Element types of tensors and the bf16/f16 <-> f32 conversions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace infer {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32 };

size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);  // "f32", "f16", "bf16", "i32"

// bf16 keeps the top 16 bits of an IEEE f32. Rounding is to nearest even; NaN stays a
// (quiet) NaN with its sign, infinities stay infinities.
inline uint16_t F32ToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float Bf16ToF32(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

// IEEE binary16. Conversions are exact where representable; f32 -> f16 rounds to nearest
// even, overflows to infinity, keeps NaN (quiet) and produces subnormals.
inline float F16ToF32(uint16_t value) {
  const uint32_t sign = static_cast<uint32_t>(value & 0x8000u) << 16;
  const uint32_t exponent = (value >> 10) & 0x1fu;
  uint32_t mantissa = value & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise the mantissa.
    uint32_t shifted_exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --shifted_exponent;
    }
    bits = sign | (shifted_exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t F32ToF16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs_bits >> 13) & 0x3ffu));
  if (abs_bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs_bits < 0x38800000u) {
    // Result is subnormal or zero: shift the implicit-1 mantissa into place, round to even.
    if (abs_bits < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t exponent = abs_bits >> 23;
    const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    const uint32_t half = 1u << (shift - 1);
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t result = mantissa >> shift;
    if (remainder > half || (remainder == half && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  const uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace infer
