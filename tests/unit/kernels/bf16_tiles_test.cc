// MatMulPrecision::kBf16 on AMX-BF16 tiles (cpu/matmul_bf16_tiles.cc): its emulated tiles and
// its vector code give, bit for bit, a sum written here from Intel's definition of TDPBF16PS
// (blocks of 16 pairs of k; per block the even and the odd products each summed from +0 by
// fused multiply-adds with denormals treated as zero and flushed; the block's even + odd added
// to the running sum; the bias last), for every m; and on a CPU with AMX the real tiles give
// the emulation's bits.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "infer/kernels/cpu/isa.h"
#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/ops.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

// f32 fused multiply-add on the FMA unit (vfmadd231ss), which reads MXCSR's DAZ and FTZ.
[[gnu::target("fma")]] [[gnu::noinline]] float HardwareFma(float a, float b, float c) {
  return __builtin_fmaf(a, b, c);
}
[[gnu::noinline]] float HardwareAdd(float a, float b) {
  volatile float sum = a;
  return sum + b;
}

// MXCSR with DAZ and FTZ set for the scope.
class Daz {
 public:
  Daz() : saved_(__builtin_ia32_stmxcsr()) { __builtin_ia32_ldmxcsr(saved_ | 0x8040); }
  ~Daz() { __builtin_ia32_ldmxcsr(saved_); }
  Daz(const Daz&) = delete;
  Daz& operator=(const Daz&) = delete;

 private:
  unsigned saved_;
};

// y [m, n] by the definition: x rounded to bf16 (nearest even), w as stored (bf16).
std::vector<float> DefinitionMatMul(const std::vector<float>& x, int64_t m, int64_t k,
                                    int64_t x_stride, const StoredTensor& w, int64_t n,
                                    const float* bias) {
  std::vector<float> y(static_cast<size_t>(m * n));
  const Daz daz;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0F;
      for (int64_t b = 0; b < k; b += 32) {
        float even = 0.0F;
        float odd = 0.0F;
        for (int64_t c = b; c < std::min(k, b + 32); ++c) {
          const float xv = Bf16ToF32(F32ToBf16(x[i * x_stride + c]));
          float& chain = c % 2 == 0 ? even : odd;
          chain = HardwareFma(xv, w.widened[j * k + c], chain);
        }
        sum = HardwareAdd(sum, HardwareAdd(even, odd));
      }
      y[i * n + j] = bias != nullptr ? HardwareAdd(sum, bias[j]) : sum;
    }
  }
  return y;
}

using TilesFn = void (*)(const float*, int64_t, int64_t, int64_t, std::span<const cpu::Product>,
                         ThreadPool&);

std::vector<float> RunTiles(TilesFn fn, const std::vector<float>& x, int64_t m, int64_t k,
                            int64_t x_stride, const PackedMatrix& w, const float* bias,
                            int64_t y_stride) {
  std::vector<float> y(static_cast<size_t>(m * y_stride), -7.0F);
  const cpu::Product product{&w, bias, y.data(), y_stride};
  fn(x.data(), m, k, x_stride, std::span<const cpu::Product>(&product, 1), TestPool());
  return y;
}

// Rows of `cols` values spread over binades from 2^min_exponent (that one: zero), some zero.
// With min_exponent below -60 every third row is scaled by 2^-63 as well, so that a tiny x row
// times a tiny w row has products, sums and results near and below the least normal f32.
std::vector<float> WideFloats(int64_t rows, int64_t cols, uint32_t seed, int min_exponent) {
  std::vector<float> v = RandomFloats(static_cast<size_t>(rows * cols), -1, 1, seed);
  std::mt19937 rng(seed + 1000);
  std::uniform_int_distribution<int> exponent(min_exponent, 8);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const int e = exponent(rng);
    const int scale = min_exponent < -60 && i / cols % 3 == 0 ? -63 : 0;
    v[i] = e == min_exponent ? 0.0F : std::ldexp(v[i], e + scale);
  }
  return v;
}

