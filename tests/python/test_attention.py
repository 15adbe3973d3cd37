"""Attention forward and backward against a float64 NumPy reference that
materialises the scores, on fresh random inputs with poisoned outputs; the
backward also against central finite differences; bad input leaves every
buffer untouched.

The feature matrix is complete: GQA (H = 4, Hkv in 4, 2, 1) x causal x
window x ALiBi x (Sq == Skv, Sq < Skv, decode Sq = 1, Sq > Skv) x dtype x
head_dim (5, 64, 128, 256). Shapes stay small so it runs in seconds; a few
larger cases cross the 64-row/64-key tiles. Tolerances are relative to the
largest magnitude of each reference tensor: TOLERANCE[dtype] (f32 1e-5,
f16/bf16 1e-2), doubled for bf16 gradients (O and dO reach the backward
rounded to 8 bits, and Dd = <dO, O> carries that error into every dS).
"""

import itertools
import time

import numpy as np
import pytest

import tensorcore as tc
from conftest import ELEMENT_SIZE, TOLERANCE, np_dtype, poison, random_array, run_python, to_f64

H = 4
SEQ_CASES = {"eq": (29, 29), "lt": (11, 40), "decode": (1, 37), "gt": (33, 14)}
WINDOW = 6


@pytest.fixture
def actx(ctx):
    caps = tc.runtime_capabilities(ctx)
    if not tc.capability_available(caps, "attention_backward"):
        pytest.skip("no attention kernels on %s" % ctx.device)
    return ctx


# ---- the reference -----------------------------------------------------------------------

def visible(sq, skv, causal, window):
    """[Sq, Skv] mask of the keys each query sees, and the query positions."""
    pos = np.arange(sq) + (skv - sq)
    j = np.arange(skv)
    vis = np.ones((sq, skv), dtype=bool)
    if causal or window > 0:
        vis &= j[None, :] <= pos[:, None]
    if window > 0:
        vis &= j[None, :] > pos[:, None] - window
    return vis, pos


def reference(q, k, v, do, causal=True, window=0, slopes=None, scale=None, o_given=None):
    """O, LSE, dQ, dK, dV in float64 from [B, H, S, D] arrays (K, V with Hkv heads).

    The backward's row term D = rowsum(dO * O) is taken from `o_given`, the O
    the backward op is handed (rounded to the io dtype), when one is passed:
    in the softmax gradient dP - D cancels, so the rounding of O matters."""
    B, Hq, sq, D = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    G = Hq // hkv
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    kr, vr = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)
    s = scale * (q @ np.swapaxes(kr, -1, -2))
    vis, pos = visible(sq, skv, causal, window)
    if slopes is not None:
        s = s - np.asarray(slopes, np.float64)[None, :, None, None] * (pos[:, None] - np.arange(skv)[None, :])
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    e = np.where(vis, np.exp(s - np.where(empty, 0.0, m)), 0.0)
    l = e.sum(axis=-1, keepdims=True)
    p = e / np.where(empty, 1.0, l)
    o = p @ vr
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, l)))[..., 0]
    dp = do @ np.swapaxes(vr, -1, -2)
    rowterm = (p * dp).sum(axis=-1, keepdims=True) if o_given is None else (do * o_given).sum(axis=-1, keepdims=True)
    ds = p * (dp - rowterm) * scale
    dq = ds @ kr
    dkr = np.swapaxes(ds, -1, -2) @ q
    dvr = np.swapaxes(p, -1, -2) @ do
    dk = dkr.reshape(B, hkv, G, skv, D).sum(axis=2)
    dv = dvr.reshape(B, hkv, G, skv, D).sum(axis=2)
    return o, lse, dq, dk, dv


def alibi_slopes(heads):
    return (2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)).astype(np.float32)


# ---- running the library -----------------------------------------------------------------

