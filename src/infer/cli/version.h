// What build this is: the project version (CMake's project(VERSION), its one home), the git
// commit it was built from, and the ISA levels compiled in and detected. For `infer --version`,
// `infer version`, serve's start line and /metrics' infer_build_info.
#pragma once

#include <string>
#include <string_view>

namespace infer::cli {

std::string_view Version();  // "0.1.0"
// The commit's first 12 hex digits, "-dirty" appended when tracked files had changes, or
// "unknown" when the source was not a git checkout (written at build time).
std::string_view Commit();
// "infer VERSION (commit COMMIT)\nISA levels compiled in: ...; detected: ... (active: ...)".
std::string VersionText();

}  // namespace infer::cli
