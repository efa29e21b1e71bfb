// Plain-loop reference kernels: the kScalar path and the oracle the SIMD kernels are tested
// against. Written for clarity; reductions accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "infer/kernels/cpu/kernels.h"

namespace infer::kernels::cpu {

void RoundActivationsToBf16(const float* x, int64_t m, int64_t k, int64_t x_stride, float* out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t kk = 0; kk < k; ++kk) out[i * k + kk] = Bf16ToF32(F32ToBf16(x[i * x_stride + kk]));
  }
}

}  // namespace infer::kernels::cpu

namespace infer::kernels::cpu::reference {

namespace {

float Widen(DType dtype, const void* data, int64_t index) {
  switch (dtype) {
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(data)[index]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(data)[index]);
    default:
      return static_cast<const float*>(data)[index];
  }
}

// The exact dequantized weight of a quantized matrix, in double: d * q (+ m).
double DequantizedWeight(const PackedMatrix& w, int64_t row, int64_t col) {
  const int64_t block = col / kQuantBlock;
  const double d = w.ChannelScale(row, col);
  const int offset = QuantStoredOffset(w.quantization());
  if (offset != 0) return d * (w.QuantAt(row, col) - offset);
  return d * w.QuantAt(row, col) + w.SubBlockMinimum(row, block);
}

}  // namespace

void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t padded_k,
                         int8_t* q, float* d, int32_t* sum) {
  const int64_t blocks = padded_k / kQuantBlock;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * kQuantBlock;
      const int64_t count = std::clamp<int64_t>(k - begin, 0, kQuantBlock);
      float amax = 0.0F;
      for (int64_t c = 0; c < count; ++c)
        amax = std::max(amax, std::fabs(x[i * x_stride + begin + c]));
      const float scale = amax / 127.0F;
      const float inverse = scale > 0.0F ? 1.0F / scale : 0.0F;
      int32_t total = 0;
      for (int64_t c = 0; c < kQuantBlock; ++c) {
        const int value =
            c < count ? static_cast<int>(std::nearbyint(x[i * x_stride + begin + c] * inverse)) : 0;
        q[i * padded_k + begin + c] = static_cast<int8_t>(value);
        total += value;
      }
      d[i * blocks + b] = scale;
      sum[i * blocks + b] = total;
    }
  }
}

namespace {

// The product of the dequantized weights with the rounded activations, in double.
void QuantizedMatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const PackedMatrix& w,
                     const float* bias, float* y, int64_t y_stride, ThreadPool& pool) {
  const int64_t padded_k = w.num_groups() * w.group_size();
  const int64_t blocks = padded_k / kQuantBlock;
  std::vector<int8_t> q(static_cast<size_t>(m * padded_k));
  std::vector<float> d(static_cast<size_t>(m * blocks));
  std::vector<int32_t> sum(static_cast<size_t>(m * blocks));
  QuantizeActivations(x, m, k, x_stride, padded_k, q.data(), d.data(), sum.data());
  pool.ParallelFor(w.rows(), 16, [&](int64_t n_begin, int64_t n_end) {
    std::vector<double> w_row(static_cast<size_t>(k));
    for (int64_t j = n_begin; j < n_end; ++j) {
      for (int64_t c = 0; c < k; ++c) w_row[static_cast<size_t>(c)] = DequantizedWeight(w, j, c);
      for (int64_t i = 0; i < m; ++i) {
        double total = bias != nullptr ? bias[j] : 0.0;
        for (int64_t c = 0; c < k; ++c) {
          total +=
              w_row[static_cast<size_t>(c)] * d[i * blocks + c / kQuantBlock] * q[i * padded_k + c];
        }
        y[i * y_stride + j] = static_cast<float>(total);
      }
    }
  });
}

}  // namespace

void QuantizedMatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Product> outputs, ThreadPool& pool) {
  for (const Product& out : outputs) {
    QuantizedMatMul(x, m, k, x_stride, *out.w, out.bias, out.y, out.y_stride, pool);
  }
}

