#!/usr/bin/env bash
# The serving soak (tests/integration/soak_test.cc) for longer than the suite's 20 s: mixed load on
# `infer serve` (bursty completions and chats, hang-ups, bad requests), then checks that every
# request was answered once and that RSS, threads and open files did not grow.
# Usage: scripts/soak.sh [SECONDS (default 1800)] [BUILD_DIR (default build)]
# More `infer serve` flags through INFER_SOAK_SERVE_ARGS (split on white space), e.g.
#   INFER_SOAK_SERVE_ARGS='--quantization int8 --speculative-config {"method":"ngram"}'
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-1800}"
build="${2:-build}"
cmake --build "$build" --target serve_integration_test infer >/dev/null
INFER_SOAK_SECONDS="$seconds" "$build/tests/integration/serve_integration_test" \
  --gtest_filter='Soak.*'
