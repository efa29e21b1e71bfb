// Where tests find the infer binary under test, the checkout and the reference fixtures. The
// paths are compiled into paths.cc alone: every other test object is then the same in every
// clone, so that ccache shares it between a checkout and CI's.
#pragma once

#include <string>

namespace infer::testing {

const char* InferBinary();     // the `infer` executable of this build
const char* SourceDir();       // the checkout (.cache/tokenizers, scripts/)
const char* FixturesDir();     // tests/fixtures
const char* ProjectVersion();  // CMake's project(VERSION), as the build was configured

// The command that runs tests/gguf/NAME (the GGUF writer and references) with Debian's python3
// and its numpy.
std::string GgufTool(const std::string& name);
// The same for tests/lora/NAME (the PEFT adapter writer).
std::string LoraTool(const std::string& name);

}  // namespace infer::testing
