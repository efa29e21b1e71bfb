#include "testing/paths.h"

namespace infer::testing {

const char* InferBinary() { return INFER_BINARY; }
const char* SourceDir() { return INFER_SOURCE_DIR; }
const char* FixturesDir() { return INFER_TEST_FIXTURES; }
const char* ProjectVersion() { return INFER_PROJECT_VERSION; }

std::string GgufTool(const std::string& name) {
  return std::string("/usr/bin/python3 ") + SourceDir() + "/tests/gguf/" + name;
}

std::string LoraTool(const std::string& name) {
  return std::string("/usr/bin/python3 ") + SourceDir() + "/tests/lora/" + name;
}

}  // namespace infer::testing
