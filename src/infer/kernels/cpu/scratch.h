// Grow-only, 64-byte-aligned scratch memory for kernels (one per thread via thread_local).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace infer::kernels::cpu {

class Scratch {
 public:
  // At least `count` floats; the contents are unspecified.
  float* Floats(size_t count) {
    const size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
    if (bytes > capacity_bytes_) {
      data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      capacity_bytes_ = bytes;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  size_t capacity_bytes_ = 0;
};

}  // namespace infer::kernels::cpu
