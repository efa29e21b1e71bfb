#!/usr/bin/env python3
"""Writes a real-size GGUF of random weights for llama.cpp, from a dev model folder's
config.json and tokenizer.json: the counterpart of infer's --load-format dummy, so that the two
engines can be timed side by side on the same CPU (speed does not depend on the values).

Types, as llama.cpp's own quantizer lays out these files: bf16 (every matrix BF16), q8_0 (every
matrix Q8_0, the tied embedding/output too), q4_0 (layers Q4_0; the tied embedding, which is
also the output head, Q6_K as llama-quantize makes it, or Q8_0 where rows are not a multiple of
256, its fallback: gemma-3-1b's 1152), q4_k_m (llama-quantize's Q4_K_M: layers Q4_K, attn_v and
ffn_down Q6_K in its use_more_bits layers, the head Q6_K; Q5_0 and Q8_0 its fallbacks for rows
that are not whole 256-blocks), q5_k_m (the same with Q5_K layers; Q5_1 the fallback for
Q5_K). Norms are F32 ones. Quantized blocks hold
random quants with scales that give the weights mean ~0 and standard deviation 1/sqrt(fan-in)
(block_fields), so no f16 field is NaN or inf and activations stay finite. Architectures: llama (Llama-3.2-1B-Instruct), qwen3
(Qwen3-1.7B: q/k norms) and gemma3 (gemma-3-1b-it: q/k norms, post-attention and post-FFN norms,
sliding window 512 on five of six layers, a SentencePiece vocabulary), each tying its output head
to the embedding as these checkpoints do; and qwen3moe (Qwen3-30B-A3B: Qwen3's attention, every
layer a mixture of experts stacked as llama.cpp's converter stacks them, ffn_{gate,up,down}_exps
[experts, rows, cols] in the layers' type (ffn_down_exps taking Q6_K where ffn_down would), the
router ffn_gate_inp F32, an untied output head Q6_K in the K-quant and 4-bit files, and the
expert_count, expert_used_count and expert_feed_forward_length keys).

Qwen3.5 (model_type qwen3_5 / qwen3_5_moe, multimodal configs whose text model is under
text_config; the vision tower and the MTP block are not written): llama.cpp's qwen35 and
qwen35moe. Three of every four layers (full_attention_interval) are Gated DeltaNet: attn_qkv
[hidden -> 2 key_dim + value_dim] (llama-quantize counts it with attn_v, so Q6_K in Q4_K_M's
use_more_bits layers), attn_gate (z), ssm_alpha and ssm_beta [hidden -> value heads] and ssm_out
in the layers' type, ssm_conv1d [kernel, conv_dim], ssm_dt.bias and ssm_a (-exp(A_log):
negative, -1 .. -0.5) F32 as llama.cpp keeps them, ssm_norm [head_v_dim]; the fourth is gated
attention (attn_q [hidden -> 2 heads head_dim]: query and gate; q/k norms). Every layer has
attn_norm and post_attention_norm (the pre-MLP norm), then a dense MLP (Qwen3.5-4B: tied head) or
(Qwen3.5-35B-A3B) routed experts as qwen3moe's plus a shared expert ffn_{gate,up,down}_shexp
(ffn_down_shexp Q6_K where ffn_down would) gated by ffn_gate_inp_shexp [hidden] F32, with an
untied head. Keys: ssm.conv_kernel, ssm.state_size, ssm.group_count, ssm.time_step_rank,
ssm.inner_size, full_attention_interval, rope.dimension_count (head_dim x
partial_rotary_factor), rope.dimension_sections (mrope_section padded to 4, [11, 11, 10, 0]
by default), expert_shared_feed_forward_length.

A folder without tokenizer.json (tests/fixtures/configs/Qwen3.5-*: no tokenizer.json exists here
for their 248320-token vocabulary) gets a placeholder byte-level BPE vocabulary that llama.cpp
loads: GPT-2's 256 byte tokens in their usual order (as Qwen's vocabularies begin), then
[PADn], all normal but the eos token (<|endoftext|>, control), no merges (so text tokenizes to
bytes), pre-tokenizer qwen35 for Qwen3.5 (llama-bpe for llama, qwen2 otherwise); bos is eos
where the config names none. Speed does not depend on the vocabulary's strings.

Usage: make_gguf.py MODEL_DIR {bf16,q8_0,q4_0,q4_k_m,q5_k_m} OUT.gguf
"""
import array
import json
import math
import os
import random
import struct
import sys

