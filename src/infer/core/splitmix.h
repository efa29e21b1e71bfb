// SplitMix64's finalizer: a well-mixed 64-bit function of x (Steele, Lea and Flood, 2014), for
// hashes and for random values that are a function of (seed, index) alone.
#pragma once

#include <cstdint>

namespace infer {

constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace infer
