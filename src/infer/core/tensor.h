// Tensors: a dtype, a shape and strides over storage that is owned, borrowed or memory-mapped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "infer/core/dtype.h"

namespace infer {

class AlignedBuffer;

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);  // "[2048, 8192]"

// A view: it never frees the memory itself; `keepalive` (a MappedFile, an AlignedBuffer
// or nothing for borrowed memory) holds the storage alive while any view uses it.
// Strides are in elements, row-major by default.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keepalive = nullptr);

  // Owned, zero-initialised, 64-byte-aligned storage.
  static Tensor Empty(DType dtype, Shape shape, bool huge_pages = false);
  // Borrowed memory: the caller keeps it alive.
  static Tensor Borrow(DType dtype, Shape shape, void* data) {
    return {dtype, std::move(shape), data};
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim(size_t axis) const { return shape_.at(axis); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return NumElements(shape_); }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  bool is_contiguous() const;

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  const std::shared_ptr<const void>& keepalive() const { return keepalive_; }

  // Row `index` of the first axis, as a view of rank-1.
  Tensor Row(int64_t index) const;
  // The same memory with a new contiguous shape of equal element count.
  Tensor Reshape(Shape shape) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  Shape strides_;
  void* data_ = nullptr;
  std::shared_ptr<const void> keepalive_;
};

// Tensors carved one after another out of shared chunks of 2 MiB pages, each 64-byte aligned
// and zero-initialised: a model's packed matrices sit in huge pages to their last byte. (A
// buffer of each matrix's own leaves the part past its last whole 2 MiB, and all of a matrix
// under 2 MiB, in 4 KiB pages: a sizeable share of a small model's weights, whose TLB misses
// cost decode speed on a VM.) A request larger than a chunk gets 2 MiB pages of its own; the
// rest of a chunk left behind stays unused address space (pages are backed when first
// touched). The tensors keep their chunk alive; the arena may go first. Not thread-safe.
class TensorArena {
 public:
  static constexpr size_t kDefaultChunkBytes = size_t{256} << 20;
  explicit TensorArena(size_t chunk_bytes = kDefaultChunkBytes) : chunk_bytes_(chunk_bytes) {}

  Tensor Empty(DType dtype, Shape shape);

 private:
  size_t chunk_bytes_;
  std::shared_ptr<AlignedBuffer> chunk_;
  size_t used_ = 0;
};

// Zeroed storage from `arena` when given, else a buffer of its own.
Tensor EmptyIn(TensorArena* arena, DType dtype, Shape shape);

// Reads element i of a contiguous tensor of any float dtype as f32.
float ElementAsF32(const Tensor& tensor, int64_t index);
// Writes element i of a contiguous tensor from f32 (rounded to nearest even for bf16/f16).
void StoreElementF32(const Tensor& tensor, int64_t index, float value);

}  // namespace infer
