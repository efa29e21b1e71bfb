// Vectorised elementwise and per-row kernels (norms, RoPE, activations, widening), compiled
// once per ISA. Each loop runs whole vectors, then one masked vector for the tail.
#include <cmath>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

// Calls fn(offset, count) over [0, n) in vectors of kLanes, the last one possibly partial.
template <typename Fn>
inline void ForEachVector(int64_t n, Fn&& fn) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) fn(i, int64_t{kLanes});
  if (i < n) fn(i, n - i);
}

// Widens `count` (<= kLanes) weights at src + offset to f32.
inline V LoadWidened(DType dtype, const void* src, int64_t offset, int64_t count) {
  if (dtype == DType::kF32) return LoadN(static_cast<const float*>(src) + offset, count);
  const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
  if (count == kLanes) return dtype == DType::kBF16 ? LoadBf16(p) : LoadF16(p);
  alignas(64) uint16_t tail[kLanes] = {};
  for (int64_t i = 0; i < count; ++i) tail[i] = p[i];
  return dtype == DType::kBF16 ? LoadBf16(tail) : LoadF16(tail);
}

template <typename Op>
inline void Unary(const float* x, float* y, int64_t n, Op&& op) {
  ForEachVector(n,
                [&](int64_t i, int64_t count) { StoreN(y + i, op(LoadN(x + i, count)), count); });
}

}  // namespace

void RmsNorm(const float* x, int64_t rows, int64_t dim, DType w_dtype, const void* w, float eps,
             float weight_offset, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    // Sum of squares in double (two f64 halves per f32 vector): exact enough for any dim.
    double sum_squares = 0.0;
    {
      double partial[kLanes] = {};
      ForEachVector(dim, [&](int64_t i, int64_t count) {
        alignas(64) float sq[kLanes];
        const V v = LoadN(row + i, count);
        Store(sq, v);
        for (int lane = 0; lane < kLanes; ++lane) {
          partial[lane] += static_cast<double>(sq[lane]) * sq[lane];
        }
      });
      for (double p : partial) sum_squares += p;
    }
    const auto inv_rms =
        static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(dim) + eps));
    const V scale = Set1(inv_rms);
    const V offset = Set1(weight_offset);
    ForEachVector(dim, [&](int64_t i, int64_t count) {
      const V weight = Add(offset, LoadWidened(w_dtype, w, i, count));
      StoreN(y + r * dim + i, Mul(Mul(LoadN(row + i, count), scale), weight), count);
    });
  }
}

void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t token_stride,
          const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c_row = cos + t * half;
    const float* s_row = sin + t * half;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + t * token_stride + h * head_dim;
      ForEachVector(half, [&](int64_t i, int64_t count) {
        const V a = LoadN(v + i, count);
        const V b = LoadN(v + half + i, count);
        const V c = LoadN(c_row + i, count);
        const V s = LoadN(s_row + i, count);
        StoreN(v + i, FNma(b, s, Mul(a, c)), count);
        StoreN(v + half + i, Fma(a, s, Mul(b, c)), count);
      });
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  ForEachVector(n, [&](int64_t i, int64_t count) {
    StoreN(out + i, Mul(Silu(LoadN(gate + i, count)), LoadN(up + i, count)), count);
  });
}

void GeluTanhMul(const float* gate, const float* up, float* out, int64_t n) {
  ForEachVector(n, [&](int64_t i, int64_t count) {
    StoreN(out + i, Mul(GeluTanh(LoadN(gate + i, count)), LoadN(up + i, count)), count);
  });
}

void Add(float* x, const float* y, int64_t n) {
  ForEachVector(n, [&](int64_t i, int64_t count) {
    StoreN(x + i, Add(LoadN(x + i, count), LoadN(y + i, count)), count);
  });
}

void WidenScale(DType dtype, const void* src, int64_t n, float scale, float* out) {
  const V s = Set1(scale);
  ForEachVector(n, [&](int64_t i, int64_t count) {
    StoreN(out + i, Mul(LoadWidened(dtype, src, i, count), s), count);
  });
}

void SoftCap(float* x, int64_t n, float cap) {
  const V c = Set1(cap);
  Unary(x, x, n, [&](V v) { return Mul(Tanh(Div(v, c)), c); });
}

void ExpArray(const float* x, float* y, int64_t n) {
  Unary(x, y, n, [](V v) { return Exp(v); });
}

void TanhArray(const float* x, float* y, int64_t n) {
  Unary(x, y, n, [](V v) { return Tanh(v); });
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
