#!/usr/bin/env python3
"""A float64 reference of the decoders (Llama 3, Qwen3, Qwen3-MoE, Gemma 3 text, and the text models
of Qwen3.5 and Qwen3.5-MoE: Gated DeltaNet + gated attention), written in numpy
from tests/fixtures/models/HF_SEMANTICS.md alone: none of infer's code takes part. It checks
itself against the fixtures' float64 logits (--self-check) and is then the reference for
weights the fixtures do not cover, such as a GGUF file's dequantized ones.

Usage (Debian's python3-numpy):
  reference_f64.py MODEL_DIR OUT.f32.bin ID [ID ...]   logits for every position, row-major f32
  reference_f64.py MODEL_DIR OUT.f32.bin --ids-file F  the same for each line of ids in F, in order
  reference_f64.py --self-check FIXTURES_MODELS_DIR    each fixture against its logits.f32.bin
  ... --lora ADAPTER_DIR   with a PEFT LoRA adapter merged into the weights in float64 (W + s B A,
                           s = lora_alpha / r, or / sqrt(r) with use_rslora), from PEFT's format alone
  ... --greedy N           OUT gets the N ids greedy decoding appends to the ids (text, one line)
  ... --round-activations bf16|int8
                           the input of every weight product (q/k/v, o, gate/up, down, the head;
                           Qwen3.5's in_proj_qkv/z/b/a and out_proj; not the MoE routers nor the
                           shared-expert gate) rounded first, the rest still float64: bf16 (to
                           nearest even, via f32), or int8 per row and block of 32 channels
                           (d = max|x| / 127, q = x / d to nearest even, x = d q), the scheme
                           llama.cpp's Q8_0 activations and infer's quantized MatMul use. What
                           an engine that rounds its activations so, and is exact otherwise,
                           would give.
MODEL_DIR holds config.json and model.safetensors (F32, F16 or BF16). Qwen3.5 checkpoints
(model_type qwen3_5, qwen3_5_moe) nest the text model's config in text_config and name its tensors
model.language_model.* (a missing one is looked for under model.); the *_text forms are flat, named
model.*. model.visual.* and mtp.* are not read.
"""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np


def read_safetensors(path):
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = memoryview(data)[8 + length:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = body[begin:end]
        if info["dtype"] == "BF16":
            values = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":
            values = np.frombuffer(raw, np.float16)
        elif info["dtype"] == "F32":
            values = np.frombuffer(raw, np.float32)
        else:
            raise ValueError(f"{path}: {name} has dtype {info['dtype']}")
        tensors[name] = values.astype(np.float64).reshape(info["shape"])
    return tensors


def inverse_frequencies(theta, head_dim, scaling):
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "linear":
        inv = inv / scaling["factor"]
    elif kind == "llama3":
        old = scaling["original_max_position_embeddings"]
        low, high, factor = scaling["low_freq_factor"], scaling["high_freq_factor"], scaling["factor"]
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < old / high:
                out.append(f)
            elif wavelen > old / low:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        inv = np.array(out)
    return inv


def rope(x, positions, inv):
    # rotate_half over the first rotary_dim = 2 len(inv) dimensions: i pairs with i + rotary_dim/2;
    # the dimensions past rotary_dim (Qwen3.5's partial rotary) pass unchanged.
    angles = positions[:, None] * inv[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    half = len(inv)
    a, b, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin, rest], axis=-1)


def rms_norm(x, weight, eps, offset):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (offset + weight)


def merge_lora(w, adapter_dir):
    """W += s B A for every lora_A / lora_B pair PEFT saved, named as PEFT names them. Pairs in
    modules off the text path (Qwen3.5's model.visual.*, mtp.*) are left out: their layers.N would
    otherwise be taken for the decoder's."""
    config = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    r = config["r"]
    alpha = config.get("lora_alpha", 8)
    s = alpha / (math.sqrt(r) if config.get("use_rslora") else r)
    tensors = read_safetensors(Path(adapter_dir) / "adapter_model.safetensors")
    for name, a in tensors.items():
        if ".lora_A." not in name or any(part in name for part in (".visual.", "mtp.")):
            continue
        b = tensors[name.replace(".lora_A.", ".lora_B.")]
        module = name[name.index("layers."):name.index(".lora_A.")]
        w["model." + module + ".weight"] = w["model." + module + ".weight"] + s * (b @ a)


