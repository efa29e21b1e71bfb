// libFuzzer target: the GGUF parser on arbitrary bytes must either accept (and then every
// tensor's bytes lie inside the file, after the aligned data offset, without overlap) or throw
// infer::Error; nothing else.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "infer/core/error.h"
#include "infer/loader/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const infer::GgufHeader header = infer::ParseGgufHeader(bytes, "fuzz");
    if (header.alignment == 0 || header.data_offset % header.alignment != 0) std::abort();
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const auto& tensor : header.tensors) {
      if (header.data_offset + tensor.offset + tensor.bytes > size) std::abort();
      spans.emplace_back(tensor.offset, tensor.offset + tensor.bytes);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i - 1].second > spans[i].first) std::abort();
    }
  } catch (const infer::Error&) {
  }
  return 0;
}
