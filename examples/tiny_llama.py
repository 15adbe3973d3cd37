"""A small LLaMA-style language model, forward and backward, for
examples/diloco_train.py.

Byte-level tokens (vocab 256); each block is
    h += Wo . attn(RoPE(Wq . rmsnorm(h)), RoPE(Wk . rmsnorm(h)), Wv . rmsnorm(h))   causal
    h += W2 . (silu(W1 . rmsnorm(h)) * (W3 . rmsnorm(h)))                          SwiGLU
then logits = Wout . rmsnorm(h) and the mean cross-entropy of the next byte.

Two implementations of the same maths, behind one interface
(model(cfg, theta, grad, ctx).loss / .loss_and_grad / .logits, and
adamw(...).step):

  TcModel / TcAdamW (a Context is given, CPU or CUDA): every kernel is
    tensorcore's - tc.gemm (every matrix product, the embedding lookup and
    its gradient as products with a one-hot matrix, the residual adds as
    GEMMs with beta = 1) and gemm_batched (the head layout),
    rmsnorm_forward/backward, rope_forward/backward, attention_forward/
    backward (causal, with its log-sum-exp), swiglu_forward/backward,
    softmax_forward (the output distribution) and adamw_step on the flat
    parameter buffer. Parameters, gradients and activations are buffers of
    the context, never mapped into host memory; the host builds the one-hot
    rows of inputs and targets and reads the output distribution back for
    the loss.
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

import math

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


def model(cfg, theta, grad, ctx=None, **kw):
    """TcModel on `ctx` (keywords tf32, stream), or the NumPy reference when ctx is None."""
    return NumpyModel(cfg, theta, grad) if ctx is None else TcModel(cfg, ctx, theta, grad, **kw)


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
#
# Nothing below maps a buffer into host memory: tensors are buffers over
# ranges of allocations, made with ctx.buffer_from_ptr(device address +
# offset), which is the host address on a CPU context and the device address
# on a CUDA context (the CUDA backend accepts any pointer inside an
# allocation of its device). The host only writes the one-hot matrices and
# the RoPE tables and reads the output distribution back for the loss, so
# the same code trains on a CPU and on a CUDA context.
#
# Head layout. Attention and RoPE take [batch, heads, seq, hd]; the
# projections produce tokens x (head, hd). The per-head tensors are kept as
# [H, B, T, hd] and handed to attention and RoPE as batch 1 with H*B heads:
# every (h, b) block is an independent causal sequence of T rows, so this is
# the same maths as [B, H, T, hd]. In that layout head h of all B*T tokens is
# one contiguous [B*T, hd] matrix, which is what the reordering GEMMs below
# need:
#   tokens [N, G*hd] -> heads [G, N, hd]:  C_g = A[:, g*hd:(g+1)*hd] @ I
#   heads [G, N, hd] -> transposed tokens [G*hd, N]:  C_g = I @ (head g)^T
# (gemm_batched over g. It refuses batches of C whose spans overlap, as
# interleaved column blocks of [N, G*hd] would, so the way back to tokens
# gives the transposed layout, which the following products read with
# transpose flags.) A product with the identity is exact in f32 (one
# non-zero term per output), as is the "axpy" y = alpha x + beta y written as
# [n/k, k] @ I_k with k = gcd(hd, n): an ordinary GEMM shape for which every
# BLAS has an algorithm. These reorderings and copies never run on TF32.


class _Flat:
    """Buffers over ranges of a flat f32 array or Buffer of cfg.size() floats
    (no copies): the model's tensors as views of theta or of the gradient."""

    def __init__(self, ctx, cfg, x):
        self.ctx, self.cfg, self.owner = ctx, cfg, x  # owner keeps the memory alive
        n = cfg.size()
        if isinstance(x, np.ndarray):  # host memory: CPU contexts only (a CUDA context refuses the address)
            if x.dtype != np.float32 or not x.flags.c_contiguous or x.size < n:
                raise ValueError("expected a contiguous float32 array of at least %d elements" % n)
            self.addr = x.ctypes.data
        else:
            if x.size() < 4 * n:
                raise ValueError("expected a buffer of at least %d bytes" % (4 * n))
            self.addr = x.device_ptr()
        self.t = {name: self.range(off, int(np.prod(shape))) for name, (off, shape) in cfg.offsets().items()}
        for i in range(cfg.layers):  # Wq, Wk, Wv as one [3*dim, dim] matrix
            off = cfg.offsets()["blk.%d.attn_q.weight" % i][0]
            self.t["blk.%d.qkv" % i] = self.range(off, 3 * cfg.dim * cfg.dim)

    def range(self, off, n):
        """A Buffer over floats [off, off + n)."""
        return self.ctx.buffer_from_ptr(self.addr + 4 * off, 4 * n)

    def __getitem__(self, name):
        return self.t[name]


