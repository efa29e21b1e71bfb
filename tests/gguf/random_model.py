#!/usr/bin/env python3
"""Writes a random Hugging Face checkpoint (config.json + bf16 model.safetensors) shaped like a
fixture but with the sizes given, for GGUF K-quant tests (their blocks need rows of 256 values,
the fixtures have 64). A mixture of experts keeps its expert count and top-k, its experts of
--intermediate, and its last layer dense. Weights ~ N(0, (2.5 / sqrt(fan_in))^2) as the fixtures', norms ~ 1 (Gemma:
offsets ~ 0), rounded to bf16.
Usage: random_model.py FIXTURE_MODEL_DIR OUT_DIR --hidden H --intermediate I --layers N
       [--head-dim D] [--seed S]
"""
import argparse
import json
import struct
from pathlib import Path

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("like")
parser.add_argument("out")
parser.add_argument("--hidden", type=int, required=True)
parser.add_argument("--intermediate", type=int, required=True)
parser.add_argument("--layers", type=int, required=True)
parser.add_argument("--head-dim", type=int)
parser.add_argument("--seed", type=int, default=53)
args = parser.parse_args()
config = json.loads((Path(args.like) / "config.json").read_text())
gemma = config["model_type"] == "gemma3_text"
heads, kv = config["num_attention_heads"], config.get("num_key_value_heads")
head_dim = args.head_dim or config.get("head_dim") or config["hidden_size"] // heads
config.update(hidden_size=args.hidden, intermediate_size=args.intermediate,
              num_hidden_layers=args.layers, head_dim=head_dim)
if gemma:
    config["query_pre_attn_scalar"] = head_dim
experts = config.get("num_experts", 0)
if experts:
    config.update(moe_intermediate_size=args.intermediate, mlp_only_layers=[args.layers - 1],
                  decoder_sparse_step=1)
rng = np.random.default_rng(args.seed)
hidden, inter, vocab = args.hidden, args.intermediate, config["vocab_size"]
shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
for i in range(args.layers):
    p = f"model.layers.{i}."
    shapes.update({p + "input_layernorm.weight": (hidden,),
                   p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
                   p + "self_attn.k_proj.weight": (kv * head_dim, hidden),
                   p + "self_attn.v_proj.weight": (kv * head_dim, hidden),
                   p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
                   p + "post_attention_layernorm.weight": (hidden,)})
    mlps = [p + "mlp."]
    if experts and i != args.layers - 1:
        shapes[p + "mlp.gate.weight"] = (experts, hidden)
        mlps = [f"{p}mlp.experts.{e}." for e in range(experts)]
    for mlp in mlps:
        shapes.update({mlp + "gate_proj.weight": (inter, hidden),
                       mlp + "up_proj.weight": (inter, hidden),
                       mlp + "down_proj.weight": (hidden, inter)})
    if config["model_type"] != "llama":
        shapes[p + "self_attn.q_norm.weight"] = (head_dim,)
        shapes[p + "self_attn.k_norm.weight"] = (head_dim,)
    if gemma:
        shapes[p + "pre_feedforward_layernorm.weight"] = (hidden,)
        shapes[p + "post_feedforward_layernorm.weight"] = (hidden,)
if not config.get("tie_word_embeddings", gemma):
    shapes["lm_head.weight"] = (vocab, hidden)
header, body = {}, bytearray()
for name, shape in shapes.items():
    if len(shape) == 1:
        w = rng.normal(0.0 if gemma else 1.0, 0.1, shape)
    else:
        w = rng.normal(0.0, 2.5 / np.sqrt(shape[1]), shape)
    bits = np.asarray(w, np.float32).view(np.uint32)
    raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    header[name] = {"dtype": "BF16", "shape": list(shape),
                    "data_offsets": [len(body), len(body) + len(raw)]}
    body += raw
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
(out / "config.json").write_text(json.dumps(config, indent=1))
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
(out / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + body)