class Problem:
    """Random inputs for one configuration, uploaded, with poisoned outputs."""

    def __init__(self, ctx, rng, dtype, B, heads, hkv, sq, skv, D, alibi=False):
        self.ctx, self.dtype = ctx, dtype
        self.dims = dict(batch=B, heads=heads, seq_q=sq, seq_kv=skv, head_dim=D)
        self.hkv = hkv
        self.q = random_array(rng, (B, heads, sq, D), dtype)
        self.k = random_array(rng, (B, hkv, skv, D), dtype)
        self.v = random_array(rng, (B, hkv, skv, D), dtype)
        self.do = random_array(rng, (B, heads, sq, D), dtype)
        self.slopes = alibi_slopes(heads) if alibi else None
        self.Q, self.K, self.V, self.dO = (ctx.buffer_from_array(x) for x in (self.q, self.k, self.v, self.do))
        es = ELEMENT_SIZE[dtype]
        self.O = ctx.buffer_from_array(poison(self.q.size * es))
        self.LSE = ctx.buffer_from_array(poison(B * heads * sq * 4))
        self.dQ = ctx.buffer_from_array(poison(self.q.size * es))
        self.dK = ctx.buffer_from_array(poison(self.k.size * es))
        self.dV = ctx.buffer_from_array(poison(self.k.size * es))

    def gradient_floors(self, o, scale=None):
        """(dQ, dK) floors for close(): softmax_scale * max|rowsum(dO * O)|
        times max|K| (for dQ) or max|Q| (for dK), the size of the terms
        whose difference the gradients are."""
        f = lambda x: to_f64(x, self.dtype)  # noqa: E731
        scale = 1.0 / np.sqrt(self.q.shape[-1]) if scale is None else scale
        d = np.abs((f(self.do) * o).sum(-1)).max(initial=0.0)
        return scale * d * np.abs(f(self.k)).max(), scale * d * np.abs(f(self.q)).max()

    def read(self, buf, like, dtype=None):
        return to_f64(buf.to_numpy(like.shape, np_dtype(dtype or self.dtype)), dtype or self.dtype)

    def forward(self, **kw):
        self.ctx.attention_forward(self.Q, self.K, self.V, self.O, **self.dims, LSE=self.LSE, dtype=self.dtype,
                                   kv_heads=self.hkv, alibi_slopes=self.slopes, **kw)
        lse = to_f64(self.LSE.to_numpy(self.q.shape[:3], np.float32))
        return self.read(self.O, self.q), lse

    def backward(self, **kw):
        self.ctx.attention_backward(self.Q, self.K, self.V, self.O, self.dO, self.LSE, self.dQ, self.dK, self.dV,
                                    **self.dims, dtype=self.dtype, kv_heads=self.hkv, alibi_slopes=self.slopes,
                                    **kw)
        return self.read(self.dQ, self.q), self.read(self.dK, self.k), self.read(self.dV, self.k)

    def reference(self, causal, window, scale=None, o_given=None):
        f = lambda x: to_f64(x, self.dtype)  # noqa: E731
        return reference(f(self.q), f(self.k), f(self.v), f(self.do), causal, window, self.slopes, scale, o_given)


def close(what, got, want, rtol, floor=0.0):
    """Every element written (finite where the reference is) and within
    rtol * max(max|want|, floor); -inf LSE rows must be -inf exactly. `floor`
    is the magnitude of the terms that cancel in a gradient that is exactly
    zero in exact arithmetic (one visible key: dP - rowsum(dO * O) = 0)."""
    got, want = np.asarray(got), np.asarray(want)
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), "%s: rows without keys must be %r" % (what, want[inf][:1])
    g, w = got[~inf], want[~inf]
    assert np.isfinite(g).all(), "%s: %d non-finite outputs (unwritten?)" % (what, (~np.isfinite(g)).sum())
    scale = max(np.abs(w).max(initial=0.0), floor, 1e-30)
    err = np.abs(g - w)
    assert (err <= rtol * scale).all(), "%s: %d elements off, worst %g (limit %g)" % (
        what, (err > rtol * scale).sum(), err.max(), rtol * scale)


def check_problem(p, causal, window, scale=None, **kw):
    o, lse = p.forward(causal=causal, window_size=window, softmax_scale=scale, **kw)
    ro, rlse, rdq, rdk, rdv = p.reference(causal, window, scale)
    tol = TOLERANCE[p.dtype]
    close("O", o, ro, tol)
    close("LSE", lse, rlse, max(tol, 1e-5) / 4 if p.dtype == "f32" else 2e-3)
    dq, dk, dv = p.backward(causal=causal, window_size=window, softmax_scale=scale, **kw)
    # The gradients the op defines for the O it was given (the stored, rounded one).
    _, _, rdq, rdk, rdv = p.reference(causal, window, scale, o_given=o)
    gtol = 2 * tol if p.dtype == "bf16" else tol
    fq, fk = p.gradient_floors(o, scale)
    close("dQ", dq, rdq, gtol, fq)
    close("dK", dk, rdk, gtol, fk)
    close("dV", dv, rdv, gtol)


# ---- the feature matrix ------------------------------------------------------------------

MATRIX = list(itertools.product(["f32", "f16", "bf16"], [5, 64, 128, 256], [4, 2, 1], [False, True],
                                [0, WINDOW], [False, True], list(SEQ_CASES)))


@pytest.mark.parametrize("dtype,D,hkv,causal,window,alibi,seq", MATRIX, ids=[
    "%s-D%d-Hkv%d-%s-%s-%s-%s" % (dt, D, hkv, "causal" if c else "full", "win" if w else "nowin",
                                  "alibi" if a else "noalibi", s) for dt, D, hkv, c, w, a, s in MATRIX])
