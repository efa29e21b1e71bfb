#!/usr/bin/env python3
"""LoRA adapters' cost beside the base model, in one run (`infer bench` and `infer serve`).

Real-size random weights (--load-format dummy, -q int8 by default) and real-size random PEFT
adapters (tests/lora/make_adapter.py from the model's config.json: rank 16 on all seven
projections, f32 as PEFT keeps adapter weights by default). Rounds alternate, so host noise
falls on all alike:
  base     `infer bench --parallel 1,16` without --lora
  lora     `infer bench --parallel 1 --lora A` (every row adapter A)
  mixed    `infer bench --parallel 16 --lora none,A,B,C,D` (rows take the base and four adapters
           in turn)
The report gives each setting's prefill and decode rates (best and median over rounds) and the
ratios: lora batch-1 decode and prefill over the base's, mixed batch-16 decode over the base's
batch of 16. Then the memory: `infer serve` with 0, 1 and 8 adapters loaded, its VmRSS once it
listens, and what the adapters' files hold.

Usage: benchmarks/run_lora_bench.py [--binary build/infer] [--model models/Llama-3.2-1B-Instruct]
         [-q int8] [--rounds 3] [--rank 16] [--dtype f32] [--prompt-tokens 128] [--gen-tokens 32]
Writes benchmarks/reports/lora_bench-<UTC stamp>.json and prints a table.
"""
import argparse
import datetime
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from run_sampling_bench import cpu_flags, cpu_name  # noqa: E402


def bench(args, extra, parallel):
    command = [args.binary, "bench", "--model", args.model, "--load-format", "dummy",
               "-q", args.quantization, "--threads", "2", "--prompt-tokens", str(args.prompt_tokens),
               "--gen-tokens", str(args.gen_tokens), "--repetitions", "1",
               "--parallel", parallel, "--json"] + extra
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    return {r["parallel"]: (r["prefill_tok_s"], r["decode_tok_s"]) for r in report["results"]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_rss_kib(args, adapters):
    """VmRSS of `infer serve` with `adapters` loaded, once it listens."""
    command = [args.binary, "serve", "--model", args.model, "--load-format", "dummy",
               "-q", args.quantization, "--threads", "2", "--port", str(free_port()),
               "--max-model-len", "1024", "--kv-cache-memory", "256MiB"]
    if adapters:
        command += ["--enable-lora", "--lora-modules"] + [f"a{i}={a}" for i, a in enumerate(adapters)]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        for line in child.stderr:
            if "listening on" in line:
                break
        time.sleep(1)
        status = pathlib.Path(f"/proc/{child.pid}/status").read_text()
        return int(next(l.split()[1] for l in status.splitlines() if l.startswith("VmRSS")))
    finally:
        child.terminate()
        child.wait()


def summary(values):
    return {"best": max(values), "median": statistics.median(values), "samples": values}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=str(ROOT / "build/infer"))
    parser.add_argument("--model", default=str(ROOT / "models/Llama-3.2-1B-Instruct"))
    parser.add_argument("-q", "--quantization", default="int8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--gen-tokens", type=int, default=32)
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="lora-bench-"))
    adapters = []
    for i in range(8):
        adapters.append(str(work / f"adapter{i}"))
        subprocess.run(["/usr/bin/python3", str(ROOT / "tests/lora/make_adapter.py"), args.model,
                        adapters[-1], "--rank", str(args.rank), "--dtype", args.dtype,
                        "--strength", "0", "--seed", str(i)], check=True)
    adapter_bytes = sum(os.path.getsize(pathlib.Path(a) / "adapter_model.safetensors")
                        for a in adapters[:1])
    runs = {"base": [], "lora": [], "mixed": []}
    for round_index in range(args.rounds):
        runs["base"].append(bench(args, [], "1,16"))
        runs["lora"].append(bench(args, ["--lora", adapters[0]], "1"))
        mixed = ["--lora", "none"] + sum((["--lora", a] for a in adapters[:4]), [])
        runs["mixed"].append(bench(args, mixed, "16"))
        print(f"round {round_index + 1}/{args.rounds}: base {runs['base'][-1]}, "
              f"lora {runs['lora'][-1]}, mixed {runs['mixed'][-1]}", file=sys.stderr)
    result = {
        "base_b1_prefill": summary([r[1][0] for r in runs["base"]]),
        "base_b1_decode": summary([r[1][1] for r in runs["base"]]),
        "base_b16_decode": summary([r[16][1] for r in runs["base"]]),
        "lora_b1_prefill": summary([r[1][0] for r in runs["lora"]]),
        "lora_b1_decode": summary([r[1][1] for r in runs["lora"]]),
        "mixed_b16_decode": summary([r[16][1] for r in runs["mixed"]]),
    }
    # Ratios of the same round's runs, then their median (the rounds alternate).
    def ratios(numerator, denominator):
        return [n / d for n, d in zip(numerator, denominator)]
    result["ratio_b1_decode"] = summary(ratios(result["lora_b1_decode"]["samples"],
                                               result["base_b1_decode"]["samples"]))
    result["ratio_b1_prefill"] = summary(ratios(result["lora_b1_prefill"]["samples"],
                                                result["base_b1_prefill"]["samples"]))
    result["ratio_b16_mixed_decode"] = summary(ratios(result["mixed_b16_decode"]["samples"],
                                                      result["base_b16_decode"]["samples"]))
    rss = {str(n): serve_rss_kib(args, adapters[:n]) for n in (0, 1, 8)}
    report = {
        "cpu": cpu_name(), "cpu_flags": cpu_flags(), "model": args.model,
        "quantization": args.quantization, "rank": args.rank, "adapter_dtype": args.dtype,
        "prompt_tokens": args.prompt_tokens, "gen_tokens": args.gen_tokens, "rounds": args.rounds,
        "adapter_file_bytes": adapter_bytes, "serve_rss_kib": rss,
        "rss_per_adapter_kib": {"1": rss["1"] - rss["0"], "8": (rss["8"] - rss["0"]) / 8},
        "timestamp": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), **result,
    }
    stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    out = ROOT / "benchmarks/reports" / f"lora_bench-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"| setting | median tok/s | ratio to the base (median of rounds) |")
    print(f"| --- | --- | --- |")
    print(f"| base b1 prefill / decode | {result['base_b1_prefill']['median']:.1f} / "
          f"{result['base_b1_decode']['median']:.2f} | |")
    print(f"| lora b1 prefill | {result['lora_b1_prefill']['median']:.1f} | "
          f"{result['ratio_b1_prefill']['median']:.3f} |")
    print(f"| lora b1 decode | {result['lora_b1_decode']['median']:.2f} | "
          f"{result['ratio_b1_decode']['median']:.3f} |")
    print(f"| base b16 decode | {result['base_b16_decode']['median']:.1f} | |")
    print(f"| mixed b16 decode (base + 4 adapters) | {result['mixed_b16_decode']['median']:.1f} | "
          f"{result['ratio_b16_mixed_decode']['median']:.3f} |")
    print(f"serve VmRSS (KiB) with 0 / 1 / 8 adapters: {rss['0']} / {rss['1']} / {rss['8']}; "
          f"one adapter's file {adapter_bytes / 1024:.0f} KiB")
    print(f"report: {out}")


if __name__ == "__main__":
    main()
