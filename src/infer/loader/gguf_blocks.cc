// Compiled with -ffp-contract=off (CMakeLists.txt): a fused multiply-add would round d q - m
// once where gguf-py rounds twice.
#include "infer/loader/gguf_blocks.h"

#include <cmath>
#include <cstring>

#include "infer/core/dtype.h"
#include "infer/core/error.h"
#include "infer/loader/gguf.h"

namespace infer {

namespace {

uint16_t Half(const uint8_t* p) {
  uint16_t bits = 0;
  std::memcpy(&bits, p, 2);
  return bits;
}
float HalfAt(const uint8_t* p) { return F16ToF32(Half(p)); }

// Q4_K and Q5_K: the 6-bit scale and minimum of sub-block j (0-7) from the 12 packed bytes.
void ScaleMin(const uint8_t* s, int j, uint8_t& scale, uint8_t& minimum) {
  if (j < 4) {
    scale = s[j] & 63;
    minimum = s[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    minimum = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// The 4-bit q of element e of a Q4_0 / Q4_1 block's 16 bytes: low nibbles first, then high.
int Nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }
// The 256 4-bit q of a K block's 128 bytes: sub-blocks 2 g and 2 g + 1 are the low and high
// nibbles of bytes [32 g, 32 g + 32). (T: int, or int8_t for a QuantizedRow.)
template <typename T>
void NibblesK(const uint8_t* qs, T* q) {
  for (int pair = 0; pair < 4; ++pair) {
    for (int l = 0; l < 32; ++l) {
      q[64 * pair + l] = static_cast<T>(qs[32 * pair + l] & 15);
      q[64 * pair + 32 + l] = static_cast<T>(qs[32 * pair + l] >> 4);
    }
  }
}

// A Q4_K block's 128 nibble bytes as QuantizedRow::nibbles: sub-blocks 2 g and 2 g + 1 are the
// low and high nibbles of bytes [32 g, 32 g + 32), and a sub-block's byte c pairs its values c
// and c + 16.
// Eight bytes at a time (each byte's nibbles kept in place by the masks).
void PairNibblesK(const uint8_t* qs, uint8_t* nibbles) {
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL;
  for (int pair = 0; pair < 4; ++pair) {
    for (int half = 0; half < 2; ++half) {
      uint64_t lo = 0;
      uint64_t hi = 0;
      std::memcpy(&lo, qs + 32 * pair + 8 * half, 8);
      std::memcpy(&hi, qs + 32 * pair + 16 + 8 * half, 8);
      const uint64_t even = (lo & kLow) | (hi & kLow) << 4;
      const uint64_t odd = (lo >> 4 & kLow) | (hi & ~kLow);
      std::memcpy(nibbles + 32 * pair + 8 * half, &even, 8);
      std::memcpy(nibbles + 32 * pair + 16 + 8 * half, &odd, 8);
    }
  }
}

// The 5-bit q (0-31) of element e of a Q5_0 / Q5_1 block from `bits`: its 4 bytes of fifth bits
// (bit e for element e), then its 16 bytes of nibbles.
int Q5Bits(const uint8_t* bits, int e) {
  uint32_t high_bits = 0;
  std::memcpy(&high_bits, bits, 4);
  return Nibble32(bits + 4, e) | static_cast<int>(((high_bits >> e) & 1U) << 4);
}
// The 256 q of a Q4_K block (0-15) or, `five`, a Q5_K block (0-31: Q4_K's block with the
// values' fifth bits, 32 bytes whose bit j is sub-block j's, between the scales and nibbles).
template <typename T>
void ValuesK(const uint8_t* b, bool five, T* q) {
  NibblesK(b + (five ? 48 : 16), q);
  if (!five) return;
  const uint8_t* qh = b + 16;
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] = static_cast<T>(q[32 * j + l] | ((qh[l] >> j) & 1) << 4);
  }
}

// Element e of a Q5_0 block (d, then the bits) less its offset 16: in [-16, 15].
int Q5Value(const uint8_t* b, int e) { return Q5Bits(b + 2, e) - 16; }

// The 256 stored values of a Q6_K block (128 bytes of low nibbles, 64 of top 2 bits, then the
// scales and d), q plus its offset 32: in [0, 63]. Each half of 128 has 64 nibble bytes and 32
// top-bit bytes: its 32-value quarters g = 0-3 take the low nibbles of bytes [0, 32) and [32, 64),
// then their high nibbles, and top bits 2 g.
void Q6Values(const uint8_t* b, uint8_t* q) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* low = b + 64 * h;
    const uint8_t* top = b + 128 + 32 * h;
    for (int l = 0; l < 32; ++l) {
      q[128 * h + l] = static_cast<uint8_t>((low[l] & 15) | (top[l] & 3) << 4);
      q[128 * h + 32 + l] = static_cast<uint8_t>((low[32 + l] & 15) | (top[l] >> 2 & 3) << 4);
      q[128 * h + 64 + l] = static_cast<uint8_t>((low[l] >> 4) | (top[l] >> 4 & 3) << 4);
      q[128 * h + 96 + l] = static_cast<uint8_t>((low[32 + l] >> 4) | (top[l] >> 6 & 3) << 4);
    }
  }
}

