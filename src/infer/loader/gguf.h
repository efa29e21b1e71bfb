// GGUF files (llama.cpp's format, versions 2 and 3): the header, the metadata and the tensor
// infos parsed with every count, length, offset and shape checked against the file's size
// before it is used, and zero-copy views of the tensor data over an mmap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "infer/core/mapped_file.h"
#include "infer/core/tensor.h"

namespace infer {

// ggml's tensor types, by the ids GGUF stores (those infer reads or names in errors), named as
// ggml names them.
// NOLINTBEGIN(readability-identifier-naming)
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
};
// NOLINTEND(readability-identifier-naming)

// A type's name as llama.cpp prints it and its block: `block_elements` values along a row
// take `block_bytes` bytes.
struct GgmlTypeInfo {
  std::string_view name;
  int64_t block_elements = 1;
  int64_t block_bytes = 0;
};
// Every type id ggml defines a block for; nullopt for an id it does not.
std::optional<GgmlTypeInfo> GgmlTypeTraits(uint32_t type);
// "Q4_K", or "type 99" for an id without a block.
std::string GgmlTypeName(uint32_t type);

// The metadata value types, by their ids in the file.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view GgufTypeName(GgufType type);

// One metadata value. Integers and bools are kept as int64 (a u64 above its range is refused),
// floats as double; arrays by element kind. An array of arrays is parsed (and checked) but its
// contents are not kept.
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType element_type = GgufType::kU8;  // arrays only
  std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
               std::vector<std::string>, std::monostate>
      value;
};

struct GgufTensorInfo {
  std::string name;
  // ggml's order: dims[0] is the innermost (a matrix's row length), as the file stores them.
  std::vector<int64_t> dims;
  uint32_t type = 0;
  uint64_t offset = 0;  // into the data section
  uint64_t bytes = 0;
  int64_t elements() const;
  // The row-major shape, outermost first (a matrix [rows, row length]).
  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
};

struct GgufHeader {
  uint32_t version = 0;
  uint64_t alignment = 32;   // general.alignment
  uint64_t data_offset = 0;  // the data section's start in the file
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in the file's order
};

// Parses and validates a whole GGUF file held in `file_bytes`. Throws infer::Error whose message
// starts with `source` and names the key or tensor at fault.
GgufHeader ParseGgufHeader(std::span<const std::byte> file_bytes, const std::string& source);

// Whether `path` is a regular file that starts with GGUF's magic.
bool IsGgufFile(const std::string& path);

// A parsed, memory-mapped GGUF file. The typed getters throw infer::Error naming the key when
// it holds another type; they return nullopt (or null) when the key is absent.
class GgufFile {
 public:
  static GgufFile Open(const std::string& path);
  const std::string& path() const { return file_->path(); }
  const GgufHeader& header() const { return header_; }
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }
  // The tensor named `name`, or null.
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's bytes in the mapping (valid while this file lives).
  std::span<const std::byte> Data(const GgufTensorInfo& tensor) const;
  // An F32, F16 or BF16 tensor as a zero-copy Tensor of its row-major shape (the mapping stays
  // alive while the view does). Throws infer::Error for another type.
  Tensor View(const GgufTensorInfo& tensor) const;

  bool Has(const std::string& key) const { return header_.metadata.contains(key); }
  std::optional<int64_t> Int(const std::string& key) const;   // any integer or bool type
  std::optional<double> Float(const std::string& key) const;  // f32, f64 or an integer
  std::optional<bool> Bool(const std::string& key) const;
  std::optional<std::string> String(const std::string& key) const;
  const std::vector<std::string>* Strings(const std::string& key) const;
  const std::vector<int64_t>* Ints(const std::string& key) const;
  const std::vector<double>* Floats(const std::string& key) const;

 private:
  const GgufValue* Find(const std::string& key) const;
  std::shared_ptr<MappedFile> file_;
  GgufHeader header_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace infer
