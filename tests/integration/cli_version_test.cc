// `infer --version` and `infer version` against what the build came from: CMake's project
// version and the checkout's commit as git names it now (12 hex digits, "-dirty" when tracked
// files differ), and the ISA levels.
#include <string>

#include <gtest/gtest.h>

#include "infer/kernels/cpu/isa.h"
#include "testing/paths.h"
#include "testing/subprocess.h"

namespace infer {
namespace {

std::string Git(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/git", "-C", testing::SourceDir()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto result = testing::RunCommand(argv);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::string out = result.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST(CliVersion, NamesTheVersionTheCommitBuiltAndTheIsaLevels) {
  std::string commit = Git({"rev-parse", "--short=12", "HEAD"});
  if (!Git({"status", "--porcelain", "--untracked-files=no"}).empty()) commit += "-dirty";
  const std::string first_line =
      "infer " + std::string(testing::ProjectVersion()) + " (commit " + commit + ")\n";
  for (const char* form : {"--version", "version"}) {
    const auto result = testing::RunCommand({testing::InferBinary(), form});
    ASSERT_EQ(result.exit_code, 0) << form << ": " << result.err;
    EXPECT_EQ(result.out.substr(0, first_line.size()), first_line) << form;
    EXPECT_NE(result.out.find("detected: " + std::string(kernels::IsaName(kernels::DetectIsa()))),
              std::string::npos)
        << result.out;
    EXPECT_NE(result.out.find("ISA levels compiled in: scalar avx2 avxvnni avx512 avx512bf16 "
                              "avx512amx"),
              std::string::npos)
        << result.out;
  }
}

}  // namespace
}  // namespace infer
