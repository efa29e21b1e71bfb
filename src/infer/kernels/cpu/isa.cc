// Chooses the kernel ISA from cpuid once, with an environment override for tests.
#include "infer/kernels/cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "infer/core/error.h"

namespace infer::kernels {

namespace {

uint64_t XGetBv() {
  uint32_t eax = 0;
  uint32_t edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// AMX: the CPU has AMX-BF16, AMX-TILE and AMX-INT8 (cpuid 7.0 edx bits 22, 24, 25), the OS saves
// the tile state (XCR0 bits 17, 18), and Linux grants this process the tile data (dynamically
// enabled since Linux 5.16: arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, read back with
// ARCH_GET_XCOMP_PERM). Without the grant the first tile instruction would kill the process.
bool AmxUsable(uint64_t xcr0) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool amx = (edx & (1u << 22)) != 0 && (edx & (1u << 24)) != 0 && (edx & (1u << 25)) != 0;
  if (!amx || (xcr0 & (uint64_t{3} << 17)) != (uint64_t{3} << 17)) return false;
  constexpr long kArchGetXcompPerm = 0x1022;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr unsigned long kXfeatureXtiledata = 18;
  if (::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long granted = 0;
  if (::syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0) return false;
  return (granted & (1ul << kXfeatureXtiledata)) != 0;
}

// AVX-VNNI: cpuid 7.1 eax bit 4 (the VEX-encoded vpdpbusd on ymm).
bool AvxVnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
}

Isa DetectOnce() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return Isa::kScalar;
  const bool osxsave = (ecx & bit_OSXSAVE) != 0;
  const bool fma = (ecx & bit_FMA) != 0;
  const bool f16c = (ecx & bit_F16C) != 0;
  if (!osxsave) return Isa::kScalar;
  const uint64_t xcr0 = XGetBv();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return Isa::kScalar;
  const bool avx2 = (ebx & bit_AVX2) != 0;
  const bool avx512 =
      (ebx & bit_AVX512F) && (ebx & bit_AVX512BW) && (ebx & bit_AVX512VL) && (ebx & bit_AVX512DQ);
  if (avx512 && ymm_state && zmm_state && fma && f16c) {
    const bool vnni = (ecx & bit_AVX512VNNI) != 0;  // leaf 7.0 ecx
    const bool bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5));
    if (!bf16 || !vnni) return Isa::kAvx512;
    return AmxUsable(xcr0) ? Isa::kAvx512Amx : Isa::kAvx512Bf16;
  }
  if (avx2 && ymm_state && fma && f16c) return AvxVnni() ? Isa::kAvxVnni : Isa::kAvx2;
  return Isa::kScalar;
}

Isa InitialIsa() {
  const char* forced = std::getenv("INFER_FORCE_ISA");
  if (forced == nullptr || *forced == '\0') return DetectIsa();
  Isa isa = Isa::kScalar;
  try {
    isa = ParseIsa(forced);
  } catch (const Error& error) {
    Fail("INFER_FORCE_ISA: {}", error.what());
  }
  INFER_CHECK(IsaSupported(isa), "INFER_FORCE_ISA={}: this CPU does not support it", forced);
  return isa;
}

// -1 until first use; then the Isa value.
std::atomic<int> active_isa{-1};

}  // namespace

Isa DetectIsa() {
  static const Isa kDetected = DetectOnce();
  return kDetected;
}

bool Bf16DotOutrunsF32() {
  static const bool kAmd = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    return std::strcmp(vendor, "AuthenticAMD") == 0;
  }();
  return kAmd && IsaSupported(Isa::kAvx512Bf16);
}

bool IsaSupported(Isa isa) {
  const Isa detected = DetectIsa();
  // AVX-VNNI stands beside the AVX-512 levels, not below them: Sapphire Rapids and Zen 4 have
  // both, Skylake-X and Ice Lake servers only AVX-512.
  if (isa == Isa::kAvxVnni) {
    static const bool kAvxVnni = detected != Isa::kScalar && AvxVnni();
    return kAvxVnni;
  }
  return static_cast<int>(isa) <= static_cast<int>(detected);
}

Isa ActiveIsa() {
  int value = active_isa.load(std::memory_order_relaxed);
  if (value < 0) {
    value = static_cast<int>(InitialIsa());
    active_isa.store(value, std::memory_order_relaxed);
  }
  return static_cast<Isa>(value);
}

void SetActiveIsa(Isa isa) {
  INFER_CHECK(IsaSupported(isa), "SetActiveIsa({}): this CPU does not support it", IsaName(isa));
  active_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

Isa ParseIsa(std::string_view name) {
  for (Isa isa :
       {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAvx512Amx}) {
    if (IsaName(isa) == name) return isa;
  }
  Fail("ISA '{}' is not one of scalar, avx2, avxvnni, avx512, avx512bf16, avx512amx", name);
}

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avxvnni";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
    case Isa::kAvx512Amx:
      return "avx512amx";
  }
  return "unknown";
}

}  // namespace infer::kernels
