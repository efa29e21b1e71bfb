#include "infer/loader/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"

namespace infer {

using nlohmann::json;

std::optional<size_t> SafetensorsDTypeSize(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kSizes.find(dtype);
  if (it == kSizes.end()) return std::nullopt;
  return it->second;
}

std::optional<DType> SafetensorsToDType(const std::string& dtype) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  return std::nullopt;
}

namespace {

uint64_t ReadLittleEndianU64(const std::byte* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

// Reads a JSON number that must be a non-negative integer.
std::optional<uint64_t> AsUnsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return value.get<uint64_t>();
  return std::nullopt;
}

SafetensorsEntry ParseEntry(const std::string& source, const std::string& name, const json& info,
                            uint64_t data_bytes) {
  const std::string where = fmt::format("{}: tensor '{}'", source, name);
  INFER_CHECK(info.is_object(), "{}: header entry is not an object", where);
  INFER_CHECK(info.contains("dtype") && info["dtype"].is_string(),
              "{}: missing or non-string dtype", where);
  INFER_CHECK(info.contains("shape") && info["shape"].is_array(), "{}: missing or non-array shape",
              where);
  INFER_CHECK(info.contains("data_offsets") && info["data_offsets"].is_array() &&
                  info["data_offsets"].size() == 2,
              "{}: data_offsets must be an array of two integers", where);
  SafetensorsEntry entry;
  entry.name = name;
  entry.dtype = info["dtype"].get<std::string>();
  const auto element_bytes = SafetensorsDTypeSize(entry.dtype);
  INFER_CHECK(element_bytes.has_value(), "{}: unknown dtype '{}'", where, entry.dtype);

  uint64_t expected_bytes = *element_bytes;
  for (const json& dim : info["shape"]) {
    const auto value = AsUnsigned(dim);
    INFER_CHECK(value.has_value(),
                "{}: shape {} has a dimension that is not a non-negative integer", where,
                info["shape"].dump());
    INFER_CHECK(*value <= static_cast<uint64_t>(INT64_MAX) &&
                    !__builtin_mul_overflow(expected_bytes, *value, &expected_bytes),
                "{}: shape {} overflows", where, info["shape"].dump());
    entry.shape.push_back(static_cast<int64_t>(*value));
  }
  const auto begin = AsUnsigned(info["data_offsets"][0]);
  const auto end = AsUnsigned(info["data_offsets"][1]);
  INFER_CHECK(begin && end, "{}: data_offsets {} must be non-negative integers", where,
              info["data_offsets"].dump());
  entry.begin = *begin;
  entry.end = *end;
  INFER_CHECK(entry.begin <= entry.end, "{}: data_offsets [{}, {}] are reversed", where,
              entry.begin, entry.end);
  INFER_CHECK(entry.end <= data_bytes,
              "{}: data_offsets [{}, {}] run past the end of the data section ({} bytes)", where,
              entry.begin, entry.end, data_bytes);
  INFER_CHECK(entry.end - entry.begin == expected_bytes,
              "{}: {} x {} needs {} bytes but data_offsets [{}, {}] hold {}", where,
              ShapeString(entry.shape), entry.dtype, expected_bytes, entry.begin, entry.end,
              entry.end - entry.begin);
  return entry;
}

}  // namespace

SafetensorsHeader ParseSafetensorsHeader(std::span<const std::byte> file_bytes,
                                         const std::string& source) {
  INFER_CHECK(file_bytes.size() >= 8, "{}: file is {} bytes, too small for a safetensors header",
              source, file_bytes.size());
  SafetensorsHeader header;
  header.header_bytes = ReadLittleEndianU64(file_bytes.data());
  INFER_CHECK(header.header_bytes <= kMaxSafetensorsHeaderBytes,
              "{}: header length {} exceeds the {} byte limit", source, header.header_bytes,
              kMaxSafetensorsHeaderBytes);
  INFER_CHECK(header.header_bytes <= file_bytes.size() - 8,
              "{}: header length {} runs past the end of the file ({} bytes)", source,
              header.header_bytes, file_bytes.size());
  header.data_offset = 8 + header.header_bytes;
  const uint64_t data_bytes = file_bytes.size() - header.data_offset;

  const char* text = reinterpret_cast<const char*>(file_bytes.data() + 8);
  // Duplicate top-level keys would silently shadow each other in the JSON object: reject.
  std::set<std::string> seen_keys;
  std::string duplicate_key;
  json::parser_callback_t check_duplicates = [&](int depth, json::parse_event_t event,
                                                 json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen_keys.insert(key).second && duplicate_key.empty()) duplicate_key = key;
    }
    return true;
  };
  json parsed = json::parse(text, text + header.header_bytes, check_duplicates,
                            /*allow_exceptions=*/false);
  INFER_CHECK(!parsed.is_discarded(), "{}: header is not valid JSON", source);
  INFER_CHECK(parsed.is_object(), "{}: header is not a JSON object", source);
  INFER_CHECK(duplicate_key.empty(), "{}: header names tensor '{}' twice", source, duplicate_key);

  for (const auto& [name, info] : parsed.items()) {
    if (name == "__metadata__") {
      INFER_CHECK(info.is_object(), "{}: __metadata__ is not an object", source);
      for (const auto& [key, value] : info.items()) {
        INFER_CHECK(value.is_string(), "{}: __metadata__ value for '{}' is not a string", source,
                    key);
        header.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    header.entries.push_back(ParseEntry(source, name, info, data_bytes));
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 1; i < header.entries.size(); ++i) {
    const auto& previous = header.entries[i - 1];
    const auto& current = header.entries[i];
    INFER_CHECK(current.begin >= previous.end,
                "{}: tensor '{}' bytes [{}, {}] overlap tensor '{}' bytes [{}, {}]", source,
                current.name, current.begin, current.end, previous.name, previous.begin,
                previous.end);
  }
  return header;
}

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile file;
  file.file_ = MappedFile::Open(path);
  file.header_ = ParseSafetensorsHeader(file.file_->bytes(), path);
  return file;
}

