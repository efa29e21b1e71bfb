// CPU instruction-set levels the kernels are compiled for, and the one chosen at start-up.
#pragma once

#include <string_view>

namespace infer::kernels {

// kScalar is the plain reference code. kAvxVnni is AVX2 plus AVX-VNNI (vpdpbusd on ymm, VEX
// encoded: Intel client CPUs from Alder Lake on, which have no AVX-512): quantized MatMul on
// vpdpbusd, everything else as kAvx2. From kAvx512 on, a level implies the ones before it.
// kAvx512Bf16 adds AVX512_BF16 (vdpbf16ps, MatMulPrecision::kBf16) and AVX512_VNNI (vpdpbusd,
// quantized MatMul); kAvx512 computes the same integer sums with vpmaddwd, kAvx2 with
// vpmaddubsw / vpmaddwd.
// kAvx512Amx adds AMX-INT8 tiles (tdpbsud) for quantized MatMul over many rows (prefill) and
// AMX-BF16 tiles (tdpbf16ps) for MatMulPrecision::kBf16, in the tiles' order for every m; it is
// detected only where the kernel grants this process the tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM), and runs the kAvx512Bf16 kernels for everything else.
enum class Isa { kScalar, kAvx2, kAvxVnni, kAvx512, kAvx512Bf16, kAvx512Amx };

// The best level this CPU supports (cpuid + xgetbv), ignoring any override.
Isa DetectIsa();

// The level ops dispatch to: DetectIsa(), or INFER_FORCE_ISA=scalar|avx2|avxvnni|avx512|
// avx512bf16|avx512amx when set (an unknown name, or a level the CPU lacks, throws infer::Error).
// Cached on first use.
Isa ActiveIsa();

// Overrides ActiveIsa() from now on (tests and A/B benchmarks). Throws infer::Error if the CPU
// lacks the level.
void SetActiveIsa(Isa isa);

// True when this CPU can run kernels compiled for `isa`.
bool IsaSupported(Isa isa);

// True where this CPU's vdpbf16ps does about twice the multiply-adds of its f32 FMAs per cycle:
// AMD's AVX512_BF16 cores (Zen 4 on). Intel's (Cooper Lake, and Sapphire Rapids' vector units)
// do no more than two FMAs' worth, so there bf16 pays only on the AMX tiles.
bool Bf16DotOutrunsF32();

std::string_view IsaName(Isa isa);
// The inverse of IsaName; an unknown name throws infer::Error listing the names.
// "scalar", "avx2", "avxvnni", "avx512", "avx512bf16", "avx512amx"
Isa ParseIsa(std::string_view name);

}  // namespace infer::kernels
