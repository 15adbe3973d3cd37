"""A small LLaMA-style language model, forward and backward, for
examples/diloco_train.py.

Byte-level tokens (vocab 256); each block is
    h += Wo . attn(RoPE(Wq . rmsnorm(h)), RoPE(Wk . rmsnorm(h)), Wv . rmsnorm(h))   causal
    h += W2 . (silu(W1 . rmsnorm(h)) * (W3 . rmsnorm(h)))                          SwiGLU
then logits = Wout . rmsnorm(h) and the mean cross-entropy of the next byte.

Two implementations of the same maths, behind one interface
(model(cfg, theta, grad, ctx).loss / .loss_and_grad / .logits, and
adamw(...).step):

  TcModel / TcAdamW (a Context is given): every kernel is tensorcore's -
    tc.gemm (every matrix product, the embedding lookup and its gradient as
    products with a one-hot matrix), rmsnorm_forward/backward,
    rope_forward/backward, attention_forward/backward (causal, with its
    log-sum-exp), swiglu_forward/backward, softmax_forward (the output
    distribution) and adamw_step on the flat parameter buffer. Activations
    live in tensorcore buffers allocated once per (batch, seq) shape. What is
    left to NumPy is glue on those buffers' memory, never a copy of the model:
    the head-layout permutations [B,T,H,hd] <-> [B,H,T,hd], the residual
    copies and the two residual adds of the backward pass, the one-hot rows,
    and picking the targets' probabilities for the loss.
  NumpyModel / NumpyAdamW (no Context): the reference, with every backward
    pass written out by hand; dtype-agnostic, so tests run it in float64
    against finite differences.

RoPE rotates pairs (2k, 2k+1) by default: the interleaved convention of GGUF
and of tensorcore's LLaMA harness (src/model/llama.cpp), so the trained Wq/Wk
are saved as they are. Config(rope_interleaved=False) trains with the half
rotation (k, k + hd/2) of HF/GPT-NeoX instead; save_gguf then permutes the
rows of Wq/Wk the way the HF -> GGUF converters do.

All parameters live in ONE flat f32 array (a tensorcore buffer in the
example), each tensor a view into it, so DiLoCo and the data-parallel
allreduce see the whole model as one buffer. The matrices come first and the
norm weights last, so AdamW decays [0, n_decay) and leaves the norms'
[n_decay, n) alone with two calls on contiguous ranges.
"""

import ctypes

import numpy as np

EPS = 1e-5


class Config:
    def __init__(self, dim=96, layers=2, heads=4, ffn=256, vocab=256, seq=64, rope_base=10000.0,
                 rope_interleaved=True):
        self.dim, self.layers, self.heads, self.ffn, self.vocab, self.seq = dim, layers, heads, ffn, vocab, seq
        self.head_dim = dim // heads
        self.rope_base = rope_base
        self.rope_interleaved = rope_interleaved

    def shapes(self):
        """(name, shape) of every tensor, in flat-buffer order (GGUF names):
        matrices (weight-decayed) first, norm weights last. Wq, Wk, Wv of a
        layer are adjacent, so they also form one [3*dim, dim] matrix."""
        d, f, v = self.dim, self.ffn, self.vocab
        mats = [("token_embd.weight", (v, d))]
        norms = []
        for i in range(self.layers):
            p = "blk.%d." % i
            mats += [(p + "attn_q.weight", (d, d)), (p + "attn_k.weight", (d, d)), (p + "attn_v.weight", (d, d)),
                     (p + "attn_output.weight", (d, d)), (p + "ffn_gate.weight", (f, d)),
                     (p + "ffn_up.weight", (f, d)), (p + "ffn_down.weight", (d, f))]
            norms += [(p + "attn_norm.weight", (d,)), (p + "ffn_norm.weight", (d,))]
        mats.append(("output.weight", (v, d)))
        norms.append(("output_norm.weight", (d,)))
        return mats + norms

    def offsets(self):
        """name -> (element offset, shape) in the flat buffer."""
        out, off = {}, 0
        for name, shape in self.shapes():
            out[name] = (off, shape)
            off += int(np.prod(shape))
        return out

    def size(self):
        return sum(int(np.prod(s)) for _, s in self.shapes())

    def n_decay(self):
        """Elements of the flat buffer that take weight decay (all but the norms)."""
        return sum(int(np.prod(s)) for n, s in self.shapes() if not n.endswith("norm.weight"))