Tensor SafetensorsFile::View(const SafetensorsEntry& entry) const {
  const auto dtype = SafetensorsToDType(entry.dtype);
  INFER_CHECK(dtype.has_value(), "{}: tensor '{}' has dtype {}, which infer cannot compute with",
              path(), entry.name, entry.dtype);
  const std::byte* bytes = file_->bytes().data() + header_.data_offset + entry.begin;
  if (reinterpret_cast<uintptr_t>(bytes) % DTypeSize(*dtype) != 0) {
    // A header whose length is not a multiple of 8 misaligns the data; copy rather than
    // read unaligned elements.
    Tensor copy = Tensor::Empty(*dtype, entry.shape);
    std::memcpy(copy.raw(), bytes, entry.end - entry.begin);
    return copy;
  }
  return {*dtype, entry.shape, const_cast<std::byte*>(bytes),
          std::shared_ptr<const void>(file_, file_.get())};
}

SafetensorsCheckpoint SafetensorsCheckpoint::Open(const std::string& folder) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint checkpoint;
  const fs::path index_path = fs::path(folder) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(folder) / "model.safetensors";
  auto add_file = [&](const fs::path& path) -> const SafetensorsFile& {
    checkpoint.files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::Open(path)));
    return *checkpoint.files_.back();
  };

  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    json index = json::parse(in, nullptr, /*allow_exceptions=*/false);
    INFER_CHECK(!index.is_discarded() && index.is_object(), "{}: not a valid JSON object",
                index_path.string());
    INFER_CHECK(index.contains("weight_map") && index["weight_map"].is_object(),
                "{}: missing 'weight_map' object", index_path.string());
    std::map<std::string, const SafetensorsFile*> shard_by_name;
    for (const auto& item : index["weight_map"].items()) {
      const std::string& tensor_name = item.key();
      const json& shard = item.value();
      INFER_CHECK(shard.is_string(), "{}: weight_map['{}'] is not a file name", index_path.string(),
                  tensor_name);
      const auto shard_name = shard.get<std::string>();
      INFER_CHECK(!shard_name.empty() && shard_name.find('/') == std::string::npos &&
                      shard_name != "." && shard_name != "..",
                  "{}: weight_map['{}'] = '{}' is not a file in the folder", index_path.string(),
                  tensor_name, shard_name);
      auto it = shard_by_name.find(shard_name);
      if (it == shard_by_name.end()) {
        it = shard_by_name.emplace(shard_name, &add_file(fs::path(folder) / shard_name)).first;
      }
      const SafetensorsFile* file = it->second;
      const auto& entries = file->header().entries;
      auto entry = std::find_if(entries.begin(), entries.end(),
                                [&](const SafetensorsEntry& e) { return e.name == tensor_name; });
      INFER_CHECK(entry != entries.end(), "{}: tensor '{}' is not in {}, where the index puts it",
                  index_path.string(), tensor_name, file->path());
      checkpoint.tensors_[tensor_name] = {file, &*entry};
    }
  } else if (fs::exists(single_path)) {
    const SafetensorsFile& file = add_file(single_path);
    for (const auto& entry : file.header().entries)
      checkpoint.tensors_[entry.name] = {&file, &entry};
  } else {
    Fail("{}: no model.safetensors or model.safetensors.index.json", folder);
  }
  return checkpoint;
}

void WriteSafetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    INFER_CHECK(tensor.is_contiguous(), "WriteSafetensors: tensor '{}' is not contiguous", name);
    const char* dtype = tensor.dtype() == DType::kF32    ? "F32"
                        : tensor.dtype() == DType::kF16  ? "F16"
                        : tensor.dtype() == DType::kBF16 ? "BF16"
                                                         : "I32";
    header[name] = {{"dtype", dtype},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.size_bytes()}}};
    offset += tensor.size_bytes();
  }
  std::string header_text = header.dump();
  header_text.resize((header_text.size() + 7) / 8 * 8, ' ');  // keeps the data 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  INFER_CHECK(out.good(), "{}: cannot open for writing", path);
  const uint64_t header_bytes = header_text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_bytes >> (8 * i)) & 0xff));
  out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
  for (const auto& [name, tensor] : tensors) {
    out.write(static_cast<const char*>(tensor.raw()),
              static_cast<std::streamsize>(tensor.size_bytes()));
  }
  INFER_CHECK(out.good(), "{}: write failed", path);
}

}  // namespace infer
