"""A float64 NumPy forward of the decoder architectures tensorcore.llama
loads, written from the model families' definitions (as llama.cpp runs
them), for the tests and for bench/llama_logits_vs_llamacpp.py.

cfg: E, H, HKV, D, eps, base and rope_scale (RoPE: positions times
rope_scale, default 1), and the architecture's choices:
neox (RoPE pairs (x[k], x[k + D/2])), gemma (embeddings * sqrt(E), GEGLU,
post-branch norms, output tied when the weights have no output.weight),
qk_norm, attn_cap / final_cap (soft-capping; absent or 0: none), window
with swa (one flag per layer: a sliding-window layer) and base_swa (their
RoPE base), scale (softmax scale; default 1/sqrt(D)); kv_f16 / kv_q8: K
(after RoPE) and V as an f16 or Q8_0 cache holds them. Biases are used where
the weights have them. w: name -> float64 array as GGUF names them, matrices
[rows, K]."""

import numpy as np


def rmsnorm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rope(x, pos, base, neox):
    """x [S, heads, D] rotated by pos * base^(-2k/D), k < D/2 (pos already scaled)."""
    D = x.shape[-1]
    k = np.arange(D // 2)
    theta = pos[:, None] * base ** (-2.0 * k / D)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    a, b = (x[..., : D // 2], x[..., D // 2:]) if neox else (x[..., 0::2], x[..., 1::2])
    ra, rb = a * c - b * s, b * c + a * s
    return np.concatenate([ra, rb], -1) if neox else np.stack([ra, rb], -1).reshape(x.shape)


def q8_0_round_trip(x):
    """x [..., D] (D a multiple of 32) as a Q8_0 KV cache holds it: per block
    of 32, in f32 as ggml's quantize_row_q8_0_ref, d = max|x| / 127 and
    q = roundf(x / d) (0 when d is 0); the value is q times d rounded to f16."""
    b = x.astype(np.float32).reshape(-1, 32)
    d = np.abs(b).max(1) / np.float32(127)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    v = b * inv[:, None]
    q = np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)  # roundf: halves away from zero
    return (q * d.astype(np.float16).astype(np.float64)[:, None]).reshape(x.shape)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, w, tokens, layers=None):
    """float64 logits [S, V] of the whole sequence."""
    E, H, HKV, D, eps = cfg["E"], cfg["H"], cfg["HKV"], cfg["D"], cfg["eps"]
    S = len(tokens)
    gemma = cfg.get("gemma", False)
    neox = cfg.get("neox", False)
    scale = cfg.get("scale", 1 / np.sqrt(D))
    n_layer = cfg["layers"] if layers is None else layers
    swa = cfg.get("swa", [False] * n_layer)
    x = w["token_embd.weight"][np.asarray(tokens)] * (np.sqrt(E) if gemma else 1.0)
    pos = np.arange(S, dtype=np.float64) * cfg.get("rope_scale", 1.0)
    i, j = np.arange(S)[:, None], np.arange(S)[None, :]
    for l in range(n_layer):
        p = "blk.%d." % l
        base = cfg.get("base_swa", cfg["base"]) if swa[l] else cfg["base"]
        h = rmsnorm(x, w[p + "attn_norm.weight"], eps)
        q, k, v = (h @ w[p + "attn_%s.weight" % t].T + w.get(p + "attn_%s.bias" % t, 0.0) for t in "qkv")
        q, k, v = q.reshape(S, H, D), k.reshape(S, HKV, D), v.reshape(S, HKV, D)
        if cfg.get("qk_norm"):
            q, k = rmsnorm(q, w[p + "attn_q_norm.weight"], eps), rmsnorm(k, w[p + "attn_k_norm.weight"], eps)
        q, k = rope(q, pos, base, neox), rope(k, pos, base, neox)
        if cfg.get("kv_f16"):  # an f16 KV cache holds the keys after RoPE and the values rounded
            k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
        if cfg.get("kv_q8"):  # a Q8_0 cache: per block of 32 along D
            k, v = q8_0_round_trip(k), q8_0_round_trip(v)
        visible = (j <= i) & ((i - j < cfg["window"]) if swa[l] else True)
        o = np.empty((S, H, D))
        for hh in range(H):
            g = hh // (H // HKV)
            sc = q[:, hh] @ k[:, g].T * scale
            if cfg.get("attn_cap"):
                sc = cfg["attn_cap"] * np.tanh(sc / cfg["attn_cap"])
            sc = np.where(visible, sc, -np.inf)
            pr = np.exp(sc - sc.max(-1, keepdims=True))
            o[:, hh] = (pr / pr.sum(-1, keepdims=True)) @ v[:, g]
        out = o.reshape(S, H * D) @ w[p + "attn_output.weight"].T
        if gemma:
            out = rmsnorm(out, w[p + "post_attention_norm.weight"], eps)
        x = x + out
        h = rmsnorm(x, w[p + "ffn_norm.weight"], eps)
        gt, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        act = gelu_tanh(gt) if gemma else gt / (1 + np.exp(-gt))
        out = (act * up) @ w[p + "ffn_down.weight"].T
        if gemma:
            out = rmsnorm(out, w[p + "post_ffw_norm.weight"], eps)
        x = x + out
    logits = rmsnorm(x, w["output_norm.weight"], eps) @ w.get("output.weight", w["token_embd.weight"]).T
    if cfg.get("final_cap"):
        logits = cfg["final_cap"] * np.tanh(logits / cfg["final_cap"])
    return logits