def views(cfg, flat):
    """name -> view of `flat` (weights are [out, in], as in GGUF/PyTorch)."""
    return {name: flat[off:off + int(np.prod(shape))].reshape(shape) for name, (off, shape) in cfg.offsets().items()}


def init(cfg, flat, seed):
    rng = np.random.default_rng(seed)
    for name, t in views(cfg, flat).items():
        if name.endswith("norm.weight"):
            t[...] = 1.0
        else:
            fan_in = t.shape[1]
            scale = 0.02 if name == "token_embd.weight" else 1.0 / np.sqrt(fan_in)
            if name.endswith(("attn_output.weight", "ffn_down.weight")):
                scale /= np.sqrt(2 * cfg.layers)
            t[...] = rng.standard_normal(t.shape).astype(np.float32) * scale


def rope_tables(cfg, T, dtype=np.float32):
    """cos, sin [T, hd/2] of angle p * base^(-2k/hd) (the harness's tables)."""
    half = cfg.head_dim // 2
    freq = cfg.rope_base ** (-np.arange(half, dtype=np.float64) / half)
    ang = np.arange(T)[:, None] * freq[None, :]
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


def model(cfg, theta, grad, ctx=None):
    """TcModel on `ctx`, or the NumPy reference when ctx is None."""
    return NumpyModel(cfg, theta, grad) if ctx is None else TcModel(cfg, ctx, theta, grad)


def adamw(cfg, theta, grad, ctx=None, **kw):
    return NumpyAdamW(cfg, theta, grad, **kw) if ctx is None else TcAdamW(cfg, ctx, theta, grad, **kw)


# ---- the NumPy reference -----------------------------------------------------------

def rmsnorm(x, g):
    r = 1.0 / np.sqrt(np.mean(x * x, -1, keepdims=True) + EPS)
    return x * r * g, r


def rmsnorm_back(x, g, r, dy):
    dyg = dy * g
    dx = r * dyg - x * r ** 3 * np.mean(dyg * x, -1, keepdims=True)
    dg = np.sum((dy * x * r).reshape(-1, x.shape[-1]), 0)
    return dx, dg


def rope(x, cos, sin, interleaved, inverse=False):
    """Rotation of the pairs (2k, 2k+1) (interleaved) or (k, k + hd/2) of
    x [B, H, T, hd] by the angles of position t; inverse = transposed."""
    s = -sin if inverse else sin
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * s
        out[..., 1::2] = a * s + b * cos
        return out
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * s, a * s + b * cos], -1)


def softmax(x):
    m = np.max(x, -1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, -1, keepdims=True)


def silu(x):
    return x / (1.0 + np.exp(-x))


