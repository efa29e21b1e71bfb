#include "infer/core/tensor.h"

#include <gtest/gtest.h>

#include "infer/core/error.h"

namespace infer {
namespace {

TEST(Tensor, EmptyIsZeroedAlignedAndContiguous) {
  Tensor tensor = Tensor::Empty(DType::kF32, {3, 5});
  EXPECT_EQ(tensor.numel(), 15);
  EXPECT_EQ(tensor.size_bytes(), 60U);
  EXPECT_TRUE(tensor.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor.raw()) % 64, 0U);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(tensor.data<float>()[i], 0.0F);
  EXPECT_EQ(tensor.strides(), (Shape{5, 1}));
}

TEST(Tensor, RowIsAViewThatKeepsStorageAlive) {
  Tensor row;
  {
    Tensor tensor = Tensor::Empty(DType::kBF16, {4, 8});
    tensor.data<uint16_t>()[2 * 8 + 3] = F32ToBf16(7.0F);
    row = tensor.Row(2);
  }
  EXPECT_EQ(row.shape(), (Shape{8}));
  EXPECT_EQ(ElementAsF32(row, 3), 7.0F);
}

TEST(Tensor, HugePageStorageWorks) {
  Tensor tensor = Tensor::Empty(DType::kF32, {1 << 20}, /*huge_pages=*/true);
  tensor.data<float>()[(1 << 20) - 1] = 3.0F;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor.raw()) % (2 << 20), 0U);
  EXPECT_EQ(tensor.data<float>()[0], 0.0F);
}

TEST(TensorArena, CarvesAlignedZeroedTensorsOneAfterAnother) {
  TensorArena arena(size_t{4} << 20);
  const Tensor a = arena.Empty(DType::kF32, {10});  // 40 bytes
  const Tensor b = arena.Empty(DType::kBF16, {3, 100});
  const Tensor empty = arena.Empty(DType::kF32, {0});
  const Tensor c = arena.Empty(DType::kI32, {16});
  const auto* first = static_cast<const std::byte*>(a.raw());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (2 << 20), 0U);  // a chunk starts on a 2 MiB page
  EXPECT_EQ(static_cast<const std::byte*>(b.raw()), first + 64);
  EXPECT_EQ(static_cast<const std::byte*>(c.raw()), first + 64 + 640);  // 600 bytes, aligned up
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(b.shape(), (Shape{3, 100}));
  for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(ElementAsF32(b, i), 0.0F);
  for (int i = 0; i < 16; ++i) ASSERT_EQ(c.data<int32_t>()[i], 0);
}

TEST(TensorArena, ALargerRequestTakesAChunkOfItsOwnAndTensorsOutliveTheArena) {
  Tensor small;
  Tensor large;
  Tensor after;
  {
    TensorArena arena(size_t{1} << 20);
    small = arena.Empty(DType::kF32, {1000});
    large = arena.Empty(DType::kF32, {1 << 19});  // 2 MiB: more than a chunk
    after = arena.Empty(DType::kF32, {4});        // carved after `small`, in its chunk
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large.raw()) % (2 << 20), 0U);
  EXPECT_EQ(after.raw(), static_cast<std::byte*>(small.raw()) + 4032);  // 4000, aligned up
  small.data<float>()[999] = 1.0F;
  large.data<float>()[(1 << 19) - 1] = 2.0F;
  after.data<float>()[3] = 3.0F;
  EXPECT_EQ(small.data<float>()[999] + large.data<float>()[(1 << 19) - 1] + after.data<float>()[3],
            6.0F);
}

TEST(Tensor, ReshapeChecksElementCount) {
  Tensor tensor = Tensor::Empty(DType::kF32, {2, 6});
  EXPECT_EQ(tensor.Reshape({3, 4}).shape(), (Shape{3, 4}));
  EXPECT_THROW(tensor.Reshape({5}), Error);
  EXPECT_THROW(tensor.Row(2), Error);
}

TEST(Tensor, BorrowedMemory) {
  float values[4] = {1, 2, 3, 4};
  Tensor tensor = Tensor::Borrow(DType::kF32, {2, 2}, values);
  EXPECT_EQ(ElementAsF32(tensor, 3), 4.0F);
  EXPECT_EQ(ShapeString(tensor.shape()), "[2, 2]");
}

}  // namespace
}  // namespace infer
