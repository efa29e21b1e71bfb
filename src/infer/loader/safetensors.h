// safetensors files: header parsing with full validation, zero-copy tensors over an mmap,
// sharded checkpoints (model.safetensors.index.json), and a small writer for tests/tools.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "infer/core/mapped_file.h"
#include "infer/core/tensor.h"

namespace infer {

// One entry of a safetensors header. `dtype` is the file's name for it ("BF16", "F32", ...).
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  Shape shape;
  uint64_t begin = 0;  // offsets into the data section, as in the file
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;              // the JSON header's length (the first 8 bytes)
  uint64_t data_offset = 0;               // 8 + header_bytes
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
};

// Largest header accepted (the reference implementation's limit).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates the header of a whole safetensors file held in `file_bytes`.
// Throws infer::Error whose message starts with `source` and names the tensor at fault.
SafetensorsHeader ParseSafetensorsHeader(std::span<const std::byte> file_bytes,
                                         const std::string& source);

// Size in bytes of one element of a safetensors dtype name; nullopt if unknown.
std::optional<size_t> SafetensorsDTypeSize(const std::string& dtype);
// The core dtype for a safetensors dtype name, if infer computes with it (F32, F16, BF16).
std::optional<DType> SafetensorsToDType(const std::string& dtype);

// A parsed, memory-mapped safetensors file.
class SafetensorsFile {
 public:
  static SafetensorsFile Open(const std::string& path);
  const std::string& path() const { return file_->path(); }
  const SafetensorsHeader& header() const { return header_; }
  // A zero-copy view of the tensor's bytes (the mmap stays alive while the view does).
  Tensor View(const SafetensorsEntry& entry) const;

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
};

// All tensors of a checkpoint folder: model.safetensors, or the shards named by
// model.safetensors.index.json (every tensor must be in the shard the index names).
class SafetensorsCheckpoint {
 public:
  static SafetensorsCheckpoint Open(const std::string& folder);
  // Every tensor name, with the file and entry that hold it.
  struct Location {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  const std::map<std::string, Location>& tensors() const { return tensors_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location> tensors_;
};

// Writes a safetensors file (tests and tools). Tensors are contiguous; names sorted.
void WriteSafetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace infer
