#!/usr/bin/env bash
# clang-format (check only) and clang-tidy over the project's own C++ sources.
# Needs build/compile_commands.json (scripts/setup.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t sources < <(git ls-files '*.cc' '*.h')
echo "lint: clang-format on ${#sources[@]} files"
clang-format --dry-run --Werror "${sources[@]}"
mapfile -t units < <(git ls-files 'src/*.cc')
# Units whose clang-tidy inputs (preprocessed text, flags, config, version) match a clean run's
# are not re-checked (scripts/tidy_cache.py; INFER_TIDY_CACHE=off checks every unit).
keys="$(mktemp)"
trap 'rm -f "$keys" "$keys.stale"' EXIT
if [ "${INFER_TIDY_CACHE:-}" = off ]; then
  stale=("${units[@]}")
else
  python3 scripts/tidy_cache.py stale "$keys" "${units[@]}" >"$keys.stale"  # fails the lint on error
  mapfile -t stale <"$keys.stale"
fi
echo "lint: clang-tidy on ${#stale[@]} of ${#units[@]} translation units (the rest unchanged since a clean run)"
if ((${#stale[@]} > 0)); then
  printf '%s\n' "${stale[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p build --quiet \
    --extra-arg=-Wno-unknown-warning-option 2>/dev/null
fi
[ "${INFER_TIDY_CACHE:-}" = off ] || python3 scripts/tidy_cache.py record "$keys"
echo "lint: clean"
