// INFER_DISPATCH: the one switch from ActiveIsa() to the kernels of cpu/kernels.h, for the
// baseline sources that call them (ops.cc, linear_attention.cc).
#pragma once

#include "infer/kernels/cpu/isa.h"
#include "infer/kernels/cpu/kernels.h"

// Calls the kernel `name` from the namespace of the active ISA (kAvx512Amx: avx512bf16's,
// kAvxVnni: avx2's, but for QuantizedMatMuls, see QuantizedProducts).
#define INFER_DISPATCH(name, ...)                  \
  do {                                             \
    switch (ActiveIsa()) {                         \
      case Isa::kAvx512Amx:                        \
      case Isa::kAvx512Bf16:                       \
        return cpu::avx512bf16::name(__VA_ARGS__); \
      case Isa::kAvx512:                           \
        return cpu::avx512::name(__VA_ARGS__);     \
      case Isa::kAvxVnni:                          \
      case Isa::kAvx2:                             \
        return cpu::avx2::name(__VA_ARGS__);       \
      case Isa::kScalar:                           \
        return cpu::reference::name(__VA_ARGS__);  \
    }                                              \
  } while (0)