class _Acts:
    """Every activation buffer of one (B, T): allocated once, reused each step."""

    def __init__(self, ctx, cfg, B, T):
        N, D, F, H, hd, V = B * T, cfg.dim, cfg.ffn, cfg.heads, cfg.head_dim, cfg.vocab
        L = cfg.layers
        self._owners = []

        def new(n):
            buf = ctx.buffer(4 * n)
            self._owners.append(buf)
            return buf

        def part(buf, off, n):  # floats [off, off + n) of buf
            return ctx.buffer_from_ptr(buf.device_ptr() + 4 * off, 4 * n)

        hs = H * N * hd  # one of q, k, v: [H, B, T, hd]
        self.onehot_x, self.onehot_y = new(N * V), new(N * V)  # inputs (embedding), targets (dlogits)
        self.h = [new(N * D) for _ in range(L + 1)]  # residual stream entering each block (and the last)
        self.a, self.h1, self.b = ([new(N * D) for _ in range(L)] for _ in range(3))
        self.r1, self.r2 = ([new(N) for _ in range(L)] for _ in range(2))
        self.qkv = [new(3 * hs) for _ in range(L)]  # [3H, B, T, hd]: q, k (RoPE'd) and v of every head
        self.q, self.k, self.v = ([part(t, j * hs, hs) for t in self.qkv] for j in range(3))
        self.qk = [part(t, 0, 2 * hs) for t in self.qkv]  # q and k, rotated by one RoPE call
        self.o = [new(hs) for _ in range(L)]  # attention output [H, B, T, hd]
        self.oT = [new(N * D) for _ in range(L)]  # the same as [D, N]: o's tokens, transposed
        self.lse = [new(H * N) for _ in range(L)]
        self.gate, self.up, self.m = ([new(N * F) for _ in range(L)] for _ in range(3))
        self.f, self.rf = new(N * D), new(N)
        self.logits, self.probs = new(N * V), new(N * V)
        self.cos, self.sin = new(T * (hd // 2)), new(T * (hd // 2))
        cos, sin = rope_tables(cfg, T)
        self.cos.write(np.ascontiguousarray(cos))
        self.sin.write(np.ascontiguousarray(sin))
        # scratch shared by the layers: the q/k/v projections in token layout
        # [N, 3D] (forward) and their gradients transposed, [3D, N] (backward)
        self.tok = new(N * 3 * D)
        self.dqkv = new(3 * hs)  # dq, dk, dv [3H, B, T, hd]
        self.dq, self.dk, self.dv = (part(self.dqkv, j * hs, hs) for j in range(3))
        self.dqk = part(self.dqkv, 0, 2 * hs)
        self.dh, self.db, self.da, self.do2, self.df = (new(N * D) for _ in range(5))
        self.do = new(hs)
        self.dm, self.dgate, self.dup = (new(N * F) for _ in range(3))
        # host staging: the one-hot rows written each step, the distribution read back
        self.onehot_host = np.zeros((N, V), np.float32)
        self.probs_host = np.empty((N, V), np.float32)


class TcModel:
    """The model on tensorcore kernels, on a CPU or a CUDA context.

    theta and grad: Buffers of the context holding cfg.size() floats (or,
    on a CPU context, flat f32 arrays); their memory is used in place (the
    gradient is written straight into grad). tf32=True lets the matrix
    products of the model run on TF32 tensor cores (ignored on the CPU).

    stream=True enqueues the kernels of a forward (and of a backward) pass
    on a stream of the context and waits once at the end, instead of
    waiting for every kernel: on a GPU the host then prepares the next
    kernels while the device runs. The host touches the buffers only after
    such a wait (reading the distribution, the logits) or before any kernel
    of the pass is enqueued (writing the one-hot rows), and every public
    call returns with the stream drained, so the gradient is complete for
    whatever runs next (the allreduce, AdamW)."""

    def __init__(self, cfg, ctx, theta, grad, tf32=False, stream=False):
        self.cfg, self.ctx, self.tf32 = cfg, ctx, tf32
        self.stream = ctx.stream() if stream else None
        self.P, self.G = _Flat(ctx, cfg, theta), _Flat(ctx, cfg, grad)
        # 3H copies of I [hd, hd]: gemm_batched has no broadcast stride, so
        # each batch of a reordering reads its own identity.
        H, hd = cfg.heads, cfg.head_dim
        eye = np.ascontiguousarray(np.tile(np.eye(hd, dtype=np.float32), (3 * H, 1, 1)))
        self.eye = ctx.buffer(eye.nbytes)
        self.eye.write(eye)
        self.acts = {}

    def _acts(self, B, T):
        x = self.acts.get((B, T))
        if x is None:
            x = self.acts[(B, T)] = _Acts(self.ctx, self.cfg, B, T)
        return x

    # ---- the few shapes of GEMM the model uses ----

    def _gemm(self, A, Bm, C, M, N, K, ta=False, tb=False, alpha=1.0, beta=0.0, exact=False):
        """C = alpha op(A) op(B) + beta C in f32; `exact` products (one-hot
        rows) never run on TF32."""
        self.ctx.gemm(A, Bm, C, M, N, K, dtype="f32", accum="f32", alpha=alpha, beta=beta, transpose_a=ta,
                      transpose_b=tb, allow_tf32=self.tf32 and not exact, stream=self.stream)

    def _axpy(self, x, y, n, alpha=1.0, beta=1.0):
        """y = alpha x + beta y over n floats (beta = 0: a copy), exactly."""
        k = math.gcd(self.cfg.head_dim, n)
        self.ctx.gemm(x, self.eye, y, n // k, k, k, dtype="f32", accum="f32", alpha=alpha, beta=beta,
                      ldb=self.cfg.head_dim, stream=self.stream)

    def _to_heads(self, src, dst, groups, N, ld):
        """dst [groups, N, hd] <- the column blocks of src [N, ld]."""
        hd = self.cfg.head_dim
        self.ctx.gemm_batched(src, self.eye, dst, groups, N, hd, hd, dtype="f32", accum="f32", lda=ld,
                              stride_a=hd, stride_b=hd * hd, stride_c=N * hd, stream=self.stream)

    def _heads_to_t(self, src, dst, groups, N):
        """dst [groups * hd, N] <- src [groups, N, hd] (block g is head g transposed)."""
        hd = self.cfg.head_dim
        self.ctx.gemm_batched(self.eye, src, dst, groups, hd, N, hd, dtype="f32", accum="f32", transpose_b=True,
                              stride_a=hd * hd, stride_b=N * hd, stride_c=hd * N, stream=self.stream)

    def _sync(self):
        """Waits for the kernels enqueued on the stream (none without one)."""
        if self.stream is not None:
            self.stream.sync()

    def _onehot(self, x, buf, ids):
        """buf [N, V] <- the one-hot rows of ids (built on the host, one write)."""
        oh = x.onehot_host
        oh[...] = 0.0
        oh[np.arange(oh.shape[0]), np.asarray(ids).reshape(-1)] = 1.0
        buf.write(oh)

    # ---- the interface ----

    def logits(self, tokens):
        x = self._forward(tokens)
        self._sync()
        out = np.empty((tokens.size, self.cfg.vocab), np.float32)
        x.logits.read(out)
        return out.reshape(*tokens.shape, -1)

    def loss(self, tokens, targets):
        x = self._forward(tokens)
        return self._loss(x, tokens, targets)

    def loss_and_grad(self, tokens, targets):
        x = self._forward(tokens)
        loss = self._loss(x, tokens, targets)
        self._backward(x, tokens, targets)
        self._sync()
        return loss

    def _loss(self, x, tokens, targets):
        """Mean -log p(target) from softmax_forward's probabilities, read back
        (floored at the smallest normal f32 so that a vanishing probability
        stays finite)."""
        N = tokens.size
        self.ctx.softmax_forward(x.logits, x.probs, N, self.cfg.vocab, dtype="f32", stream=self.stream)
        self._sync()
        x.probs.read(x.probs_host)
        pt = x.probs_host[np.arange(N), np.asarray(targets).reshape(-1)]
        return float(-np.mean(np.log(np.maximum(pt.astype(np.float64), np.finfo(np.float32).tiny))))

    def _forward(self, tokens):
        ctx, cfg, P = self.ctx, self.cfg, self.P
        B, T = tokens.shape
        N, D, F, H, hd, V = B * T, cfg.dim, cfg.ffn, cfg.heads, cfg.head_dim, cfg.vocab
        x = self._acts(B, T)
        st = self.stream  # None: each kernel runs before its call returns
        rope_kw = dict(dtype="f32", interleaved=cfg.rope_interleaved, stream=st)
        # h0 = onehot(tokens) @ E: exact (one 1 per row), and its transpose gives dE.
        self._onehot(x, x.onehot_x, tokens)
        self._gemm(x.onehot_x, P["token_embd.weight"], x.h[0], N, D, V, exact=True)
        for i in range(cfg.layers):
            L = lambda n: P["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            ctx.rmsnorm_forward(x.h[i], L("attn_norm"), x.a[i], x.r1[i], N, D, eps=EPS, dtype="f32", stream=st)
            self._gemm(x.a[i], P["blk.%d.qkv" % i], x.tok, N, 3 * D, D, tb=True)  # [N, (q|k|v, head, hd)]
            self._to_heads(x.tok, x.qkv[i], 3 * H, N, 3 * D)
            ctx.rope_forward(x.qk[i], x.cos, x.sin, 1, 2 * H * B, T, hd, **rope_kw)
            ctx.attention_forward(x.q[i], x.k[i], x.v[i], x.o[i], 1, H * B, T, T, hd, LSE=x.lse[i], dtype="f32",
                                  accum="f32", causal=True, stream=st)
            self._heads_to_t(x.o[i], x.oT[i], H, N)
            # h1 = h + o Wo^T: the product accumulates onto a copy of h (beta = 1)
            self._axpy(x.h[i], x.h1[i], N * D, beta=0.0)
            self._gemm(x.oT[i], L("attn_output"), x.h1[i], N, D, D, ta=True, tb=True, beta=1.0)
            ctx.rmsnorm_forward(x.h1[i], L("ffn_norm"), x.b[i], x.r2[i], N, D, eps=EPS, dtype="f32", stream=st)
            self._gemm(x.b[i], L("ffn_gate"), x.gate[i], N, F, D, tb=True)
            self._gemm(x.b[i], L("ffn_up"), x.up[i], N, F, D, tb=True)
            ctx.swiglu_forward(x.gate[i], x.up[i], x.m[i], N * F, dtype="f32", stream=st)
            self._axpy(x.h1[i], x.h[i + 1], N * D, beta=0.0)
            self._gemm(x.m[i], L("ffn_down"), x.h[i + 1], N, D, F, tb=True, beta=1.0)
        ctx.rmsnorm_forward(x.h[cfg.layers], P["output_norm.weight"], x.f, x.rf, N, D, eps=EPS, dtype="f32",
                            stream=st)
        self._gemm(x.f, P["output.weight"], x.logits, N, V, D, tb=True)
        return x

    def _backward(self, x, tokens, targets):
        """Writes every element of the gradient; x.probs must be this batch's."""
        ctx, cfg, P, G = self.ctx, self.cfg, self.P, self.G
        B, T = tokens.shape
        N, D, F, H, hd, V = B * T, cfg.dim, cfg.ffn, cfg.heads, cfg.head_dim, cfg.vocab
        st = self.stream  # None: each kernel runs before its call returns
        rope_kw = dict(dtype="f32", interleaved=cfg.rope_interleaved, stream=st)
        # dlogits = (probs - onehot(targets)) / N: the 1/N rides on the GEMMs' alpha.
        self._onehot(x, x.onehot_y, targets)
        self._axpy(x.onehot_y, x.probs, N * V, alpha=-1.0)
        dlog = x.probs
        self._gemm(dlog, P["output.weight"], x.df, N, D, V, alpha=1.0 / N)
        self._gemm(dlog, x.f, G["output.weight"], V, D, N, ta=True, alpha=1.0 / N)
        ctx.rmsnorm_backward(x.h[cfg.layers], P["output_norm.weight"], x.df, x.rf, x.dh, G["output_norm.weight"], N,
                             D, dtype="f32", stream=st)
        for i in reversed(range(cfg.layers)):
            L = lambda n: P["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            W = lambda n: G["blk.%d.%s.weight" % (i, n)]  # noqa: E731
            # SwiGLU block: dh is the gradient of the block's output h2 = h1 + m Wd^T
            self._gemm(x.dh, L("ffn_down"), x.dm, N, F, D)
            self._gemm(x.dh, x.m[i], W("ffn_down"), D, F, N, ta=True)
            ctx.swiglu_backward(x.gate[i], x.up[i], x.dm, x.dgate, x.dup, N * F, dtype="f32", stream=st)
            self._gemm(x.dgate, x.b[i], W("ffn_gate"), F, D, N, ta=True)
            self._gemm(x.dup, x.b[i], W("ffn_up"), F, D, N, ta=True)
            self._gemm(x.dgate, L("ffn_gate"), x.db, N, D, F)
            self._gemm(x.dup, L("ffn_up"), x.db, N, D, F, beta=1.0)
            ctx.rmsnorm_backward(x.h1[i], L("ffn_norm"), x.db, x.r2[i], x.db, W("ffn_norm"), N, D, dtype="f32",
                                 stream=st)
            self._axpy(x.db, x.dh, N * D)  # now the gradient of h1 = h + o Wo^T
            # attention block: dWo = dh1^T o (o as oT [D, N]); do = dh1 Wo, to heads
            self._gemm(x.dh, x.oT[i], W("attn_output"), D, D, N, ta=True, tb=True)
            self._gemm(x.dh, L("attn_output"), x.do2, N, D, D)
            self._to_heads(x.do2, x.do, H, N, D)
            ctx.attention_backward(x.q[i], x.k[i], x.v[i], x.o[i], x.do, x.lse[i], x.dq, x.dk, x.dv, 1, H * B, T, T,
                                   hd, dtype="f32", accum="f32", causal=True, stream=st)
            ctx.rope_backward(x.dqk, x.cos, x.sin, 1, 2 * H * B, T, hd, **rope_kw)
            # [dq | dk | dv] as [3D, N]: dWqkv = that @ a, da = its transpose @ Wqkv
            self._heads_to_t(x.dqkv, x.tok, 3 * H, N)
            self._gemm(x.tok, x.a[i], G["blk.%d.qkv" % i], 3 * D, D, N)
            self._gemm(x.tok, P["blk.%d.qkv" % i], x.da, N, D, 3 * D, ta=True)
            ctx.rmsnorm_backward(x.h[i], L("attn_norm"), x.da, x.r1[i], x.da, W("attn_norm"), N, D, dtype="f32",
                                 stream=st)
            self._axpy(x.da, x.dh, N * D)  # the gradient of the block's input h
        self._gemm(x.onehot_x, x.dh, G["token_embd.weight"], V, D, N, ta=True, exact=True)


class TcAdamW:
    """tensorcore's adamw_step on the flat parameter buffer: one call over
    the matrices [0, n_decay) with weight decay, one over the norm weights
    [n_decay, n) without. m and v are buffers of the same context."""

    def __init__(self, cfg, ctx, theta, grad, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1):
        self.ctx = ctx
        n, nd = cfg.size(), cfg.n_decay()
        self.P, self.G = _Flat(ctx, cfg, theta), _Flat(ctx, cfg, grad)
        self.m, self.v = ctx.buffer(4 * n), ctx.buffer(4 * n)
        zeros = np.zeros(n, np.float32)
        self.m.write(zeros)
        self.v.write(zeros)
        addr_m, addr_v = self.m.device_ptr(), self.v.device_ptr()
        self.ranges = []
        for off, cnt, decay in ((0, nd, wd), (nd, n - nd, 0.0)):
            self.ranges.append((self.P.range(off, cnt), ctx.buffer_from_ptr(addr_m + 4 * off, 4 * cnt),
                                ctx.buffer_from_ptr(addr_v + 4 * off, 4 * cnt), self.G.range(off, cnt), cnt, decay))
        self.t = 0
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps

    def step(self, lr=None):
        lr = self.lr if lr is None else lr
        self.t += 1
        bc1, bc2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, m, v, g, cnt, wd in self.ranges:
            self.ctx.adamw_step(p, m, v, g, "f32", cnt, lr, self.b1, self.b2, self.eps, wd, bc1, bc2)


def host_copy(cfg, theta):
    """theta as a flat float32 host array: itself when it is one, else read
    back from its Buffer (a CUDA buffer has no host address)."""
    if isinstance(theta, np.ndarray):
        return theta
    return theta.to_numpy(cfg.size(), np.float32)


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
    p = views(cfg, host_copy(cfg, theta))
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


def decode_gguf(path, prompt_ids, n_new, device=None):
    """Greedy decoding from the GGUF with tensorcore's LLaMA harness
    (tensorcore.llama.Llama, KV cache, interleaved RoPE) on `device` (the
    harness's default when None): (the n_new token ids, the harness's logits
    [len(prompt) + n_new - 1, vocab] of the whole sequence in one evaluation)."""
    from tensorcore.llama import Llama
    with Llama(str(path), n_ctx=len(prompt_ids) + n_new, activations="f32", kv_type="f32", device=device) as m:
        new = m.generate(prompt_ids, n_new)
        m.reset()
        logits = m.eval(list(prompt_ids) + new[:-1])
    return new, logits
