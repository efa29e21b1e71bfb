#!/usr/bin/env bash
# infer beside llama.cpp on the same CPU, in one run: real-size random weights of the three dev
# configs for both (infer: --load-format dummy; llama.cpp: a GGUF of random weights from
# benchmarks/llamacpp/make_gguf.py), pp512 and tg128 at 2 threads, for bf16 / int8 vs Q8_0 /
# int4 vs Q4_0. The engines alternate per repetition (one repetition each, the first one
# swapping every time), so a slow stretch of the shared host lands on both sides; each side's
# figures are the mean over the repetitions. tg128 is decode from an empty context on both
# sides, as llama-bench defines it (llama.cpp: one prompt token, then 128 decoded; infer: the
# pp1 run of `infer bench`, whose tgN follows an N-token prompt); infer's tg128 after the
# 512-token prompt is kept beside it (tg128 @ d512). Writes
# benchmarks/reports/llamacpp_compare-*.json and prints a table with the ratios.
# Usage: [PAIRS="none:bf16 int8:q8_0 int4:q4_0"] benchmarks/run_llamacpp_compare.sh
#          [REPETITIONS [MODEL_DIR...]]
#   (idle machine; ~10 GB of GGUFs in .cache/gguf; default: the three models/ folders)
#   A MODEL_DIR may hold a config.json only, as tests/fixtures/configs/Qwen3.5-4B and
#   Qwen3.5-35B-A3B do (Hugging Face multimodal configs, the text model under text_config):
#   infer's dummy weights need no tokenizer, and make_gguf.py then writes a placeholder
#   vocabulary (llama.cpp's qwen35 / qwen35moe). Mind the sizes: Qwen3.5-4B's q8_0 GGUF is
#   4.5 GB; Qwen3.5-35B-A3B's about 20 GB in q4_0, 37 GB in q8_0, 69 GB in bf16.
#   PAIRS: infer's --quantization and llama.cpp's GGUF type per row (make_gguf.py's types:
#   bf16, q8_0, q4_0, q4_k_m, q5_k_m), e.g. "int4:q4_0 int4k:q4_0 int4k:q4_k_m". infer's "none"
#   keeps bf16 weights and multiplies in f32 (its default --matmul-precision); "bf16" multiplies in
#   bf16 (--matmul-precision bf16: activations rounded to bf16, as llama.cpp's BF16 does).
#   A GGUF type in several rows (or an infer type) is run once per repetition. An infer type may name its output head's
#   type after a slash (--lm-head-quantization): "int4k/int6:q4_0" (llama.cpp's 4-bit files keep
#   a Q6_K head).
#   FORCE_ISA=avx2|avxvnni: both engines on that narrower ISA, to measure such a CPU on a wider
#   one: infer under INFER_FORCE_ISA, llama.cpp with only its matching prebuilt CPU variant
#   (haswell: AVX2, FMA, F16C, BMI2; alderlake: those and AVX-VNNI), from a hard-linked copy of
#   the install that holds no other variant (.cache/llamacpp-VARIANT).
#   GGUF=1: infer also runs the very GGUF files llama.cpp runs (`infer bench --model FILE.gguf`,
#   their blocks used as given: Q8_0 as int8, Q4_0 as int4, Q4_K as int4k, Q5_0 as int8, Q5_1 as
#   int5, Q5_K as int5k, Q6_K as int6k), beside its own --quantization of the dummy weights; the table
#   gains those columns and their ratios.
#   IK_LLAMA_BENCH=PATH: ik_llama.cpp's llama-bench too (benchmarks/llamacpp/build_ik_llama.sh
#   builds it, for FORCE_ISA's flags), on the same GGUFs with its run-time repacking (-rtr 1:
#   Q8_0 to Q8_0_R8 and so on) and its defaults otherwise; the three engines then take turns
#   per repetition, the first one rotating.
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-2}"
shift || true
models=("$@")
((${#models[@]})) || models=(models/Llama-3.2-1B-Instruct models/Qwen3-1.7B models/gemma-3-1b-it)
threads=2
bash benchmarks/llamacpp/setup.sh >/dev/null
export NODE_LLAMA_CPP_DIR="$PWD/.cache/llamacpp/node_modules/node-llama-cpp"
force_isa="${FORCE_ISA:-}"
if [[ -n "$force_isa" ]]; then
  declare -A variant_of=([avx2]=haswell [avxvnni]=alderlake)
  variant="${variant_of[$force_isa]:-}"
  [[ -n "$variant" ]] || { echo "FORCE_ISA: avx2 or avxvnni, not '$force_isa'" >&2; exit 2; }
  export INFER_FORCE_ISA="$force_isa"
  copy=".cache/llamacpp-$variant"
  if [[ ! -d "$copy" ]]; then
    cp -al .cache/llamacpp "$copy.tmp"
    find "$copy.tmp" -name 'libggml-cpu-*.so' ! -name "libggml-cpu-$variant.so" -delete
    mv "$copy.tmp" "$copy"
  fi
  export NODE_LLAMA_CPP_DIR="$PWD/$copy/node_modules/node-llama-cpp"
fi
mkdir -p .cache/gguf
stamp=$(date -u +%Y%m%dT%H%M%SZ)
work=.cache/llamacpp_compare-$stamp  # kept: a failure late in the run loses nothing
mkdir -p "$work"
read -r -a pairs <<<"${PAIRS:-none:bf16 int8:q8_0 int4:q4_0}"
ik_bench="${IK_LLAMA_BENCH:-}"
engines=(llamacpp infer)
[[ "${GGUF:-0}" == 1 ]] && engines+=(infer_gguf)
if [[ -n "$ik_bench" ]]; then
  [[ -x "$ik_bench" ]] || { echo "IK_LLAMA_BENCH: no executable at '$ik_bench'" >&2; exit 2; }
  engines+=(ik_llama)
fi
declare -A gguf_name=([Llama-3.2-1B-Instruct]=Llama-3.2-1B [Qwen3-1.7B]=Qwen3-1.7B
  [gemma-3-1b-it]=gemma-3-1b)
# One repetition of each engine for $model / $name, type $q, repetition $r.
run_llamacpp() {
  local out="$work/llamacpp-$name-$type-$r.json"
  [[ -s "$out" ]] || node benchmarks/llamacpp/bench.mjs "$gguf" "$threads" 512 128 1 >"$out"
}
run_ik_llama() {
  local out="$work/ik_llama-$name-$type-$r.json"
  [[ -s "$out" ]] || "$ik_bench" -m "$gguf" -t "$threads" -p 512 -n 128 -r 1 -rtr 1 -o json \
    >"$out" 2>"$work/ik_llama-$name-$type-$r.log"
}
run_infer() {
  local out="$work/infer-$name-${q//\//_}-$r.json" head=auto weights=${q%%/*} precision=f32
  [[ $q == */* ]] && head=${q#*/}
  # "bf16": bf16 weights multiplied in bf16 (activations rounded), as llama.cpp's BF16 files;
  # "none": the same weights in f32 (infer's default precision).
  [[ $weights == bf16 ]] && weights=none precision=bf16
  [[ -s "$out" ]] || build/infer bench --model "$model" --load-format dummy \
    --quantization "$weights" --matmul-precision "$precision" \
    --lm-head-quantization "$head" --prompt-tokens 512,1 \
    --gen-tokens 128 --threads "$threads" --repetitions 1 --report "$out" >/dev/null 2>&1
}
run_infer_gguf() {
  local out="$work/infer_gguf-$name-$type-$r.json" precision=f32
  [[ $type == bf16 ]] && precision=bf16  # as the "bf16" infer rows and llama.cpp's BF16
  [[ -s "$out" ]] || build/infer bench --model "$gguf" --matmul-precision "$precision" \
    --prompt-tokens 512,1 --gen-tokens 128 --threads "$threads" --repetitions 1 \
    --report "$out" >/dev/null 2>"$work/infer_gguf-$name-$type-$r.log"
}
for model in "${models[@]}"; do
  name=$(basename "$model")
  for pair in "${pairs[@]}"; do
    q=${pair%%:*}
    type=${pair#*:}
    gguf=".cache/gguf/${gguf_name[$name]:-$name}-$type.gguf"
    [[ -s "$gguf" ]] || python3 benchmarks/llamacpp/make_gguf.py "$model" "$type" "$gguf" >/dev/null
    for ((r = 1; r <= reps; r++)); do
      for ((e = 0; e < ${#engines[@]}; e++)); do
        "run_${engines[(e + r - 1) % ${#engines[@]}]}"
      done
    done
  done
done
GGUF="${GGUF:-0}" FORCE_ISA="$force_isa" IK_LLAMA_BENCH="$ik_bench" python3 - "$work" "benchmarks/reports/llamacpp_compare-$stamp.json" \
  "$reps" "${pairs[*]}" "${models[@]}" <<'PY'
import json, os, subprocess, sys
work, report, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
force_isa = os.environ.get("FORCE_ISA") or None
pairs = [tuple(pair.split(":", 1)) for pair in sys.argv[4].split()]
models = [os.path.basename(m) for m in sys.argv[5:]]
ik = os.environ.get("IK_LLAMA_BENCH") or None
gguf_mode = os.environ.get("GGUF") == "1"
# build_ik_llama.sh leaves the source's commit beside the build (llama-bench's own build_commit
# would name the repository the build folder sits in).
ik_commit_file = ik and os.path.join(os.path.dirname(ik), "../../SOURCE_COMMIT")
ik_source = open(ik_commit_file).read().strip() if ik and os.path.exists(ik_commit_file) else "?"


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def load(engine, m, q):
    """The repetitions' reports of one engine, model and type, and their mean figures."""
    runs = []
    for r in range(1, reps + 1):
        text = open(f"{work}/{engine}-{m}-{q.replace('/', '_')}-{r}.json").read().strip()
        if engine == "llamacpp":
            runs.append(json.loads(text.splitlines()[-1]))
            continue
        if engine == "ik_llama":  # llama-bench -o json: one entry per test (pp512, tg128)
            tests = json.loads(text)
            pp = next(t for t in tests if t["n_prompt"] == 512 and t["n_gen"] == 0)
            tg = next(t for t in tests if t["n_prompt"] == 0 and t["n_gen"] == 128)
            runs.append({"pp_tok_s": pp["avg_ts"], "tg_tok_s": tg["avg_ts"],
                         "build": f"ik_llama.cpp {ik_source} llama-bench -rtr 1",
                         "flash_attn": pp.get("flash_attn")})
            continue
        run = json.loads(text)  # infer and infer_gguf: infer bench's report
        by_prompt = {result["prompt_tokens"]: result for result in run["results"]}
        # Prefill from pp512; decode from the empty context (pp1), as llama.cpp's tg128.
        run.update(prefill_tok_s=by_prompt[512]["prefill_tok_s"],
                   decode_tok_s=by_prompt[1]["decode_tok_s"],
                   decode_fraction_of_ceiling=by_prompt[1]["decode_fraction_of_ceiling"],
                   decode_depth512_tok_s=by_prompt[512]["decode_tok_s"])
        runs.append(run)
    merged = dict(runs[0])
    for key in ("pp_tok_s", "tg_tok_s", "prefill_tok_s", "decode_tok_s", "read_bandwidth_gb_s",
                "decode_fraction_of_ceiling", "decode_depth512_tok_s"):
        if key in merged:
            merged[key] = mean([run.get(key) for run in runs])
            merged[key + "_runs"] = [run.get(key) for run in runs]
    return merged


cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model_name = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in cpu.splitlines() if l.startswith("Flags")), [])
rows = []
print(f"CPU: {model_name} ({' '.join(f for f in flags if f.startswith(('avx512', 'amx', 'avx_vnni')))})"
      + (f"; both engines forced to {force_isa}" if force_isa else ""))
print("| model | infer type | llama.cpp type | pp512 infer | pp512 llama.cpp | ratio | tg128 infer | tg128 llama.cpp | ratio | infer % of probe ceiling | infer tg128 @ d512 |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for m, q, t in [(m, q, t) for m in models
                for q, t in pairs]:
    mine, theirs = load("infer", m, q), load("llamacpp", m, t)
    row = {"model": m, "infer_quantization": q, "llamacpp_type": t,
           "infer_pp512_tok_s": mine["prefill_tok_s"], "llamacpp_pp512_tok_s": theirs["pp_tok_s"],
           "infer_tg128_tok_s": mine["decode_tok_s"], "llamacpp_tg128_tok_s": theirs["tg_tok_s"],
           "infer_decode_fraction_of_ceiling": mine.get("decode_fraction_of_ceiling"),
           "infer_tg128_depth512_tok_s": mine["decode_depth512_tok_s"],
           "llamacpp_backend": theirs.get("backend"), "llamacpp_system_info": theirs.get("system_info"),
           "read_bandwidth_gb_s": mine.get("read_bandwidth_gb_s"), "isa": mine.get("isa"),
           "runs": {"infer_pp512": mine["prefill_tok_s_runs"], "llamacpp_pp512": theirs["pp_tok_s_runs"],
                    "infer_tg128": mine["decode_tok_s_runs"], "llamacpp_tg128": theirs["tg_tok_s_runs"],
                    "infer_tg128_depth512": mine["decode_depth512_tok_s_runs"],
                    "read_bandwidth_gb_s": mine.get("read_bandwidth_gb_s_runs")}}
    row["pp_ratio"] = row["infer_pp512_tok_s"] / row["llamacpp_pp512_tok_s"]
    row["tg_ratio"] = row["infer_tg128_tok_s"] / row["llamacpp_tg128_tok_s"]
    if ik:
        fork = load("ik_llama", m, t)
        row.update(ik_llama_pp512_tok_s=fork["pp_tok_s"], ik_llama_tg128_tok_s=fork["tg_tok_s"],
                   ik_llama_build=fork["build"], ik_llama_flash_attn=fork["flash_attn"],
                   pp_ratio_to_ik_llama=row["infer_pp512_tok_s"] / fork["pp_tok_s"],
                   tg_ratio_to_ik_llama=row["infer_tg128_tok_s"] / fork["tg_tok_s"],
                   ik_llama_over_llamacpp_pp=fork["pp_tok_s"] / row["llamacpp_pp512_tok_s"],
                   ik_llama_over_llamacpp_tg=fork["tg_tok_s"] / row["llamacpp_tg128_tok_s"])
        row["runs"].update(ik_llama_pp512=fork["pp_tok_s_runs"], ik_llama_tg128=fork["tg_tok_s_runs"])
    if gguf_mode:
        file = load("infer_gguf", m, t)
        row.update(infer_gguf_pp512_tok_s=file["prefill_tok_s"],
                   infer_gguf_tg128_tok_s=file["decode_tok_s"],
                   infer_gguf_weight_bytes=file.get("weight_bytes"),
                   gguf_over_own_pp=file["prefill_tok_s"] / row["infer_pp512_tok_s"],
                   gguf_over_own_tg=file["decode_tok_s"] / row["infer_tg128_tok_s"],
                   gguf_over_llamacpp_pp=file["prefill_tok_s"] / row["llamacpp_pp512_tok_s"],
                   gguf_over_llamacpp_tg=file["decode_tok_s"] / row["llamacpp_tg128_tok_s"])
        row["runs"].update(infer_gguf_pp512=file["prefill_tok_s_runs"],
                           infer_gguf_tg128=file["decode_tok_s_runs"])
    rows.append(row)
    print(f"| {m} | {q} | {t} | {row['infer_pp512_tok_s']:.1f} | {row['llamacpp_pp512_tok_s']:.1f} | "
          f"{row['pp_ratio']:.2f}x | {row['infer_tg128_tok_s']:.1f} | {row['llamacpp_tg128_tok_s']:.1f} | "
          f"{row['tg_ratio']:.2f}x | {100 * (row['infer_decode_fraction_of_ceiling'] or 0):.0f}% | "
          f"{row['infer_tg128_depth512_tok_s']:.1f} |")
if ik:
    print()
    print("| model | infer type | GGUF type | pp512 ik_llama.cpp | ik / llama.cpp | infer / ik | tg128 ik_llama.cpp | ik / llama.cpp | infer / ik |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['model']} | {row['infer_quantization']} | {row['llamacpp_type']} | "
              f"{row['ik_llama_pp512_tok_s']:.1f} | {row['ik_llama_over_llamacpp_pp']:.2f}x | "
              f"{row['pp_ratio_to_ik_llama']:.2f}x | {row['ik_llama_tg128_tok_s']:.1f} | "
              f"{row['ik_llama_over_llamacpp_tg']:.2f}x | {row['tg_ratio_to_ik_llama']:.2f}x |")
if gguf_mode:
    print()
    print("| model | GGUF type | infer own type | pp512 infer on the file | / infer own | / llama.cpp | tg128 infer on the file | / infer own | / llama.cpp |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['model']} | {row['llamacpp_type']} | {row['infer_quantization']} | "
              f"{row['infer_gguf_pp512_tok_s']:.1f} | {row['gguf_over_own_pp']:.2f}x | "
              f"{row['gguf_over_llamacpp_pp']:.2f}x | {row['infer_gguf_tg128_tok_s']:.1f} | "
              f"{row['gguf_over_own_tg']:.2f}x | {row['gguf_over_llamacpp_tg']:.2f}x |")
json.dump({"cpu": model_name, "cpu_flags": [f for f in flags if f.startswith(("avx", "amx", "fma", "f16c"))],
           "force_isa": force_isa, "threads": 2, "repetitions": reps,
           "order": "engines take turns per repetition, the first one rotating each time",
           "ik_llama": ik and f"{ik} ({ik_source})",
           "tg128": "decode of 128 tokens after a 1-token prompt on both sides (llama-bench's tg128); infer_tg128_depth512_tok_s: infer's after the 512-token prompt", "models": "random weights of " + ", ".join(models),
           "llamacpp": "node-llama-cpp 3.22.1 prebuilt CPU build", "rows": rows},
          open(report, "w"), indent=1)
print(f"llama.cpp backend: {rows[0]['llamacpp_backend']}; {rows[0]['llamacpp_system_info']}")
print(f"report: {report}")
PY