void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const PackedMatrix& w,
            const float* bias, float* y, int64_t y_stride, ThreadPool& pool,
            bool bf16_activations) {
  const int64_t n = w.rows();
  std::vector<float> rounded;
  if (bf16_activations) {
    rounded.resize(static_cast<size_t>(m * k));
    RoundActivationsToBf16(x, m, k, x_stride, rounded.data());
    x = rounded.data();
    x_stride = k;
  }
  pool.ParallelFor(n, 16, [&](int64_t n_begin, int64_t n_end) {
    std::vector<float> w_row(static_cast<size_t>(k));
    for (int64_t j = n_begin; j < n_end; ++j) {
      for (int64_t kk = 0; kk < k; ++kk) w_row[kk] = w.At(j, kk);
      for (int64_t i = 0; i < m; ++i) {
        double sum = bias != nullptr ? bias[j] : 0.0;
        for (int64_t kk = 0; kk < k; ++kk) {
          sum += static_cast<double>(x[i * x_stride + kk]) * w_row[kk];
        }
        y[i * y_stride + j] = static_cast<float>(sum);
      }
    }
  });
}

void MatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,
             std::span<const Product> outputs, ThreadPool& pool, bool bf16_activations) {
  for (const Product& out : outputs) {
    MatMul(x, m, k, x_stride, *out.w, out.bias, out.y, out.y_stride, pool, bf16_activations);
  }
}

void RmsNorm(const float* x, int64_t rows, int64_t dim, DType w_dtype, const void* w, float eps,
             float weight_offset, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    double sum_squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_squares += static_cast<double>(row[i]) * row[i];
    const auto inv_rms =
        static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) {
      y[r * dim + i] = (row[i] * inv_rms) * (weight_offset + Widen(w_dtype, w, i));
    }
  }
}

void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t token_stride,
          const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + t * token_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cos[t * half + i];
        const float s = sin[t * half + i];
        const float a = v[i];
        const float b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void PagedAttention(const float* q, std::span<const AttentionSequence> seqs, const PagedKvLayer& kv,
                    const AttentionParams& params, float* out, ThreadPool& pool) {
  const int64_t num_heads = params.num_heads;
  const int64_t head_dim = params.head_dim;
  const int64_t group = num_heads / params.num_kv_heads;
  const int64_t row_stride = num_heads * head_dim;
  // Element e of the K or V row of position `pos`, kv head `kv_head`, widened to double.
  const auto element = [&](const void* base, const AttentionSequence& seq, int64_t pos,
                           int64_t kv_head, int64_t e) -> double {
    const int64_t index = seq.block_table[pos / kv.block_size] * kv.block_stride +
                          kv_head * kv.head_stride + (pos % kv.block_size) * head_dim + e;
    if (kv.dtype == DType::kBF16) return Bf16ToF32(static_cast<const uint16_t*>(base)[index]);
    return static_cast<const float*>(base)[index];
  };
  for (const AttentionSequence& seq : seqs) {
    pool.RunTasks(static_cast<int>(num_heads), [&](int h) {
      const int64_t kv_head = h / group;
      std::vector<double> scores;
      for (int64_t t = 0; t < seq.num_tokens; ++t) {
        const int64_t pos = seq.first_pos + t;
        const int64_t first_key =
            params.sliding_window > 0 ? std::max<int64_t>(0, pos - params.sliding_window + 1) : 0;
        const float* query = q + (seq.row + t) * row_stride + h * head_dim;
        scores.assign(static_cast<size_t>(pos + 1 - first_key), 0.0);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = first_key; j <= pos; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) {
            dot += static_cast<double>(query[d]) * element(kv.k, seq, j, kv_head, d);
          }
          scores[j - first_key] = dot * params.scale;
          max_score = std::max(max_score, scores[j - first_key]);
        }
        double sum = 0.0;
        for (double& s : scores) {
          s = std::exp(s - max_score);
          sum += s;
        }
        float* o = out + (seq.row + t) * row_stride + h * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) {
          double acc = 0.0;
          for (int64_t j = first_key; j <= pos; ++j) {
            acc += scores[j - first_key] * element(kv.v, seq, j, kv_head, d);
          }
          o[d] = static_cast<float>(acc / sum);
        }
      }
    });
  }
}