template <typename Block>
void ForBlocks(std::span<const std::byte> row, std::span<float> out, int64_t block_elements,
               int64_t block_bytes, Block block) {
  const auto blocks = static_cast<int64_t>(out.size()) / block_elements;
  INFER_CHECK(static_cast<int64_t>(out.size()) % block_elements == 0 &&
                  static_cast<int64_t>(row.size()) >= blocks * block_bytes,
              "dequantize: {} values from {} bytes", out.size(), row.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(row.data());
  for (int64_t b = 0; b < blocks; ++b) {
    block(bytes + b * block_bytes, out.data() + b * block_elements);
  }
}

}  // namespace

bool CanDequantizeGgml(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void DequantizeGgmlRow(uint32_t type, std::span<const std::byte> row, std::span<float> out) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return ForBlocks(row, out, 1, 4, [](const uint8_t* b, float* y) { std::memcpy(y, b, 4); });
    case GgmlType::kF16:
      return ForBlocks(row, out, 1, 2, [](const uint8_t* b, float* y) { *y = HalfAt(b); });
    case GgmlType::kBF16:
      return ForBlocks(row, out, 1, 2, [](const uint8_t* b, float* y) { *y = Bf16ToF32(Half(b)); });
    case GgmlType::kQ8_0:
      return ForBlocks(row, out, 32, 34, [](const uint8_t* b, float* y) {
        const float d = HalfAt(b);
        for (int e = 0; e < 32; ++e)
          y[e] = static_cast<float>(b[2 + e] >= 128 ? b[2 + e] - 256 : b[2 + e]) * d;
      });
    case GgmlType::kQ4_0:
      return ForBlocks(row, out, 32, 18, [](const uint8_t* b, float* y) {
        const float d = HalfAt(b);
        for (int e = 0; e < 32; ++e) y[e] = d * static_cast<float>(Nibble32(b + 2, e) - 8);
      });
    case GgmlType::kQ5_0:
      return ForBlocks(row, out, 32, 22, [](const uint8_t* b, float* y) {
        const float d = HalfAt(b);
        for (int e = 0; e < 32; ++e) y[e] = d * static_cast<float>(Q5Value(b, e));
      });
    case GgmlType::kQ4_1:
      return ForBlocks(row, out, 32, 20, [](const uint8_t* b, float* y) {
        const float d = HalfAt(b);
        const float m = HalfAt(b + 2);
        for (int e = 0; e < 32; ++e) y[e] = d * static_cast<float>(Nibble32(b + 4, e)) + m;
      });
    case GgmlType::kQ5_1:
      return ForBlocks(row, out, 32, 24, [](const uint8_t* b, float* y) {
        const float d = HalfAt(b);
        const float m = HalfAt(b + 2);
        for (int e = 0; e < 32; ++e) y[e] = d * static_cast<float>(Q5Bits(b + 4, e)) + m;
      });
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = static_cast<GgmlType>(type) == GgmlType::kQ5_K;
      return ForBlocks(row, out, 256, five ? 176 : 144, [five](const uint8_t* b, float* y) {
        const float d = HalfAt(b);
        const float dmin = HalfAt(b + 2);
        const uint8_t* scales = b + 4;
        int q[256];
        ValuesK(b, five, q);
        for (int j = 0; j < 8; ++j) {
          uint8_t sc = 0;
          uint8_t mn = 0;
          ScaleMin(scales, j, sc, mn);
          const float scale = d * static_cast<float>(sc);
          const float minimum = dmin * static_cast<float>(mn);
          for (int e = 32 * j; e < 32 * j + 32; ++e) {
            y[e] = scale * static_cast<float>(q[e]) - minimum;
          }
        }
      });
    }
    case GgmlType::kQ6_K:
      return ForBlocks(row, out, 256, 210, [](const uint8_t* b, float* y) {
        const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
        const float d = HalfAt(b + 208);
        uint8_t q[256];
        Q6Values(b, q);
        for (int e = 0; e < 256; ++e) {
          const int sub = e / 16;  // each 16 values have their own scale
          y[e] = d * static_cast<float>(scales[sub]) * static_cast<float>(q[e] - 32);
        }
      });
    default:
      Fail("dequantize: ggml type {} is not read", GgmlTypeName(type));
  }
}

