// libFuzzer target: the safetensors header parser on arbitrary bytes must either accept
// (and then every entry lies inside the data section) or throw infer::Error; nothing else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "infer/core/error.h"
#include "infer/loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const infer::SafetensorsHeader header = infer::ParseSafetensorsHeader(bytes, "fuzz");
    const uint64_t data_bytes = size - header.data_offset;
    uint64_t previous_end = 0;
    for (const auto& entry : header.entries) {
      if (entry.end > data_bytes || entry.begin > entry.end || entry.begin < previous_end)
        std::abort();
      previous_end = entry.end;
    }
  } catch (const infer::Error&) {
  }
  return 0;
}
