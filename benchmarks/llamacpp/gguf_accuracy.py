#!/usr/bin/env python3
"""infer beside llama.cpp on the same GGUF files: how far each is from the float64 reference of
exactly the weights a file holds (GgufModelTest's measure), in one run.

For each fixture (llama, qwen3, gemma3) and each type (F32, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 on the
fixture; Q4_K, Q5_K, Q6_K on its K-sized random model, as the test makes it), the file is written
by tests/gguf/write_gguf.py with a stand-in vocabulary of the fixture's size (the fixtures have
no tokenizer, and llama.cpp will not load a model without one), its dequantized weights go to
tests/gguf/reference_f64.py, and both engines give logits for:
- the fixture's reference positions (its logits_input_ids): worst row error, max over positions
  of max |l - ref| / max |ref|;
- GgufModelTest's 16 sequences of 64 ids (its LCG, seed 53): top-1 agreement over 1024 positions.
infer: `infer logits --model FILE.gguf --matmul-precision f32` (every type kept as the file
gives it; a quantized MatMul rounds its activations to int8 per 32, whatever the precision), and
again with `--quantized-activations int8x2` (a second int8 plane for what the first leaves);
llama.cpp: gguf_logits.cc built against node-llama-cpp's prebuilt libllama
(benchmarks/llamacpp/setup.sh), f32 KV cache, no flash attention. A float file must agree at
top-1 1.000 on both sides, which checks the harness.
Beside them, two engines that exist only in numpy: reference_f64.py with the input of every
weight product rounded (--round-activations) to int8 per 32 channels (the scheme both engines
use) or to bf16, float64 otherwise; their top-1 over the same 1024 positions says how much of
an engine's disagreement the activation rounding alone makes.

Usage: /usr/bin/python3 benchmarks/llamacpp/gguf_accuracy.py [--threads 2]
Writes benchmarks/reports/gguf_accuracy-<UTC stamp>.json and prints a table.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "gguf"), os.path.join(ROOT, "benchmarks")]
import write_gguf  # noqa: E402
from run_sampling_bench import cpu_flags, cpu_name  # noqa: E402

LLAMACPP = os.path.join(ROOT, ".cache", "llamacpp", "node_modules")
BINS = os.path.join(LLAMACPP, "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
BUNDLE = os.path.join(LLAMACPP, "node-llama-cpp", "llama", "gitRelease.bundle")
FIXTURE_TYPES = ["F32", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]
K_TYPES = ["Q4_K", "Q5_K", "Q6_K"]


def stand_in_vocabulary(_tokenizer_dir, vocab_size):
    """A SentencePiece-style vocabulary of the model's size: <unk> <s> </s>, the 256 byte pieces
    (llama.cpp looks up the newline byte), then plain pieces. Only ids are used here."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581t{i}" for i in range(vocab_size - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (vocab_size - 259)
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": [float(-i) for i in range(vocab_size)],
            "tokenizer.ggml.token_type": types}


def many_sequences():
    """GgufModelTest's ManySequences: 16 x 64 ids below 512 from its LCG, seed 53."""
    state, sequences = 53, []
    for _ in range(16):
        ids = []
        for _ in range(64):
            state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
            ids.append((state >> 33) % 512)
        sequences.append(ids)
    return sequences


def build_llamacpp_logits(work):
    headers = os.path.join(ROOT, ".cache", "llamacpp-src")
    if not os.path.isfile(os.path.join(headers, "include", "llama.h")):
        subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "-q", BUNDLE, headers],
                       check=True)
    binary = os.path.join(work, "gguf_logits")
    libs = [os.path.join(BINS, name) for name in sorted(os.listdir(BINS))
            if name.startswith(("libllama.", "libggml.", "libggml-base"))]
    subprocess.run(["g++", "-O2", "-std=c++17", os.path.join(os.path.dirname(__file__),
                    "gguf_logits.cc"), "-I", os.path.join(headers, "include"), "-I",
                    os.path.join(headers, "ggml", "include"), *libs, f"-Wl,-rpath,{BINS}", "-o",
                    binary], check=True)
    return binary


def write_ids(path, sequences):
    with open(path, "w") as f:
        for ids in sequences:
            f.write(" ".join(map(str, ids)) + "\n")


def infer_logits(infer, gguf, sequences, out, threads, activations="int8"):
    rows = []
    for ids in sequences:
        subprocess.run([infer, "logits", "--model", gguf, "--prompt-ids", ",".join(map(str, ids)),
                        "--out", out, "--matmul-precision", "f32", "--threads", str(threads),
                        "--quantized-activations", activations],
                       check=True, capture_output=True)
        rows.append(np.fromfile(out, dtype=np.float32))
    return np.concatenate(rows)


def reference_logits(weights_dir, ids_file, out, rounding=None):
    """reference_f64.py's logits of the checkpoint at weights_dir for each line of ids_file."""
    command = ["/usr/bin/python3", os.path.join(ROOT, "tests", "gguf", "reference_f64.py"),
               weights_dir, out, "--ids-file", ids_file]
    if rounding:
        command += ["--round-activations", rounding]
    subprocess.run(command, check=True, capture_output=True)
    return np.fromfile(out, dtype=np.float32)