def test_feature_matrix(actx, rng, dtype, D, hkv, causal, window, alibi, seq):
    sq, skv = SEQ_CASES[seq]
    p = Problem(actx, rng, dtype, 1, H, hkv, sq, skv, D, alibi)
    check_problem(p, causal, window)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("causal,window,alibi,hkv,sq,skv", [
    (True, 0, False, 2, 150, 150),     # several row and key tiles, diagonal tiles masked
    (False, 70, True, 4, 130, 200),    # window spanning tile edges
    (True, 0, True, 1, 140, 90),       # early rows see no key
    (False, 0, False, 2, 1, 300),      # decode over several key tiles
])
def test_larger_than_a_tile(actx, rng, dtype, causal, window, alibi, hkv, sq, skv):
    p = Problem(actx, rng, dtype, 2, H, hkv, sq, skv, 64, alibi)
    check_problem(p, causal, window)


# On CUDA, f16/bf16 with head_dim a multiple of 8 run the tensor-core kernels
# (head_dim padded to 64, 128 or 256 in the forward; up to 128 in the
# backward); everything else runs the row-wise f32 kernels. These cases cross
# the 64-row/64-key tiles with ragged edges (sizes not multiples of 64, and 1)
# and name the kernel that ran.
CUDA_PATHS = [
    # dtype, D, hkv, causal, window, alibi, sq, skv
    ("bf16", 64, 4, True, 0, False, 130, 130),
    ("f16", 128, 2, True, 0, False, 97, 161),     # Sq < Skv, bottom-right causal
    ("bf16", 128, 1, True, 0, True, 150, 70),     # Sq > Skv: early rows see nothing
    ("f16", 256, 2, False, 0, False, 70, 45),
    ("bf16", 256, 4, True, 40, True, 65, 129),
    ("f16", 72, 2, False, 33, False, 100, 100),   # padded to 128
    ("bf16", 40, 1, False, 0, True, 1, 200),      # padded to 64, decode
    ("f16", 64, 2, True, 0, True, 1, 1),
    ("bf16", 64, 4, False, 0, False, 200, 1),
    ("f16", 5, 2, True, 20, True, 90, 110),       # odd head_dim: row-wise
    ("bf16", 36, 4, True, 0, False, 66, 66),      # not a multiple of 8: row-wise
    ("f32", 64, 2, True, 0, True, 70, 90),        # f32: row-wise
]


def expected_kernels(dtype, D):
    fast = dtype != "f32" and D % 8 == 0
    fwd = "attention_fwd_mma" if fast else "attention_fwd_rowwise"
    bwd = "attention_bwd_dq_convert" if fast and D <= 128 else "attention_bwd_dkdv_rowwise"
    return fwd, bwd


@pytest.mark.parametrize("dtype,D,hkv,causal,window,alibi,sq,skv", CUDA_PATHS, ids=[
    "%s-D%d-Hkv%d-%s-w%d-%s-%dx%d" % (dt, D, hkv, "causal" if c else "full", w, "alibi" if a else "noalibi", sq, skv)
    for dt, D, hkv, c, w, a, sq, skv in CUDA_PATHS])
def test_kernel_paths(actx, rng, monkeypatch, dtype, D, hkv, causal, window, alibi, sq, skv):
    # Our kernels, also for the cases cuDNN would otherwise take.
    monkeypatch.setenv("TC_CUDA_ATTENTION_CUDNN", "0")
    p = Problem(actx, rng, dtype, 2, H, hkv, sq, skv, D, alibi)
    o, lse = p.forward(causal=causal, window_size=window)
    fwd_kernel = tc.cuda_last_kernel_name() if actx.device == "cuda" else None
    ro, rlse, _, _, _ = p.reference(causal, window)
    tol = TOLERANCE[dtype]
    close("O", o, ro, tol)
    close("LSE", lse, rlse, max(tol, 1e-5) / 4 if dtype == "f32" else 2e-3)
    dq, dk, dv = p.backward(causal=causal, window_size=window)
    bwd_kernel = tc.cuda_last_kernel_name() if actx.device == "cuda" else None
    _, _, rdq, rdk, rdv = p.reference(causal, window, o_given=o)
    gtol = 2 * tol if dtype == "bf16" else tol
    fq, fk = p.gradient_floors(o)
    close("dQ", dq, rdq, gtol, fq)
    close("dK", dk, rdk, gtol, fk)
    close("dV", dv, rdv, gtol)
    if actx.device == "cuda":
        want_fwd, want_bwd = expected_kernels(dtype, D)
        assert fwd_kernel.startswith(want_fwd), fwd_kernel
        assert bwd_kernel.startswith(want_bwd), bwd_kernel


# cuDNN's fused attention (src/cuda/attention_cudnn.cu) takes f16/bf16 with
# head_dim % 8 == 0, no ALiBi, causal or window only with Sq <= Skv, when
# the library is built with it (tc.version() ends in "+cudnn"). These shapes
# are ones every cuDNN 9.3+ takes (Sq, Skv multiples of 64 for bottom-right
# causal before 9.6): the path must be cuDNN's and the numbers right.
CUDNN_CASES = [
    # dtype, D, hkv, causal, sq, skv
    ("bf16", 64, 4, True, 128, 128),
    ("f16", 128, 4, False, 128, 128),
    ("bf16", 128, 2, True, 64, 192),     # bottom-right causal, GQA
    ("f16", 64, 1, False, 100, 37),      # MQA, ragged sizes, Sq > Skv without a mask
    ("bf16", 256, 2, False, 64, 64),
]


