#include "infer/core/tensor.h"

#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "infer/core/error.h"
#include "infer/core/mapped_file.h"

namespace infer {

int64_t NumElements(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string ShapeString(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

namespace {
Shape RowMajorStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}
}  // namespace

Tensor::Tensor(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keepalive)
    : dtype_(dtype),
      shape_(std::move(shape)),
      strides_(RowMajorStrides(shape_)),
      data_(data),
      keepalive_(std::move(keepalive)) {
  for (int64_t dim : shape_)
    INFER_CHECK(dim >= 0, "negative tensor dimension in {}", ShapeString(shape_));
}

Tensor Tensor::Empty(DType dtype, Shape shape, bool huge_pages) {
  const auto bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  auto buffer = std::make_shared<AlignedBuffer>(bytes, huge_pages);
  if (bytes > 0 && !huge_pages) std::memset(buffer->data(), 0, bytes);  // mmap memory is zeroed
  void* data = buffer->data();
  return {dtype, std::move(shape), data, std::move(buffer)};
}

Tensor TensorArena::Empty(DType dtype, Shape shape) {
  constexpr size_t kAlignBytes = 64;
  const auto bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  if (bytes == 0) return Tensor::Empty(dtype, std::move(shape));
  // Larger than a chunk: 2 MiB pages of its own, and the current chunk stays in use.
  if (bytes > chunk_bytes_) return Tensor::Empty(dtype, std::move(shape), /*huge_pages=*/true);
  size_t offset = (used_ + kAlignBytes - 1) & ~(kAlignBytes - 1);
  if (chunk_ == nullptr || offset + bytes > chunk_->size_bytes()) {
    chunk_ = std::make_shared<AlignedBuffer>(chunk_bytes_, /*huge_pages=*/true);
    offset = 0;
  }
  used_ = offset + bytes;
  return {dtype, std::move(shape), chunk_->data() + offset, chunk_};
}

Tensor EmptyIn(TensorArena* arena, DType dtype, Shape shape) {
  return arena != nullptr ? arena->Empty(dtype, std::move(shape))
                          : Tensor::Empty(dtype, std::move(shape));
}

bool Tensor::is_contiguous() const { return strides_ == RowMajorStrides(shape_); }

Tensor Tensor::Row(int64_t index) const {
  INFER_CHECK(rank() >= 1 && index >= 0 && index < shape_[0], "row {} out of range for shape {}",
              index, ShapeString(shape_));
  Tensor row;
  row.dtype_ = dtype_;
  row.shape_.assign(shape_.begin() + 1, shape_.end());
  row.strides_.assign(strides_.begin() + 1, strides_.end());
  row.data_ = static_cast<std::byte*>(data_) +
              index * strides_[0] * static_cast<int64_t>(DTypeSize(dtype_));
  row.keepalive_ = keepalive_;
  return row;
}

Tensor Tensor::Reshape(Shape shape) const {
  INFER_CHECK(is_contiguous(), "cannot reshape a non-contiguous tensor");
  INFER_CHECK(NumElements(shape) == numel(), "cannot reshape {} to {}", ShapeString(shape_),
              ShapeString(shape));
  return {dtype_, std::move(shape), data_, keepalive_};
}

float ElementAsF32(const Tensor& tensor, int64_t index) {
  switch (tensor.dtype()) {
    case DType::kF32:
      return tensor.data<const float>()[index];
    case DType::kBF16:
      return Bf16ToF32(tensor.data<const uint16_t>()[index]);
    case DType::kF16:
      return F16ToF32(tensor.data<const uint16_t>()[index]);
    case DType::kI32:
      return static_cast<float>(tensor.data<const int32_t>()[index]);
  }
  return 0.0F;
}

void StoreElementF32(const Tensor& tensor, int64_t index, float value) {
  switch (tensor.dtype()) {
    case DType::kF32:
      tensor.data<float>()[index] = value;
      break;
    case DType::kBF16:
      tensor.data<uint16_t>()[index] = F32ToBf16(value);
      break;
    case DType::kF16:
      tensor.data<uint16_t>()[index] = F32ToF16(value);
      break;
    case DType::kI32:
      tensor.data<int32_t>()[index] = static_cast<int32_t>(value);
      break;
  }
}

}  // namespace infer