GGML = {"f32": 0, "f16": 1, "q4_0": 2, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q4_k": 12, "q5_k": 13,
        "q6_k": 14, "bf16": 30}
FILE_TYPE = {"bf16": 32, "q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q5_k_m": 17}  # llama_ftype
# (elements per block, bytes per block)
BLOCKS = {"q8_0": (32, 34), "q4_0": (32, 18), "q5_0": (32, 22), "q5_1": (32, 24),
          "q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210)}
ALIGN = 32


def gguf_string(text):
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def kv(key, kind, value):
    out = gguf_string(key)
    if kind == "str":
        return out + struct.pack("<I", 8) + gguf_string(value)
    if kind == "u32":
        return out + struct.pack("<II", 4, value)
    if kind == "f32":
        return out + struct.pack("<If", 6, value)
    if kind == "f32s":
        return out + struct.pack("<IIQ", 9, 6, len(value)) + struct.pack(f"<{len(value)}f", *value)
    if kind == "strs":
        return out + struct.pack("<IIQ", 9, 8, len(value)) + b"".join(gguf_string(v) for v in value)
    if kind == "i32s":
        return out + struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value)
    raise ValueError(kind)


def block_fields(kind, columns):
    """The fields every block of `kind` gets in place of random bytes: (offset, bytes). Scales are
    chosen so that the weights have mean ~0 and standard deviation ~1/sqrt(columns), as a trained
    layer's do, so that activations stay finite and a router's choices stay spread over its
    experts on both engines (quants are random bytes, uniform over their levels; Q4_K and Q5_K
    take sc = m = 32 in every sub-block, Q6_K sc = 16)."""
    std = columns ** -0.5
    levels = {"q8_0": 256, "q4_0": 16, "q5_0": 32, "q5_1": 32, "q4_k": 16, "q5_k": 32,
              "q6_k": 64}[kind]
    d = std / math.sqrt((levels * levels - 1) / 12)  # the step of uniform q
    half = struct.pack("<e", d)
    if kind in ("q8_0", "q4_0", "q5_0"):
        return [(0, half)]
    if kind == "q5_1":  # w = d q + m
        return [(0, half), (2, struct.pack("<e", -(levels - 1) / 2 * d))]
    if kind in ("q4_k", "q5_k"):  # w = d sc q - dmin m, with sc = m = 32 (6-bit, packed)
        step = d / 32
        return [(0, struct.pack("<e", step)), (2, struct.pack("<e", (levels - 1) / 2 * step)),
                (4, bytes([160] * 8 + [0] * 4))]
    if kind == "q6_k":  # w = d sc (q - 32), sc = 16
        return [(192, bytes([16] * 16)), (208, struct.pack("<e", d / 16))]
    raise ValueError(kind)


def tensor_bytes(kind, count, columns, name):
    if kind == "f32":
        if name.endswith("ffn_gate_inp.weight"):  # a router: random, so that choices spread
            std = columns ** -0.5
            return array.array("f", (random.uniform(-std, std) * 1.732 for _ in range(count))) \
                .tobytes()
        if name.endswith(".ssm_a"):  # -exp(A_log): a decay, negative
            return array.array("f", (random.uniform(-1.0, -0.5) for _ in range(count))).tobytes()
        return struct.pack("<f", 1.0) * count
    if kind == "bf16":
        # Random bf16 of magnitude <= ~0.03: a random low byte and a high byte 0x3c/0xbc.
        data = bytearray(os.urandom(count * 2))
        data[1::2] = bytes(0x3C | (b & 0x80) for b in data[1::2])
        return bytes(data)
    per_block, size = BLOCKS[kind]
    assert count % per_block == 0, (kind, count)
    blocks = count // per_block
    data = bytearray(os.urandom(blocks * size))
    for at, field in block_fields(kind, columns):
        for i, byte in enumerate(field):
            data[at + i::size] = bytes([byte]) * blocks
    return bytes(data)