def cudnn_in_build():
    return "+cudnn" in tc.version()


def cudnn_case_id(case):
    dt, D, hkv, c, sq, skv = case
    return "%s-D%d-Hkv%d-%s-%dx%d" % (dt, D, hkv, "causal" if c else "full", sq, skv)


@pytest.mark.parametrize("dtype,D,hkv,causal,sq,skv", CUDNN_CASES, ids=[cudnn_case_id(c) for c in CUDNN_CASES])
def test_cudnn_path(actx, rng, monkeypatch, dtype, D, hkv, causal, sq, skv):
    if actx.device != "cuda":
        pytest.skip("cuDNN is the CUDA backend's")
    monkeypatch.delenv("TC_CUDA_ATTENTION_CUDNN", raising=False)
    monkeypatch.setenv("TC_CUDNN_PLAN_AFTER", "1")  # the plan at the shape's first call,
    monkeypatch.setenv("TC_CUDNN_PLAN_BACKGROUND", "0")  # built by that call
    p = Problem(actx, rng, dtype, 2, H, hkv, sq, skv, D)
    o, lse = p.forward(causal=causal)
    fwd_kernel = tc.cuda_last_kernel_name()
    dq, dk, dv = p.backward(causal=causal)
    bwd_kernel = tc.cuda_last_kernel_name()
    print("paths:", fwd_kernel, bwd_kernel)
    ro, rlse, _, _, _ = p.reference(causal, 0)
    tol = TOLERANCE[dtype]
    close("O", o, ro, tol)
    close("LSE", lse, rlse, 2e-3)
    _, _, rdq, rdk, rdv = p.reference(causal, 0, o_given=o)
    gtol = 2 * tol if dtype == "bf16" else tol
    fq, fk = p.gradient_floors(o)
    close("dQ", dq, rdq, gtol, fq)
    close("dK", dk, rdk, gtol, fk)
    close("dV", dv, rdv, gtol)
    if cudnn_in_build():
        assert fwd_kernel == "cudnn_sdpa_fprop", fwd_kernel
        assert bwd_kernel == "cudnn_sdpa_bprop", bwd_kernel
    else:
        assert fwd_kernel.startswith("attention_fwd_mma"), fwd_kernel


def test_cudnn_forward_without_lse(actx, rng, monkeypatch):
    """The forward without an LSE output (cuDNN's inference graph)."""
    if actx.device != "cuda":
        pytest.skip("cuDNN is the CUDA backend's")
    monkeypatch.delenv("TC_CUDA_ATTENTION_CUDNN", raising=False)
    monkeypatch.setenv("TC_CUDNN_PLAN_AFTER", "1")  # the plan at the shape's first call,
    monkeypatch.setenv("TC_CUDNN_PLAN_BACKGROUND", "0")  # built by that call
    p = Problem(actx, rng, "bf16", 2, H, 2, 128, 128, 64)
    actx.attention_forward(p.Q, p.K, p.V, p.O, **p.dims, dtype="bf16", kv_heads=p.hkv, causal=True)
    kernel = tc.cuda_last_kernel_name()
    ro, _, _, _, _ = p.reference(True, 0)
    close("O", p.read(p.O, p.q), ro, TOLERANCE["bf16"])
    if cudnn_in_build():
        assert kernel == "cudnn_sdpa_fprop", kernel


def test_cudnn_window_and_alibi(actx, rng, monkeypatch):
    """A shape cuDNN has a plan for, then the same shape with windows (cuDNN
    takes them from 9.2, with its own plan) and with ALiBi (always our
    kernels): each with its own semantics."""
    if actx.device != "cuda":
        pytest.skip("cuDNN is the CUDA backend's")
    monkeypatch.delenv("TC_CUDA_ATTENTION_CUDNN", raising=False)
    monkeypatch.setenv("TC_CUDNN_PLAN_AFTER", "1")  # the plan at the shape's first call,
    monkeypatch.setenv("TC_CUDNN_PLAN_BACKGROUND", "0")  # built by that call
    for causal, alibi, window, sq, skv in ((True, False, 0, 128, 128), (True, False, 20, 128, 128),
                                           (False, False, 33, 128, 128), (False, False, 20, 64, 192),
                                           (True, True, 0, 128, 128)):
        p = Problem(actx, rng, "bf16", 1, H, 2, sq, skv, 64, alibi)
        o, lse = p.forward(causal=causal, window_size=window)
        kernel = tc.cuda_last_kernel_name()
        dq, dk, dv = p.backward(causal=causal, window_size=window)
        bkernel = tc.cuda_last_kernel_name()
        print("causal=%s alibi=%s window=%d %dx%d: %s, %s" % (causal, alibi, window, sq, skv, kernel, bkernel))
        ro, rlse, _, _, _ = p.reference(causal, window)
        close("O", o, ro, TOLERANCE["bf16"])
        close("LSE", lse, rlse, 2e-3)
        _, _, rdq, rdk, rdv = p.reference(causal, window, o_given=o)
        fq, fk = p.gradient_floors(o)
        close("dQ", dq, rdq, 2 * TOLERANCE["bf16"], fq)
        close("dK", dk, rdk, 2 * TOLERANCE["bf16"], fk)
        close("dV", dv, rdv, 2 * TOLERANCE["bf16"])
        if alibi:
            assert kernel.startswith("attention_fwd_mma"), kernel
            assert bkernel.startswith("attention_bwd_dq_convert"), bkernel
        elif not window and cudnn_in_build():
            assert (kernel, bkernel) == ("cudnn_sdpa_fprop", "cudnn_sdpa_bprop"), (kernel, bkernel)


