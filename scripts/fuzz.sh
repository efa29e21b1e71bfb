#!/usr/bin/env bash
# Runs every libFuzzer target for N seconds (default 60) over the kept corpus
# (tests/fuzz/corpus/<target>, read-only) plus a working corpus in build-asan/corpus/<target>.
# The targets live in the ASan + UBSan build that scripts/sanitize.sh makes (built here if
# missing). Usage: scripts/fuzz.sh [SECONDS [TARGET...]]. Exits non-zero on any finding; the
# input that found it is in build-asan/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
bash scripts/sanitize.sh address --build-only >/dev/null
targets=("$@")
if ((${#targets[@]} == 0)); then
  for target in build-asan/tests/fuzz/*_fuzz; do targets+=("$(basename "$target" _fuzz)"); done
fi
mkdir -p build-asan/artifacts
status=0
for name in "${targets[@]}"; do
  corpus="build-asan/corpus/$name"
  mkdir -p "$corpus"
  seeds=()
  [ -d "tests/fuzz/corpus/$name" ] && seeds+=("tests/fuzz/corpus/$name")
  echo "== fuzzing $name for ${seconds}s"
  # -timeout: one input running 60 s is a hang; -rss_limit_mb: one using 4 GiB is a finding.
  if ! "build-asan/tests/fuzz/${name}_fuzz" -max_total_time="$seconds" -max_len=65536 \
      -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build-asan/artifacts/ \
      "$corpus" "${seeds[@]}" 2>"build-asan/$name.log"; then
    echo "FINDING in $name: see build-asan/$name.log and build-asan/artifacts/"
    tail -40 "build-asan/$name.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb|Done" "build-asan/$name.log" | tail -3
  fi
done
exit $status
