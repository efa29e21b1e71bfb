// MatMul y = x . w^T for int8 / int4 weights (ops.h PackedMatrix, Quantization), compiled once
// per ISA.
//
// Activations are rounded to int8 per row and block of 32 channels (QuantizeActivations); each
// block's integer dot products with the weights' unsigned values run on the integer units:
// vpdpbusd (u8 x s8, four products per 32-bit lane) where the CPU has AVX-512 VNNI, otherwise
// the same sums from vpmaddwd on 16-bit halves (exact either way). A block's integer sum r
// then becomes a float term, with dx the activation block's scale, s its sum of q, d and m the
// weight group's scale and minimum:
//   int8 (stored q + 128):  (r - 128 s) * (d dx)
//   int4 (w = d q + m):     r * (d dx) + m * (dx s)
// added to one f32 accumulator per output in ascending block order. That order depends on k
// and the group only, never on m or on the loop order around the tile, so a row's result is
// the same bit for bit alone or in a batch.
// Loop orders, as in matmul_simd.cc: few row blocks (decode) stream ranges of weight panels
// with prefetch far ahead; many (prefill) take tasks of kNc features whose weights stay in L2
// while every row block passes over them.
#include <algorithm>
#include <cstring>
#include <span>

#include "infer/kernels/cpu/kernels.h"
#include "infer/kernels/cpu/scratch.h"
#include "infer/kernels/cpu/simd.h"

namespace infer::kernels::cpu::INFER_ISA_NS {

namespace {

constexpr int64_t kPanel = PackedMatrix::kPanelRows;
// A tile: kNr features (AVX-512: one panel; AVX2: half of one) as two vectors.
constexpr int kNr = 2 * kLanes;
static_assert(kPanel % kNr == 0);

#if defined(__AVX512F__)
using VI = __m512i;
inline VI LoadI(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline VI Set1I(int32_t v) { return _mm512_set1_epi32(v); }
inline VI ZeroI() { return _mm512_setzero_si512(); }
inline VI LowNibbles(VI v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
inline VI HighNibbles(VI v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
}
inline VI HighNibblesTimes16(VI v) {
  return _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(0xf0)));
}
inline VI AddI(VI a, VI b) { return _mm512_add_epi32(a, b); }
inline VI Shr4I32(VI v) { return _mm512_srai_epi32(v, 4); }  // exact on multiples of 16
inline VI SubI(VI a, VI b) { return _mm512_sub_epi32(a, b); }
inline V ToFloat(VI v) { return _mm512_cvtepi32_ps(v); }
#if defined(__AVX512VNNI__)
// acc[i] += u[4i] s[4i] + ... + u[4i+3] s[4i+3] (u unsigned, s signed bytes).
inline VI DotU8S8(VI acc, VI u, VI s) { return _mm512_dpbusd_epi32(acc, u, s); }
#else
inline VI DotU8S8(VI acc, VI u, VI s) {
  const VI u_even = _mm512_and_si512(u, _mm512_set1_epi16(0x00ff));
  const VI u_odd = _mm512_srli_epi16(u, 8);
  const VI s_even = _mm512_srai_epi16(_mm512_slli_epi16(s, 8), 8);
  const VI s_odd = _mm512_srai_epi16(s, 8);
  acc = _mm512_add_epi32(acc, _mm512_madd_epi16(u_even, s_even));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(u_odd, s_odd));
}
#endif
#else
using VI = __m256i;
inline VI LoadI(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const VI*>(p)); }
inline VI Set1I(int32_t v) { return _mm256_set1_epi32(v); }
inline VI ZeroI() { return _mm256_setzero_si256(); }
inline VI LowNibbles(VI v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
// Used by the int4 tile of 3 or more rows, which AVX2's 2-row tiles never instantiate.
[[maybe_unused]] inline VI HighNibbles(VI v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
}
inline VI HighNibblesTimes16(VI v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(0xf0)));
}
inline VI AddI(VI a, VI b) { return _mm256_add_epi32(a, b); }
inline VI Shr4I32(VI v) { return _mm256_srai_epi32(v, 4); }  // exact on multiples of 16
inline VI SubI(VI a, VI b) { return _mm256_sub_epi32(a, b); }
inline V ToFloat(VI v) { return _mm256_cvtepi32_ps(v); }
inline VI DotU8S8(VI acc, VI u, VI s) {
  const VI u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00ff));
  const VI u_odd = _mm256_srli_epi16(u, 8);
  const VI s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8);
  const VI s_odd = _mm256_srai_epi16(s, 8);
  acc = _mm256_add_epi32(acc, _mm256_madd_epi16(u_even, s_even));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(u_odd, s_odd));
}
#endif

