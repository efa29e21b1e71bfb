#include "infer/kernels/cpu/isa.h"

#include <gtest/gtest.h>

#include "infer/core/error.h"
#include "kernel_test_util.h"

namespace infer::kernels {
namespace {

TEST(IsaTest, DetectedIsSupportedAndNamed) {
  EXPECT_TRUE(IsaSupported(DetectIsa()));
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  EXPECT_EQ(IsaName(Isa::kScalar), "scalar");
  EXPECT_EQ(IsaName(Isa::kAvx2), "avx2");
  EXPECT_EQ(IsaName(Isa::kAvxVnni), "avxvnni");
  EXPECT_EQ(IsaName(Isa::kAvx512), "avx512");
  EXPECT_EQ(IsaName(Isa::kAvx512Bf16), "avx512bf16");
  EXPECT_EQ(IsaName(Isa::kAvx512Amx), "avx512amx");
  for (Isa isa :
       {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAvx512Amx}) {
    EXPECT_EQ(ParseIsa(IsaName(isa)), isa);
  }
  EXPECT_THROW(ParseIsa("amx"), Error);
  // A level implies the ones before it (AVX-VNNI: AVX2).
  if (IsaSupported(Isa::kAvxVnni)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx2));
  }
  if (IsaSupported(Isa::kAvx512Bf16)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx512));
  }
  if (IsaSupported(Isa::kAvx512Amx)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx512Bf16));
  }
}

TEST(IsaTest, SetActiveIsaOverridesAndRestores) {
  const Isa before = ActiveIsa();
  {
    ScopedIsa scoped(Isa::kScalar);
    EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  }
  EXPECT_EQ(ActiveIsa(), before);
  if (!IsaSupported(Isa::kAvx512)) {
    EXPECT_THROW(SetActiveIsa(Isa::kAvx512), Error);
  }
}

}  // namespace
}  // namespace infer::kernels
