#include "infer/core/dtype.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <cpuid.h>
#include <gtest/gtest.h>

namespace infer {
namespace {

TEST(Bf16, ExactValuesRoundTrip) {
  for (float value : {0.0F, -0.0F, 1.0F, -2.5F, 65536.0F, 1.0F / 1024}) {
    EXPECT_EQ(Bf16ToF32(F32ToBf16(value)), value);
  }
}

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0F + 0x1p-8F)), 1.0F);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0F + 3 * 0x1p-8F)), 1.0F + 0x1p-6F);
  // Just above halfway rounds up.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0F + 0x1p-8F + 0x1p-20F)), 1.0F + 0x1p-7F);
}

TEST(Bf16, KeepsInfAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Bf16ToF32(F32ToBf16(inf)), inf);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(-inf)), -inf);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low bits must not collapse to infinity.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(low_payload_nan))));
  // The largest finite float rounds to infinity, as round-to-nearest-even requires.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::max())), inf);
}

// The F16C instructions are the independent reference for IEEE half conversions.
__attribute__((target("f16c"))) uint16_t HardwareF32ToF16(float value) {
  return static_cast<uint16_t>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HardwareF16ToF32(uint16_t value) { return _cvtsh_ss(value); }

// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

TEST(F16, WideningMatchesHardwareForEveryValue) {
  if (!HasF16c()) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float expected = HardwareF16ToF32(static_cast<uint16_t>(bits));
    const float actual = F16ToF32(static_cast<uint16_t>(bits));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << bits;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(actual), std::bit_cast<uint32_t>(expected)) << bits;
    }
  }
}

TEST(F16, NarrowingMatchesHardware) {
  if (!HasF16c()) GTEST_SKIP() << "no F16C on this CPU";
  // Every f32 exponent, a spread of mantissas including the rounding boundaries.
  for (uint32_t exponent = 0; exponent < 256; ++exponent) {
    for (uint32_t mantissa : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7fffffu,
                              0x400000u, 0x12345u, 0x7fe000u, 0x7ff000u}) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        const float value = std::bit_cast<float>(sign | (exponent << 23) | mantissa);
        const uint16_t expected = HardwareF32ToF16(value);
        const uint16_t actual = F32ToF16(value);
        if (std::isnan(value)) {
          EXPECT_TRUE(std::isnan(F16ToF32(actual)));
        } else {
          EXPECT_EQ(actual, expected) << std::hexfloat << value;
        }
      }
    }
  }
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2U);
  EXPECT_EQ(DTypeSize(DType::kF32), 4U);
  EXPECT_EQ(DTypeName(DType::kF16), "f16");
}

}  // namespace
}  // namespace infer