struct Case {
  int64_t m, k, n;
  int min_exponent;  // of the data (WideFloats); -60 and below reach denormal products
};

TEST(Bf16TilesTest, EmulatedTilesAndVectorCodeFollowIntelsDefinition) {
  if (!IsaSupported(Isa::kAvx512Bf16)) GTEST_SKIP() << "the tile path's vector code is AVX-512";
  const Case cases[] = {{1, 1, 1, -4},      {3, 31, 17, -4},    {4, 33, 33, -70},
                        {5, 40, 33, -70},   {15, 33, 33, -70},  {16, 64, 32, -4},
                        {17, 65, 40, -70},  {33, 513, 67, -4},  {40, 700, 20, -4},
                        {5, 600, 300, -70}, {70, 129, 96, -70}, {64, 2048, 64, -4}};
  uint32_t seed = 200;
  for (const Case& c : cases) {
    ++seed;
    const int64_t x_stride = c.k + 3;
    const std::vector<float> x = WideFloats(c.m, x_stride, seed, c.min_exponent);
    const StoredTensor w =
        Store(DType::kBF16, {c.n, c.k}, WideFloats(c.n, c.k, seed + 1, c.min_exponent));
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(c.n), -1, 1, seed + 2);
    const PackedMatrix packed = PackedMatrix::Pack(w.tensor);
    for (const bool with_bias : {false, true}) {
      const float* b = with_bias ? bias.data() : nullptr;
      const std::vector<float> want = DefinitionMatMul(x, c.m, c.k, x_stride, w, c.n, b);
      const std::vector<float> got = RunTiles(cpu::avx512amx_emulated::MatMulsBf16Tiles, x, c.m,
                                              c.k, x_stride, packed, b, c.n + 2);
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n + 2; ++j) {
          const float g = got[i * (c.n + 2) + j];
          if (j >= c.n) {
            ASSERT_EQ(g, -7.0F) << "wrote padding";
            continue;
          }
          ASSERT_EQ(std::bit_cast<uint32_t>(g), std::bit_cast<uint32_t>(want[i * c.n + j]))
              << "m=" << c.m << " k=" << c.k << " n=" << c.n << " bias=" << with_bias << " at " << i
              << "," << j << ": " << g << " want " << want[i * c.n + j];
        }
      }
    }
  }
}

TEST(Bf16TilesTest, RealTilesGiveTheEmulationsBits) {
  if (!IsaSupported(Isa::kAvx512Amx)) GTEST_SKIP() << "this CPU has no AMX";
  uint32_t seed = 300;
  for (const Case& c : {Case{16, 64, 32, -70}, Case{33, 513, 67, -70}, Case{128, 2048, 96, -4},
                        Case{70, 129, 300, -70}, Case{7, 1000, 50, -70}}) {
    ++seed;
    const std::vector<float> x = WideFloats(c.m, c.k, seed, c.min_exponent);
    const StoredTensor w =
        Store(DType::kBF16, {c.n, c.k}, WideFloats(c.n, c.k, seed + 1, c.min_exponent));
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(c.n), -1, 1, seed + 2);
    const PackedMatrix packed = PackedMatrix::Pack(w.tensor);
    const auto real =
        RunTiles(cpu::avx512amx::MatMulsBf16Tiles, x, c.m, c.k, c.k, packed, bias.data(), c.n);
    const auto emulated = RunTiles(cpu::avx512amx_emulated::MatMulsBf16Tiles, x, c.m, c.k, c.k,
                                   packed, bias.data(), c.n);
    for (size_t i = 0; i < real.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(real[i]), std::bit_cast<uint32_t>(emulated[i]))
          << "m=" << c.m << " k=" << c.k << " n=" << c.n << " at " << i;
    }
  }
}

}  // namespace
}  // namespace infer::kernels
