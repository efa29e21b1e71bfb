// Grow-only, 64-byte-aligned scratch memory for kernels (one per thread via thread_local).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace infer::kernels::cpu {

class Scratch {
 public:
  // At least `count` elements of a trivial type T; the contents are unspecified.
  template <class T>
  T* Array(size_t count) {
    const size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
    if (bytes > capacity_bytes_) {
      data_.reset(std::aligned_alloc(64, bytes));
      capacity_bytes_ = bytes;
    }
    return static_cast<T*>(data_.get());
  }
  float* Floats(size_t count) { return Array<float>(count); }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  size_t capacity_bytes_ = 0;
};

}  // namespace infer::kernels::cpu
