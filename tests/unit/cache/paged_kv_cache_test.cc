// The paged KV storage: rows land where PagedKvLayer says (the layout attention reads), bf16
// rounds to nearest even, block copies, and bad shapes are refused.
#include "infer/cache/paged_kv_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "infer/core/error.h"

namespace infer {
namespace {

TEST(PagedKvCacheTest, WritesRowsWhereTheLayerViewPointsInBothDtypes) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    PagedKvCache cache(2, 2, 4, 5, 16, dtype);  // 2 layers, 2 kv heads, head_dim 4, 5 blocks
    const std::vector<int32_t> table = {3, 1};
    std::vector<float> k(3 * 8), v(3 * 8);
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = 1.0F + static_cast<float>(i) / 1024.0F;
      v[i] = -k[i];
    }
    cache.Write(1, table, 15, k.data(), v.data(), 3);  // positions 15, 16, 17: two blocks
    const kernels::PagedKvLayer layer = cache.Layer(1);
    for (int64_t t = 0; t < 3; ++t) {
      const int64_t pos = 15 + t;
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t d = 0; d < 4; ++d) {
          const int64_t index = table[static_cast<size_t>(pos / 16)] * layer.block_stride +
                                h * layer.head_stride + (pos % 16) * 4 + d;
          const float expected_k = k[static_cast<size_t>(t * 8 + h * 4 + d)];
          const float got_k = dtype == DType::kF32
                                  ? static_cast<const float*>(layer.k)[index]
                                  : Bf16ToF32(static_cast<const uint16_t*>(layer.k)[index]);
          const float got_v = dtype == DType::kF32
                                  ? static_cast<const float*>(layer.v)[index]
                                  : Bf16ToF32(static_cast<const uint16_t*>(layer.v)[index]);
          if (dtype == DType::kF32) {
            EXPECT_EQ(got_k, expected_k);
          } else {
            EXPECT_EQ(got_k, Bf16ToF32(F32ToBf16(expected_k)));
          }
          EXPECT_EQ(got_v, -got_k);
        }
      }
    }
    cache.CopyBlock(1, 4);
    const kernels::PagedKvLayer copied = cache.Layer(1);
    const size_t element = DTypeSize(dtype);
    EXPECT_EQ(std::memcmp(static_cast<const char*>(copied.k) + 4 * copied.block_stride * element,
                          static_cast<const char*>(copied.k) + 1 * copied.block_stride * element,
                          static_cast<size_t>(copied.block_stride) * element),
              0);
    EXPECT_EQ(cache.memory_bytes(), 2 * 2 * 5 * 2 * 16 * 4 * static_cast<int64_t>(element));
  }
}

TEST(PagedKvCacheTest, RefusesBadShapesAndPositions) {
  EXPECT_THROW(PagedKvCache(1, 1, 4, 2, 24, DType::kF32), Error);  // block size not 16k
  EXPECT_THROW(PagedKvCache(1, 1, 4, 2, 16, DType::kF16), Error);
  EXPECT_THROW(PagedKvCache(1, 1, 4, 0, 16, DType::kF32), Error);
  PagedKvCache cache(1, 1, 4, 2, 16, DType::kF32);
  std::vector<float> row(4, 1.0F);
  const std::vector<int32_t> table = {0};
  EXPECT_THROW(cache.Write(0, table, 16, row.data(), row.data(), 1), Error);  // past the table
  const std::vector<int32_t> bad = {7};
  EXPECT_THROW(cache.Write(0, bad, 0, row.data(), row.data(), 1), Error);
  EXPECT_THROW(cache.Layer(1), Error);
  EXPECT_EQ(ParseKvCacheDType("bf16"), DType::kBF16);
  EXPECT_THROW(ParseKvCacheDType("fp8"), Error);
}

}  // namespace
}  // namespace infer