class NumpyModel:
    """The reference forward and hand-written backward over views of the
    flat `theta` / `grad` arrays (any float dtype)."""

    def __init__(self, cfg, theta, grad):
        self.cfg, self.theta, self.grad = cfg, theta, grad
        self.p, self.g = views(cfg, theta), views(cfg, grad)

    def logits(self, tokens):
        return self._forward(tokens)[0]

    def loss(self, tokens, targets):
        return self._loss(self._forward(tokens)[0], targets)[0]

    def loss_and_grad(self, tokens, targets):
        logits, cache = self._forward(tokens, keep=True)
        loss, lp = self._loss(logits, targets)
        self._backward(cache, lp, targets)
        return loss

    @staticmethod
    def _loss(logits, targets):
        lp = logits - np.max(logits, -1, keepdims=True)
        lp = lp - np.log(np.sum(np.exp(lp), -1, keepdims=True))
        return float(-np.mean(np.take_along_axis(lp, targets[..., None], -1))), lp

    def _forward(self, tokens, keep=False):
        cfg, p = self.cfg, self.p
        B, T = tokens.shape
        H, hd = cfg.heads, cfg.head_dim
        cos, sin = rope_tables(cfg, T, self.theta.dtype)
        mask = np.triu(np.full((T, T), -np.inf, self.theta.dtype), 1)
        h = p["token_embd.weight"][tokens]
        acts = []
        for i in range(cfg.layers):
            L = lambda n: p["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            heads = lambda z: z.reshape(B, T, H, hd).transpose(0, 2, 1, 3)  # noqa: E731
            a, r1 = rmsnorm(h, L("attn_norm"))
            q, k, v = (heads(a @ L(n).T) for n in ("attn_q", "attn_k", "attn_v"))
            qr, kr = rope(q, cos, sin, cfg.rope_interleaved), rope(k, cos, sin, cfg.rope_interleaved)
            att = softmax(qr @ kr.transpose(0, 1, 3, 2) / np.sqrt(hd) + mask)
            o = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, cfg.dim)
            h1 = h + o @ L("attn_output").T
            b, r2 = rmsnorm(h1, L("ffn_norm"))
            gt, up = b @ L("ffn_gate").T, b @ L("ffn_up").T
            m = silu(gt) * up
            h2 = h1 + m @ L("ffn_down").T
            if keep:
                acts.append((h, a, r1, qr, kr, v, att, o, h1, b, r2, gt, up, m))
            h = h2
        f, rf = rmsnorm(h, p["output_norm.weight"])
        return f @ p["output.weight"].T, (tokens, acts, h, f, rf)

    def _backward(self, cache, lp, targets):
        """Fills self.grad (every element)."""
        cfg, p, G = self.cfg, self.p, self.g
        tokens, acts, hL, f, rf = cache
        B, T = tokens.shape
        H, hd = cfg.heads, cfg.head_dim
        cos, sin = rope_tables(cfg, T, self.theta.dtype)
        lin = lambda x, w, dy: (dy @ w, dy.reshape(-1, dy.shape[-1]).T @ x.reshape(-1, x.shape[-1]))  # noqa: E731
        dlogits = np.exp(lp)
        np.put_along_axis(dlogits, targets[..., None], np.take_along_axis(dlogits, targets[..., None], -1) - 1.0, -1)
        dlogits /= B * T
        df, G["output.weight"][...] = lin(f, p["output.weight"], dlogits)
        dh, G["output_norm.weight"][...] = rmsnorm_back(hL, p["output_norm.weight"], rf, df)
        for i in reversed(range(cfg.layers)):
            L = lambda n: p["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            W = lambda n: G["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            h, a, r1, qr, kr, v, att, o, h1, b, r2, gt, up, m = acts[i]
            # SwiGLU block
            dm, W("ffn_down")[...] = lin(m, L("ffn_down"), dh)
            sg = 1.0 / (1.0 + np.exp(-gt))
            dgt = dm * up * sg * (1.0 + gt * (1.0 - sg))
            dup = dm * gt * sg
            db1, W("ffn_gate")[...] = lin(b, L("ffn_gate"), dgt)
            db2, W("ffn_up")[...] = lin(b, L("ffn_up"), dup)
            dh1, W("ffn_norm")[...] = rmsnorm_back(h1, L("ffn_norm"), r2, db1 + db2)
            dh1 = dh1 + dh
            # attention block
            do, W("attn_output")[...] = lin(o, L("attn_output"), dh1)
            do = do.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
            datt = do @ v.transpose(0, 1, 3, 2)
            dv = att.transpose(0, 1, 3, 2) @ do
            ds = att * (datt - np.sum(datt * att, -1, keepdims=True)) / np.sqrt(hd)
            dqr = ds @ kr
            dkr = ds.transpose(0, 1, 3, 2) @ qr
            flat = lambda z: z.transpose(0, 2, 1, 3).reshape(B, T, cfg.dim)  # noqa: E731
            dq = flat(rope(dqr, cos, sin, cfg.rope_interleaved, inverse=True))
            dk = flat(rope(dkr, cos, sin, cfg.rope_interleaved, inverse=True))
            da = np.zeros_like(a)
            for name, dy in (("attn_q", dq), ("attn_k", dk), ("attn_v", flat(dv))):
                dx, W(name)[...] = lin(a, L(name), dy)
                da += dx
            dh0, W("attn_norm")[...] = rmsnorm_back(h, L("attn_norm"), r1, da)
            dh = dh0 + dh1
        ge = G["token_embd.weight"]
        ge[...] = 0.0
        np.add.at(ge, tokens.reshape(-1), dh.reshape(-1, cfg.dim))


class NumpyAdamW:
    """p -= lr (m^ / (sqrt(v^) + eps) + wd p) over the flat parameter array,
    without decay on the norm weights [n_decay, n)."""

    def __init__(self, cfg, theta, grad, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1):
        self.theta, self.grad = theta, grad
        self.m = np.zeros_like(theta)
        self.v = np.zeros_like(theta)
        self.t = 0
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, betas[0], betas[1], eps, wd
        self.decay = np.zeros_like(theta)
        self.decay[:cfg.n_decay()] = 1.0

    def step(self, lr=None):
        lr = self.lr if lr is None else lr
        p, g = self.theta, self.grad
        self.t += 1
        self.m[...] = self.b1 * self.m + (1 - self.b1) * g
        self.v[...] = self.b2 * self.v + (1 - self.b2) * g * g
        mh = self.m / (1 - self.b1 ** self.t)
        vh = self.v / (1 - self.b2 ** self.t)
        p -= lr * (mh / (np.sqrt(vh) + self.eps) + self.wd * self.decay * p)


# ---- tensorcore ------------------------------------------------------------------------

class _T:
    """A tensorcore buffer and the NumPy view of its (host) memory."""

    def __init__(self, buf, arr, parent=None):
        self.buf, self.a, self._parent = buf, arr, parent


def _host_array(x, n):
    """(address, float32 view) of the first n floats of a flat array or a
    host-accessible Buffer."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32 or not x.flags.c_contiguous or x.size < n:
            raise ValueError("expected a contiguous float32 array of at least %d elements" % n)
        return x.ctypes.data, x.reshape(-1)[:n]
    addr = x.map()
    return addr, np.ctypeslib.as_array((ctypes.c_float * n).from_address(addr))


class _Flat:
    """Buffers over ranges of a flat f32 array/buffer (no copies)."""

    def __init__(self, ctx, cfg, x):
        self.ctx, self.cfg = ctx, cfg
        self.addr, self.a = _host_array(x, cfg.size())
        self.owner = x
        self.t = {name: self.range(off, int(np.prod(shape)), shape) for name, (off, shape) in cfg.offsets().items()}
        for i in range(cfg.layers):  # Wq, Wk, Wv as one [3*dim, dim] matrix
            off = cfg.offsets()["blk.%d.attn_q.weight" % i][0]
            self.t["blk.%d.qkv" % i] = self.range(off, 3 * cfg.dim * cfg.dim, (3 * cfg.dim, cfg.dim))

    def range(self, off, n, shape=None):
        buf = self.ctx.buffer_from_ptr(self.addr + 4 * off, 4 * n)
        return _T(buf, self.a[off:off + n].reshape(shape or (n,)), self)

    def __getitem__(self, name):
        return self.t[name].buf


class _Acts:
    """Every activation buffer of one (B, T): allocated once, reused each step."""

    def __init__(self, ctx, cfg, B, T):
        N, D, F, H, hd, V = B * T, cfg.dim, cfg.ffn, cfg.heads, cfg.head_dim, cfg.vocab

        def new(*shape):
            n = int(np.prod(shape))
            buf = ctx.buffer(4 * n)
            return _T(buf, np.ctypeslib.as_array((ctypes.c_float * n).from_address(buf.map())).reshape(shape))

        def part(t, i, n):  # the i-th of the equal parts of t's memory
            size = t.a.size // n
            return _T(ctx.buffer_from_ptr(t.a.ctypes.data + 4 * size * i, 4 * size), t.a.reshape(n, -1)[i], t)

        self.onehot = new(N, V)
        self.h = [new(N, D) for _ in range(cfg.layers + 1)]  # residual stream entering each block (and the last)
        self.a, self.h1, self.b, self.o2 = ([new(N, D) for _ in range(cfg.layers)] for _ in range(4))
        self.r1, self.r2 = ([new(N) for _ in range(cfg.layers)] for _ in range(2))
        self.qkv4 = [new(3, B, H, T, hd) for _ in range(cfg.layers)]  # RoPE'd q, k and v, attention's layout
        self.q, self.k, self.v = ([part(t, j, 3) for t in self.qkv4] for j in range(3))
        self.o = [new(B, H, T, hd) for _ in range(cfg.layers)]
        self.lse = [new(B, H, T) for _ in range(cfg.layers)]
        self.gate, self.up, self.m = ([new(N, F) for _ in range(cfg.layers)] for _ in range(3))
        self.f, self.rf = new(N, D), new(N)
        self.logits, self.probs = new(N, V), new(N, V)
        self.cos, self.sin = new(T, hd // 2), new(T, hd // 2)
        self.cos.a[...], self.sin.a[...] = rope_tables(cfg, T)
        # backward scratch, shared by the layers
        self.qkv = new(N, 3 * D)  # projections [B, T, 3, H, hd] (forward) and their gradients (backward)
        self.dqkv4 = new(3, B, H, T, hd)
        self.dq, self.dk, self.dv = (part(self.dqkv4, j, 3) for j in range(3))
        self.dh, self.dtmp, self.db, self.do2, self.da, self.df = (new(N, D) for _ in range(6))
        self.do = new(B, H, T, hd)
        self.dm, self.dgate, self.dup = (new(N, F) for _ in range(3))


class TcModel:
    """The model on tensorcore kernels. theta and grad: flat f32 arrays or
    host-accessible Buffers of cfg.size() floats; their memory is used in
    place (the gradient is written straight into grad)."""

    def __init__(self, cfg, ctx, theta, grad):
        self.cfg, self.ctx = cfg, ctx
        self.P, self.G = _Flat(ctx, cfg, theta), _Flat(ctx, cfg, grad)
        self.acts = {}
        self._last = None

    def _acts(self, B, T):
        x = self.acts.get((B, T))
        if x is None:
            x = self.acts[(B, T)] = _Acts(self.ctx, self.cfg, B, T)
        return x

    def _gemm(self, A, Bm, C, M, N, K, ta=False, tb=False, alpha=1.0, beta=0.0):
        self.ctx.gemm(A, Bm, C, M, N, K, dtype="f32", accum="f32", alpha=alpha, beta=beta, transpose_a=ta,
                      transpose_b=tb)

    def logits(self, tokens):
        x = self._forward(tokens)
        return x.logits.a.reshape(*tokens.shape, -1).copy()

    def loss(self, tokens, targets):
        x = self._forward(tokens)
        return self._loss(x, tokens, targets)

    def loss_and_grad(self, tokens, targets):
        x = self._forward(tokens)
        loss = self._loss(x, tokens, targets)
        self._backward(x, tokens, targets)
        return loss

    def _loss(self, x, tokens, targets):
        """Mean -log p(target) from softmax_forward's probabilities (floored at
        the smallest normal f32 so that a vanishing probability stays finite)."""
        ctx, cfg = self.ctx, self.cfg
        N = tokens.size
        ctx.softmax_forward(x.logits.buf, x.probs.buf, N, cfg.vocab, dtype="f32")
        pt = x.probs.a[np.arange(N), targets.reshape(-1)]
        return float(-np.mean(np.log(np.maximum(pt.astype(np.float64), np.finfo(np.float32).tiny))))

    def _forward(self, tokens):
        ctx, cfg, P = self.ctx, self.cfg, self.P
        B, T = tokens.shape
        N, D, F, H, hd, V = B * T, cfg.dim, cfg.ffn, cfg.heads, cfg.head_dim, cfg.vocab
        x = self._acts(B, T)
        rope_kw = dict(dtype="f32", interleaved=cfg.rope_interleaved)
        # h0 = onehot(tokens) @ E: exact (one 1 per row), and its transpose gives dE.
        x.onehot.a[...] = 0.0
        x.onehot.a[np.arange(N), tokens.reshape(-1)] = 1.0
        self._gemm(x.onehot.buf, P["token_embd.weight"], x.h[0].buf, N, D, V)
        for i in range(cfg.layers):
            L = lambda n: P["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            ctx.rmsnorm_forward(x.h[i].buf, L("attn_norm"), x.a[i].buf, x.r1[i].buf, N, D, eps=EPS, dtype="f32")
            self._gemm(x.a[i].buf, P["blk.%d.qkv" % i], x.qkv.buf, N, 3 * D, D, tb=True)
            x.qkv4[i].a[...] = x.qkv.a.reshape(B, T, 3, H, hd).transpose(2, 0, 3, 1, 4)
            ctx.rope_forward(x.q[i].buf, x.cos.buf, x.sin.buf, B, H, T, hd, **rope_kw)
            ctx.rope_forward(x.k[i].buf, x.cos.buf, x.sin.buf, B, H, T, hd, **rope_kw)
            ctx.attention_forward(x.q[i].buf, x.k[i].buf, x.v[i].buf, x.o[i].buf, B, H, T, T, hd, LSE=x.lse[i].buf,
                                  dtype="f32", accum="f32", causal=True)
            x.o2[i].a.reshape(B, T, H, hd)[...] = x.o[i].a.transpose(0, 2, 1, 3)
            x.h1[i].a[...] = x.h[i].a  # h1 = h + o Wo^T: the product accumulates (beta = 1)
            self._gemm(x.o2[i].buf, L("attn_output"), x.h1[i].buf, N, D, D, tb=True, beta=1.0)
            ctx.rmsnorm_forward(x.h1[i].buf, L("ffn_norm"), x.b[i].buf, x.r2[i].buf, N, D, eps=EPS, dtype="f32")
            self._gemm(x.b[i].buf, L("ffn_gate"), x.gate[i].buf, N, F, D, tb=True)
            self._gemm(x.b[i].buf, L("ffn_up"), x.up[i].buf, N, F, D, tb=True)
            ctx.swiglu_forward(x.gate[i].buf, x.up[i].buf, x.m[i].buf, N * F, dtype="f32")
            x.h[i + 1].a[...] = x.h1[i].a
            self._gemm(x.m[i].buf, L("ffn_down"), x.h[i + 1].buf, N, D, F, tb=True, beta=1.0)
        ctx.rmsnorm_forward(x.h[cfg.layers].buf, P["output_norm.weight"], x.f.buf, x.rf.buf, N, D, eps=EPS,
                            dtype="f32")
        self._gemm(x.f.buf, P["output.weight"], x.logits.buf, N, V, D, tb=True)
        return x

    def _backward(self, x, tokens, targets):
        """Writes every element of the gradient; x.probs must be this batch's."""
        ctx, cfg, P, G = self.ctx, self.cfg, self.P, self.G
        B, T = tokens.shape
        N, D, F, H, hd, V = B * T, cfg.dim, cfg.ffn, cfg.heads, cfg.head_dim, cfg.vocab
        rope_kw = dict(dtype="f32", interleaved=cfg.rope_interleaved)
        # dlogits = (probs - onehot(targets)) / N: the 1/N rides on the GEMMs' alpha.
        x.probs.a[np.arange(N), targets.reshape(-1)] -= 1.0
        dlog = x.probs.buf
        self._gemm(dlog, P["output.weight"], x.df.buf, N, D, V, alpha=1.0 / N)
        self._gemm(dlog, x.f.buf, G["output.weight"], V, D, N, ta=True, alpha=1.0 / N)
        ctx.rmsnorm_backward(x.h[cfg.layers].buf, P["output_norm.weight"], x.df.buf, x.rf.buf, x.dh.buf,
                             G["output_norm.weight"], N, D, dtype="f32")
        for i in reversed(range(cfg.layers)):
            L = lambda n: P["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            W = lambda n: G["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            # SwiGLU block: dh is the gradient of the block's output h2 = h1 + m Wd^T
            self._gemm(x.dh.buf, L("ffn_down"), x.dm.buf, N, F, D)
            self._gemm(x.dh.buf, x.m[i].buf, W("ffn_down"), D, F, N, ta=True)
            ctx.swiglu_backward(x.gate[i].buf, x.up[i].buf, x.dm.buf, x.dgate.buf, x.dup.buf, N * F, dtype="f32")
            self._gemm(x.dgate.buf, x.b[i].buf, W("ffn_gate"), F, D, N, ta=True)
            self._gemm(x.dup.buf, x.b[i].buf, W("ffn_up"), F, D, N, ta=True)
            self._gemm(x.dgate.buf, L("ffn_gate"), x.db.buf, N, D, F)
            self._gemm(x.dup.buf, L("ffn_up"), x.db.buf, N, D, F, beta=1.0)
            ctx.rmsnorm_backward(x.h1[i].buf, L("ffn_norm"), x.db.buf, x.r2[i].buf, x.dtmp.buf, W("ffn_norm"), N, D,
                                 dtype="f32")
            x.dh.a += x.dtmp.a  # now the gradient of h1 = h + o Wo^T
            # attention block
            self._gemm(x.dh.buf, L("attn_output"), x.do2.buf, N, D, D)
            self._gemm(x.dh.buf, x.o2[i].buf, W("attn_output"), D, D, N, ta=True)
            x.do.a[...] = x.do2.a.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
            ctx.attention_backward(x.q[i].buf, x.k[i].buf, x.v[i].buf, x.o[i].buf, x.do.buf, x.lse[i].buf,
                                   x.dq.buf, x.dk.buf, x.dv.buf, B, H, T, T, hd, dtype="f32", accum="f32", causal=True)
            ctx.rope_backward(x.dq.buf, x.cos.buf, x.sin.buf, B, H, T, hd, **rope_kw)
            ctx.rope_backward(x.dk.buf, x.cos.buf, x.sin.buf, B, H, T, hd, **rope_kw)
            x.qkv.a.reshape(B, T, 3, H, hd)[...] = x.dqkv4.a.transpose(1, 3, 0, 2, 4)
            self._gemm(x.qkv.buf, x.a[i].buf, G["blk.%d.qkv" % i], 3 * D, D, N, ta=True)
            self._gemm(x.qkv.buf, P["blk.%d.qkv" % i], x.da.buf, N, D, 3 * D)
            ctx.rmsnorm_backward(x.h[i].buf, L("attn_norm"), x.da.buf, x.r1[i].buf, x.dtmp.buf, W("attn_norm"), N,
                                 D, dtype="f32")
            x.dh.a += x.dtmp.a  # the gradient of the block's input h
        self._gemm(x.onehot.buf, x.dh.buf, G["token_embd.weight"], V, D, N, ta=True)


class TcAdamW:
    """tensorcore's adamw_step on the flat parameter buffer: one call over
    the matrices [0, n_decay) with weight decay, one over the norm weights
    [n_decay, n) without. m and v are tensorcore buffers."""

    def __init__(self, cfg, ctx, theta, grad, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1):
        self.ctx = ctx
        n, nd = cfg.size(), cfg.n_decay()
        self.P, self.G = _Flat(ctx, cfg, theta), _Flat(ctx, cfg, grad)
        self.m, self.v = ctx.buffer(4 * n), ctx.buffer(4 * n)
        zeros = np.zeros(n, np.float32)
        self.m.write(zeros)
        self.v.write(zeros)
        addr_m, addr_v = self.m.map(), self.v.map()
        self.ranges = []
        for off, cnt, decay in ((0, nd, wd), (nd, n - nd, 0.0)):
            self.ranges.append((self.P.range(off, cnt).buf, ctx.buffer_from_ptr(addr_m + 4 * off, 4 * cnt),
                                ctx.buffer_from_ptr(addr_v + 4 * off, 4 * cnt), self.G.range(off, cnt).buf, cnt,
                                decay))
        self.t = 0
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps

    def step(self, lr=None):
        lr = self.lr if lr is None else lr
        self.t += 1
        bc1, bc2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, m, v, g, cnt, wd in self.ranges:
            self.ctx.adamw_step(p, m, v, g, "f32", cnt, lr, self.b1, self.b2, self.eps, wd, bc1, bc2)


# ---- GGUF export and decoding with tensorcore's LLaMA harness -----------------------

def to_interleaved(w, heads):
    """Rows of Wq/Wk reordered so that GGUF's interleaved RoPE (pairs 2k, 2k+1)
    computes what the half rotation (k, k + hd/2) computed: the permutation the
    HF -> GGUF converters apply."""
    out_dim, in_dim = w.shape
    hd = out_dim // heads
    return w.reshape(heads, 2, hd // 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def save_gguf(cfg, theta, path, name="tiny-llama-diloco"):
    """A llama-architecture GGUF (f32 tensors) through tensorcore's GGUF
    writer. The vocabulary is SentencePiece-style with only the 256 byte
    tokens <0x00>..<0xFF>, so token id = byte value, as in training."""
    import tensorcore as tc
    p = views(cfg, theta)
    with tc.GgufWriter() as w:
        w.add_string("general.architecture", "llama")
        w.add_string("general.name", name)
        w.add_uint32("llama.context_length", cfg.seq)
        w.add_uint32("llama.embedding_length", cfg.dim)
        w.add_uint32("llama.block_count", cfg.layers)
        w.add_uint32("llama.feed_forward_length", cfg.ffn)
        w.add_uint32("llama.attention.head_count", cfg.heads)
        w.add_uint32("llama.attention.head_count_kv", cfg.heads)
        w.add_uint32("llama.rope.dimension_count", cfg.head_dim)
        w.add_float32("llama.rope.freq_base", cfg.rope_base)
        w.add_float32("llama.attention.layer_norm_rms_epsilon", EPS)
        w.add_uint32("llama.vocab_size", cfg.vocab)
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", ["<0x%02X>" % i for i in range(cfg.vocab)])
        w.add_array("tokenizer.ggml.scores", np.zeros(cfg.vocab, np.float32))
        w.add_array("tokenizer.ggml.token_type", np.full(cfg.vocab, 6, np.int32))  # byte tokens
        w.add_bool("tokenizer.ggml.add_space_prefix", False)
        for tname, _ in cfg.shapes():
            arr = np.ascontiguousarray(p[tname], np.float32)
            if tname.endswith(("attn_q.weight", "attn_k.weight")) and not cfg.rope_interleaved:
                arr = to_interleaved(arr, cfg.heads)
            w.add_tensor(tname, arr, copy=True)
        w.write(str(path))


def decode_gguf(path, prompt_ids, n_new):
    """Greedy decoding from the GGUF with tensorcore's LLaMA harness
    (tensorcore.llama.Llama, KV cache, interleaved RoPE): (the n_new token
    ids, the harness's logits [len(prompt) + n_new - 1, vocab] of the whole
    sequence in one evaluation)."""
    from tensorcore.llama import Llama
    with Llama(str(path), n_ctx=len(prompt_ids) + n_new, activations="f32") as m:
        new = m.generate(prompt_ids, n_new)
        m.reset()
        logits = m.eval(list(prompt_ids) + new[:-1])
    return new, logits