@pytest.mark.parametrize("after", [2, 3])
def test_cudnn_plan_at_the_shapes_nth_call(actx, rng, monkeypatch, after):
    """TC_CUDNN_PLAN_AFTER=N: a shape's first N-1 calls run on our kernels
    (no plan built: cuDNN compiles its engines, 0.1-1 s), the Nth builds
    the plan (TC_CUDNN_PLAN_BACKGROUND=0: in that call) and runs cuDNN's;
    every call's output is right."""
    if actx.device != "cuda":
        pytest.skip("cuDNN is the CUDA backend's")
    monkeypatch.delenv("TC_CUDA_ATTENTION_CUDNN", raising=False)
    monkeypatch.setenv("TC_CUDNN_PLAN_AFTER", str(after))
    monkeypatch.setenv("TC_CUDNN_PLAN_BACKGROUND", "0")
    p = Problem(actx, rng, "bf16", 1 + after, H, 2, 128, 128, 64)  # a batch no other test uses: a new shape
    ro, _, _, _, _ = p.reference(True, 0)
    kernels = []
    for _ in range(after + 1):
        p.O = actx.buffer_from_array(poison(p.q.size * ELEMENT_SIZE["bf16"]))  # each call writes every output
        actx.attention_forward(p.Q, p.K, p.V, p.O, **p.dims, dtype="bf16", kv_heads=p.hkv, causal=True)
        kernels.append(tc.cuda_last_kernel_name())
        close("O", p.read(p.O, p.q), ro, TOLERANCE["bf16"])
    assert all(k.startswith("attention_fwd_mma") for k in kernels[:after - 1]), kernels
    if cudnn_in_build():
        assert kernels[after - 1:] == ["cudnn_sdpa_fprop"] * 2, kernels


def test_cudnn_plan_built_in_the_background(actx, rng, monkeypatch):
    """By default the Nth call only starts the plan's build, on a helper
    thread: that call and the ones after it run on our kernels until the plan
    is ready, then cuDNN's runs (timed at its first run), forward and
    backward; every call's output is right, whichever path it took."""
    if actx.device != "cuda":
        pytest.skip("cuDNN is the CUDA backend's")
    monkeypatch.delenv("TC_CUDA_ATTENTION_CUDNN", raising=False)
    monkeypatch.delenv("TC_CUDNN_PLAN_BACKGROUND", raising=False)
    monkeypatch.setenv("TC_CUDNN_PLAN_AFTER", "2")
    p = Problem(actx, rng, "f16", 7, H, 2, 128, 128, 64)  # a batch no other test uses: a new shape
    ro, rlse, _, _, _ = p.reference(True, 0)
    forward, backward = [], []
    deadline = time.monotonic() + 120.0
    while time.monotonic() < deadline:
        p.O = actx.buffer_from_array(poison(p.q.size * ELEMENT_SIZE["f16"]))
        o, lse = p.forward(causal=True)
        forward.append(tc.cuda_last_kernel_name())
        close("O", o, ro, TOLERANCE["f16"])
        close("LSE", lse, rlse, 2e-3)
        p.backward(causal=True)
        backward.append(tc.cuda_last_kernel_name())
        if not cudnn_in_build() or (forward[-1], backward[-1]) == ("cudnn_sdpa_fprop", "cudnn_sdpa_bprop"):
            break
        time.sleep(0.05)
    print("forward:", forward, "backward:", backward)
    # The second call starts the builds; neither waits for them.
    want_fwd, want_bwd = expected_kernels("f16", 64)
    assert forward[1].startswith(want_fwd), forward
    assert backward[1].startswith(want_bwd), backward
    if cudnn_in_build():
        assert (forward[-1], backward[-1]) == ("cudnn_sdpa_fprop", "cudnn_sdpa_bprop"), (forward, backward)
        dq, dk, dv = p.backward(causal=True)
        _, _, rdq, rdk, rdv = p.reference(True, 0, o_given=o)
        fq, fk = p.gradient_floors(o)
        close("dQ", dq, rdq, TOLERANCE["f16"], fq)
        close("dK", dk, rdk, TOLERANCE["f16"], fk)
        close("dV", dv, rdv, TOLERANCE["f16"])


