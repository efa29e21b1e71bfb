// Helpers for kernel tests: the SIMD ISAs to compare against the reference, random data,
// and weights stored in each dtype.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "infer/core/dtype.h"
#include "infer/core/tensor.h"
#include "infer/core/thread_pool.h"
#include "infer/kernels/cpu/isa.h"
#include "infer/kernels/ops.h"

namespace infer::kernels {

// Every SIMD level compiled in that this CPU can run.
inline std::vector<Isa> SimdIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAvx512Amx}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// For tests that compare the SIMD levels with the reference (or with each other): on a CPU that
// runs none of them (no AVX2) they would check nothing, so they are reported skipped instead.
#define INFER_SKIP_WITHOUT_SIMD()                                                        \
  do {                                                                                   \
    if (::infer::kernels::SimdIsas().empty()) {                                          \
      GTEST_SKIP() << "this CPU runs no SIMD level (AVX2 or above): nothing to compare"; \
    }                                                                                    \
  } while (false)

// One two-thread pool for the whole test binary, never destroyed: kernels are exercised
// across many calls on the same pool, as the model uses it.
inline ThreadPool& TestPool() {
  static ThreadPool* pool = new ThreadPool(2);
  return *pool;
}

// Sets the active ISA for a scope, restoring the previous one.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : previous_(ActiveIsa()) { SetActiveIsa(isa); }
  ~ScopedIsa() { SetActiveIsa(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

inline std::vector<float> RandomFloats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Values stored as `dtype` (rounded), and the exact f32 view of what was stored.
struct StoredTensor {
  Tensor tensor;
  std::vector<float> widened;
};

inline StoredTensor Store(DType dtype, const Shape& shape, const std::vector<float>& values) {
  StoredTensor out{Tensor::Empty(dtype, shape), std::vector<float>(values.size())};
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      out.tensor.data<float>()[i] = values[i];
    } else if (dtype == DType::kBF16) {
      out.tensor.data<uint16_t>()[i] = F32ToBf16(values[i]);
    } else {
      out.tensor.data<uint16_t>()[i] = F32ToF16(values[i]);
    }
    out.widened[i] = ElementAsF32(out.tensor, static_cast<int64_t>(i));
  }
  return out;
}

inline std::string Describe(Isa isa, DType dtype) {
  return std::string(IsaName(isa)) + "/" + std::string(DTypeName(dtype));
}

// MatMuls over `weights` (a bias on output 1; output rows one wider than the weight) against
// one MatMul per weight, on the active ISA: asserts the same bits in every output.
inline void ExpectMatMulsEqualEachMatMul(
    const std::vector<float>& x, int64_t m, int64_t k,
    const std::vector<const PackedMatrix*>& weights, const Tensor& bias, MatMulPrecision precision,
    const std::string& what, QuantizedActivations activations = QuantizedActivations::kInt8) {
  std::vector<std::vector<float>> together, alone;
  std::vector<MatMulOutput> outputs;
  for (size_t o = 0; o < weights.size(); ++o) {
    const int64_t stride = weights[o]->rows() + 1;
    together.emplace_back(static_cast<size_t>(m * stride), -7.0F);
    alone.emplace_back(static_cast<size_t>(m * stride), -7.0F);
    const Tensor* b = o == 1 ? &bias : nullptr;
    outputs.push_back({weights[o], b, together.back().data(), stride});
    MatMul(x.data(), m, k, k, *weights[o], b, alone.back().data(), stride, TestPool(), precision,
           activations);
  }
  MatMuls(x.data(), m, k, k, outputs, TestPool(), precision, activations);
  for (size_t o = 0; o < weights.size(); ++o) {
    ASSERT_EQ(together[o], alone[o]) << what << " m=" << m << " output " << o;
  }
}

}  // namespace infer::kernels
