// Token ranks (the vocabulary's order by bytes) as sorted, disjoint ranges and as bitsets by
// rank: the two shapes masks and their derivations trade between.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace infer::grammar {

struct RankRange {
  int32_t begin, end;
};

// Appends [begin, end), merged into the last range when they touch.
inline void AppendRange(std::vector<RankRange>& out, int32_t begin, int32_t end) {
  if (!out.empty() && out.back().end == begin) {
    out.back().end = end;
  } else {
    out.push_back({begin, end});
  }
}

// Sets the bits of the ranks of `range` in a bitset by rank, a word at a time.
inline void SetRange(std::vector<uint64_t>& bits, RankRange range) {
  const auto end = static_cast<size_t>(range.end);
  for (auto r = static_cast<size_t>(range.begin); r < end;) {
    const size_t w = r >> 6, lo = r & 63, hi = std::min<size_t>(64, lo + (end - r));
    bits[w] |= hi - lo == 64 ? ~uint64_t{0} : ((uint64_t{1} << (hi - lo)) - 1) << lo;
    r += hi - lo;
  }
}

// Appends the runs of set bits of a bitset by rank as rank ranges (words of all ones or all
// zeros are stepped over whole).
inline void RangesOf(const std::vector<uint64_t>& bits, std::vector<RankRange>& out) {
  const size_t n = bits.size() * 64;
  size_t r = 0;
  while (r < n) {
    size_t w = r >> 6;
    uint64_t word = bits[w] & (~uint64_t{0} << (r & 63));
    while (word == 0 && ++w < bits.size()) word = bits[w];
    if (word == 0) return;
    const size_t begin = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
    uint64_t rest = ~bits[w] & (~uint64_t{0} << (begin & 63));
    while (rest == 0 && ++w < bits.size()) rest = ~bits[w];
    const size_t end = rest == 0 ? n : w * 64 + static_cast<size_t>(__builtin_ctzll(rest));
    AppendRange(out, static_cast<int32_t>(begin), static_cast<int32_t>(end));
    r = end;
  }
}

// Per-rank byte tables (lengths, forced counts) read 64 ranks at a time into one word of a
// bitset by rank: bit i is set when (p[i] & mask) > t, unsigned (p holds 64 bytes).
inline uint64_t BytesAbove(const uint8_t* p, uint8_t t, uint8_t mask = 0xff) {
#if defined(__SSE2__)
  const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
  const __m128i m = _mm_set1_epi8(static_cast<char>(mask));
  const __m128i threshold = _mm_xor_si128(_mm_set1_epi8(static_cast<char>(t)), bias);
  uint64_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const __m128i v = _mm_xor_si128(
        _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), m), bias);
    const auto bits = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpgt_epi8(v, threshold)));
    out |= static_cast<uint64_t>(bits) << (16 * i);
  }
  return out;
#else
  uint64_t out = 0;
  for (int i = 0; i < 64; ++i) out |= static_cast<uint64_t>((p[i] & mask) > t) << i;
  return out;
#endif
}

// Bit i set when p[i] has its high bit (p holds 64 bytes).
inline uint64_t BytesHighBit(const uint8_t* p) {
#if defined(__SSE2__)
  uint64_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const auto bits = static_cast<uint32_t>(
        _mm_movemask_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i))));
    out |= static_cast<uint64_t>(bits) << (16 * i);
  }
  return out;
#else
  uint64_t out = 0;
  for (int i = 0; i < 64; ++i) out |= static_cast<uint64_t>(p[i] >> 7) << i;
  return out;
#endif
}

}  // namespace infer::grammar
