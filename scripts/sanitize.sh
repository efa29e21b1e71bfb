#!/usr/bin/env bash
# Sanitizer builds (clang-14, RelWithDebInfo) and their test runs.
#   scripts/sanitize.sh [address]  ASan + UBSan into build-asan/: the whole suite. The same build
#                                  carries libFuzzer's coverage hooks and the fuzz targets, which
#                                  scripts/fuzz.sh runs, so the libraries are compiled once.
#   scripts/sanitize.sh thread     TSan into build-tsan/: the whole suite too (the thread pool and
#                                  the kernels it runs, the engine and scheduler, the HTTP server
#                                  and its child `infer serve`, and everything single-threaded).
#   --build-only                   configure and build, run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=address
build_only=0
for arg in "$@"; do
  case "$arg" in
    address | thread) mode="$arg" ;;
    --build-only) build_only=1 ;;
    *) echo "usage: scripts/sanitize.sh [address|thread] [--build-only]" >&2; exit 2 ;;
  esac
done

if [[ "$mode" == address ]]; then
  dir=build-asan
  extra=(-DINFER_SANITIZE=address -DINFER_FUZZ=ON)
else
  dir=build-tsan
  extra=(-DINFER_SANITIZE=thread)
fi
# ccache (when the build uses it): paths relative to the checkout and no working directory in the
# hash, so that a build here and CI's build in its own clone share objects (the debug info's
# compilation directory may then name the other checkout; stack traces still name the files).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
# A build folder configured with another compiler (an older gcc build-asan) is started over.
if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -q "CMAKE_CXX_COMPILER:.*clang++-14" "$dir/CMakeCache.txt"; then
  rm -rf "$dir"
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DINFER_BUILD_BENCHMARKS=OFF "${extra[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
((build_only)) && exit 0

if [[ "$mode" == address ]]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ctest --test-dir "$dir" --output-on-failure -j2
else
  # A race ends the process (exit 66): a test's own binary fails, and a child `infer serve` dies,
  # which its test sees as a dropped connection. Reports go to stderr, shown on failure.
  # tests/tsan_suppressions.txt: only a false positive inside the uninstrumented cpp-httplib.
  export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:history_size=4:suppressions=$PWD/tests/tsan_suppressions.txt"
  ctest --test-dir "$dir" --output-on-failure -j2
fi
