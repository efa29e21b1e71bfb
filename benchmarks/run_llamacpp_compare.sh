#!/usr/bin/env bash
# infer beside llama.cpp on the same CPU, in one run: real-size random Llama-3.2-1B weights for
# both (infer: --load-format dummy; llama.cpp: a GGUF of random weights from
# benchmarks/llamacpp/make_gguf.py), pp512 and tg128 at 2 threads, for bf16 / int8 vs Q8_0 /
# int4 vs Q4_0, alternating engines per type. Writes benchmarks/reports/llamacpp_compare-*.json
# and prints a table with the ratios.
# Usage: benchmarks/run_llamacpp_compare.sh [REPETITIONS]   (idle machine; ~2 GB of GGUFs in .cache)
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-2}"
threads=2
model=models/Llama-3.2-1B-Instruct
bash benchmarks/llamacpp/setup.sh >/dev/null
export NODE_LLAMA_CPP_DIR="$PWD/.cache/llamacpp/node_modules/node-llama-cpp"
mkdir -p .cache/gguf
stamp=$(date -u +%Y%m%dT%H%M%SZ)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A gguf_type=([none]=bf16 [int8]=q8_0 [int4]=q4_0)
for q in none int8 int4; do
  type=${gguf_type[$q]}
  gguf=".cache/gguf/Llama-3.2-1B-$type.gguf"
  [[ -s "$gguf" ]] || python3 benchmarks/llamacpp/make_gguf.py "$model" "$type" "$gguf" >/dev/null
  node benchmarks/llamacpp/bench.mjs "$gguf" "$threads" 512 128 "$reps" >"$work/llamacpp-$q.json"
  build/infer bench --model "$model" --load-format dummy --quantization "$q" --prompt-tokens 512 \
    --gen-tokens 128 --threads "$threads" --repetitions "$reps" \
    --report "$work/infer-$q.json" >/dev/null 2>&1
done
python3 - "$work" "benchmarks/reports/llamacpp_compare-$stamp.json" <<'PY'
import json, subprocess, sys
work, report = sys.argv[1], sys.argv[2]
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model_name = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in cpu.splitlines() if l.startswith("Flags")), [])
rows = []
print(f"CPU: {model_name} ({' '.join(f for f in flags if f.startswith(('avx512', 'amx', 'avx_vnni')))})")
print("| infer type | llama.cpp type | pp512 infer | pp512 llama.cpp | ratio | tg128 infer | tg128 llama.cpp | ratio | infer % of probe ceiling |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for q, t in (("none", "bf16"), ("int8", "q8_0"), ("int4", "q4_0")):
    mine = json.load(open(f"{work}/infer-{q}.json"))
    theirs = json.loads(open(f"{work}/llamacpp-{q}.json").read().strip().splitlines()[-1])
    row = {"infer_quantization": q, "llamacpp_type": t,
           "infer_pp512_tok_s": mine["prefill_tok_s"], "llamacpp_pp512_tok_s": theirs["pp_tok_s"],
           "infer_tg128_tok_s": mine["decode_tok_s"], "llamacpp_tg128_tok_s": theirs["tg_tok_s"],
           "infer_decode_fraction_of_ceiling": mine.get("decode_fraction_of_ceiling"),
           "llamacpp_backend": theirs.get("backend"), "llamacpp_system_info": theirs.get("system_info"),
           "read_bandwidth_gb_s": mine.get("read_bandwidth_gb_s"), "isa": mine.get("isa")}
    row["pp_ratio"] = row["infer_pp512_tok_s"] / row["llamacpp_pp512_tok_s"]
    row["tg_ratio"] = row["infer_tg128_tok_s"] / row["llamacpp_tg128_tok_s"]
    rows.append(row)
    print(f"| {q} | {t} | {row['infer_pp512_tok_s']:.1f} | {row['llamacpp_pp512_tok_s']:.1f} | "
          f"{row['pp_ratio']:.2f}x | {row['infer_tg128_tok_s']:.1f} | {row['llamacpp_tg128_tok_s']:.1f} | "
          f"{row['tg_ratio']:.2f}x | {100 * (row['infer_decode_fraction_of_ceiling'] or 0):.0f}% |")
json.dump({"cpu": model_name, "threads": 2, "model": "Llama-3.2-1B-Instruct (random weights)",
           "llamacpp": "node-llama-cpp 3.22.1 prebuilt CPU build", "rows": rows},
          open(report, "w"), indent=1)
print(f"llama.cpp backend: {rows[0]['llamacpp_backend']}; {rows[0]['llamacpp_system_info']}")
print(f"report: {report}")
PY