def measure(logits, reference, vocab):
    got, ref = logits.reshape(-1, vocab), reference.reshape(-1, vocab)
    return (float(np.max(np.abs(got - ref).max(1) / np.abs(ref).max(1))),
            float(np.mean(got.argmax(1) == ref.argmax(1))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not os.path.isdir(BINS):
        sys.exit("llama.cpp is not installed: benchmarks/llamacpp/setup.sh")
    infer = os.path.join(ROOT, "build", "infer")
    write_gguf.tokenizer_metadata = stand_in_vocabulary
    work = tempfile.mkdtemp(prefix="gguf-accuracy-")
    llamacpp = build_llamacpp_logits(work)
    many_ids = os.path.join(work, "many.ids")
    write_ids(many_ids, many_sequences())
    results = []
    for arch in ("llama", "qwen3", "gemma3"):
        fixture = os.path.join(ROOT, "tests", "fixtures", "models", arch)
        with open(os.path.join(fixture, "reference.json")) as f:
            fixture_ids = json.load(f)["logits_input_ids"]
        fixture_ids_file = os.path.join(work, f"{arch}.ids")
        write_ids(fixture_ids_file, [fixture_ids])
        k_model = os.path.join(work, f"k_{arch}")
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "gguf", "random_model.py"),
                        os.path.join(fixture, "model"), k_model, "--hidden", "256",
                        "--intermediate", "512", "--layers", "2", "--head-dim", "64"],
                       check=True, capture_output=True)
        for kind in FIXTURE_TYPES + K_TYPES:
            source = k_model if kind in K_TYPES else os.path.join(fixture, "model")
            with open(os.path.join(source, "config.json")) as f:
                vocab = json.load(f)["vocab_size"]
            tag = os.path.join(work, f"{arch}_{kind}")
            write_gguf.convert(source, tag + ".gguf", kind, tag, tokenizer_dir="stand-in")
            row = {"arch": arch, "type": kind, "model": "k-sized" if kind in K_TYPES else "fixture"}
            for name, ids_file, sequences in (("fixture", fixture_ids_file, [fixture_ids]),
                                              ("many", many_ids, many_sequences())):
                reference = reference_logits(tag, ids_file, f"{tag}.{name}.ref")
                subprocess.run([llamacpp, BINS, tag + ".gguf", ids_file, f"{tag}.{name}.lcpp",
                                str(args.threads)], check=True, capture_output=True)
                theirs = measure(np.fromfile(f"{tag}.{name}.lcpp", dtype=np.float32), reference,
                                 vocab)
                ours = measure(infer_logits(infer, tag + ".gguf", sequences, f"{tag}.out",
                                            args.threads), reference, vocab)
                fine = measure(infer_logits(infer, tag + ".gguf", sequences, f"{tag}.out",
                                            args.threads, "int8x2"), reference, vocab)
                if name == "fixture":
                    row.update(infer_worst_row_error=ours[0], llamacpp_worst_row_error=theirs[0],
                               infer_int8x2_worst_row_error=fine[0])
                else:
                    row.update(infer_top1_1024=ours[1], llamacpp_top1_1024=theirs[1],
                               infer_int8x2_top1_1024=fine[1])
                    for rounding in ("int8", "bf16"):
                        rounded = reference_logits(tag, ids_file, f"{tag}.{rounding}.ref",
                                                   rounding)
                        row[f"numpy_{rounding}_activations_top1_1024"] = measure(
                            rounded, reference, vocab)[1]
            results.append(row)
            print(f"{arch:6} {kind:4} ({row['model']:7}) worst row error infer "
                  f"{row['infer_worst_row_error']:.4f} (int8x2 "
                  f"{row['infer_int8x2_worst_row_error']:.5f}) llama.cpp "
                  f"{row['llamacpp_worst_row_error']:.4f} | top-1 over 1024 infer "
                  f"{row['infer_top1_1024']:.3f} (int8x2 {row['infer_int8x2_top1_1024']:.3f}) "
                  f"llama.cpp {row['llamacpp_top1_1024']:.3f} "
                  f"numpy int8 {row['numpy_int8_activations_top1_1024']:.3f} bf16 "
                  f"{row['numpy_bf16_activations_top1_1024']:.3f}", flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    with open(os.path.join(LLAMACPP, "node-llama-cpp", "llama", "llama.cpp.info.json")) as f:
        release = json.load(f)["tag"]
    report = {"benchmark": "gguf_accuracy", "time": stamp, "cpu": cpu_name(),
              "cpu_flags": cpu_flags(), "threads": args.threads,
              "llamacpp": f"node-llama-cpp's prebuilt llama.cpp {release}", "results": results}
    path = os.path.join(ROOT, "benchmarks", "reports", f"gguf_accuracy-{stamp}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print("report:", os.path.relpath(path, ROOT))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
