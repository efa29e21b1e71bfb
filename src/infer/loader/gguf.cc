#include "infer/loader/gguf.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "infer/core/error.h"

namespace infer {

namespace {

struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};

// ggml's block sizes (ggml.c's type_traits), every type with a block.
constexpr std::array kTypes = {
    TypeRow{0, {"F32", 1, 4}},         TypeRow{1, {"F16", 1, 2}},
    TypeRow{2, {"Q4_0", 32, 18}},      TypeRow{3, {"Q4_1", 32, 20}},
    TypeRow{6, {"Q5_0", 32, 22}},      TypeRow{7, {"Q5_1", 32, 24}},
    TypeRow{8, {"Q8_0", 32, 34}},      TypeRow{9, {"Q8_1", 32, 36}},
    TypeRow{10, {"Q2_K", 256, 84}},    TypeRow{11, {"Q3_K", 256, 110}},
    TypeRow{12, {"Q4_K", 256, 144}},   TypeRow{13, {"Q5_K", 256, 176}},
    TypeRow{14, {"Q6_K", 256, 210}},   TypeRow{15, {"Q8_K", 256, 292}},
    TypeRow{16, {"IQ2_XXS", 256, 66}}, TypeRow{17, {"IQ2_XS", 256, 74}},
    TypeRow{18, {"IQ3_XXS", 256, 98}}, TypeRow{19, {"IQ1_S", 256, 50}},
    TypeRow{20, {"IQ4_NL", 32, 18}},   TypeRow{21, {"IQ3_S", 256, 110}},
    TypeRow{22, {"IQ2_S", 256, 82}},   TypeRow{23, {"IQ4_XS", 256, 136}},
    TypeRow{24, {"I8", 1, 1}},         TypeRow{25, {"I16", 1, 2}},
    TypeRow{26, {"I32", 1, 4}},        TypeRow{27, {"I64", 1, 8}},
    TypeRow{28, {"F64", 1, 8}},        TypeRow{29, {"IQ1_M", 256, 56}},
    TypeRow{30, {"BF16", 1, 2}},       TypeRow{34, {"TQ1_0", 256, 54}},
    TypeRow{35, {"TQ2_0", 256, 66}},
};

constexpr uint32_t kMagic = 0x46554747;  // "GGUF", little-endian
constexpr size_t kMaxDims = 4;           // GGML_MAX_DIMS
constexpr uint64_t kMaxNameBytes = 1024;
constexpr int kMaxArrayDepth = 8;

// A cursor over the file's bytes: every read checks what is left first.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& source)
      : bytes_(bytes), source_(source) {}

  size_t position() const { return position_; }
  uint64_t left() const { return bytes_.size() - position_; }

