"""A small LLaMA-style language model, forward and backward, for
examples/diloco_train.py.

Byte-level tokens (vocab 256); each block is
    h += Wo . attn(RoPE(Wq . rmsnorm(h)), RoPE(Wk . rmsnorm(h)), Wv . rmsnorm(h))   causal
    h += W2 . (silu(W1 . rmsnorm(h)) * (W3 . rmsnorm(h)))                          SwiGLU
then logits = Wout . rmsnorm(h) and the mean cross-entropy of the next byte.

Which pieces run where: every matrix product goes through tensorcore's GEMM
(tc.gemm, f32, OpenBLAS underneath) when a Context is given. RMSNorm, RoPE,
softmax, SwiGLU, attention and AdamW are NumPy here, with their backward
passes written out by hand: tensorcore's training and attention kernels
(include/tensorcore/training.h, attention.h) are not in this tree yet; when
they are, each NumPy function below maps one-to-one onto a kernel of the same
name.

All parameters live in ONE flat f32 array (a tensorcore buffer in the
example), each tensor a view into it, so DiLoCo and the data-parallel
allreduce see the whole model as one buffer.
"""

import numpy as np

EPS = 1e-5


class Config:
    def __init__(self, dim=96, layers=2, heads=4, ffn=256, vocab=256, seq=64, rope_base=10000.0):
        self.dim, self.layers, self.heads, self.ffn, self.vocab, self.seq = dim, layers, heads, ffn, vocab, seq
        self.head_dim = dim // heads
        self.rope_base = rope_base

    def shapes(self):
        """(name, shape) of every tensor, in flat-buffer order (GGUF names)."""
        d, f, v = self.dim, self.ffn, self.vocab
        out = [("token_embd.weight", (v, d))]
        for i in range(self.layers):
            p = "blk.%d." % i
            out += [(p + "attn_norm.weight", (d,)), (p + "attn_q.weight", (d, d)), (p + "attn_k.weight", (d, d)),
                    (p + "attn_v.weight", (d, d)), (p + "attn_output.weight", (d, d)),
                    (p + "ffn_norm.weight", (d,)), (p + "ffn_gate.weight", (f, d)), (p + "ffn_up.weight", (f, d)),
                    (p + "ffn_down.weight", (d, f))]
        out += [("output_norm.weight", (d,)), ("output.weight", (v, d))]
        return out

    def size(self):
        return sum(int(np.prod(s)) for _, s in self.shapes())


def views(cfg, flat):
    """name -> view of `flat` (weights are [out, in], as in GGUF/PyTorch)."""
    out, off = {}, 0
    for name, shape in cfg.shapes():
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape)
        off += n
    return out


def init(cfg, flat, seed):
    rng = np.random.default_rng(seed)
    p = views(cfg, flat)
    for name, t in p.items():
        if name.endswith("norm.weight"):
            t[...] = 1.0
        else:
            fan_in = t.shape[1]
            scale = 0.02 if name == "token_embd.weight" else 1.0 / np.sqrt(fan_in)
            if name.endswith(("attn_output.weight", "ffn_down.weight")):
                scale /= np.sqrt(2 * cfg.layers)
            t[...] = rng.standard_normal(t.shape).astype(np.float32) * scale


# ---- matrix products (tensorcore GEMM when a context is given) -----------------------

class MatMul:
    """y = x @ w.T for x [M, K], w [N, K] (and the transposed products of
    the backward pass) through tc.gemm when ctx is set, else NumPy."""

    def __init__(self, ctx=None):
        self.ctx = ctx
        self.cache = {}

    def _buf(self, key, nbytes):
        b = self.cache.get(key)
        if b is None or b.nbytes < nbytes:
            b = self.ctx.buffer(max(nbytes, 64))
            self.cache[key] = b
        return b

    def __call__(self, a, b, ta=False, tb=False):
        """op(a) @ op(b), 2-D f32."""
        if self.ctx is None:
            return (a.T if ta else a) @ (b.T if tb else b)
        a = np.ascontiguousarray(a, np.float32)
        b = np.ascontiguousarray(b, np.float32)
        M = a.shape[1] if ta else a.shape[0]
        K = a.shape[0] if ta else a.shape[1]
        N = b.shape[0] if tb else b.shape[1]
        A, B, C = self._buf("a", a.nbytes), self._buf("b", b.nbytes), self._buf("c", M * N * 4)
        A.write(a)
        B.write(b)
        self.ctx.gemm(A, B, C, M, N, K, dtype="f32", accum="f32", transpose_a=ta, transpose_b=tb)
        return C.to_numpy((M, N), np.float32)