std::optional<kernels::Quantization> ExactQuantization(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ5_0:
      return kernels::Quantization::kInt8;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
      return kernels::Quantization::kInt4;
    case GgmlType::kQ5_1:
      return kernels::Quantization::kInt5;
    case GgmlType::kQ4_K:
      return kernels::Quantization::kInt4K;
    case GgmlType::kQ5_K:
      return kernels::Quantization::kInt5K;
    case GgmlType::kQ6_K:
      return kernels::Quantization::kInt6K;
    default:
      return std::nullopt;
  }
}

void FillQuantizedRow(uint32_t type, std::span<const std::byte> row,
                      kernels::PackedMatrix::QuantizedRow& out) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(row.data());
  const auto cols = static_cast<int64_t>(out.q.size());
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kQ8_0:
      for (int64_t g = 0; g < cols / 32; ++g) {
        const uint8_t* b = bytes + g * 34;
        out.d[g] = Half(b);
        for (int e = 0; e < 32; ++e)
          out.q[g * 32 + e] = static_cast<uint8_t>(b[2 + e] ^ 0x80);  // q + 128
      }
      return;
    case GgmlType::kQ5_0:
      for (int64_t g = 0; g < cols / 32; ++g) {
        const uint8_t* b = bytes + g * 22;
        out.d[g] = Half(b);
        for (int e = 0; e < 32; ++e) out.q[g * 32 + e] = static_cast<uint8_t>(Q5Value(b, e) + 128);
      }
      return;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const bool with_min = static_cast<GgmlType>(type) == GgmlType::kQ4_1;
      const int64_t block_bytes = with_min ? 20 : 18;
      for (int64_t g = 0; g < cols / 32; ++g) {
        const uint8_t* b = bytes + g * block_bytes;
        out.d[g] = Half(b);
        if (with_min) {
          out.m[g] = Half(b + 2);
        } else {
          // m = -8 d: a power-of-two multiple, exact in f16 unless it overflows.
          const float m = -8.0F * HalfAt(b);
          INFER_CHECK(std::abs(m) <= 65504.0F, "Q4_0 block {}: scale {} is too large for int4", g,
                      HalfAt(b));
          out.m[g] = F32ToF16(m);
        }
        // The block's 16 bytes (element e < 16 low, e + 16 high) are the layout's own.
        std::memcpy(out.nibbles.data() + g * 16, b + (with_min ? 4 : 2), 16);
      }
      out.as_nibbles = true;
      return;
    }
    case GgmlType::kQ5_1:
      for (int64_t g = 0; g < cols / 32; ++g) {
        const uint8_t* b = bytes + g * 24;
        out.d[g] = Half(b);
        out.m[g] = Half(b + 2);
        for (int e = 0; e < 32; ++e) out.q[g * 32 + e] = static_cast<uint8_t>(Q5Bits(b + 4, e));
      }
      return;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = static_cast<GgmlType>(type) == GgmlType::kQ5_K;
      for (int64_t g = 0; g < cols / 256; ++g) {
        const uint8_t* b = bytes + g * (five ? 176 : 144);
        out.d[g] = Half(b);
        out.m[g] = Half(b + 2) ^ 0x8000;  // the minimum step dm = -dmin
        for (int j = 0; j < 8; ++j) ScaleMin(b + 4, j, out.sc[g * 8 + j], out.mn[g * 8 + j]);
        if (five) {
          ValuesK(b, five, out.q.data() + g * 256);
        } else {
          PairNibblesK(b + 16, out.nibbles.data() + g * 128);
        }
      }
      out.as_nibbles = !five;
      return;
    }
    case GgmlType::kQ6_K:
      for (int64_t g = 0; g < cols / 256; ++g) {
        const uint8_t* b = bytes + g * 210;
        out.d[g] = Half(b + 208);
        for (int h = 0; h < 16; ++h) out.sc16[g * 16 + h] = static_cast<int8_t>(b[192 + h]);
        Q6Values(b, out.q.data() + g * 256);
      }
      return;
    default:
      Fail("ggml type {} has no exact infer layout", GgmlTypeName(type));
  }
}

}  // namespace infer