// Rows per register tile (accumulators: 2 f32 + 2 int32 vectors per row and tile).
constexpr int kMr = kLanes == 16 ? 4 : 2;
// Up to this many row blocks take the streaming order.
constexpr int64_t kStreamMaxBlocks = 4;
// Output features per task in the many-row order, and weight groups per k-block: a block of
// kNc x kKcGroups x 32 int8 weights (256 KiB) stays in L2 while the row blocks pass.
constexpr int64_t kNc = 256;
constexpr int64_t kKcGroups = 32;
// Tiles per thread in the streaming order, claimed dynamically.
constexpr int64_t kStreamTasksPerThread = 4;
// Prefetch distance along a panel's stream, in bytes (the streaming order runs 4 panel
// streams per thread). 1 KiB against the earlier 4 KiB, the two alternated on Qwen3-1.7B decode
// (AMD EPYC, 2 threads): int8 ahead in 8 of 11 pairs, 27.2 against 25.1 tok/s on average and
// 87-97% of the bandwidth probe against 83-85%; int4 ahead in 3 of 4. Shorter distances (512)
// measured within the noise of 1 KiB.
constexpr int64_t kPrefetchBytes = 1024;

inline void PrefetchLine(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// One step of a tile: the two vectors at `p` (features [0, kLanes) and [kLanes, kNr) of the
// tile, four bytes each), with the same two lines kPrefetchBytes ahead asked for.
inline void LoadStep(const uint8_t* p, VI& v0, VI& v1) {
  PrefetchLine(p + kPrefetchBytes);
  PrefetchLine(p + kPrefetchBytes + 64);
  v0 = LoadI(p);
  v1 = LoadI(p + kLanes * 4);
}

// The activations rounded to int8: row i's values at q + i * padded_k, its block scales and
// sums at d / sum + i * blocks.
struct QuantizedRows {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* sum = nullptr;
  int64_t padded_k = 0;
  int64_t blocks = 0;
};

inline int32_t Quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// kRows rows (from row0) against kTiles column tiles from feature j0, over weight groups
// [g0, g1). y holds the sum of the earlier groups when `accumulate`; bias (features from j0,
// or null) is added after the last group.
template <bool kInt4, int kRows, int kTiles>
inline void QuantTile(const QuantizedRows& x, int64_t row0, const PackedMatrix& w, int64_t j0,
                      int64_t g0, int64_t g1, float* y, int64_t y_stride, bool accumulate,
                      const float* bias) {
  const auto* data = static_cast<const uint8_t*>(w.data());
  const int64_t subs = w.group_size() / kQuantBlock;
  const int64_t sub_bytes = w.sub_block_bytes();
  const int64_t group_bytes = w.group_bytes();
  const int64_t values_bytes = subs * sub_bytes;
  const uint8_t* base[kTiles];
  int64_t cols[kTiles];
  int64_t lanes[kTiles];  // the tile's first lane in its panel
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const int64_t jt = j0 + t * kNr;
    lanes[t] = jt % kPanel;
    base[t] = data + (jt / kPanel) * w.panel_bytes() + g0 * group_bytes + (jt % kPanel) * 4;
    cols[t] = std::min<int64_t>(kNr, w.rows() - jt);
  }
  V acc[kTiles][kRows][2];
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const float* yr = y + r * y_stride + t * kNr;
      const int64_t c0 = std::min<int64_t>(cols[t], kLanes);
      acc[t][r][0] = accumulate ? LoadN(yr, c0) : Zero();
      acc[t][r][1] = accumulate && cols[t] > kLanes ? LoadN(yr + kLanes, cols[t] - kLanes) : Zero();
    }
  }
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t b = 0; b < subs; ++b) {
      const int64_t block = g * subs + b;
      VI dot[kTiles][kRows][2];
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) dot[t][r][0] = dot[t][r][1] = ZeroI();
      }
      const int8_t* xq = x.q + row0 * x.padded_k + block * kQuantBlock;
      if constexpr (kInt4 && kRows <= 2) {
        // Few rows (decode): the high nibbles stay in place (16 q) in their own accumulators,
        // shifted down once per block (the sums are exact multiples of 16): one AND and no
        // shift per load, and two independent chains.
        VI dot_hi[kTiles][kRows][2];
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) dot_hi[t][r][0] = dot_hi[t][r][1] = ZeroI();
        }
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
#pragma GCC unroll 8
          for (int t = 0; t < kTiles; ++t) {
            VI raw0, raw1;
            LoadStep(base[t] + b * sub_bytes + j * kPanel * 4, raw0, raw1);
            const VI lo0 = LowNibbles(raw0), hi0 = HighNibblesTimes16(raw0);
            const VI lo1 = LowNibbles(raw1), hi1 = HighNibblesTimes16(raw1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const VI xlo = Set1I(Quad(xq + r * x.padded_k + 4 * j));
              const VI xhi = Set1I(Quad(xq + r * x.padded_k + 4 * (j + 4)));
              dot[t][r][0] = DotU8S8(dot[t][r][0], lo0, xlo);
              dot[t][r][1] = DotU8S8(dot[t][r][1], lo1, xlo);
              dot_hi[t][r][0] = DotU8S8(dot_hi[t][r][0], hi0, xhi);
              dot_hi[t][r][1] = DotU8S8(dot_hi[t][r][1], hi1, xhi);
            }
          }
        }
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            dot[t][r][0] = AddI(dot[t][r][0], Shr4I32(dot_hi[t][r][0]));
            dot[t][r][1] = AddI(dot[t][r][1], Shr4I32(dot_hi[t][r][1]));
          }
        }
      } else if constexpr (kInt4) {
#pragma GCC unroll 4
        for (int64_t j = 0; j < 4; ++j) {
#pragma GCC unroll 8
          for (int t = 0; t < kTiles; ++t) {
            VI raw0, raw1;
            LoadStep(base[t] + b * sub_bytes + j * kPanel * 4, raw0, raw1);
            const VI lo0 = LowNibbles(raw0), hi0 = HighNibbles(raw0);
            const VI lo1 = LowNibbles(raw1), hi1 = HighNibbles(raw1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const VI xlo = Set1I(Quad(xq + r * x.padded_k + 4 * j));
              const VI xhi = Set1I(Quad(xq + r * x.padded_k + 4 * (j + 4)));
              dot[t][r][0] = DotU8S8(DotU8S8(dot[t][r][0], lo0, xlo), hi0, xhi);
              dot[t][r][1] = DotU8S8(DotU8S8(dot[t][r][1], lo1, xlo), hi1, xhi);
            }
          }
        }
      } else {
#pragma GCC unroll 8
        for (int64_t j = 0; j < 8; ++j) {
#pragma GCC unroll 8
          for (int t = 0; t < kTiles; ++t) {
            VI w0, w1;
            LoadStep(base[t] + b * sub_bytes + j * kPanel * 4, w0, w1);
#pragma GCC unroll 8
            for (int r = 0; r < kRows; ++r) {
              const VI xb = Set1I(Quad(xq + r * x.padded_k + 4 * j));
              dot[t][r][0] = DotU8S8(dot[t][r][0], w0, xb);
              dot[t][r][1] = DotU8S8(dot[t][r][1], w1, xb);
            }
          }
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
        // This group's scales, from the tile's first lane.
        const uint8_t* scales = base[t] - lanes[t] * 4 + values_bytes;
        // The loads above prefetch the values' lines; the scale lines (64 or 128 bytes per
        // group, 6-20% of the stream) need their own.
        if (b == 0) {
          PrefetchLine(scales + kPrefetchBytes);
          if constexpr (kInt4) PrefetchLine(scales + kPrefetchBytes + 64);
        }
        const auto* d_ptr = reinterpret_cast<const uint16_t*>(scales) + lanes[t];
        const V d0 = LoadF16(d_ptr);
        const V d1 = LoadF16(d_ptr + kLanes);
        V m0 = Zero(), m1 = Zero();
        if constexpr (kInt4) {
          m0 = LoadF16(d_ptr + kPanel);
          m1 = LoadF16(d_ptr + kPanel + kLanes);
        }
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          const float dx = x.d[(row0 + r) * x.blocks + block];
          const int32_t sx = x.sum[(row0 + r) * x.blocks + block];
          const V vdx = Set1(dx);
          if constexpr (kInt4) {
            acc[t][r][0] = Fma(ToFloat(dot[t][r][0]), Mul(d0, vdx), acc[t][r][0]);
            acc[t][r][1] = Fma(ToFloat(dot[t][r][1]), Mul(d1, vdx), acc[t][r][1]);
            const V dxs = Set1(dx * static_cast<float>(sx));
            acc[t][r][0] = Fma(m0, dxs, acc[t][r][0]);
            acc[t][r][1] = Fma(m1, dxs, acc[t][r][1]);
          } else {
            const VI offset = Set1I(128 * sx);
            acc[t][r][0] = Fma(ToFloat(SubI(dot[t][r][0], offset)), Mul(d0, vdx), acc[t][r][0]);
            acc[t][r][1] = Fma(ToFloat(SubI(dot[t][r][1], offset)), Mul(d1, vdx), acc[t][r][1]);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) base[t] += group_bytes;
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const int64_t c0 = std::min<int64_t>(cols[t], kLanes);
    const int64_t c1 = cols[t] - c0;
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      float* yr = y + r * y_stride + t * kNr;
      V v0 = acc[t][r][0];
      V v1 = acc[t][r][1];
      if (bias != nullptr) {
        v0 = Add(v0, LoadN(bias + t * kNr, c0));
        if (c1 > 0) v1 = Add(v1, LoadN(bias + t * kNr + kLanes, c1));
      }
      StoreN(yr, v0, c0);
      if (c1 > 0) StoreN(yr + kLanes, v1, c1);
    }
  }
}

