#!/usr/bin/env bash
# Quantized weights side by side: `infer bench` (pp512, tg128, 2 threads) on real-size dummy
# weights of the three dev configs with --quantization none, int8 and int4, one run per type
# back to back, each beside infer bench's read-bandwidth probe. One JSON report per model and
# type into benchmarks/reports/.
# Usage: benchmarks/run_quant_bench.sh [REPETITIONS]   (run on an idle machine)
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-3}"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
for model in Llama-3.2-1B-Instruct Qwen3-1.7B gemma-3-1b-it; do
  for q in none int8 int4; do
    build/infer bench --model "tests/fixtures/configs/$model" --load-format dummy \
      --quantization "$q" --prompt-tokens 512 --gen-tokens 128 --threads 2 \
      --repetitions "$reps" --report "benchmarks/reports/quant_bench-$model-$q-$stamp.json" \
      2>/dev/null | grep -E "pp512|tg128|isa"
  done
done
