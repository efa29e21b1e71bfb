#!/usr/bin/env bash
# Runs `infer bench` (pp128, pp512, tg128 at 1 and 2 threads) on real-size dummy weights of
# the three dev configs and writes one JSON report per model into benchmarks/reports/.
# Usage: benchmarks/run_model_bench.sh [REPETITIONS]   (run on an idle machine)
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-5}"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
for model in Llama-3.2-1B-Instruct Qwen3-1.7B gemma-3-1b-it; do
  build/infer bench --model "tests/fixtures/configs/$model" --load-format dummy \
    --prompt-tokens 128,512 --gen-tokens 128 --threads 1,2 --repetitions "$reps" \
    --report "benchmarks/reports/model_bench-$model-$stamp.json"
done
