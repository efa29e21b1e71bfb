#include "infer/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>

#include "infer/core/error.h"

namespace infer {

std::shared_ptr<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  INFER_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail("{}: not a regular file", path);
  }
  const auto size = static_cast<size_t>(st.st_size);
  const std::byte* data = nullptr;
  if (size > 0) {
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      Fail("{}: mmap failed: {}", path, std::strerror(err));
    }
    data = static_cast<const std::byte*>(mapped);
    // Ask for 2 MiB page-cache mappings where the kernel supports them for files
    // (read-only THP): decode streams every weight once per token and TLB misses are costly.
    ::madvise(mapped, size, MADV_HUGEPAGE);
  }
  ::close(fd);
  return std::shared_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_bytes_);
}

namespace {
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kSimdAlignBytes = 64;  // one cache line, one zmm register
}  // namespace

AlignedBuffer::AlignedBuffer(size_t size_bytes, bool huge_pages) : size_bytes_(size_bytes) {
  if (size_bytes == 0) return;
  if (huge_pages) {
    // The size rounded up to whole 2 MiB pages (the last partial one is a huge page too), and
    // one huge page more so that the start can be 2 MiB-aligned: THP only backs aligned 2 MiB
    // ranges.
    const size_t rounded = (size_bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    const size_t reserved = rounded + kHugePageBytes;
    void* mapped =
        ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    INFER_CHECK(mapped != MAP_FAILED, "cannot allocate {} bytes: {}", size_bytes,
                std::strerror(errno));
    const auto base = reinterpret_cast<uintptr_t>(mapped);
    const uintptr_t aligned = (base + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    // Unmap the unused head and tail so the mapping is exactly [aligned, aligned + rounded).
    if (aligned > base) ::munmap(mapped, aligned - base);
    const uintptr_t end = aligned + rounded;
    if (base + reserved > end) ::munmap(reinterpret_cast<void*>(end), base + reserved - end);
    ::madvise(reinterpret_cast<void*>(aligned), rounded, MADV_HUGEPAGE);
    data_ = reinterpret_cast<std::byte*>(aligned);
    mapped_bytes_ = rounded;
  } else {
    const size_t rounded = (size_bytes + kSimdAlignBytes - 1) & ~(kSimdAlignBytes - 1);
    data_ = static_cast<std::byte*>(std::aligned_alloc(kSimdAlignBytes, rounded));
    INFER_CHECK(data_ != nullptr, "cannot allocate {} bytes", size_bytes);
  }
}

AlignedBuffer::~AlignedBuffer() {
  if (data_ == nullptr) return;
  if (mapped_bytes_ != 0) {
    ::munmap(data_, mapped_bytes_);
  } else {
    std::free(data_);
  }
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(other.data_), size_bytes_(other.size_bytes_), mapped_bytes_(other.mapped_bytes_) {
  other.data_ = nullptr;
  other.size_bytes_ = 0;
  other.mapped_bytes_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    this->~AlignedBuffer();
    new (this) AlignedBuffer(std::move(other));
  }
  return *this;
}

namespace {
// Sums the "<key>: N kB" lines of a /proc file, in bytes.
size_t ReadProcKb(const char* path, std::string_view key) {
  std::ifstream in(path);
  std::string line;
  size_t total_kb = 0;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() &&
        line[key.size()] == ':') {
      total_kb += std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return total_kb * 1024;
}
}  // namespace

size_t HugePageResidentBytes() {
  return ReadProcKb("/proc/self/smaps_rollup", "AnonHugePages") +
         ReadProcKb("/proc/self/smaps_rollup", "FilePmdMapped");
}
size_t PeakRssBytes() { return ReadProcKb("/proc/self/status", "VmHWM"); }
size_t CurrentRssBytes() { return ReadProcKb("/proc/self/status", "VmRSS"); }

}  // namespace infer
