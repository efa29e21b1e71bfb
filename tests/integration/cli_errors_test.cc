// Corrupted and malicious model folders: `infer inspect` must answer each with one line on
// stderr and exit status 1 (never a crash; the sanitizer build runs this too).
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "../unit/loader/test_util.h"
#include "testing/paths.h"
#include "testing/subprocess.h"

namespace infer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string FixtureModel(const std::string& arch) {
  return testing::FixturePath("models/" + arch + "/model").string();
}

std::string LittleEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// The fixture's safetensors header text and data.
struct SplitFile {
  std::string header;
  std::string data;
};
SplitFile ReadFixtureSafetensors(const std::string& arch) {
  const std::string bytes = testing::ReadFile(fs::path(FixtureModel(arch)) / "model.safetensors");
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(bytes[i]);
  return {bytes.substr(8, length), bytes.substr(8 + length)};
}

std::string Assemble(const std::string& header, const std::string& data) {
  return LittleEndian64(header.size()) + header + data;
}

std::string ReplaceFirst(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

struct Corruption {
  const char* name;
  // Gets a folder holding a copy of the llama fixture; damages it.
  std::function<void(const fs::path&)> damage;
  const char* expected;  // substring of the error line
};

void WriteSafetensors(const fs::path& folder, const std::string& bytes) {
  testing::WriteFile(folder / "model.safetensors", bytes);
}

std::vector<Corruption> Corruptions() {
  const SplitFile fixture = ReadFixtureSafetensors("llama");
  const std::string& h = fixture.header;
  const std::string& d = fixture.data;
  const std::string whole = Assemble(h, d);
  const std::string first_tensor = "model.embed_tokens.weight";
  return {
      {"empty file", [](const fs::path& f) { WriteSafetensors(f, ""); }, "too small"},
      {"truncated data",
       [=](const fs::path& f) { WriteSafetensors(f, whole.substr(0, whole.size() / 2)); },
       "past the end of the data section"},
      {"truncated header",
       [=](const fs::path& f) { WriteSafetensors(f, whole.substr(0, 8 + h.size() / 2)); },
       "past the end of the file"},
      {"lying header length",
       [=](const fs::path& f) {
         WriteSafetensors(f, LittleEndian64(h.size() + d.size() + 1) + h + d);
       },
       "past the end of the file"},
      {"huge header length",
       [=](const fs::path& f) { WriteSafetensors(f, LittleEndian64(~0ull) + h + d); }, "exceeds"},
      {"zero header length",
       [=](const fs::path& f) { WriteSafetensors(f, LittleEndian64(0) + h + d); },
       "not valid JSON"},
      {"bad json header",
       [=](const fs::path& f) { WriteSafetensors(f, Assemble(ReplaceFirst(h, "{", "["), d)); },
       "not valid JSON"},
      {"header is an array", [=](const fs::path& f) { WriteSafetensors(f, Assemble("[1]", d)); },
       "not a JSON object"},
      {"offsets past the end",
       [=](const fs::path& f) {
         std::string header =
             ReplaceFirst(h, "\"data_offsets\":[0,", "\"data_offsets\":[999999999,");
         WriteSafetensors(f, Assemble(header, d));
       },
       "data_offsets"},
      {"unknown dtype",
       [=](const fs::path& f) {
         WriteSafetensors(f, Assemble(ReplaceFirst(h, "\"BF16\"", "\"Q4_K\""), d));
       },
       "unknown dtype 'Q4_K'"},
      {"dtype size mismatch",
       [=](const fs::path& f) {
         WriteSafetensors(f, Assemble(ReplaceFirst(h, "\"BF16\"", "\"F32\""), d));
       },
       "needs"},
      {"integer dtype",
       [=](const fs::path& f) {
         // Same byte size, but infer cannot compute with I16 weights.
         WriteSafetensors(f, Assemble(ReplaceFirst(h, "\"BF16\"", "\"I16\""), d));
       },
       "cannot compute with"},
      {"overlapping ranges",
       [=](const fs::path& f) {
         // Point the second tensor's range back onto the first one's bytes.
         std::string header = h;
         const auto first = header.find("\"data_offsets\":[");
         const auto second = header.find("\"data_offsets\":[", first + 1);
         const auto second_end = header.find(']', second);
         const auto comma = header.find(',', second);
         const uint64_t begin = std::stoull(header.substr(second + 16, comma - second - 16));
         const uint64_t end = std::stoull(header.substr(comma + 1, second_end - comma - 1));
         const uint64_t shift = std::min<uint64_t>(begin, 2);
         header.replace(second, second_end - second,
                        "\"data_offsets\":[" + std::to_string(begin - shift) + "," +
                            std::to_string(end - shift));
         WriteSafetensors(f, Assemble(header, d));
       },
       "overlap"},
      {"negative dimension",
       [=](const fs::path& f) {
         WriteSafetensors(f, Assemble(ReplaceFirst(h, "\"shape\":[", "\"shape\":[-"), d));
       },
       "not a non-negative integer"},
      {"missing tensor",
       [=](const fs::path& f) {
         WriteSafetensors(f,
                          Assemble(ReplaceFirst(h, "model.norm.weight", "model.norm.weihgt"), d));
       },
       "missing tensor 'model.norm.weight'"},
      {"duplicate tensor",
       [=](const fs::path& f) {
         WriteSafetensors(f, Assemble(ReplaceFirst(h, "model.norm.weight", first_tensor), d));
       },
       "twice"},
      {"no weights file", [](const fs::path& f) { fs::remove(f / "model.safetensors"); },
       "no model.safetensors"},
      {"weights file is a folder",
       [](const fs::path& f) {
         fs::remove(f / "model.safetensors");
         fs::create_directory(f / "model.safetensors");
       },
       "not a regular file"},
      {"config bad json",
       [](const fs::path& f) { testing::WriteFile(f / "config.json", "{\"model_type\": "); },
       "not valid JSON"},
      {"config missing", [](const fs::path& f) { fs::remove(f / "config.json"); },
       "config.json: cannot open"},
      {"config missing hidden_size",
       [](const fs::path& f) {
         const std::string config = testing::ReadFile(f / "config.json");
         testing::WriteFile(f / "config.json",
                            ReplaceFirst(config, "\"hidden_size\"", "\"hidden_sizes\""));
       },
       "missing required key 'hidden_size'"},
      {"config unknown model_type",
       [](const fs::path& f) {
         const std::string config = testing::ReadFile(f / "config.json");
         testing::WriteFile(f / "config.json", ReplaceFirst(config, "\"llama\"", "\"mamba\""));
       },
       "model_type 'mamba' is not supported"},
      {"config wrong type",
       [](const fs::path& f) {
         const std::string config = testing::ReadFile(f / "config.json");
         testing::WriteFile(f / "config.json", ReplaceFirst(config, "\"num_hidden_layers\": 4",
                                                            "\"num_hidden_layers\": \"4\""));
       },
       "'num_hidden_layers' must be an integer"},
      {"config shape disagrees with weights",
       [](const fs::path& f) {
         const std::string config = testing::ReadFile(f / "config.json");
         testing::WriteFile(f / "config.json", ReplaceFirst(config, "\"intermediate_size\": 128",
                                                            "\"intermediate_size\": 96"));
       },
       "has shape [128, 64] but the config needs [96, 64]"},
      {"index bad json",
       [](const fs::path& f) {
         testing::WriteFile(f / "model.safetensors.index.json", "{\"weight_map\": ");
       },
       "not a valid JSON object"},
      {"index names a missing shard",
       [](const fs::path& f) {
         testing::WriteFile(
             f / "model.safetensors.index.json",
             R"({"weight_map":{"model.norm.weight":"model-00009-of-00009.safetensors"}})");
       },
       "cannot open"},
      {"index escapes the folder",
       [](const fs::path& f) {
         testing::WriteFile(f / "model.safetensors.index.json",
                            R"({"weight_map":{"model.norm.weight":"../../etc/passwd"}})");
       },
       "is not a file in the folder"},
      {"generation config bad json",
       [](const fs::path& f) { testing::WriteFile(f / "generation_config.json", "[1,"); },
       "generation_config.json: not a valid JSON object"},
  };
}

TEST(CliErrors, EveryCorruptionIsOneLineAndExitOne) {
  const auto corruptions = Corruptions();
  EXPECT_GE(corruptions.size(), 20U);
  for (const Corruption& corruption : corruptions) {
    TempDir dir;
    for (const auto& entry : fs::directory_iterator(FixtureModel("llama"))) {
      fs::copy_file(entry.path(), dir.path() / entry.path().filename());
    }
    fs::permissions(dir.path() / "config.json", fs::perms::owner_write, fs::perm_options::add);
    corruption.damage(dir.path());
    const auto result = testing::RunCommand(
        {::infer::testing::InferBinary(), "inspect", "--model", dir.path().string()});
    EXPECT_EQ(result.exit_code, 1) << corruption.name << ": " << result.err;
    EXPECT_EQ(result.err.rfind("error: ", 0), 0U) << corruption.name << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
        << corruption.name << ": " << result.err;
    EXPECT_NE(result.err.find(corruption.expected), std::string::npos)
        << corruption.name << ": expected '" << corruption.expected << "' in: " << result.err;
  }
}

TEST(CliErrors, MissingModelFolder) {
  const auto result = testing::RunCommand(
      {::infer::testing::InferBinary(), "inspect", "--model", "/no/such/folder"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("/no/such/folder"), std::string::npos) << result.err;
}

// A KV budget beyond the machine's memory is refused with both sizes, before the pool is
// allocated.
TEST(CliErrors, KvBudgetBeyondTheMachinesMemory) {
  const auto result = testing::RunCommand({::infer::testing::InferBinary(), "serve", "--model",
                                           testing::FixturePath("models/llama/model").string(),
                                           "--port", "0", "--kv-cache-memory", "100000GiB"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("the KV cache budget (100000.00 GiB, --kv-cache-memory) is more than "
                            "the"),
            std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("GiB of memory available"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace infer
