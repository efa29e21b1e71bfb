// Activations rounded to int8 per row and block of kQuantBlock channels, for the quantized
// MatMul: a block's scale is its largest magnitude / 127, its values rounded to nearest even,
// and the sum of the rounded values kept beside them (the scalar reference's arithmetic, the
// same f32 operations). Compiled once per ISA.
#include <algorithm>

#include "infer/kernels/cpu/matmul_quant_tile.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

// One row's blocks: the scalar reference's arithmetic (the same f32 operations), with the max
// and the rounding in vectors. Block b goes to q + b * step * kQuantBlock, d[b * step] and
// sum[b * step] (QuantizedRows: step is its group_rows).
void QuantizeRow(const float* x, int64_t k, int64_t padded_k, int64_t step, int8_t* q, float* d,
                 int32_t* sum) {
  alignas(64) float values[kQuantBlock];
  for (int64_t begin = 0; begin < padded_k; begin += kQuantBlock) {
    const int64_t count = std::clamp<int64_t>(k - begin, 0, kQuantBlock);
    V amax = Zero();
    for (int64_t c = 0; c < kQuantBlock; c += kLanes) {
      const V v = count > c ? LoadN(x + begin + c, count - c) : Zero();
      Store(values + c, v);
      amax = Max(amax, Abs(v));
    }
    const float scale = ReduceMax(amax) / 127.0F;
    const float inverse = scale > 0.0F ? 1.0F / scale : 0.0F;
    const V vinv = Set1(inverse);
    int32_t total = 0;
    const int64_t block = begin / kQuantBlock;
    int8_t* out = q + block * step * kQuantBlock;
#if defined(__AVX512F__)
    for (int64_t c = 0; c < kQuantBlock; c += kLanes) {
      const V r = Round(Mul(Load(values + c), vinv));
      alignas(64) float rounded[kLanes];
      Store(rounded, r);
      for (int l = 0; l < kLanes; ++l) {
        const auto v = static_cast<int32_t>(rounded[l]);
        out[c + l] = static_cast<int8_t>(v);
        total += v;
      }
    }
#else
    // The rounded values are whole numbers within [-127, 127]: exact as int32, and the packs
    // to 16 and 8 bits never saturate.
    VI sums = ZeroI();
    for (int64_t c = 0; c < kQuantBlock; c += kLanes) {
      const VI v = _mm256_cvtps_epi32(Round(Mul(Load(values + c), vinv)));
      sums = AddI(sums, v);
      const __m128i halves =
          _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), _mm_packs_epi16(halves, halves));
    }
    alignas(32) int32_t lanes[kLanes];
    _mm256_store_si256(reinterpret_cast<VI*>(lanes), sums);
    for (const int32_t v : lanes) total += v;
#endif
    d[block * step] = scale;
    sum[block * step] = total;
  }
}

}  // namespace

void QuantizeRows(const float* x, int64_t begin, int64_t end, int64_t k, int64_t x_stride,
                  const QuantizedRows& layout, int8_t* q, float* d, int32_t* sum) {
  for (int64_t i = begin; i < end; ++i) {
    const int64_t at = layout.Index(i, 0);
    QuantizeRow(x + i * x_stride, k, layout.padded_k, layout.group_rows, q + at * kQuantBlock,
                d + at, sum + at);
  }
}

void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t padded_k,
                         int8_t* q, float* d, int32_t* sum) {
  const QuantizedRows row_after_row{.padded_k = padded_k, .blocks = padded_k / kQuantBlock};
  QuantizeRows(x, 0, m, k, x_stride, row_after_row, q, d, sum);
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
