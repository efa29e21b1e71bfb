#!/usr/bin/env python3
"""Writes a PEFT LoRA adapter folder with random weights, in PEFT's own format: adapter_config.json
(peft_type LORA, r, lora_alpha, use_rslora, target_modules, bias "none") and
adapter_model.safetensors holding base_model.model.model.layers.L.<self_attn|mlp>.<proj>.lora_A.weight
[r, in] and .lora_B.weight [out, r], as PEFT's save_pretrained writes them. Written from PEFT's
documented format with numpy alone (Debian's python3-numpy); none of infer's code takes part.

Usage: make_adapter.py MODEL_DIR OUT_DIR --rank R [--alpha A] [--dtype f32|bf16|f16] [--rslora]
       [--targets q_proj,v_proj,...] [--seed S] [--no-prefix] [--strength X]
MODEL_DIR holds the base's config.json and model.safetensors. B is drawn so that s B A is about
--strength (default 0.5) times the base weight's spread, which moves the model's greedy choices.
OUT_DIR may also be given --config-only JSON to add to adapter_config.json (tests of refusals).
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gguf"))
from reference_f64 import read_safetensors  # noqa: E402

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def to_dtype(values, dtype):
    """values (float64) as stored: f32, f16, or bf16 rounded to nearest even, and raw bytes."""
    f32 = values.astype(np.float32)
    if dtype == "f32":
        return f32.tobytes(), "F32"
    if dtype == "f16":
        return values.astype(np.float16).tobytes(), "F16"
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded.tobytes(), "BF16"


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        raw, dtype, shape = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--alpha", type=float, default=None)
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    parser.add_argument("--rslora", action="store_true")
    parser.add_argument("--targets", default=",".join(ALL))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-prefix", action="store_true")
    parser.add_argument("--strength", type=float, default=0.5)
    parser.add_argument("--extra-config", default="{}")
    args = parser.parse_args()
    config = json.loads((Path(args.model) / "config.json").read_text())
    weights = read_safetensors(Path(args.model) / "model.safetensors") if args.strength > 0 else {}
    rng = np.random.default_rng(args.seed)
    r = args.rank
    alpha = args.alpha if args.alpha is not None else 2.0 * r
    scale = alpha / (np.sqrt(r) if args.rslora else r)
    targets = args.targets.split(",")
    prefix = "" if args.no_prefix else "base_model.model."
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for target in targets:
            module = f"model.layers.{layer}.{'mlp' if target in ALL[4:] else 'self_attn'}.{target}"
            base = weights.get(module + ".weight")
            if base is not None:
                out_dim, in_dim = base.shape
                spread = float(np.std(base))
            else:  # --strength 0 (speed work): shapes from the config alone
                h, inter = config["hidden_size"], config["intermediate_size"]
                heads = config["num_attention_heads"]
                hd = config.get("head_dim") or h // heads
                q, kv = heads * hd, config.get("num_key_value_heads", heads) * hd
                out_dim, in_dim = {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h),
                                   "o_proj": (h, q), "gate_proj": (inter, h), "up_proj": (inter, h),
                                   "down_proj": (h, inter)}[target]
                spread = 0.02
            a = rng.uniform(-1, 1, (r, in_dim)) / np.sqrt(in_dim / 3)
            # s B A's entries: about scale * sqrt(r) * std(A) * std(B), std(A) = 1 / sqrt(in).
            b_std = max(args.strength, 0.05) * spread * np.sqrt(in_dim) / (scale * np.sqrt(r))
            b = rng.uniform(-1, 1, (out_dim, r)) * b_std * np.sqrt(3)
            for kind, values in (("lora_A", a), ("lora_B", b)):
                raw, dtype = to_dtype(values, args.dtype)
                tensors[f"{prefix}{module}.{kind}.weight"] = (raw, dtype, values.shape)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "adapter_model.safetensors", tensors)
    adapter_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha,
        "use_rslora": args.rslora, "use_dora": False, "target_modules": targets,
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "modules_to_save": None,
        "rank_pattern": {}, "alpha_pattern": {}, "base_model_name_or_path": str(args.model),
        "inference_mode": True,
    }
    adapter_config.update(json.loads(args.extra_config))
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))


if __name__ == "__main__":
    main()