// Tiles per call for kRows rows: with few rows, several adjacent tiles keep more weight
// streams and independent dot chains in flight.
constexpr int TilesPerCall(int rows) {
  if constexpr (kLanes == 16) {
    return rows <= 1 ? 4 : rows <= 2 ? 2 : 1;
  } else {
    return rows <= 1 ? 2 : 1;
  }
}

// `rows` rows against `tiles` column tiles from j0.
template <bool kInt4, int kRows = kMr>
inline void QuantTiles(int rows, int64_t tiles, const QuantizedRows& x, int64_t row0,
                       const PackedMatrix& w, int64_t j0, int64_t g0, int64_t g1, float* y,
                       int64_t y_stride, bool accumulate, const float* bias) {
  if constexpr (kRows > 0) {
    if (rows != kRows) {
      QuantTiles<kInt4, kRows - 1>(rows, tiles, x, row0, w, j0, g0, g1, y, y_stride, accumulate,
                                   bias);
      return;
    }
    constexpr int kGroup = TilesPerCall(kRows);
    int64_t t = 0;
    if constexpr (kGroup > 1) {
      for (; t + kGroup <= tiles; t += kGroup) {
        QuantTile<kInt4, kRows, kGroup>(x, row0, w, j0 + t * kNr, g0, g1, y + t * kNr, y_stride,
                                        accumulate, bias != nullptr ? bias + t * kNr : nullptr);
      }
    }
    for (; t < tiles; ++t) {
      QuantTile<kInt4, kRows, 1>(x, row0, w, j0 + t * kNr, g0, g1, y + t * kNr, y_stride,
                                 accumulate, bias != nullptr ? bias + t * kNr : nullptr);
    }
  }
}