EXIT_DURING_A_BUILD = """
import numpy as np, tensorcore as tc
ctx = tc.Context("cuda")
shape = dict(batch=3, heads=4, seq_q=96, seq_kv=96, head_dim=64)
x = np.zeros((3, 4, 96, 64), np.float16)
Q, K, V, O = (ctx.buffer_from_array(x) for _ in range(4))
for _ in range(2):  # the second call queues the plan's build; nothing waits for it
    ctx.attention_forward(Q, K, V, O, **shape, dtype="f16", causal=True)
ctx.synchronize()
%s
print("done", flush=True)
"""


@pytest.mark.parametrize("close", [True, False], ids=["context-closed", "context-left-open"])
def test_exit_with_a_plan_build_in_flight(actx, close):
    """A process that ends right after queueing a plan's build: closing the
    context waits for it (no build runs on past its device's contexts, where
    exit would tear cuDNN down under it), and one that leaves the context to
    the end exits cleanly too."""
    if actx.device != "cuda" or not cudnn_in_build():
        pytest.skip("cuDNN's plans are the CUDA backend's")
    r = run_python(EXIT_DURING_A_BUILD % ("ctx.close()" if close else ""),
                   env={"TC_CUDNN_PLAN_AFTER": "2", "TC_CUDNN_PLAN_BACKGROUND": "1"}, timeout=120)
    assert r.returncode == 0 and "done" in r.stdout, (r.returncode, r.stderr[-2000:])


@pytest.mark.parametrize("dtype,D,hkv,causal,sq,skv", CUDNN_CASES[:3], ids=[cudnn_case_id(c) for c in CUDNN_CASES[:3]])
def test_cudnn_switch_off_runs_our_kernels(actx, rng, monkeypatch, dtype, D, hkv, causal, sq, skv):
    """TC_CUDA_ATTENTION_CUDNN=0: the same shapes on our tensor-core kernels."""
    if actx.device != "cuda":
        pytest.skip("cuDNN is the CUDA backend's")
    monkeypatch.setenv("TC_CUDA_ATTENTION_CUDNN", "0")
    p = Problem(actx, rng, dtype, 1, H, hkv, sq, skv, D)
    o, _ = p.forward(causal=causal)
    fwd_kernel = tc.cuda_last_kernel_name()
    p.backward(causal=causal)
    bwd_kernel = tc.cuda_last_kernel_name()
    want_fwd, want_bwd = expected_kernels(dtype, D)
    assert fwd_kernel.startswith(want_fwd), fwd_kernel
    assert bwd_kernel.startswith(want_bwd), bwd_kernel
    close("O", o, p.reference(causal, 0)[0], TOLERANCE[dtype])


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_every_vector_path(actx, rng, monkeypatch, isa):
    """TC_CPU_ISA caps the run-time choice (a path the processor lacks falls
    back to the best one available). CPU only."""
    if actx.device != "cpu":
        pytest.skip("the vector paths are the CPU's")
    monkeypatch.setenv("TC_CPU_ISA", isa)
    p = Problem(actx, rng, "f32", 1, H, 2, 70, 90, 40, alibi=True)
    check_problem(p, True, 50)


def test_explicit_scale_and_default_kv_heads(actx, rng):
    p = Problem(actx, rng, "f32", 2, H, H, 9, 12, 16)
    p.hkv = 0  # kv_heads 0 means heads
    check_problem(p, False, 0, scale=0.37)


def test_rows_without_keys(actx, rng):
    """Sq > Skv with a causal mask: the first Sq - Skv rows see nothing: O = 0,
    LSE = -inf, and their dQ is 0."""
    p = Problem(actx, rng, "f32", 1, 2, 2, 10, 4, 8)
    o, lse = p.forward(causal=True)
    assert (o[:, :, :6] == 0).all() and np.isneginf(lse[:, :, :6]).all()
    assert np.isfinite(lse[:, :, 6:]).all()
    dq, _, _ = p.backward(causal=True)
    assert (dq[:, :, :6] == 0).all()


def test_window_without_causal_never_looks_ahead(actx, rng):
    """window_size > 0 keeps keys in (p - W, p] whether or not causal is set."""
    p = Problem(actx, rng, "f32", 1, 2, 2, 8, 8, 4)
    a, la = p.forward(causal=False, window_size=3)
    b, lb = p.forward(causal=True, window_size=3)
    assert np.array_equal(a, b) and np.array_equal(la, lb)


# ---- finite differences ------------------------------------------------------------------