void GatedDeltaHead(const float* q, const float* k, int64_t qk_stride, const float* v,
                    int64_t v_stride, const float* decay, const float* beta, int64_t gb_stride,
                    int64_t n, int64_t dk, int64_t dv, float* s, float* o, int64_t o_stride) {
  std::vector<float> delta(static_cast<size_t>(dv));
  for (int64_t t = 0; t < n; ++t) {
    const float* q_t = q + t * qk_stride;
    const float* k_t = k + t * qk_stride;
    const float d = decay[t * gb_stride];
    std::fill(delta.begin(), delta.end(), 0.0F);
    for (int64_t i = 0; i < dk; ++i) {
      for (int64_t j = 0; j < dv; ++j) {
        s[i * dv + j] *= d;
        delta[static_cast<size_t>(j)] += s[i * dv + j] * k_t[i];
      }
    }
    for (int64_t j = 0; j < dv; ++j) {
      delta[static_cast<size_t>(j)] =
          beta[t * gb_stride] * (v[t * v_stride + j] - delta[static_cast<size_t>(j)]);
    }
    float* o_t = o + t * o_stride;
    std::fill(o_t, o_t + dv, 0.0F);
    for (int64_t i = 0; i < dk; ++i) {
      for (int64_t j = 0; j < dv; ++j) {
        s[i * dv + j] += k_t[i] * delta[static_cast<size_t>(j)];
        o_t[j] += s[i * dv + j] * q_t[i];
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void GeluTanhMul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double u = std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
    out[i] = static_cast<float>(0.5 * g * (1.0 + std::tanh(u)) * up[i]);
  }
}

void Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void LoraShrink(const float* x, int64_t x_stride, std::span<const int32_t> rows, int64_t k,
                DType dtype, const void* a, int64_t j0, int64_t j1, float scale, float* t,
                int64_t t_stride) {
  for (const int32_t row : rows) {
    for (int64_t j = j0; j < j1; ++j) {
      double sum = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        sum += static_cast<double>(x[row * x_stride + c]) * Widen(dtype, a, j * k + c);
      }
      t[row * t_stride + j] = scale * static_cast<float>(sum);
    }
  }
}

void LoraExpand(const float* t, int64_t t_stride, std::span<const int32_t> rows, int64_t rank,
                DType dtype, const void* b, int64_t o0, int64_t o1, float* y, int64_t y_stride) {
  for (const int32_t row : rows) {
    for (int64_t o = o0; o < o1; ++o) {
      double sum = y[row * y_stride + o];
      for (int64_t j = 0; j < rank; ++j) {
        const int64_t at = ((o / kLoraPanel) * rank + j) * kLoraPanel + o % kLoraPanel;
        sum += static_cast<double>(t[row * t_stride + j]) * Widen(dtype, b, at);
      }
      y[row * y_stride + o] = static_cast<float>(sum);
    }
  }
}

void WidenScale(DType dtype, const void* src, int64_t n, float scale, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Widen(dtype, src, i) * scale;
}

void SoftCap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(std::tanh(static_cast<double>(x[i]) / cap) * cap);
  }
}

void ExpArray(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(std::exp(static_cast<double>(x[i])));
}

void TanhArray(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(std::tanh(static_cast<double>(x[i])));
}

double ExpShifted(const float* x, int64_t n, float shift, double* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(static_cast<double>(x[i] - shift));
    sum += out[i];
  }
  return sum;
}

RowExtremes Extremes(const float* x, int64_t n) {
  RowExtremes result;
  result.max = -std::numeric_limits<float>::infinity();
  result.min_above_neg_inf = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v > result.max) {
      result.max = v;
      result.argmax = i;
    }
    if (v == -std::numeric_limits<float>::infinity()) {
      ++result.num_neg_inf;
    } else if (v < result.min_above_neg_inf) {
      result.min_above_neg_inf = v;
    }
    result.has_nan = result.has_nan || std::isnan(v);
  }
  return result;
}

}  // namespace infer::kernels::cpu::reference
