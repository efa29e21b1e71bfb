#include "infer/loader/safetensors.h"

#include <cstring>

#include <gtest/gtest.h>

#include "infer/core/error.h"
#include "test_util.h"

namespace infer {
namespace {

using testing::TempDir;

// A file image: 8-byte little-endian header length, header, data.
std::string Image(const std::string& header, const std::string& data,
                  uint64_t length_override = 0) {
  const uint64_t length = length_override != 0 ? length_override : header.size();
  std::string image(8, '\0');
  for (int i = 0; i < 8; ++i) image[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return image + header + data;
}

SafetensorsHeader Parse(const std::string& image) {
  return ParseSafetensorsHeader(
      std::span(reinterpret_cast<const std::byte*>(image.data()), image.size()),
      "test.safetensors");
}

std::string ErrorOf(const std::string& image) {
  try {
    Parse(image);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Safetensors, ParsesAValidHeader) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  const SafetensorsHeader parsed = Parse(Image(header, std::string(12, '\0')));
  ASSERT_EQ(parsed.entries.size(), 2U);
  EXPECT_EQ(parsed.entries[0].name, "a");  // sorted by offset
  EXPECT_EQ(parsed.entries[1].shape, (Shape{2}));
  EXPECT_EQ(parsed.metadata.at("format"), "pt");
  EXPECT_EQ(parsed.data_offset, 8 + header.size());
}

TEST(Safetensors, ScalarsAndEmptyTensorsAreValid) {
  const std::string header = R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                             R"("e":{"dtype":"F16","shape":[0,3],"data_offsets":[4,4]}})";
  EXPECT_EQ(Parse(Image(header, std::string(4, '\0'))).entries.size(), 2U);
}

struct BadCase {
  const char* name;
  std::string image;
  const char* expected;  // a substring of the error
};

std::vector<BadCase> BadCases() {
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  return {
      {"empty", "", "too small"},
      {"short", std::string(5, '\0'), "too small"},
      {"length past end", Image("{}", "", 1000), "past the end of the file"},
      {"huge length", Image("{}", "", 1ull << 40), "exceeds"},
      {"not json", Image("{not json", ""), "not valid JSON"},
      {"not object", Image("[1,2]", ""), "not a JSON object"},
      {"entry not object", Image(R"({"w":5})", ""), "not an object"},
      {"no dtype", Image(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, 0)),
       "dtype"},
      {"unknown dtype",
       Image(R"({"w":{"dtype":"F13","shape":[1],"data_offsets":[0,4]}})", std::string(4, 0)),
       "unknown dtype 'F13'"},
      {"negative dim",
       Image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, 0)),
       "not a non-negative integer"},
      {"float dim",
       Image(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", std::string(4, 0)),
       "not a non-negative integer"},
      {"shape overflow",
       Image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
             std::string(4, 0)),
       "overflows"},
      {"size mismatch",
       Image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 0)),
       "needs 12 bytes"},
      {"offsets past end", Image("{" + ok_entry + "}", std::string(4, 0)),
       "past the end of the data"},
      {"reversed offsets",
       Image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, 0)),
       "reversed"},
      {"three offsets",
       Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", std::string(8, 0)),
       "two integers"},
      {"overlap",
       Image(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           std::string(12, 0)),
       "overlap"},
      {"duplicate name",
       Image(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           std::string(8, 0)),
       "twice"},
      {"bad metadata", Image(R"({"__metadata__":{"k":1}})", ""), "not a string"},
      {"metadata not object", Image(R"({"__metadata__":[]})", ""), "__metadata__ is not an object"},
  };
}

TEST(Safetensors, RejectsEveryMalformedHeaderWithANamedError) {
  for (const BadCase& bad : BadCases()) {
    const std::string message = ErrorOf(bad.image);
    EXPECT_NE(message.find(bad.expected), std::string::npos)
        << bad.name << ": got '" << message << "'";
    EXPECT_EQ(message.rfind("test.safetensors", 0), 0U) << bad.name << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << bad.name;
  }
}

TEST(Safetensors, WriteThenOpenIsZeroCopy) {
  TempDir dir;
  Tensor a = Tensor::Empty(DType::kBF16, {3, 5});
  for (int i = 0; i < 15; ++i) a.data<uint16_t>()[i] = F32ToBf16(static_cast<float>(i));
  Tensor b = Tensor::Empty(DType::kF32, {4});
  b.data<float>()[3] = -1.5F;
  const auto path = (dir.path() / "x.safetensors").string();
  WriteSafetensors(path, {{"a", a}, {"b", b}}, {{"format", "pt"}});
  SafetensorsFile file = SafetensorsFile::Open(path);
  ASSERT_EQ(file.header().entries.size(), 2U);
  Tensor view_a = file.View(file.header().entries[0]);
  Tensor view_b = file.View(file.header().entries[1]);
  EXPECT_EQ(view_a.shape(), (Shape{3, 5}));
  EXPECT_EQ(ElementAsF32(view_a, 14), 14.0F);
  EXPECT_EQ(ElementAsF32(view_b, 3), -1.5F);
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  // The view points into the mapping, not into a copy.
  const auto* view_bytes = static_cast<const std::byte*>(view_a.raw());
  EXPECT_EQ(file.header().data_offset % 8, 0U);
  EXPECT_NE(view_a.keepalive(), nullptr);
  (void)view_bytes;
}

TEST(Safetensors, ShardedCheckpointFollowsTheIndex) {
  TempDir dir;
  Tensor a = Tensor::Empty(DType::kF32, {2});
  Tensor b = Tensor::Empty(DType::kF32, {3});
  WriteSafetensors((dir.path() / "model-00001-of-00002.safetensors").string(), {{"a", a}});
  WriteSafetensors((dir.path() / "model-00002-of-00002.safetensors").string(), {{"b", b}});
  testing::WriteFile(dir.path() / "model.safetensors.index.json",
                     R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
                     R"("b":"model-00002-of-00002.safetensors"}})");
  SafetensorsCheckpoint checkpoint = SafetensorsCheckpoint::Open(dir.path().string());
  EXPECT_EQ(checkpoint.tensors().size(), 2U);
  EXPECT_EQ(checkpoint.files().size(), 2U);

  // The index names a shard that does not hold the tensor.
  testing::WriteFile(dir.path() / "model.safetensors.index.json",
                     R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})");
  EXPECT_THROW(SafetensorsCheckpoint::Open(dir.path().string()), Error);
  // The index escapes the folder.
  testing::WriteFile(dir.path() / "model.safetensors.index.json",
                     R"({"weight_map":{"a":"../etc/passwd"}})");
  EXPECT_THROW(SafetensorsCheckpoint::Open(dir.path().string()), Error);
}

TEST(Safetensors, MissingCheckpointIsAnError) {
  TempDir dir;
  EXPECT_THROW(SafetensorsCheckpoint::Open(dir.path().string()), Error);
}

}  // namespace
}  // namespace infer
