// The GGUF reader against a file llama.cpp's gguf-py wrote (tests/fixtures/gguf/values.gguf and
// what gguf-py's own reader says of it, values.json): every value type, a non-default
// alignment, a tensor of each type; then hostile files: every truncation, bad magic, versions,
// big-endian files, counts and lengths past the end, bad shapes, offsets and alignment.
#include "infer/loader/gguf.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/loader/gguf_blocks.h"
#include "infer/loader/gguf_model.h"
#include "test_util.h"

namespace infer {
namespace {

using nlohmann::json;

std::string FixturePath(const std::string& name) {
  return std::string(testing::FixturesDir()) + "/gguf/" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

GgufHeader Parse(const std::string& image) {
  return ParseGgufHeader(std::span(reinterpret_cast<const std::byte*>(image.data()), image.size()),
                         "test.gguf");
}

std::string ErrorOf(const std::string& image) {
  try {
    Parse(image);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Gguf, ReadsWhatGgufPyWrote) {
  const GgufFile file = GgufFile::Open(FixturePath("values.gguf"));
  const json expected = json::parse(ReadBytes(FixturePath("values.json")));
  EXPECT_EQ(file.header().version, 3U);
  EXPECT_EQ(file.header().alignment, 64U);
  EXPECT_EQ(file.header().data_offset % 64, 0U);
  EXPECT_EQ(file.String("general.architecture"), "llama");
  for (const auto& [key, entry] : expected["metadata"].items()) {
    SCOPED_TRACE(key);
    const std::string type = entry["type"];
    if (type == "ARRAY ARRAY") {
      EXPECT_TRUE(file.Has(key));
      EXPECT_THROW(file.Ints(key), Error);
    } else if (type == "ARRAY STRING") {
      ASSERT_NE(file.Strings(key), nullptr);
      EXPECT_EQ(*file.Strings(key), entry["value"].get<std::vector<std::string>>());
    } else if (type == "ARRAY FLOAT32") {
      ASSERT_NE(file.Floats(key), nullptr);
      EXPECT_EQ(*file.Floats(key), entry["value"].get<std::vector<double>>());
    } else if (type.starts_with("ARRAY")) {
      ASSERT_NE(file.Ints(key), nullptr);
      EXPECT_EQ(*file.Ints(key), entry["value"].get<std::vector<int64_t>>());
    } else if (type == "STRING") {
      EXPECT_EQ(file.String(key), entry["value"].get<std::string>());
      EXPECT_THROW(file.Int(key), Error);
    } else if (type == "FLOAT32" || type == "FLOAT64") {
      EXPECT_EQ(file.Float(key), entry["value"].get<double>());
      EXPECT_THROW(file.String(key), Error);
    } else if (type == "BOOL") {
      EXPECT_EQ(file.Bool(key), entry["value"].get<bool>());
    } else {
      EXPECT_EQ(file.Int(key), entry["value"].get<int64_t>());
      EXPECT_EQ(file.Float(key), entry["value"].get<double>());  // an integer reads as a number
    }
  }
  EXPECT_EQ(file.Int("no.such.key"), std::nullopt);
  ASSERT_EQ(file.tensors().size(), expected["tensors"].size());
  for (const json& want : expected["tensors"]) {
    const GgufTensorInfo* tensor = file.FindTensor(want["name"].get<std::string>());
    ASSERT_NE(tensor, nullptr) << want["name"];
    EXPECT_EQ(GgmlTypeName(tensor->type), want["type"].get<std::string>());
    EXPECT_EQ(tensor->dims, want["dims"].get<std::vector<int64_t>>());
    EXPECT_EQ(file.header().data_offset + tensor->offset, want["offset"].get<uint64_t>());
    EXPECT_EQ(tensor->bytes, want["bytes"].get<uint64_t>());
    EXPECT_EQ(file.Data(*tensor).size(), tensor->bytes);
  }
  EXPECT_EQ(file.FindTensor("cube")->shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_TRUE(IsGgufFile(FixturePath("values.gguf")));
  EXPECT_FALSE(IsGgufFile(FixturePath("values.json")));
}

// Every tensor of the gguf-py file, read by infer, is what gguf-py's dequantizer says, bit for bit:
// widened (DequantizeGgmlRow) and as the matrix infer computes with (GgufMatrix: Q8_0 and Q5_0
// repacked into int8, Q4_0 and Q4_1 into int4, Q5_1 into int5, Q4_K, Q5_K and Q6_K into int4k,
// int5k and int6k).
TEST(Gguf, ValuesAreGgufPysBitForBit) {
  const GgufFile file = GgufFile::Open(FixturePath("values.gguf"));
  const json expected = json::parse(ReadBytes(FixturePath("values.json")));
  ModelConfig config;
  config.head_dim = 64;
  for (const json& want : expected["tensors"]) {
    const std::string name = want["name"];
    SCOPED_TRACE(name);
    const GgufTensorInfo& tensor = *file.FindTensor(name);
    const auto values = want["values"].get<std::vector<float>>();
    std::vector<float> widened(values.size());
    ASSERT_TRUE(CanDequantizeGgml(tensor.type));
    DequantizeGgmlRow(tensor.type, file.Data(tensor), widened);
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), std::bit_cast<uint32_t>(values[i])) << i;
    }
    if (tensor.dims.size() != 2) continue;
    const kernels::PackedMatrix matrix = GgufMatrix(file, tensor, "x.weight", config,
                                                    kernels::Quantization::kNone, nullptr, nullptr);
    EXPECT_EQ(matrix.quantization(),
              ExactQuantization(tensor.type).value_or(kernels::Quantization::kNone));
    const int64_t cols = tensor.dims[0];
    for (int64_t r = 0; r < matrix.rows(); ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        // Equal values (Q4_0's d (q - 8) may be -0 where infer's d q + m is +0).
        ASSERT_EQ(matrix.At(r, c), values[r * cols + c]) << r << ", " << c;
      }
    }
  }
}

TEST(Gguf, EveryTruncationIsAClearError) {
  const std::string image = ReadBytes(FixturePath("values.gguf"));
  const GgufHeader header = Parse(image);
  uint64_t end = 0;
  for (const auto& tensor : header.tensors) {
    end = std::max(end, header.data_offset + tensor.offset + tensor.bytes);
  }
  for (size_t size = 0; size < end; ++size) {
    const std::string error = ErrorOf(image.substr(0, size));
    ASSERT_FALSE(error.empty()) << "a file cut at " << size << " bytes was accepted";
    ASSERT_TRUE(error.starts_with("test.gguf: ")) << error;
  }
  EXPECT_EQ(ErrorOf(image.substr(0, end)), "");  // the padding after the last tensor is optional
}

// A little-endian image builder for the hostile cases.
struct Image {
  std::string bytes;
  template <typename T>
  Image& Put(T value) {
    bytes.append(reinterpret_cast<const char*>(&value), sizeof(T));
    return *this;
  }
  Image& Str(const std::string& text) {
    Put<uint64_t>(text.size());
    bytes += text;
    return *this;
  }
};

Image Header(uint64_t tensors, uint64_t keys, uint32_t version = 3) {
  Image image;
  image.bytes = "GGUF";
  image.Put<uint32_t>(version).Put<uint64_t>(tensors).Put<uint64_t>(keys);
  return image;
}

// One F32 tensor info of `dims` at `offset`.
Image& Tensor(Image& image, const std::string& name, std::vector<uint64_t> dims, uint32_t type,
              uint64_t offset) {
  image.Str(name).Put<uint32_t>(static_cast<uint32_t>(dims.size()));
  for (const uint64_t d : dims) image.Put<uint64_t>(d);
  return image.Put<uint32_t>(type).Put<uint64_t>(offset);
}

std::string Padded(Image image, size_t data_bytes) {
  image.bytes.resize((image.bytes.size() + 31) / 32 * 32 + data_bytes, '\0');
  return image.bytes;
}

TEST(Gguf, HostileFilesAreClearErrors) {
  const auto expect_error = [](const std::string& image, const std::string& needle) {
    const std::string error = ErrorOf(image);
    EXPECT_NE(error.find(needle), std::string::npos) << "error: '" << error << "'";
  };
  expect_error("GGML", "not a GGUF file");
  expect_error("", "not a GGUF file");
  expect_error(Header(0, 0, 1).bytes, "GGUF version 1");
  expect_error(Header(0, 0, 0x03000000).bytes, "big-endian");
  expect_error(Header(uint64_t{1} << 60, 0).bytes, "the tensor count says");
  expect_error(Header(0, uint64_t{1} << 40).bytes, "the metadata count says");
  {
    Image image = Header(0, 1);
    image.Str("k").Put<uint32_t>(8).Put<uint64_t>(uint64_t{1} << 50);  // a string past the end
    expect_error(image.bytes, "k is 1125899906842624 bytes long, more than the 8 allowed");
  }
  {
    Image image = Header(0, 1);
    image.Str("k").Put<uint32_t>(9).Put<uint32_t>(4).Put<uint64_t>(uint64_t{1} << 40);
    expect_error(image.bytes, "k says");
  }
  {
    Image image = Header(0, 1);
    image.Str("k").Put<uint32_t>(13);
    expect_error(image.bytes, "value type 13");
  }
  {
    Image image = Header(0, 1);
    image.Str("k").Put<uint32_t>(7).Put<uint8_t>(2);
    expect_error(image.bytes, "bool byte 2");
  }
  {
    Image image = Header(0, 2);
    image.Str("k").Put<uint32_t>(4).Put<uint32_t>(1).Str("k").Put<uint32_t>(4).Put<uint32_t>(1);
    expect_error(image.bytes, "'k' appears twice");
  }
  {
    Image image = Header(0, 1);
    image.Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(48);
    expect_error(image.bytes, "power of two");
  }
  {
    // Arrays nested past the bound.
    Image image = Header(0, 1);
    image.Str("k").Put<uint32_t>(9);  // an array, of arrays, of ...
    for (int i = 0; i < 12; ++i) image.Put<uint32_t>(9).Put<uint64_t>(1);
    image.Put<uint32_t>(4).Put<uint64_t>(0);
    expect_error(Padded(image, 64), "nests arrays deeper");
  }
  const auto one_tensor = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                             size_t data_bytes, const std::string& name = "t") {
    Image image = Header(1, 0);
    Tensor(image, name, std::move(dims), type, offset);
    return Padded(image, data_bytes);
  };
  EXPECT_EQ(ErrorOf(one_tensor({4, 2}, 0, 0, 32)), "");
  expect_error(one_tensor({4, 2}, 0, 0, 31), "runs past the end of the file");
  expect_error(one_tensor({4, 2}, 0, 32, 48), "runs past the end of the file");
  expect_error(one_tensor({4, 2}, 0, 8, 64), "not a multiple of the alignment 32");
  expect_error(one_tensor({4, 2}, 99, 0, 64), "type 99, which ggml does not define");
  expect_error(one_tensor({48, 2}, 8, 0, 256), "not a multiple of the type's block of 32");
  expect_error(one_tensor({4, 0}, 0, 0, 64), "dimension 1 = 0");
  expect_error(one_tensor({uint64_t{1} << 41}, 0, 0, 64), "dimension 0");
  expect_error(one_tensor({1ULL << 32, 1ULL << 32}, 0, 0, 64), "dimension 1");
  // 2^62 f32 values: their byte count would wrap to 0 in 64 bits.
  expect_error(one_tensor({1ULL << 40, 1ULL << 22}, 0, 0, 64), "dimension 1");
  expect_error(one_tensor({4, 2}, 0, 0, 64, ""), "empty name");
  {
    Image image = Header(1, 0);
    image.Str("t").Put<uint32_t>(5);
    expect_error(Padded(image, 64), "5 dimensions");
  }
  {
    Image image = Header(2, 0);
    Tensor(image, "a", {16}, 0, 0);
    Tensor(image, "b", {16}, 0, 32);
    expect_error(Padded(image, 128), "'a' and 'b' overlap");
  }
  {
    Image image = Header(2, 0);
    Tensor(image, "a", {4}, 0, 0);
    Tensor(image, "a", {4}, 0, 32);
    expect_error(Padded(image, 128), "'a' appears twice");
  }
}

TEST(Gguf, TypesKnowTheirBlocks) {
  EXPECT_EQ(GgmlTypeTraits(8)->block_bytes, 34);  // Q8_0: an f16 scale and 32 int8
  EXPECT_EQ(GgmlTypeTraits(12)->block_elements, 256);
  EXPECT_EQ(GgmlTypeName(14), "Q6_K");
  EXPECT_EQ(GgmlTypeName(4), "type 4");  // Q4_2, removed from ggml
  EXPECT_FALSE(GgmlTypeTraits(4).has_value());
}

}  // namespace
}  // namespace infer