def byte_tokens():
    """GPT-2's byte-level alphabet (bytes_to_unicode) in its own order, the printable bytes first:
    the 256 tokens Qwen's vocabularies begin with."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    rest = [b for b in range(256) if b not in printable]
    return [chr(b) for b in printable] + [chr(256 + n) for n in range(len(rest))]


def main():
    model_dir, kind, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    config = json.load(open(os.path.join(model_dir, "config.json")))
    arch = {"llama": "llama", "qwen3": "qwen3", "qwen3_moe": "qwen3moe",
            "gemma3_text": "gemma3", "qwen3_5": "qwen35", "qwen3_5_text": "qwen35",
            "qwen3_5_moe": "qwen35moe", "qwen3_5_moe_text": "qwen35moe"}.get(config["model_type"])
    assert arch, ("make_gguf.py writes llama, qwen3, qwen3moe, gemma3, qwen35 and qwen35moe, not "
                  f"{config['model_type']}")
    config = config.get("text_config", config)  # a multimodal checkpoint: its text model
    tokenizer_path = os.path.join(model_dir, "tokenizer.json")
    tokenizer = json.load(open(tokenizer_path)) if os.path.exists(tokenizer_path) else None
    hybrid = arch in ("qwen35", "qwen35moe")  # Gated DeltaNet layers between attention layers
    experts = config.get("num_experts", 0) if arch in ("qwen3moe", "qwen35moe") else 0
    tied = config.get("tie_word_embeddings", not experts)
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    ff = config.get("intermediate_size", 0)  # none in Qwen3.5-35B-A3B: experts only
    layers = config["num_hidden_layers"]
    vocab = config["vocab_size"]
    rope = config.get("rope_parameters") or {}
    rope_theta = config.get("rope_theta", rope.get("rope_theta", 10000.0))
    interval = config.get("full_attention_interval", 4)
    if hybrid:
        conv_kernel = config["linear_conv_kernel_dim"]
        head_k_dim, head_v_dim = config["linear_key_head_dim"], config["linear_value_head_dim"]
        k_heads, v_heads = config["linear_num_key_heads"], config["linear_num_value_heads"]
        key_dim, value_dim = head_k_dim * k_heads, head_v_dim * v_heads
        rotary = config.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.25))
        sections = (list(rope.get("mrope_section", [11, 11, 10])) + [0, 0, 0, 0])[:4]

    eos = config["eos_token_id"]
    eos = eos[-1] if isinstance(eos, list) else eos
    bos = config.get("bos_token_id")
    if bos is None:
        bos = eos
    if tokenizer is None:
        # A placeholder byte-level vocabulary (see the docstring): bytes, then [PADn].
        tokens = byte_tokens() + [f"[PAD{index}]" for index in range(256, vocab)]
        types = [1] * vocab
        tokens[eos], types[eos] = "<|endoftext|>", 3
    else:
        tokens = [""] * vocab
        types = [1] * vocab
        for token, index in tokenizer["model"]["vocab"].items():
            if index < vocab:
                tokens[index] = token
        for added in tokenizer["added_tokens"]:
            if added["id"] < vocab:
                tokens[added["id"]] = added["content"]
                types[added["id"]] = 3 if added["special"] else 4
        for index, token in enumerate(tokens):
            if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
                types[index] = 6  # a byte-fallback token
            if not token:
                tokens[index] = f"[PAD{index}]"
                types[index] = 5

    embedding = {"bf16": "bf16", "q8_0": "q8_0", "q4_0": "q6_k", "q4_k_m": "q6_k",
                 "q5_k_m": "q6_k"}[kind]

    def typed(base, columns):
        """llama-quantize's fallback where rows are not whole 256-blocks (Gemma's 1152)."""
        if columns % 256 == 0:
            return base
        return {"q6_k": "q8_0", "q4_k": "q5_0", "q5_k": "q5_1"}.get(base, base)

    def more_bits(i):
        """Q4_K_M's and Q5_K_M's layers whose attn_v and ffn_down take Q6_K (llama-quantize's
        use_more_bits)."""
        return i < layers // 8 or i >= 7 * layers // 8 or (i - layers // 8) % 3 == 2

    embedding = typed(embedding, hidden)
    # An untied head: llama-quantize's output type (Q6_K for the 4-bit and K-quant files); the
    # embedding then takes the layers' type.
    output = embedding
    if not tied:
        embedding = typed({"q4_k_m": "q4_k", "q5_k_m": "q5_k"}.get(kind, kind), hidden)

    def matrix(columns, i, name=""):
        if kind not in ("q4_k_m", "q5_k_m"):
            return kind
        base = "q4_k" if kind == "q4_k_m" else "q5_k"
        return typed("q6_k" if name in ("v", "down") and more_bits(i) else base, columns)
    tensors = [("token_embd.weight", [hidden, vocab], embedding),
               ("output_norm.weight", [hidden], "f32")]
    if not tied:
        tensors.append(("output.weight", [hidden, vocab], output))
    moe_ff = config.get("moe_intermediate_size", 0)
    shared_ff = config.get("shared_expert_intermediate_size", 0) if arch == "qwen35moe" else 0
    for i in range(layers):
        p = f"blk.{i}."
        tensors.append((p + "attn_norm.weight", [hidden], "f32"))
        if hybrid and (i + 1) % interval:
            # Gated DeltaNet. attn_qkv is in llama-quantize's attn_v category (its use_more_bits
            # layers: Q6_K in Q4_K_M); ssm_conv1d is never quantized, ssm_a (no .weight) and
            # ssm_dt.bias are F32 as the converter writes them.
            conv_dim = 2 * key_dim + value_dim
            tensors += [(p + "attn_qkv.weight", [hidden, conv_dim], matrix(hidden, i, "v")),
                        (p + "attn_gate.weight", [hidden, value_dim], matrix(hidden, i)),
                        (p + "ssm_conv1d.weight", [conv_kernel, conv_dim], "f32"),
                        (p + "ssm_dt.bias", [v_heads], "f32"),
                        (p + "ssm_a", [v_heads], "f32"),
                        (p + "ssm_beta.weight", [hidden, v_heads], matrix(hidden, i)),
                        (p + "ssm_alpha.weight", [hidden, v_heads], matrix(hidden, i)),
                        (p + "ssm_norm.weight", [head_v_dim], "f32"),
                        (p + "ssm_out.weight", [value_dim, hidden], matrix(value_dim, i))]
        else:
            # Qwen3.5's attention: attn_q holds the query and its output gate, per head.
            q_rows = heads * head_dim * (2 if hybrid else 1)
            tensors += [(p + "attn_q.weight", [hidden, q_rows], matrix(hidden, i)),
                        (p + "attn_k.weight", [hidden, kv_heads * head_dim], matrix(hidden, i)),
                        (p + "attn_v.weight", [hidden, kv_heads * head_dim],
                         matrix(hidden, i, "v")),
                        (p + "attn_output.weight", [heads * head_dim, hidden],
                         matrix(heads * head_dim, i))]
            if arch != "llama":
                tensors += [(p + "attn_q_norm.weight", [head_dim], "f32"),
                            (p + "attn_k_norm.weight", [head_dim], "f32")]
        # The pre-MLP norm: llama.cpp's qwen35 names it post_attention_norm.
        tensors.append((p + ("post_attention_norm.weight" if hybrid else "ffn_norm.weight"),
                        [hidden], "f32"))
        if experts:
            tensors += [(p + "ffn_gate_inp.weight", [hidden, experts], "f32"),
                        (p + "ffn_gate_exps.weight", [hidden, moe_ff, experts], matrix(hidden, i)),
                        (p + "ffn_up_exps.weight", [hidden, moe_ff, experts], matrix(hidden, i)),
                        (p + "ffn_down_exps.weight", [moe_ff, hidden, experts],
                         matrix(moe_ff, i, "down"))]
            if shared_ff:
                tensors += [(p + "ffn_gate_inp_shexp.weight", [hidden], "f32"),
                            (p + "ffn_gate_shexp.weight", [hidden, shared_ff], matrix(hidden, i)),
                            (p + "ffn_up_shexp.weight", [hidden, shared_ff], matrix(hidden, i)),
                            (p + "ffn_down_shexp.weight", [shared_ff, hidden],
                             matrix(shared_ff, i, "down"))]
        else:
            tensors += [(p + "ffn_gate.weight", [hidden, ff], matrix(hidden, i)),
                        (p + "ffn_up.weight", [hidden, ff], matrix(hidden, i)),
                        (p + "ffn_down.weight", [ff, hidden], matrix(ff, i, "down"))]
        if arch == "gemma3":
            tensors += [(p + "post_attention_norm.weight", [hidden], "f32"),
                        (p + "post_ffw_norm.weight", [hidden], "f32")]

    a = arch + "."
    metadata = [
        kv("general.architecture", "str", arch),
        kv("general.name", "str", os.path.basename(os.path.normpath(model_dir)) + " (random)"),
        kv("general.file_type", "u32", FILE_TYPE[kind]),
        kv("general.alignment", "u32", ALIGN),
        kv(a + "block_count", "u32", layers),
        kv(a + "context_length", "u32", min(config["max_position_embeddings"], 8192)),
        kv(a + "embedding_length", "u32", hidden),
        kv(a + "attention.head_count", "u32", heads),
        kv(a + "attention.head_count_kv", "u32", kv_heads),
        kv(a + "attention.key_length", "u32", head_dim),
        kv(a + "attention.value_length", "u32", head_dim),
        kv(a + "rope.dimension_count", "u32",
           int(head_dim * rotary) if hybrid else head_dim),
        kv(a + "rope.freq_base", "f32", float(rope_theta)),
        kv(a + "attention.layer_norm_rms_epsilon", "f32", float(config["rms_norm_eps"])),
        kv(a + "vocab_size", "u32", vocab),
        kv("tokenizer.ggml.tokens", "strs", tokens),
        kv("tokenizer.ggml.token_type", "i32s", types),
        kv("tokenizer.ggml.bos_token_id", "u32", bos),
        kv("tokenizer.ggml.eos_token_id", "u32", eos),
    ]
    if ff:
        metadata.append(kv(a + "feed_forward_length", "u32", ff))
    if experts:
        metadata += [kv(a + "expert_count", "u32", experts),
                     kv(a + "expert_used_count", "u32", config["num_experts_per_tok"]),
                     kv(a + "expert_feed_forward_length", "u32", moe_ff)]
    if shared_ff:
        metadata.append(kv(a + "expert_shared_feed_forward_length", "u32", shared_ff))
    if hybrid:
        metadata += [kv(a + "ssm.conv_kernel", "u32", conv_kernel),
                     kv(a + "ssm.state_size", "u32", head_k_dim),
                     kv(a + "ssm.group_count", "u32", k_heads),
                     kv(a + "ssm.time_step_rank", "u32", v_heads),
                     kv(a + "ssm.inner_size", "u32", value_dim),
                     kv(a + "full_attention_interval", "u32", interval),
                     kv(a + "rope.dimension_sections", "i32s", sections)]
    if arch == "gemma3" and tokenizer is not None:
        # SentencePiece with byte fallback (<0x0A> is the newline), as llama.cpp converts Gemma.
        metadata += [kv("tokenizer.ggml.model", "str", "llama"),
                     kv("tokenizer.ggml.scores", "f32s", [-float(i) for i in range(vocab)])]
    else:
        merges = [m if isinstance(m, str) else " ".join(m)
                  for m in (tokenizer["model"]["merges"] if tokenizer else [])]
        pre = {"llama": "llama-bpe", "qwen35": "qwen35", "qwen35moe": "qwen35"}.get(arch, "qwen2")
        metadata += [kv("tokenizer.ggml.model", "str", "gpt2"),
                     kv("tokenizer.ggml.pre", "str", pre),
                     kv("tokenizer.ggml.merges", "strs", merges)]
    if arch == "gemma3":
        metadata.append(kv(a + "attention.sliding_window", "u32", config["sliding_window"]))

    infos = []
    offset = 0
    sizes = []
    for name, dims, t in tensors:
        count = 1
        for d in dims:
            count *= d
        if t in BLOCKS:
            size = count // BLOCKS[t][0] * BLOCKS[t][1]
        else:
            size = count * (4 if t == "f32" else 2)
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) +
                     struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", GGML[t], offset))
        sizes.append((count, size, t))
        offset += (size + ALIGN - 1) // ALIGN * ALIGN

    with open(out_path, "wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
        for entry in metadata:
            out.write(entry)
        for info in infos:
            out.write(info)
        out.write(b"\0" * (-out.tell() % ALIGN))
        for (name, dims, _), (count, size, t) in zip(tensors, sizes):
            columns = dims[0]
            data = tensor_bytes(t, count, columns, name)
            assert len(data) == size
            out.write(data)
            out.write(b"\0" * (-size % ALIGN))
    print(f"{out_path}: {len(tensors)} tensors, {offset / 1e9:.2f} GB of weights ({kind})")


if __name__ == "__main__":
    main()
