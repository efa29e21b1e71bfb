# Writes OUTPUT (a C++ source) with the project version VERSION and the git commit of SOURCE_DIR
# ("-dirty" when tracked files differ from it; "unknown" outside a git checkout). Run at every
# build (cmake -P), it rewrites OUTPUT only when that text changes, so an unchanged commit
# recompiles nothing.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
    OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT changes STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "// Written at build time by cmake/write_version.cmake.
#include \"infer/cli/version.h\"

namespace infer::cli {

std::string_view Version() { return \"${VERSION}\"; }
std::string_view Commit() { return \"${commit}\"; }

}  // namespace infer::cli
")
file(WRITE "${OUTPUT}.tmp" "${text}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