def linear(mm, x, w):
    """x [..., K] @ w[N, K].T"""
    return mm(x.reshape(-1, x.shape[-1]), w, tb=True).reshape(*x.shape[:-1], w.shape[0])


def linear_back(mm, x, w, dy):
    """(dx, dw) of y = x @ w.T."""
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    return mm(dy2, w).reshape(x.shape), mm(dy2, x2, ta=True)


# ---- the NumPy pieces (tensorcore training/attention kernels when they land) ---------

def rmsnorm(x, g):
    r = 1.0 / np.sqrt(np.mean(x * x, -1, keepdims=True) + EPS)
    return x * r * g, r


def rmsnorm_back(x, g, r, dy):
    dyg = dy * g
    dx = r * dyg - x * r ** 3 * np.mean(dyg * x, -1, keepdims=True)
    dg = np.sum((dy * x * r).reshape(-1, x.shape[-1]), 0)
    return dx, dg


def rope_tables(cfg, T):
    half = cfg.head_dim // 2
    freq = cfg.rope_base ** (-np.arange(half, dtype=np.float64) / half)
    ang = np.arange(T)[:, None] * freq[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope(x, cos, sin, inverse=False):
    """Half rotation (element k with k + D/2) on x [B, H, T, hd]."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    s = -sin if inverse else sin
    return np.concatenate([a * cos - b * s, a * s + b * cos], -1)


def softmax(x):
    m = np.max(x, -1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, -1, keepdims=True)


def silu(x):
    return x / (1.0 + np.exp(-x))


# ---- model ------------------------------------------------------------------------

def forward(cfg, p, tokens, mm, targets=None, keep=False):
    """Mean cross-entropy (and logits); with keep=True also the activations for backward."""
    B, T = tokens.shape
    H, hd = cfg.heads, cfg.head_dim
    cos, sin = rope_tables(cfg, T)
    mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    h = p["token_embd.weight"][tokens]
    acts = []
    for i in range(cfg.layers):
        L = lambda n: p["blk.%d.%s.weight" % (i, n)]  # noqa: E731
        a, r1 = rmsnorm(h, L("attn_norm"))
        q = linear(mm, a, L("attn_q")).reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        k = linear(mm, a, L("attn_k")).reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        v = linear(mm, a, L("attn_v")).reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        qr, kr = rope(q, cos, sin), rope(k, cos, sin)
        att = softmax(qr @ kr.transpose(0, 1, 3, 2) / np.sqrt(hd) + mask)
        o = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, cfg.dim)
        h1 = h + linear(mm, o, L("attn_output"))
        b, r2 = rmsnorm(h1, L("ffn_norm"))
        gt, up = linear(mm, b, L("ffn_gate")), linear(mm, b, L("ffn_up"))
        m = silu(gt) * up
        h2 = h1 + linear(mm, m, L("ffn_down"))
        if keep:
            acts.append((h, a, r1, qr, kr, v, att, o, h1, b, r2, gt, up, m))
        h = h2
    f, rf = rmsnorm(h, p["output_norm.weight"])
    logits = linear(mm, f, p["output.weight"])
    if targets is None:
        return logits
    lp = logits - np.max(logits, -1, keepdims=True)
    lp = lp - np.log(np.sum(np.exp(lp), -1, keepdims=True))
    loss = -np.mean(np.take_along_axis(lp, targets[..., None], -1))
    if keep:
        return loss, (tokens, acts, h, f, rf, lp)
    return loss


def backward(cfg, p, grads, cache, targets, mm):
    """Fills `grads` (views of the flat gradient, same layout as p)."""
    tokens, acts, hL, f, rf, lp = cache
    B, T = tokens.shape
    H, hd = cfg.heads, cfg.head_dim
    cos, sin = rope_tables(cfg, T)
    dlogits = np.exp(lp)
    np.put_along_axis(dlogits, targets[..., None], np.take_along_axis(dlogits, targets[..., None], -1) - 1.0, -1)
    dlogits /= B * T
    df, grads["output.weight"][...] = linear_back(mm, f, p["output.weight"], dlogits)
    dh, grads["output_norm.weight"][...] = rmsnorm_back(hL, p["output_norm.weight"], rf, df)
    for i in reversed(range(cfg.layers)):
        L = lambda n: p["blk.%d.%s.weight" % (i, n)]  # noqa: E731
        G = lambda n: grads["blk.%d.%s.weight" % (i, n)]  # noqa: E731
        h, a, r1, qr, kr, v, att, o, h1, b, r2, gt, up, m = acts[i]
        # SwiGLU block
        dm, G("ffn_down")[...] = linear_back(mm, m, L("ffn_down"), dh)
        sg = 1.0 / (1.0 + np.exp(-gt))
        dgt = dm * up * sg * (1.0 + gt * (1.0 - sg))
        dup = dm * gt * sg
        db1, G("ffn_gate")[...] = linear_back(mm, b, L("ffn_gate"), dgt)
        db2, G("ffn_up")[...] = linear_back(mm, b, L("ffn_up"), dup)
        dh1, G("ffn_norm")[...] = rmsnorm_back(h1, L("ffn_norm"), r2, db1 + db2)
        dh1 = dh1 + dh
        # attention block
        do, G("attn_output")[...] = linear_back(mm, o, L("attn_output"), dh1)
        do = do.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        datt = do @ v.transpose(0, 1, 3, 2)
        dv = att.transpose(0, 1, 3, 2) @ do
        ds = att * (datt - np.sum(datt * att, -1, keepdims=True)) / np.sqrt(hd)
        dqr = ds @ kr
        dkr = ds.transpose(0, 1, 3, 2) @ qr
        dq = rope(dqr, cos, sin, inverse=True).transpose(0, 2, 1, 3).reshape(B, T, cfg.dim)
        dk = rope(dkr, cos, sin, inverse=True).transpose(0, 2, 1, 3).reshape(B, T, cfg.dim)
        dv = dv.transpose(0, 2, 1, 3).reshape(B, T, cfg.dim)
        da = np.zeros_like(a)
        for name, dy in (("attn_q", dq), ("attn_k", dk), ("attn_v", dv)):
            dx, G(name)[...] = linear_back(mm, a, L(name), dy)
            da += dx
        dh0, G("attn_norm")[...] = rmsnorm_back(h, L("attn_norm"), r1, da)
        dh = dh0 + dh1
    ge = grads["token_embd.weight"]
    ge[...] = 0.0
    np.add.at(ge, tokens.reshape(-1), dh.reshape(-1, cfg.dim))


class AdamW:
    """p -= lr (m^ / (sqrt(v^) + eps) + wd p) over the flat parameter array
    (decay skipped for norms through `decay_mask`)."""

    def __init__(self, cfg, n, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1):
        self.m = np.zeros(n, np.float32)
        self.v = np.zeros(n, np.float32)
        self.t = 0
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, betas[0], betas[1], eps, wd
        mask = np.zeros(n, np.float32)
        for name, view in views(cfg, mask).items():
            view[...] = 0.0 if name.endswith("norm.weight") else 1.0
        self.decay = mask

    def step(self, p, g, lr=None):
        lr = self.lr if lr is None else lr
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        mh = self.m / (1 - self.b1 ** self.t)
        vh = self.v / (1 - self.b2 ** self.t)
        p -= lr * (mh / (np.sqrt(vh) + self.eps) + self.wd * self.decay * p)


# ---- GGUF export and decoding ------------------------------------------------------

def to_interleaved(w, heads):
    """Rows of Wq/Wk reordered so that GGUF's interleaved RoPE (pairs 2k, 2k+1)
    computes what our half rotation (k, k + D/2) computed: the permutation the
    HF -> GGUF converters apply."""
    out_dim, in_dim = w.shape
    hd = out_dim // heads
    return w.reshape(heads, 2, hd // 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def save_gguf(cfg, p, path, name="tiny-llama-diloco"):
    """A llama-architecture GGUF (f32 tensors, byte-level vocabulary)."""
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(cfg.seq)
    w.add_embedding_length(cfg.dim)
    w.add_block_count(cfg.layers)
    w.add_feed_forward_length(cfg.ffn)
    w.add_head_count(cfg.heads)
    w.add_head_count_kv(cfg.heads)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_layer_norm_rms_eps(EPS)
    w.add_vocab_size(cfg.vocab)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([bytes([i]).decode("latin-1") for i in range(256)])
    w.add_token_types([1] * 256)
    for tname, t in p.items():
        arr = np.ascontiguousarray(t, np.float32)
        if tname.endswith(("attn_q.weight", "attn_k.weight")):
            arr = to_interleaved(arr, cfg.heads)
        w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load_gguf(path):
    """(Config, tensors) from a GGUF written by save_gguf, read with gguf-py."""
    import gguf
    r = gguf.GGUFReader(str(path))

    def field(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]
    cfg = Config(dim=int(field("llama.embedding_length")), layers=int(field("llama.block_count")),
                 heads=int(field("llama.attention.head_count")), ffn=int(field("llama.feed_forward_length")),
                 seq=int(field("llama.context_length")), rope_base=float(field("llama.rope.freq_base")))
    tensors = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # GGUF lists dims fastest first
        tensors[t.name] = np.array(t.data, np.float32).reshape(shape)
    return cfg, tensors


def decode_gguf(path, prompt, n_new):
    """Greedy decoding from a GGUF with interleaved RoPE, as a LLaMA runtime
    reads it (a NumPy stand-in for the LLaMA harness)."""
    cfg, t = load_gguf(path)
    toks = list(prompt.encode("utf-8"))
    H, hd = cfg.heads, cfg.head_dim
    half = hd // 2
    freq = cfg.rope_base ** (-np.arange(half, dtype=np.float64) / half)
    for _ in range(n_new):
        x = np.array(toks[-cfg.seq:])
        T = len(x)
        ang = np.arange(T)[:, None] * freq[None, :]
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)

        def rope_il(z):  # pairs (2k, 2k+1)
            a, b = z[..., 0::2], z[..., 1::2]
            out = np.empty_like(z)
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
            return out
        h = t["token_embd.weight"][x]
        mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
        for i in range(cfg.layers):
            W = lambda n: t["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            a, _ = rmsnorm(h, W("attn_norm"))
            q = (a @ W("attn_q").T).reshape(T, H, hd).transpose(1, 0, 2)
            k = (a @ W("attn_k").T).reshape(T, H, hd).transpose(1, 0, 2)
            v = (a @ W("attn_v").T).reshape(T, H, hd).transpose(1, 0, 2)
            att = softmax(rope_il(q) @ rope_il(k).transpose(0, 2, 1) / np.sqrt(hd) + mask)
            h = h + (att @ v).transpose(1, 0, 2).reshape(T, cfg.dim) @ W("attn_output").T
            b, _ = rmsnorm(h, W("ffn_norm"))
            h = h + (silu(b @ W("ffn_gate").T) * (b @ W("ffn_up").T)) @ W("ffn_down").T
        f, _ = rmsnorm(h, t["output_norm.weight"])
        toks.append(int(np.argmax(f[-1] @ t["output.weight"].T)))
    return bytes(toks).decode("utf-8", "replace")
