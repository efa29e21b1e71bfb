#!/usr/bin/env bash
# clang-format (check only) and clang-tidy over the project's own C++ sources.
# Needs build/compile_commands.json (scripts/setup.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t sources < <(git ls-files '*.cc' '*.h')
echo "lint: clang-format on ${#sources[@]} files"
clang-format --dry-run --Werror "${sources[@]}"
mapfile -t units < <(git ls-files 'src/*.cc')
echo "lint: clang-tidy on ${#units[@]} translation units"
printf '%s\n' "${units[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p build --quiet \
  --extra-arg=-Wno-unknown-warning-option 2>/dev/null
echo "lint: clean"
