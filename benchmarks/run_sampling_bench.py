#!/usr/bin/env python3
"""Decode speed at each model's own sampling settings against greedy decode, in one run.

For every model and every sampling setting, `infer generate` decodes the same prompt on
real-size dummy weights (--load-format dummy), and the decode rate is the number of decode
steps over their summed time (the result JSON's timing.decode_times_s). Settings: greedy
(temperature 0), the model's generation_config.json (what `infer chat` and an API request
without sampling fields use), and temperature 1 with top_p 0.95 and no top-k. Rounds alternate
the settings (and, with --baseline, a second binary) so that host noise falls on all alike;
the report gives each setting's best and median rate and its ratio to greedy of the same
binary. With --baseline the token ids of every seeded run must equal the baseline's.

Usage: benchmarks/run_sampling_bench.py [--binary build/infer] [--baseline OLD_BINARY]
         [--models Llama-3.2-1B-Instruct,...] [-q int8] [--rounds 3] [--tokens 64]
Writes benchmarks/reports/sampling_bench-<UTC stamp>.json and prints a table.
"""
import argparse
import datetime
import json
import pathlib
import platform
import statistics
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def cpu_name():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_flags():
    wanted = ["avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8"]
    text = pathlib.Path("/proc/cpuinfo").read_text()
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return [flag for flag in wanted if flag in flags]


def settings_for(model_dir):
    config = json.loads((model_dir / "generation_config.json").read_text())
    defaults = ["--temperature", str(config.get("temperature", 1.0))]
    defaults += ["--top-p", str(config.get("top_p", 1.0)), "--top-k", str(config.get("top_k", 0))]
    return {
        "greedy": ["--temperature", "0"],
        "model defaults": defaults,
        "t1 p0.95": ["--temperature", "1", "--top-p", "0.95", "--top-k", "0"],
    }


def run(binary, model_dir, quantization, tokens, sampling):
    command = [binary, "generate", "--model", str(model_dir), "--load-format", "dummy",
               "-q", quantization, "--threads", "2", "--prompt", "Write a story about a lighthouse.",
               "--max-new-tokens", str(tokens), "--seed", "7", "--json"] + sampling
    result = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    steps = result["timing"]["decode_times_s"]
    return len(steps) / sum(steps), result["token_ids"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=str(ROOT / "build/infer"))
    parser.add_argument("--baseline")
    parser.add_argument("--models", default="Llama-3.2-1B-Instruct,Qwen3-1.7B,gemma-3-1b-it")
    parser.add_argument("-q", "--quantization", default="int8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    binaries = {"new": args.binary}
    if args.baseline:
        binaries["baseline"] = args.baseline
    rates = {}  # (model, setting, binary) -> [tok/s]
    ids = {}
    mismatches = []
    for model in args.models.split(","):
        model_dir = ROOT / "models" / model
        settings = settings_for(model_dir)
        for _ in range(args.rounds):
            for name, sampling in settings.items():
                for label, binary in binaries.items():
                    rate, token_ids = run(binary, model_dir, args.quantization, args.tokens, sampling)
                    rates.setdefault((model, name, label), []).append(rate)
                    previous = ids.setdefault((model, name), token_ids)
                    if previous != token_ids:
                        mismatches.append(f"{model} {name} {label}")
    rows = []
    for (model, name, label), values in rates.items():
        greedy = rates[(model, "greedy", label)]
        rows.append({
            "model": model, "sampling": name, "binary": label,
            "args": settings_for(ROOT / "models" / model)[name],
            "tok_s": values, "best_tok_s": max(values), "median_tok_s": statistics.median(values),
            "best_vs_greedy": max(values) / max(greedy),
            "median_vs_greedy": statistics.median(values) / statistics.median(greedy),
        })
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    report = {"cpu": cpu_name(), "cpu_flags": cpu_flags(), "quantization": args.quantization,
              "tokens": args.tokens, "rounds": args.rounds, "binaries": binaries,
              "token_id_mismatches": mismatches, "rows": rows}
    path = ROOT / "benchmarks" / "reports" / f"sampling_bench-{stamp}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"cpu: {report['cpu']} ({', '.join(report['cpu_flags'])}); -q {args.quantization}")
    print(f"| {'model':<22} | {'sampling':<14} | {'binary':<8} | {'best tok/s':>10} | "
          f"{'median':>7} | {'best/greedy':>11} | {'median/greedy':>13} |")
    for row in rows:
        print(f"| {row['model']:<22} | {row['sampling']:<14} | {row['binary']:<8} | "
              f"{row['best_tok_s']:>10.2f} | {row['median_tok_s']:>7.2f} | "
              f"{row['best_vs_greedy']:>11.3f} | {row['median_vs_greedy']:>13.3f} |")
    print("token ids: " + ("same for every binary" if not mismatches else f"DIFFER: {mismatches}"))
    print(f"report: {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