@pytest.mark.parametrize("causal,window,alibi,hkv,sq,skv", [
    (True, 0, False, 2, 5, 7),
    (False, 0, True, 1, 6, 4),
    (True, 3, True, 2, 6, 6),
    (True, 0, False, 1, 7, 4),   # rows without keys
])
def test_backward_matches_finite_differences(actx, rng, causal, window, alibi, hkv, sq, skv):
    """dQ, dK, dV against central differences of L = sum(O * W) (so dO = W),
    f32, every input element perturbed."""
    heads, D = 2, 3
    p = Problem(actx, rng, "f32", 1, heads, hkv, sq, skv, D, alibi)
    w = p.do.astype(np.float64)
    kw = dict(causal=causal, window_size=window)
    p.forward(**kw)
    dq, dk, dv = p.backward(**kw)
    O = actx.buffer(p.q.nbytes)
    eps = 1e-2

    def loss(arrays):
        bufs = [actx.buffer_from_array(a) for a in arrays]
        actx.attention_forward(*bufs, O, **p.dims, dtype="f32", kv_heads=hkv, alibi_slopes=p.slopes, **kw)
        return float((O.to_numpy(p.q.shape, np.float32).astype(np.float64) * w).sum())

    base = [p.q, p.k, p.v]
    for which, analytic in enumerate((dq, dk, dv)):
        numeric = np.zeros(base[which].shape)
        for idx in np.ndindex(base[which].shape):
            plus = [a.copy() for a in base]
            minus = [a.copy() for a in base]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            numeric[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        scale = max(np.abs(numeric).max(), 1e-3)
        err = np.abs(numeric - analytic).max()
        assert err <= 2e-3 * scale + 2e-4, "%s: finite differences differ by %g (scale %g)" % (
            "QKV"[which], err, scale)


# ---- entry points ------------------------------------------------------------------------

def test_async_matches_sync_and_raw_functions(actx, rng):
    p = Problem(actx, rng, "bf16", 1, H, 2, 20, 30, 32, alibi=True)
    o_sync, lse_sync = p.forward(causal=True, window_size=9)
    O2 = actx.buffer_from_array(poison(p.q.size * 2))
    L2 = actx.buffer_from_array(poison(p.q.shape[0] * H * 20 * 4))
    slopes = actx.buffer_from_array(p.slopes)  # slopes as a Buffer this time
    with actx.stream() as s:
        tc.attention_forward_async(actx, p.Q, p.K, p.V, O2, 1, H, 20, 30, 32, s, LSE=L2, dtype="bf16",
                                   causal=True, kv_heads=2, window_size=9, alibi_slopes=slopes)
        s.sync()
    assert np.array_equal(p.read(O2, p.q), o_sync)
    assert np.array_equal(L2.to_numpy(lse_sync.shape, np.float32), lse_sync.astype(np.float32))
    O3 = actx.buffer_from_array(poison(p.q.size * 2))
    tc.attention_forward(actx, p.Q, p.K, p.V, O3, 1, H, 20, 30, 32, dtype="bf16", causal=True, kv_heads=2,
                         window_size=9, alibi_slopes=list(p.slopes))  # no LSE: not written, not needed
    assert np.array_equal(p.read(O3, p.q), o_sync)


def test_async_slopes_array_outlives_the_call(actx, rng):
    """A NumPy slopes array is copied; the queued work does not depend on it."""
    p = Problem(actx, rng, "f32", 1, H, 1, 40, 40, 16, alibi=True)
    want, _ = p.forward(causal=True)
    O2 = actx.buffer_from_array(poison(p.q.nbytes))
    with actx.stream() as s:
        slopes = p.slopes.copy()
        actx.attention_forward_async(p.Q, p.K, p.V, O2, **p.dims, stream=s, dtype="f32", kv_heads=1,
                                     alibi_slopes=slopes)
        slopes[:] = np.nan
        del slopes
        s.sync()
    assert np.array_equal(p.read(O2, p.q), want)


def test_capabilities_and_struct():
    assert tc.TC_CAPABILITY_ATTENTION == 1 << 7 and tc.TC_CAPABILITY_ATTENTION_BACKWARD == 1 << 8
    d = tc.TCAttentionDesc(batch=1, heads=2, window_size=-1)
    assert d.as_dict()["window_size"] == -1
    from conftest import HAVE_CUDA
    for device in ["cpu"] + (["cuda"] if HAVE_CUDA else []):
        with tc.Context(device) as c:
            caps = tc.runtime_capabilities(c)
            assert tc.capability_available(caps, tc.TC_CAPABILITY_ATTENTION), device
            assert tc.capability_available(caps, "attention_backward"), device


# ---- bad input ---------------------------------------------------------------------------

def snapshot(bufs):
    return [b.to_numpy((b.nbytes,), np.uint8).copy() for b in bufs]


def expect_refused(status, bufs, call):
    before = snapshot(bufs)
    with pytest.raises(tc.TensorcoreError) as info:
        call()
    assert info.value.status == status, "%s (wanted %s)" % (info.value, tc.status_string(status))
    for b, old in zip(bufs, before):
        assert np.array_equal(b.to_numpy((b.nbytes,), np.uint8), old), "a refused call wrote a buffer"
    return str(info.value)


@pytest.fixture
def small(actx, rng):
    """A valid f16 problem (B=1, H=4, Hkv=2, Sq=Skv=8, D=8) with all its buffers."""
    p = Problem(actx, rng, "f16", 1, H, 2, 8, 8, 8, alibi=True)
    p.forward(causal=True)
    p.all = [p.Q, p.K, p.V, p.O, p.LSE, p.dO, p.dQ, p.dK, p.dV]
    return p


def fwd(p, **over):
    args = dict(Q=p.Q, K=p.K, V=p.V, O=p.O, LSE=p.LSE, dtype="f16", kv_heads=2, alibi_slopes=p.slopes,
                **p.dims)
    args.update(over)
    return lambda: p.ctx.attention_forward(**args)


def bwd(p, **over):
    args = dict(Q=p.Q, K=p.K, V=p.V, O=p.O, dO=p.dO, LSE=p.LSE, dQ=p.dQ, dK=p.dK, dV=p.dV, dtype="f16",
                kv_heads=2, alibi_slopes=p.slopes, **p.dims)
    args.update(over)
    return lambda: p.ctx.attention_backward(**args)


BAD_SHAPES = [dict(kv_heads=3), dict(head_dim=0), dict(head_dim=257), dict(batch=0), dict(seq_q=-1),
              dict(seq_kv=0), dict(heads=0), dict(kv_heads=-2), dict(batch=1 << 40, heads=1 << 30)]


@pytest.mark.parametrize("over", BAD_SHAPES, ids=lambda o: ",".join("%s=%s" % kv for kv in o.items()))
@pytest.mark.parametrize("entry", [fwd, bwd])
def test_bad_shapes(small, entry, over):
    expect_refused(tc.TC_ERR_INVALID_SHAPE, small.all, entry(small, **over))


@pytest.mark.parametrize("over", [dict(dtype="i8"), dict(dtype="f64"), dict(accum="f16"), dict(accum="bf16")],
                         ids=lambda o: ",".join("%s=%s" % kv for kv in o.items()))
@pytest.mark.parametrize("entry", [fwd, bwd])
def test_unsupported_dtypes(small, entry, over):
    expect_refused(tc.TC_ERR_UNSUPPORTED_DTYPE, small.all, entry(small, **over))


@pytest.mark.parametrize("entry", [fwd, bwd])
def test_bad_arguments(small, entry):
    p = small
    refuse = lambda **o: expect_refused(tc.TC_ERR_INVALID_ARG, p.all, entry(p, **o))  # noqa: E731
    assert "window_size" in refuse(window_size=-1)
    assert "softmax_scale" in refuse(softmax_scale=float("nan"))
    refuse(softmax_scale=float("inf"))
    assert "alibi_slopes" in refuse(alibi_slopes=p.slopes[:3])  # one slope short
    short = p.ctx.buffer_from_array(poison(10))
    for name in (["Q", "K", "V", "O", "LSE"] if entry is fwd else ["Q", "K", "V", "O", "dO", "LSE", "dQ", "dK",
                                                                     "dV"]):
        assert name in refuse(**{name: short})
    # f32 needs twice the bytes of the f16 buffers: a dtype that does not match the data
    msg = refuse(dtype="f32")
    assert "needs" in msg


def test_forward_lse_rules(small):
    p = small
    expect_refused(tc.TC_ERR_INVALID_ARG, p.all, fwd(p, LSE=None, return_lse=True))
    lse_short = p.ctx.buffer_from_array(poison(4 * 31))  # B*H*Sq = 32 floats needed
    expect_refused(tc.TC_ERR_INVALID_ARG, p.all + [lse_short], fwd(p, LSE=lse_short))


def test_outputs_may_not_alias(small):
    p = small
    for over in (dict(O=p.Q), dict(LSE=p.O), dict(LSE=p.K), dict(LSE=p.Q)):
        assert "overlaps" in expect_refused(tc.TC_ERR_INVALID_ARG, p.all, fwd(p, **over))
    for over in (dict(dQ=p.Q), dict(dK=p.dV), dict(dV=p.dO), dict(dQ=p.O), dict(dK=p.O), dict(dV=p.K)):
        assert "overlaps" in expect_refused(tc.TC_ERR_INVALID_ARG, p.all, bwd(p, **over))
    # Memory shared through buffer_from_ptr is caught too.
    alias = p.ctx.buffer_from_ptr(p.K.map() if p.ctx.device == "cpu" else p.K.device_ptr(), p.K.nbytes)
    expect_refused(tc.TC_ERR_INVALID_ARG, p.all, bwd(p, dK=alias))


def test_handles(small, rng):
    p = small
    expect_refused(tc.TC_ERR_INVALID_ARG, p.all, fwd(p, Q=None))
    expect_refused(tc.TC_ERR_INVALID_ARG, p.all, bwd(p, LSE=None))
    with tc.Context("cpu") as other:
        foreign = other.buffer_from_array(poison(p.O.nbytes))
        assert "another context" in expect_refused(tc.TC_ERR_INVALID_ARG, p.all, fwd(p, O=foreign))
