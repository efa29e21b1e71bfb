// Gated DeltaNet's per-head recurrence (kernels.h GatedDeltaHead), compiled once per ISA. Per
// token, two passes over the state S [dk, dv], a chunk of up to kChunkVectors vectors of its
// columns at a time (the columns are independent): the first decays S and sums S^T k, the second
// adds k delta^T and sums S^T q, the chunk's sums held in registers.
#include <algorithm>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

void GatedDeltaHead(const float* q, const float* k, int64_t qk_stride, const float* v,
                    int64_t v_stride, const float* decay, const float* beta, int64_t gb_stride,
                    int64_t n, int64_t dk, int64_t dv, float* s, float* o, int64_t o_stride) {
  constexpr int kChunkVectors = 8;
  for (int64_t c0 = 0; c0 < dv; c0 += kChunkVectors * kLanes) {
    const int64_t width = std::min<int64_t>(kChunkVectors * kLanes, dv - c0);
    const int vectors = static_cast<int>((width + kLanes - 1) / kLanes);
    const auto count = [&](int vec) { return std::min<int64_t>(kLanes, width - vec * kLanes); };
    for (int64_t t = 0; t < n; ++t) {
      const float* q_t = q + t * qk_stride;
      const float* k_t = k + t * qk_stride;
      const V d = Set1(decay[t * gb_stride]);
      V sums[kChunkVectors];
      for (int vec = 0; vec < vectors; ++vec) sums[vec] = Zero();
      for (int64_t i = 0; i < dk; ++i) {
        float* row = s + i * dv + c0;
        const V ki = Set1(k_t[i]);
        for (int vec = 0; vec < vectors; ++vec) {
          const V decayed = Mul(LoadN(row + vec * kLanes, count(vec)), d);
          StoreN(row + vec * kLanes, decayed, count(vec));
          sums[vec] = Fma(decayed, ki, sums[vec]);
        }
      }
      const V b = Set1(beta[t * gb_stride]);
      V delta[kChunkVectors];
      for (int vec = 0; vec < vectors; ++vec) {
        delta[vec] =
            Mul(b, Sub(LoadN(v + t * v_stride + c0 + vec * kLanes, count(vec)), sums[vec]));
        sums[vec] = Zero();
      }
      for (int64_t i = 0; i < dk; ++i) {
        float* row = s + i * dv + c0;
        const V ki = Set1(k_t[i]);
        const V qi = Set1(q_t[i]);
        for (int vec = 0; vec < vectors; ++vec) {
          const V updated = Fma(ki, delta[vec], LoadN(row + vec * kLanes, count(vec)));
          StoreN(row + vec * kLanes, updated, count(vec));
          sums[vec] = Fma(updated, qi, sums[vec]);
        }
      }
      for (int vec = 0; vec < vectors; ++vec) {
        StoreN(o + t * o_stride + c0 + vec * kLanes, sums[vec], count(vec));
      }
    }
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
