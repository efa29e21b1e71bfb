// Read-only memory-mapped files: the zero-copy source of safetensors weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace infer {

class MappedFile {
 public:
  // Maps the whole file read-only. Throws infer::Error naming the path on failure.
  static std::shared_ptr<MappedFile> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {data_, size_bytes_}; }
  size_t size_bytes() const { return size_bytes_; }

 private:
  MappedFile(std::string path, const std::byte* data, size_t size_bytes)
      : path_(std::move(path)), data_(data), size_bytes_(size_bytes) {}
  std::string path_;
  const std::byte* data_;
  size_t size_bytes_;
};

// Memory owned by infer, aligned for SIMD; optionally backed by 2 MiB pages
// (madvise(MADV_HUGEPAGE)) because TLB misses dominate weight streaming on this VM.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(size_t size_bytes, bool huge_pages);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_bytes_ = 0;
  size_t mapped_bytes_ = 0;  // non-zero when the memory came from mmap
};

// Bytes of this process's memory that sit in huge pages (anon THP + file PMD mappings),
// read from /proc/self/smaps_rollup; 0 where unavailable.
size_t HugePageResidentBytes();
// Peak resident set size of this process (VmHWM), bytes.
size_t PeakRssBytes();
// Current resident set size (VmRSS), bytes.
size_t CurrentRssBytes();

}  // namespace infer
