#!/usr/bin/env bash
# Runs every libFuzzer target for N seconds (default 60) over the kept corpus
# (tests/fuzz/corpus/<target>, read-only) plus a working corpus in build-asan/corpus/<target>.
# The targets live in the ASan + UBSan build that scripts/sanitize.sh makes (built here if
# missing), one per core at a time. Usage: scripts/fuzz.sh [SECONDS [TARGET...]]. Exits non-zero
# on any finding; the input that found it is in build-asan/artifacts/.
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
# One target per core at a time: each is a single process, so N seconds each on 2 cores takes
# about N x targets / 2 of wall time.
fuzz_one() {
  local name="$1" corpus="build-asan/corpus/$1" seeds=()
  mkdir -p "$corpus"
  [ -d "tests/fuzz/corpus/$name" ] && seeds+=("tests/fuzz/corpus/$name")
  # -timeout: one input running 60 s is a hang; -rss_limit_mb: one using 4 GiB is a finding.
  "build-asan/tests/fuzz/${name}_fuzz" -max_total_time="$seconds" -max_len=65536 \
    -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build-asan/artifacts/ \
    "$corpus" "${seeds[@]}" 2>"build-asan/$name.log"
}
jobs_max="$(nproc)"
declare -A pids=()
status=0
report() {  # report NAME PID: wait for one target and print its result
  if wait "$2"; then
    echo "== $1: $(grep -E "^Done" "build-asan/$1.log" | tail -1)" \
      "peak RSS $(grep -oE "peak_rss_mb: +[0-9]+" "build-asan/$1.log" | grep -oE "[0-9]+$") MB"
  else
    echo "FINDING in $1: see build-asan/$1.log and build-asan/artifacts/"
    tail -40 "build-asan/$1.log"
    status=1
  fi
}
running=()
for name in "${targets[@]}"; do
  if ((${#running[@]} >= jobs_max)); then
    report "${running[0]}" "${pids[${running[0]}]}"
    running=("${running[@]:1}")
  fi
  echo "== fuzzing $name for ${seconds}s"
  fuzz_one "$name" &
  pids[$name]=$!
  running+=("$name")
done
for name in "${running[@]}"; do report "$name" "${pids[$name]}"; done
exit $status