thread_local Scratch tls_q_scratch;
thread_local Scratch tls_d_scratch;
thread_local Scratch tls_sum_scratch;

// x's rows against every output's weights (all quantized as kInt4 says), in one region.
template <bool kInt4>
void QuantGemm(const QuantizedRows& x, int64_t m, std::span<const Product> outputs,
               ThreadPool& pool) {
  const int64_t row_blocks = (m + kMr - 1) / kMr;
  // Row block p of output o against `tiles` tiles from j0 over groups [g0, g1).
  auto run = [&](const Product& o, int64_t p, int64_t j0, int64_t tiles, int64_t g0, int64_t g1) {
    const int rows = static_cast<int>(std::min<int64_t>(kMr, m - p * kMr));
    const int64_t groups = o.w->num_groups();
    QuantTiles<kInt4>(rows, tiles, x, p * kMr, *o.w, j0, g0, g1, o.y + p * kMr * o.y_stride + j0,
                      o.y_stride, g0 > 0,
                      g1 == groups && o.bias != nullptr ? o.bias + j0 : nullptr);
  };
  if (row_blocks <= kStreamMaxBlocks) {
    // Ranges of whole panels, about kStreamTasksPerThread per thread over all outputs.
    int64_t total_tiles = 0;
    for (const Product& o : outputs) total_tiles += (o.w->rows() + kNr - 1) / kNr;
    const int64_t max_tasks = kStreamTasksPerThread * pool.num_threads();
    const int64_t tiles_per_task = std::max<int64_t>(
        kPanel / kNr, (total_tiles + max_tasks - 1) / max_tasks / (kPanel / kNr) * (kPanel / kNr));
    const int64_t step = tiles_per_task * kNr;
    pool.RunTasks(static_cast<int>(ProductTasks(outputs, step)), [&](int task) {
      const auto [o, j0] = ProductTask(outputs, task, step);
      const int64_t tiles = (std::min(o->w->rows(), j0 + step) - j0 + kNr - 1) / kNr;
      const int64_t groups = o->w->num_groups();
      if (row_blocks == 1) {
        run(*o, 0, j0, tiles, 0, groups);
        return;
      }
      for (int64_t g0 = 0; g0 < groups; g0 += kKcGroups) {
        const int64_t g1 = std::min(groups, g0 + kKcGroups);
        for (int64_t p = 0; p < row_blocks; ++p) run(*o, p, j0, tiles, g0, g1);
      }
    });
    return;
  }
  pool.RunTasks(static_cast<int>(ProductTasks(outputs, kNc)), [&](int task) {
    const auto [o, j0] = ProductTask(outputs, task, kNc);
    const int64_t tiles = (std::min(o->w->rows(), j0 + kNc) - j0 + kNr - 1) / kNr;
    const int64_t groups = o->w->num_groups();
    for (int64_t g0 = 0; g0 < groups; g0 += kKcGroups) {
      const int64_t g1 = std::min(groups, g0 + kKcGroups);
      for (int64_t p = 0; p < row_blocks; ++p) run(*o, p, j0, tiles, g0, g1);
    }
  });
}

