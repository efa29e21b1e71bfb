#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs each for N seconds
# (default 60). Usage: scripts/fuzz.sh [SECONDS]. Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DINFER_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzzers
mkdir -p build-fuzz/artifacts
status=0
for target in build-fuzz/tests/fuzz/*_fuzz; do
  name=$(basename "$target" _fuzz)
  corpus="build-fuzz/corpus/$name"
  mkdir -p "$corpus"
  seeds=()
  [ -d "tests/fuzz/corpus/$name" ] && seeds+=("tests/fuzz/corpus/$name")
  echo "== fuzzing $name for ${seconds}s"
  if ! "$target" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix=build-fuzz/artifacts/ "$corpus" "${seeds[@]}" 2>build-fuzz/$name.log; then
    echo "FINDING in $name: see build-fuzz/$name.log and build-fuzz/artifacts/"
    tail -40 "build-fuzz/$name.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|Done" "build-fuzz/$name.log" | tail -2
  fi
done
exit $status
