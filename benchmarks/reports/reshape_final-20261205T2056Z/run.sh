#!/bin/bash
# Alternates f00a50f (old) and f37b3bf (new; dd925c9 before a reword): infer bench decode, then bench_serving W3.
cd /work/main
M=models/Llama-3.2-1B-Instruct
out=/tmp/w/perf51; mkdir -p $out
for round in 1 2; do
  for v in old new; do
    /tmp/$v/infer bench --model $M --load-format dummy -q int8 --threads 2 --prompt-tokens 16 --gen-tokens 32 --repetitions 3 --json > $out/bench_${v}_$round.json 2> $out/bench_${v}_$round.err
  done
done
for round in 1 2; do
  for v in old new; do
    /tmp/$v/bench_serving --model $M --load-format dummy --threads 2 --workload W3 --no-baseline > $out/w3_${v}_$round.txt 2>&1
  done
done
echo done > $out/DONE