// One row's blocks: the scalar reference's arithmetic (the same f32 operations), with the max
// and the rounding in vectors.
void QuantizeRow(const float* x, int64_t k, int64_t padded_k, int8_t* q, float* d, int32_t* sum) {
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
    int8_t* out = q + begin;
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
    d[begin / kQuantBlock] = scale;
    sum[begin / kQuantBlock] = total;
  }
}

}  // namespace

void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t padded_k,
                         int8_t* q, float* d, int32_t* sum) {
  const int64_t blocks = padded_k / kQuantBlock;
  for (int64_t i = 0; i < m; ++i) {
    QuantizeRow(x + i * x_stride, k, padded_k, q + i * padded_k, d + i * blocks, sum + i * blocks);
  }
}

void QuantizedMatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,
                      std::span<const Product> outputs, ThreadPool& pool) {
  if (m == 0 || outputs.empty()) return;
  const PackedMatrix& first = *outputs.front().w;
  const int64_t padded_k = first.num_groups() * first.group_size();
  if (padded_k == 0) {
    for (const Product& o : outputs) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < o.w->rows(); ++j) {
          o.y[i * o.y_stride + j] = o.bias != nullptr ? o.bias[j] : 0.0F;
        }
      }
    }
    return;
  }
  const int64_t blocks = padded_k / kQuantBlock;
  auto* q = tls_q_scratch.Array<int8_t>(static_cast<size_t>(m * padded_k));
  auto* d = tls_d_scratch.Array<float>(static_cast<size_t>(m * blocks));
  auto* sum = tls_sum_scratch.Array<int32_t>(static_cast<size_t>(m * blocks));
  constexpr int64_t kRowsPerTask = 16;
  if (m <= kRowsPerTask) {
    QuantizeActivations(x, m, k, x_stride, padded_k, q, d, sum);
  } else {
    pool.ParallelFor(m, kRowsPerTask, [&](int64_t begin, int64_t end) {
      QuantizeActivations(x + begin * x_stride, end - begin, k, x_stride, padded_k,
                          q + begin * padded_k, d + begin * blocks, sum + begin * blocks);
    });
  }
  const QuantizedRows rows{q, d, sum, padded_k, blocks};
  if (first.quantization() == Quantization::kInt4) {
    QuantGemm<true>(rows, m, outputs, pool);
  } else {
    QuantGemm<false>(rows, m, outputs, pool);
  }
}

}  // namespace infer::kernels::cpu::INFER_ISA_NS
