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