def round_bf16(x):
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def round_int8(x):
    rows, k = x.shape
    padded = np.zeros((rows, -(-k // 32) * 32))
    padded[:, :k] = x
    blocks = padded.reshape(rows, -1, 32)
    d = np.abs(blocks).max(axis=2, keepdims=True) / 127
    q = np.rint(np.divide(blocks, d, out=np.zeros_like(blocks), where=d > 0))
    return (q * d).reshape(rows, -1)[:, :k]


ROUNDINGS = {None: lambda x: x, "bf16": round_bf16, "int8": round_int8}


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def mlp_weights(w, prefix):
    return tuple(w[f"{prefix}{name}_proj.weight"] for name in ("gate", "up", "down"))


def gated_mlp(h, weights, gemma, product):
    # down(act(gate h) * up h): act is gelu_tanh for Gemma, SiLU for the others.
    gate_w, up_w, down_w = weights
    gate = product(h, gate_w)
    if gemma:
        gate = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
    else:
        gate = silu(gate)
    return product(gate * product(h, up_w), down_w)


def expert_weights(w, p, e):
    """Expert e's (gate, up, down): per-expert tensors (Qwen3-MoE), or Qwen3.5-MoE's fused
    mlp.experts.gate_up_proj (E, 2I, hidden), gate rows [0, I) and up rows [I, 2I), and
    mlp.experts.down_proj (E, hidden, I), both without a .weight suffix."""
    fused = w.get(p + "mlp.experts.gate_up_proj")
    if fused is None:
        return mlp_weights(w, f"{p}mlp.experts.{e}.")
    half = fused.shape[1] // 2
    return fused[e, :half], fused[e, half:], w[p + "mlp.experts.down_proj"][e]


def experts(h, w, p, config, product):
    """Qwen3-MoE's sparse block (HF_SEMANTICS.md, Qwen3-MoE): softmax over all experts of the
    router's logits (the router is not rounded: engines keep it in float), the top
    num_experts_per_tok (ties to the lower index), renormalised when norm_topk_prob, and the sum
    of the chosen experts' SwiGLU outputs times their weights. Qwen3.5-MoE (its own section):
    always renormalised, plus sigmoid(shared_expert_gate . h) times a SwiGLU shared expert (that
    gate, like the router, not rounded)."""
    router = h @ w[p + "mlp.gate.weight"].T
    probs = np.exp(router - router.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    top_k = config.get("num_experts_per_tok", 8)
    renormalise = config["model_type"].startswith("qwen3_5") or config.get("norm_topk_prob", False)
    out = np.zeros_like(h)
    for row in range(h.shape[0]):
        chosen = np.argsort(-router[row], kind="stable")[:top_k]
        weights = probs[row, chosen]
        if renormalise:
            weights = weights / weights.sum()
        for e, weight in zip(chosen, weights):
            out[row] += weight * gated_mlp(h[row:row + 1], expert_weights(w, p, e), False,
                                           product)[0]
    if p + "mlp.shared_expert_gate.weight" in w:
        share = sigmoid(h @ w[p + "mlp.shared_expert_gate.weight"].T)
        out += share * gated_mlp(h, mlp_weights(w, p + "mlp.shared_expert."), False, product)
    return out


def causal_conv_silu(x, weight):
    """Depthwise causal conv1d, weight (C, 1, K), no bias, then SiLU: out[t] = silu(sum_j
    w[:, j] x[t - (K-1) + j]), the last tap on the current token, zeros before the first."""
    taps = weight[:, 0, :]
    k = taps.shape[1]
    padded = np.concatenate([np.zeros((k - 1, x.shape[1])), x])
    return silu(sum(taps[:, j] * padded[j:j + len(x)] for j in range(k)))


def l2_norm(x):
    # x * rsqrt(sum(x^2) + 1e-6): the eps is added to the sum, not the mean.
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def gated_delta_net(h, w, p, config, eps, product):
    """Qwen3.5's linear-attention mixer (HF_SEMANTICS.md, Gated DeltaNet layers), prefix p =
    ...linear_attn.: flat projections qkv / z / b / a of h, conv + SiLU on qkv only, L2-normed
    q (times dk^-0.5) and k, and the gated delta rule per value head from a zero state."""
    nk = config.get("linear_num_key_heads", 16)
    nv = config.get("linear_num_value_heads", 32)
    dk = config.get("linear_key_head_dim", 128)
    dv = config.get("linear_value_head_dim", 128)
    t = h.shape[0]
    mixed = causal_conv_silu(product(h, w[p + "in_proj_qkv.weight"]), w[p + "conv1d.weight"])
    q = l2_norm(mixed[:, :nk * dk].reshape(t, nk, dk)) * dk ** -0.5
    k = l2_norm(mixed[:, nk * dk:2 * nk * dk].reshape(t, nk, dk))
    v = mixed[:, 2 * nk * dk:].reshape(t, nv, dv)
    z = product(h, w[p + "in_proj_z.weight"]).reshape(t, nv, dv)
    beta = sigmoid(product(h, w[p + "in_proj_b.weight"]))
    # g = log of the per-step decay = -exp(A_log) softplus(a + dt_bias); softplus = log(1 + e^x).
    a = product(h, w[p + "in_proj_a.weight"])
    g = -np.exp(w[p + "A_log"]) * np.logaddexp(0, a + w[p + "dt_bias"])
    out = np.zeros((t, nv, dv))
    for head in range(nv):
        kh = head // (nv // nk)  # value head j reads key head j // (nv / nk)
        state = np.zeros((dk, dv))
        for step in range(t):
            state = np.exp(g[step, head]) * state
            delta = beta[step, head] * (v[step, head] - state.T @ k[step, kh])
            state = state + np.outer(k[step, kh], delta)
            out[step, head] = state.T @ q[step, kh]
    # Gated RMSNorm per value head: plain weight (no 1 +), normalised first, then times silu(z).
    out = rms_norm(out, w[p + "norm.weight"], eps, 0.0) * silu(z)
    return product(out.reshape(t, nv * dv), w[p + "out_proj.weight"])


def text_config(config):
    """(the text model's config, its tensor prefix). Qwen3.5 checkpoints are vision-language ones:
    the keys in text_config, the tensors under model.language_model.; tie_word_embeddings is read
    from text_config, else the top level."""
    if "text_config" not in config:
        return config, "model."
    text = dict(config["text_config"])
    text.setdefault("model_type", config["model_type"] + "_text")
    text.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", False))
    return text, "model.language_model."


def text_weights(w, prefix):
    """The text model's tensors named model.X: prefix + X, else model.X (a dequantized folder may
    hold either); model.visual.* and mtp.* are off the text path and dropped."""
    def skipped(name):
        return name.startswith(("model.visual.", "mtp."))
    out = {n: v for n, v in w.items() if not skipped(n) and not n.startswith(prefix)}
    out.update({"model." + n[len(prefix):]: v for n, v in w.items()
                if not skipped(n) and n.startswith(prefix)})
    return out


def rope_settings(config, head_dim, hybrid):
    """(theta, scaling, rotary_dim) from rope_theta + rope_scaling or v5's rope_parameters. Only
    Qwen3.5 rotates part of the head: rotary_dim = int(head_dim * partial_rotary_factor), the
    factor from rope_parameters, else text_config's top, else 0.25."""
    params = config.get("rope_parameters") or {}
    theta = config.get("rope_theta", params.get("rope_theta", 10000.0))
    scaling = config.get("rope_scaling") or (params if "rope_type" in params else None)
    factor = params.get("partial_rotary_factor", config.get("partial_rotary_factor", 0.25))
    return theta, scaling, int(head_dim * factor) if hybrid else head_dim


def mlp_block(h, w, p, config, gemma, product):
    if p + "mlp.gate.weight" in w:
        return experts(h, w, p, config, product)
    return gated_mlp(h, mlp_weights(w, p + "mlp."), gemma, product)


def logits(model_dir, ids, lora=None, rounding=None):
    def product(h, weight):
        return ROUNDINGS[rounding](h) @ weight.T

    config, prefix = text_config(json.loads((Path(model_dir) / "config.json").read_text()))
    w = text_weights(read_safetensors(Path(model_dir) / "model.safetensors"), prefix)
    if lora:
        merge_lora(w, lora)
    kind = config["model_type"]
    gemma = kind == "gemma3_text"
    hybrid = kind.startswith("qwen3_5")  # Qwen3.5 and Qwen3.5-MoE, any form
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or (256 if hybrid else hidden // heads)
    eps = config.get("rms_norm_eps", 1e-6)
    layers = config["num_hidden_layers"]
    offset = 1.0 if gemma or hybrid else 0.0  # (1 + w) norms, except Qwen3.5's gated one
    ids = np.array(ids)
    t = len(ids)
    positions = np.arange(t, dtype=np.float64)
    x = w["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * math.sqrt(hidden)
        scale = config.get("query_pre_attn_scalar", 256) ** -0.5
        pattern = config.get("sliding_window_pattern", 6)
        types = config.get("layer_types") or [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
        window = config.get("sliding_window", 4096)
    elif hybrid:
        scale = head_dim ** -0.5
        interval = config.get("full_attention_interval", 4)
        types = config.get("layer_types") or [
            "linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers)]
        window = None
    else:
        scale = head_dim ** -0.5
        types = ["full_attention"] * layers
        window = None
    theta, scaling, rotary_dim = rope_settings(config, head_dim, hybrid)
    full_inv = inverse_frequencies(theta, rotary_dim, scaling)
    local_inv = inverse_frequencies(config.get("rope_local_base_freq", 10000.0), head_dim, None)
    query, key = np.arange(t)[:, None], np.arange(t)[None, :]

    def attention(h, p, sliding):
        # Qwen3.5's q_proj holds, per head, head_dim query rows then head_dim gate rows.
        q = product(h, w[p + "self_attn.q_proj.weight"]).reshape(t, heads, -1)
        q, gate = q[..., :head_dim], q[..., head_dim:]
        k = product(h, w[p + "self_attn.k_proj.weight"]).reshape(t, kv_heads, head_dim)
        v = product(h, w[p + "self_attn.v_proj.weight"]).reshape(t, kv_heads, head_dim)
        if p + "self_attn.q_norm.weight" in w:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps, offset)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps, offset)
        inv = local_inv if sliding else full_inv
        q, k = rope(q, positions, inv), rope(k, positions, inv)
        mask = key <= query
        if sliding:
            mask &= key > query - window
        out = np.zeros((t, heads, head_dim))
        for head in range(heads):
            kv = head // (heads // kv_heads)
            scores = (q[:, head] @ k[:, kv].T) * scale
            scores = np.where(mask, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            out[:, head] = (scores / scores.sum(axis=1, keepdims=True)) @ v[:, kv]
        if hybrid:
            out = out * sigmoid(gate)  # the output gate, before o_proj
        return product(out.reshape(t, heads * head_dim), w[p + "self_attn.o_proj.weight"])

    for i in range(layers):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps, offset)
        if types[i] == "linear_attention":
            attn = gated_delta_net(h, w, p + "linear_attn.", config, eps, product)
        else:
            attn = attention(h, p, types[i] == "sliding_attention")
        if gemma:
            attn = rms_norm(attn, w[p + "post_attention_layernorm.weight"], eps, offset)
            x = x + attn
            h = rms_norm(x, w[p + "pre_feedforward_layernorm.weight"], eps, offset)
        else:
            x = x + attn
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps, offset)
        mlp = mlp_block(h, w, p, config, gemma, product)
        if gemma:
            mlp = rms_norm(mlp, w[p + "post_feedforward_layernorm.weight"], eps, offset)
        x = x + mlp
    x = rms_norm(x, w["model.norm.weight"], eps, offset)
    head = w.get("lm_head.weight")
    if head is None or config.get("tie_word_embeddings", gemma):
        head = w["model.embed_tokens.weight"]
    out = product(x, head)
    cap = config.get("final_logit_softcapping")
    if cap:
        out = np.tanh(out / cap) * cap
    return out


def self_check(models):
    worst = 0.0
    for arch in ("llama", "qwen3", "qwen3_moe", "gemma3", "qwen3_5", "qwen3_5_moe"):
        folder = Path(models) / arch
        ids = json.loads((folder / "reference.json").read_text())["logits_input_ids"]
        ref = np.fromfile(folder / "logits.f32.bin", np.float32).reshape(len(ids), -1)
        got = logits(folder / "model", ids)
        error = float(np.max(np.max(np.abs(got - ref), axis=1) / np.max(np.abs(ref), axis=1)))
        print(f"{arch}: worst row error {error:.3e}")
        worst = max(worst, error)
    return worst


def take_option(args, name):
    if name not in args:
        return None
    at = args.index(name)
    value = args[at + 1]
    del args[at:at + 2]
    return value


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[0] == "--self-check":
        sys.exit(0 if self_check(args[1]) < 1e-6 else 1)
    lora = take_option(args, "--lora")
    greedy = take_option(args, "--greedy")
    rounding = take_option(args, "--round-activations")
    if rounding not in ROUNDINGS:
        sys.exit(f"--round-activations {rounding}: not one of bf16, int8")
    if args[2] == "--ids-file":
        lines = Path(args[3]).read_text().split("\n")
        sequences = [[int(i) for i in line.split()] for line in lines if line.strip()]
    else:
        sequences = [[int(i) for i in args[2:]]]
    if greedy:
        ids = list(sequences[0])
        for _ in range(int(greedy)):
            ids.append(int(np.argmax(logits(args[0], ids, lora, rounding)[-1])))
        Path(args[1]).write_text(" ".join(str(i) for i in ids[len(sequences[0]):]) + "\n")
        sys.exit(0)
    result = np.concatenate([logits(args[0], ids, lora, rounding) for ids in sequences])
    result.astype(np.float32).tofile(args[1])