  template <typename T>
  T Read(std::string_view what) {
    Need(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }
  std::string ReadString(std::string_view what, uint64_t max_bytes) {
    const auto length = Read<uint64_t>(what);
    INFER_CHECK(length <= max_bytes, "{}: {} is {} bytes long, more than the {} allowed", source_,
                what, length, max_bytes);
    Need(length, what);
    std::string text(reinterpret_cast<const char*>(bytes_.data() + position_),
                     static_cast<size_t>(length));
    position_ += static_cast<size_t>(length);
    return text;
  }
  // A count of items of at least `min_item_bytes` each: more than the file can hold is refused
  // before anything is reserved for them.
  uint64_t ReadCount(std::string_view what, uint64_t min_item_bytes) {
    const auto count = Read<uint64_t>(what);
    INFER_CHECK(count <= left() / min_item_bytes,
                "{}: {} says {} items, but only {} bytes are left in the file", source_, what,
                count, left());
    return count;
  }
  void Need(uint64_t bytes, std::string_view what) const {
    INFER_CHECK(bytes <= left(), "{}: the file ends inside {} (at byte {} of {})", source_, what,
                position_, bytes_.size());
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& source_;
  size_t position_ = 0;
};

// The fewest bytes one value of `type` takes in the file (arrays: their header).
uint64_t MinValueBytes(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kString:
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

GgufType ReadType(Cursor& cursor, const std::string& source, const std::string& key) {
  const auto id = cursor.Read<uint32_t>("a value type");
  INFER_CHECK(id <= static_cast<uint32_t>(GgufType::kF64), "{}: key '{}' has value type {}", source,
              key, id);
  return static_cast<GgufType>(id);
}

bool IsInteger(GgufType type) {
  return type == GgufType::kU8 || type == GgufType::kI8 || type == GgufType::kU16 ||
         type == GgufType::kI16 || type == GgufType::kU32 || type == GgufType::kI32 ||
         type == GgufType::kU64 || type == GgufType::kI64 || type == GgufType::kBool;
}

int64_t ReadInteger(Cursor& cursor, GgufType type, const std::string& source,
                    const std::string& key) {
  switch (type) {
    case GgufType::kU8:
      return cursor.Read<uint8_t>(key);
    case GgufType::kI8:
      return cursor.Read<int8_t>(key);
    case GgufType::kU16:
      return cursor.Read<uint16_t>(key);
    case GgufType::kI16:
      return cursor.Read<int16_t>(key);
    case GgufType::kU32:
      return cursor.Read<uint32_t>(key);
    case GgufType::kI32:
      return cursor.Read<int32_t>(key);
    case GgufType::kI64:
      return cursor.Read<int64_t>(key);
    case GgufType::kBool: {
      const auto byte = cursor.Read<uint8_t>(key);
      INFER_CHECK(byte <= 1, "{}: key '{}' holds bool byte {}", source, key, byte);
      return byte;
    }
    default: {
      const auto value = cursor.Read<uint64_t>(key);
      INFER_CHECK(value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                  "{}: key '{}' holds {}, beyond what infer reads", source, key, value);
      return static_cast<int64_t>(value);
    }
  }
}

double ReadFloat(Cursor& cursor, GgufType type, const std::string& key) {
  if (type == GgufType::kF32) return cursor.Read<float>(key);
  return cursor.Read<double>(key);
}

// Reads (and checks) an array; keeps it unless `depth` says it is nested.
GgufValue ReadArray(Cursor& cursor, const std::string& source, const std::string& key, int depth) {
  INFER_CHECK(depth < kMaxArrayDepth, "{}: key '{}' nests arrays deeper than {}", source, key,
              kMaxArrayDepth);
  GgufValue value;
  value.type = GgufType::kArray;
  value.element_type = ReadType(cursor, source, key);
  const uint64_t count = cursor.ReadCount(key, MinValueBytes(value.element_type));
  const GgufType element = value.element_type;
  if (element == GgufType::kString) {
    std::vector<std::string> strings;
    strings.reserve(count);
    for (uint64_t i = 0; i < count; ++i) strings.push_back(cursor.ReadString(key, cursor.left()));
    value.value = std::move(strings);
  } else if (element == GgufType::kF32 || element == GgufType::kF64) {
    std::vector<double> floats(count);
    for (double& f : floats) f = ReadFloat(cursor, element, key);
    value.value = std::move(floats);
  } else if (element == GgufType::kArray) {
    for (uint64_t i = 0; i < count; ++i) {
      // The element type of each inner array is read with it.
      ReadArray(cursor, source, key, depth + 1);
    }
    value.value = std::monostate{};
  } else {
    std::vector<int64_t> ints(count);
    for (int64_t& n : ints) n = ReadInteger(cursor, element, source, key);
    value.value = std::move(ints);
  }
  return value;
}

GgufValue ReadValue(Cursor& cursor, const std::string& source, const std::string& key) {
  const GgufType type = ReadType(cursor, source, key);
  if (type == GgufType::kArray) return ReadArray(cursor, source, key, 0);
  GgufValue value;
  value.type = type;
  if (type == GgufType::kString) {
    value.value = cursor.ReadString(key, cursor.left());
  } else if (type == GgufType::kF32 || type == GgufType::kF64) {
    value.value = ReadFloat(cursor, type, key);
  } else {
    value.value = ReadInteger(cursor, type, source, key);
  }
  return value;
}

GgufTensorInfo ReadTensorInfo(Cursor& cursor, const std::string& source, size_t index) {
  GgufTensorInfo tensor;
  tensor.name = cursor.ReadString("a tensor name", kMaxNameBytes);
  const std::string where = fmt::format("{}: tensor '{}'", source, tensor.name);
  INFER_CHECK(!tensor.name.empty(), "{}: tensor {} has an empty name", source, index);
  const auto num_dims = cursor.Read<uint32_t>("a tensor's dimension count");
  INFER_CHECK(num_dims >= 1 && num_dims <= kMaxDims, "{} has {} dimensions (1 to {} allowed)",
              where, num_dims, kMaxDims);
  uint64_t elements = 1;
  for (uint32_t d = 0; d < num_dims; ++d) {
    const auto dim = cursor.Read<uint64_t>("a tensor's dimensions");
    // At most 2^52 elements: their bytes (under 2^9 per element) then fit in 63 bits.
    INFER_CHECK(dim >= 1 && dim <= (uint64_t{1} << 40) && elements <= (uint64_t{1} << 52) / dim,
                "{} has dimension {} = {}, out of range", where, d, dim);
    elements *= dim;
    tensor.dims.push_back(static_cast<int64_t>(dim));
  }
  tensor.type = cursor.Read<uint32_t>("a tensor's type");
  const std::optional<GgmlTypeInfo> info = GgmlTypeTraits(tensor.type);
  INFER_CHECK(info.has_value(), "{} has type {}, which ggml does not define", where, tensor.type);
  INFER_CHECK(tensor.dims[0] % info->block_elements == 0,
              "{} ({}) has rows of {} values, not a multiple of the type's block of {}", where,
              info->name, tensor.dims[0], info->block_elements);
  tensor.bytes = elements / static_cast<uint64_t>(info->block_elements) *
                 static_cast<uint64_t>(info->block_bytes);
  tensor.offset = cursor.Read<uint64_t>("a tensor's offset");
  return tensor;
}

}  // namespace

std::optional<GgmlTypeInfo> GgmlTypeTraits(uint32_t type) {
  for (const TypeRow& row : kTypes) {
    if (row.id == type) return row.info;
  }
  return std::nullopt;
}

std::string GgmlTypeName(uint32_t type) {
  const std::optional<GgmlTypeInfo> info = GgmlTypeTraits(type);
  return info ? std::string(info->name) : fmt::format("type {}", type);
}

std::string_view GgufTypeName(GgufType type) {
  static constexpr std::array<std::string_view, 13> kNames = {
      "u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
      "bool", "string", "array", "u64", "i64", "f64"};
  const auto id = static_cast<size_t>(type);
  return id < kNames.size() ? kNames[id] : "unknown";
}

int64_t GgufTensorInfo::elements() const {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

GgufHeader ParseGgufHeader(std::span<const std::byte> file_bytes, const std::string& source) {
  Cursor cursor(file_bytes, source);
  GgufHeader header;
  INFER_CHECK(file_bytes.size() >= 4 && cursor.Read<uint32_t>("the magic") == kMagic,
              "{}: not a GGUF file (it does not start with \"GGUF\")", source);
  header.version = cursor.Read<uint32_t>("the version");
  INFER_CHECK(header.version != 0x03000000 && header.version != 0x02000000,
              "{}: a big-endian GGUF file, which infer does not read", source);
  INFER_CHECK(header.version == 2 || header.version == 3,
              "{}: GGUF version {} (infer reads versions 2 and 3)", source, header.version);
  // A tensor info takes at least 8 (name) + 4 + 8 (one dim) + 4 + 8 bytes; a key-value pair 8 +
  // 4 + 1.
  const uint64_t num_tensors = cursor.ReadCount("the tensor count", 32);
  const uint64_t num_keys = cursor.ReadCount("the metadata count", 13);
  for (uint64_t i = 0; i < num_keys; ++i) {
    std::string key = cursor.ReadString("a metadata key", kMaxNameBytes);
    INFER_CHECK(!key.empty(), "{}: metadata key {} is empty", source, i);
    INFER_CHECK(!header.metadata.contains(key), "{}: metadata key '{}' appears twice", source, key);
    GgufValue value = ReadValue(cursor, source, key);
    header.metadata.emplace(std::move(key), std::move(value));
  }
  if (auto it = header.metadata.find("general.alignment"); it != header.metadata.end()) {
    const auto* alignment = std::get_if<int64_t>(&it->second.value);
    INFER_CHECK(alignment != nullptr && IsInteger(it->second.type) && *alignment > 0 &&
                    *alignment <= (1 << 20) && (*alignment & (*alignment - 1)) == 0,
                "{}: general.alignment must be a power of two up to 1 MiB", source);
    header.alignment = static_cast<uint64_t>(*alignment);
  }
  std::set<std::string> names;
  header.tensors.reserve(num_tensors);
  for (uint64_t i = 0; i < num_tensors; ++i) {
    GgufTensorInfo tensor = ReadTensorInfo(cursor, source, i);
    INFER_CHECK(names.insert(tensor.name).second, "{}: tensor '{}' appears twice", source,
                tensor.name);
    header.tensors.push_back(std::move(tensor));
  }
  const uint64_t end_of_infos = cursor.position();
  header.data_offset = (end_of_infos + header.alignment - 1) / header.alignment * header.alignment;
  const uint64_t data_bytes =
      header.data_offset <= file_bytes.size() ? file_bytes.size() - header.data_offset : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& tensor : header.tensors) {
    INFER_CHECK(tensor.offset % header.alignment == 0,
                "{}: tensor '{}' starts at {}, not a multiple of the alignment {}", source,
                tensor.name, tensor.offset, header.alignment);
    INFER_CHECK(tensor.offset <= data_bytes && tensor.bytes <= data_bytes - tensor.offset,
                "{}: tensor '{}' ({} bytes at {}) runs past the end of the file ({} data bytes; "
                "a truncated download?)",
                source, tensor.name, tensor.bytes, tensor.offset, data_bytes);
    by_offset.push_back(&tensor);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    INFER_CHECK(by_offset[i - 1]->offset + by_offset[i - 1]->bytes <= by_offset[i]->offset,
                "{}: tensors '{}' and '{}' overlap", source, by_offset[i - 1]->name,
                by_offset[i]->name);
  }
  return header;
}

bool IsGgufFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 4> magic{};
  return in.read(magic.data(), magic.size()) && std::string_view(magic.data(), 4) == "GGUF";
}

GgufFile GgufFile::Open(const std::string& path) {
  GgufFile file;
  file.file_ = MappedFile::Open(path);
  file.header_ = ParseGgufHeader(file.file_->bytes(), path);
  for (size_t i = 0; i < file.header_.tensors.size(); ++i) {
    file.by_name_.emplace(file.header_.tensors[i].name, i);
  }
  return file;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const std::byte> GgufFile::Data(const GgufTensorInfo& tensor) const {
  return file_->bytes().subspan(header_.data_offset + tensor.offset, tensor.bytes);
}

Tensor GgufFile::View(const GgufTensorInfo& tensor) const {
  DType dtype = DType::kF32;
  switch (static_cast<GgmlType>(tensor.type)) {
    case GgmlType::kF32:
      break;
    case GgmlType::kF16:
      dtype = DType::kF16;
      break;
    case GgmlType::kBF16:
      dtype = DType::kBF16;
      break;
    default:
      Fail("{}: tensor '{}' is {}, not f32, f16 or bf16", path(), tensor.name,
           GgmlTypeName(tensor.type));
  }
  const std::byte* bytes = Data(tensor).data();
  Shape shape(tensor.dims.rbegin(), tensor.dims.rend());
  if (reinterpret_cast<uintptr_t>(bytes) % DTypeSize(dtype) != 0) {
    Tensor copy = Tensor::Empty(dtype, shape);  // an odd alignment: copy, not unaligned reads
    std::memcpy(copy.raw(), bytes, tensor.bytes);
    return copy;
  }
  return {dtype, std::move(shape), const_cast<std::byte*>(bytes), file_};
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  const auto it = header_.metadata.find(key);
  return it == header_.metadata.end() ? nullptr : &it->second;
}

namespace {

[[noreturn]] void Mismatch(const GgufValue& value, const std::string& path, const std::string& key,
                           std::string_view wanted) {
  if (value.type == GgufType::kArray) {
    Fail("{}: metadata '{}' is an array of {}, not {}", path, key, GgufTypeName(value.element_type),
         wanted);
  }
  Fail("{}: metadata '{}' is {}, not {}", path, key, GgufTypeName(value.type), wanted);
}

template <typename T>
const T* Typed(const GgufValue* value, const std::string& path, const std::string& key,
               std::string_view wanted) {
  if (value == nullptr) return nullptr;
  const T* typed = std::get_if<T>(&value->value);
  if (typed == nullptr) Mismatch(*value, path, key, wanted);
  return typed;
}

}  // namespace

std::optional<int64_t> GgufFile::Int(const std::string& key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (!IsInteger(value->type)) Mismatch(*value, path(), key, "an integer");
  return std::get<int64_t>(value->value);
}

std::optional<double> GgufFile::Float(const std::string& key) const {
  const GgufValue* value = Find(key);
  if (value != nullptr && IsInteger(value->type)) return static_cast<double>(*Int(key));
  const auto* x = Typed<double>(value, path(), key, "a number");
  return x ? std::optional(*x) : std::nullopt;
}

std::optional<bool> GgufFile::Bool(const std::string& key) const {
  const std::optional<int64_t> n = Int(key);
  return n ? std::optional(*n != 0) : std::nullopt;
}

std::optional<std::string> GgufFile::String(const std::string& key) const {
  const auto* text = Typed<std::string>(Find(key), path(), key, "a string");
  return text ? std::optional(*text) : std::nullopt;
}

const std::vector<std::string>* GgufFile::Strings(const std::string& key) const {
  return Typed<std::vector<std::string>>(Find(key), path(), key, "an array of strings");
}

const std::vector<int64_t>* GgufFile::Ints(const std::string& key) const {
  return Typed<std::vector<int64_t>>(Find(key), path(), key, "an array of integers");
}

const std::vector<double>* GgufFile::Floats(const std::string& key) const {
  return Typed<std::vector<double>>(Find(key), path(), key, "an array of numbers");
}

}  // namespace infer
