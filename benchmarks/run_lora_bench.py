#!/usr/bin/env python3
"""LoRA adapters' cost beside the base model, and their memory, in one run.

Real-size random weights (--load-format dummy, -q int8 by default) and real-size random PEFT
adapters (tests/lora/make_adapter.py from the model's config.json alone: rank 16 on all seven
projections, f32 as PEFT keeps adapter weights by default). Speed: build/benchmarks/lora_bench,
which alternates forward passes with and without adapters in one process (prefill of
--prompt-tokens, decode at that depth, and a batch of 16 whose rows take the base and four
adapters in turn against a base-only batch of 16) and gives the median pass of each. Memory:
`infer serve` with 0, 1 and 8 adapters loaded, its VmRSS once it listens, beside the adapters'
file size.

Usage: benchmarks/run_lora_bench.py [--binary build/infer] [--model models/Llama-3.2-1B-Instruct]
         [-q int8] [--rank 16] [--dtype f32] [--prompt-tokens 128]
Writes benchmarks/reports/lora_bench-<UTC stamp>.json and prints a table.
"""
import argparse
import datetime
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from run_sampling_bench import cpu_flags, cpu_name  # noqa: E402


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=str(ROOT / "build/infer"))
    parser.add_argument("--model", default=str(ROOT / "models/Llama-3.2-1B-Instruct"))
    parser.add_argument("-q", "--quantization", default="int8")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="lora-bench-"))
    adapters = []
    for i in range(8):
        adapters.append(str(work / f"adapter{i}"))
        subprocess.run(["/usr/bin/python3", str(ROOT / "tests/lora/make_adapter.py"), args.model,
                        adapters[-1], "--rank", str(args.rank), "--dtype", args.dtype,
                        "--strength", "0", "--seed", str(i)], check=True)
    adapter_bytes = os.path.getsize(pathlib.Path(adapters[0]) / "adapter_model.safetensors")
    speed_report = work / "speed.json"
    lora_args = sum((["--lora", a] for a in adapters[:4]), [])
    subprocess.run([str(pathlib.Path(args.binary).parent / "benchmarks/lora_bench"), "--model",
                    args.model, "-q", args.quantization, "--threads", "2", "--context",
                    str(args.prompt_tokens), "--report", str(speed_report)] + lora_args,
                   check=True)
    speed = json.loads(speed_report.read_text())
    rss = {str(n): serve_rss_kib(args, adapters[:n]) for n in (0, 1, 8)}
    report = {
        "cpu": cpu_name(), "cpu_flags": cpu_flags(), "model": args.model,
        "quantization": args.quantization, "rank": args.rank, "adapter_dtype": args.dtype,
        "prompt_tokens": args.prompt_tokens, "adapter_file_bytes": adapter_bytes,
        "serve_rss_kib": rss,
        "rss_per_adapter_kib": {"1": rss["1"] - rss["0"], "8": (rss["8"] - rss["0"]) / 8},
        "timestamp": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "speed": speed,
    }
    stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    out = ROOT / "benchmarks/reports" / f"lora_bench-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"serve VmRSS (KiB) with 0 / 1 / 8 adapters: {rss['0']} / {rss['1']} / {rss['8']}; "
          f"per adapter {rss['1'] - rss['0']} / {(rss['8'] - rss['0']) / 8:.0f}; "
          f"one adapter's file {adapter_bytes / 1024:.0f} KiB")
    print(f"report: {out}")


if __name__ == "__main__":
    main()
