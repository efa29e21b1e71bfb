#include "testing/paths.h"

namespace infer::testing {

const char* InferBinary() { return INFER_BINARY; }
const char* SourceDir() { return INFER_SOURCE_DIR; }
const char* FixturesDir() { return INFER_TEST_FIXTURES; }

}  // namespace infer::testing
