"""Conv2D (forward, backward_input, backward_weight) against float64 NumPy
references on fresh random inputs, central finite differences for the
backward passes, the size helpers against hand-computed values, and bad input
for every entry point (right status, every buffer left as it was).

Outputs and scratch are poisoned (NaN) first and every element is checked;
bytes of an output buffer past its tensor must stay poisoned.
"""

import numpy as np
import pytest

import tensorcore as tc
from conftest import HAVE_CUDA, TOLERANCE, assert_close, poison, random_array, to_f64

# (batch, in_channels, out_channels, H, W, kH, kW, pad_h, pad_w, stride_h, stride_w)
SHAPES = {
    "1x1": (2, 5, 3, 6, 7, 1, 1, 0, 0, 1, 1),
    "1x1_stride2": (2, 3, 4, 7, 5, 1, 1, 0, 0, 2, 2),
    "3x3_pad1": (2, 3, 4, 8, 8, 3, 3, 1, 1, 1, 1),
    "5x3_stride2_asym_pad": (2, 3, 5, 11, 9, 5, 3, 1, 2, 2, 2),
    "odd_sizes": (3, 7, 5, 13, 11, 3, 3, 0, 0, 1, 1),
    "mixed_strides": (1, 2, 3, 9, 10, 4, 2, 2, 1, 3, 1),
    "pad_beyond_kernel": (1, 2, 2, 3, 4, 2, 2, 3, 3, 1, 2),  # some outputs see only padding
    "channels_16_32": (2, 16, 32, 20, 20, 3, 3, 1, 1, 1, 1),
}
NP = {"f32": np.float32, "f16": np.float16}
BACKEND = {"cpu": "portable_cpu", "cuda": "cuda"}
ES = {"f32": 4, "f16": 2}


def out_hw(s):
    N, C, K, H, W, kH, kW, ph, pw, sh, sw = s
    return (H + 2 * ph - kH) // sh + 1, (W + 2 * pw - kW) // sw + 1


def kwargs(s, dtype):
    N, C, K, H, W, kH, kW, ph, pw, sh, sw = s
    return dict(batch=N, in_channels=C, out_channels=K, H=H, W_in=W, kH=kH, kW=kW, pad_h=ph, pad_w=pw,
                stride_h=sh, stride_w=sw, dtype=dtype)


# ---- float64 references ------------------------------------------------------------

def windows(x, s):
    """Padded input patches [N, C, OH, OW, kH, kW]."""
    N, C, K, H, W, kH, kW, ph, pw, sh, sw = s
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    v = np.lib.stride_tricks.sliding_window_view(xp, (kH, kW), axis=(2, 3))
    OH, OW = out_hw(s)
    return v[:, :, ::sh, ::sw][:, :, :OH, :OW]


def ref_forward(x, w, b, s):
    y = np.einsum("ncyxij,ocij->noyx", windows(x, s), w)
    return y if b is None else y + b[None, :, None, None]


def ref_backward_input(dy, w, s):
    N, C, K, H, W, kH, kW, ph, pw, sh, sw = s
    OH, OW = out_hw(s)
    dxp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    for i in range(kH):
        for j in range(kW):
            dxp[:, :, i:i + sh * (OH - 1) + 1:sh, j:j + sw * (OW - 1) + 1:sw] += np.einsum(
                "noyx,oc->ncyx", dy, w[:, :, i, j])
    return dxp[:, :, ph:ph + H, pw:pw + W]


def ref_backward_weight(x, dy, s):
    return np.einsum("ncyxij,noyx->ocij", windows(x, s), dy)


# ---- running the ops ---------------------------------------------------------------

class Run:
    """Buffers of one conv2d problem; outputs and scratch start poisoned, with
    `extra` poisoned bytes past each output tensor."""

    def __init__(self, ctx, s, dtype, rng, extra=64):
        self.ctx, self.s, self.dtype = ctx, s, dtype
        N, C, K, H, W, kH, kW, ph, pw, sh, sw = s
        OH, OW = out_hw(s)
        self.xs, self.ws, self.ys = (N, C, H, W), (K, C, kH, kW), (N, K, OH, OW)
        self.x = random_array(rng, self.xs, dtype)
        self.w = random_array(rng, self.ws, dtype)
        self.b = random_array(rng, (K,), dtype)
        self.dy = random_array(rng, self.ys, dtype)
        self.extra = extra
        self.X, self.Wt, self.B, self.dY = (ctx.buffer_from_array(a) for a in (self.x, self.w, self.b, self.dy))
        self.Y, self.dX, self.dW = (self.poisoned(int(np.prod(sh)) * ES[dtype] + extra)
                                    for sh in (self.ys, self.xs, self.ws))
        self.col = self.poisoned(tc.conv2d_scratch_bytes(N, C, H, W, kH, kW, ph, pw, sh, sw))
        self.dx32 = self.poisoned(tc.conv2d_backward_input_scratch_bytes(N, C, H, W))

    def poisoned(self, nbytes):
        return self.ctx.buffer_from_array(poison(nbytes))

    def read(self, buf, shape):
        n = int(np.prod(shape)) * ES[self.dtype]
        tail = buf.to_numpy((self.extra,), np.uint8, offset=n)
        assert (tail == 0xFF).all(), "bytes past the output tensor were written"
        return to_f64(buf.to_numpy(shape, NP[self.dtype]))

    def forward(self, bias=True):
        self.ctx.conv2d_forward(self.X, self.Wt, self.B if bias else None, self.Y, self.col,
                                **kwargs(self.s, self.dtype))
        return self.read(self.Y, self.ys)

    def backward_input(self):
        self.ctx.conv2d_backward_input(self.dY, self.Wt, self.dX, self.col, self.dx32, **kwargs(self.s, self.dtype))
        return self.read(self.dX, self.xs)

    def backward_weight(self):
        self.ctx.conv2d_backward_weight(self.X, self.dY, self.dW, self.col, **kwargs(self.s, self.dtype))
        return self.read(self.dW, self.ws)


@pytest.fixture
def conv_ctx():
    with tc.Context("cpu") as c:
        yield c


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_forward(ctx, rng, name, dtype):
    r = Run(ctx, SHAPES[name], dtype, rng)
    x, w, b = to_f64(r.x), to_f64(r.w), to_f64(r.b)
    for bias in (True, False):
        got = r.forward(bias)
        ref = ref_forward(x, w, b if bias else None, r.s)
        scale = ref_forward(np.abs(x), np.abs(w), np.abs(b) if bias else None, r.s) + 1e-3
        assert_close(got, ref, scale, TOLERANCE[dtype], "Y %s bias=%s" % (name, bias))
    assert ctx.last_backend_name() == BACKEND[ctx.device]


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_backward_input(ctx, rng, name, dtype):
    r = Run(ctx, SHAPES[name], dtype, rng)
    dy, w = to_f64(r.dy), to_f64(r.w)
    got = r.backward_input()
    scale = ref_backward_input(np.abs(dy), np.abs(w), r.s) + 1e-3  # inputs no tap reaches have gradient 0
    assert_close(got, ref_backward_input(dy, w, r.s), scale, TOLERANCE[dtype], "dX " + name)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_backward_weight(ctx, rng, name, dtype):
    r = Run(ctx, SHAPES[name], dtype, rng)
    x, dy = to_f64(r.x), to_f64(r.dy)
    got = r.backward_weight()
    scale = ref_backward_weight(np.abs(x), np.abs(dy), r.s) + 1e-3
    assert_close(got, ref_backward_weight(x, dy, r.s), scale, TOLERANCE[dtype], "dW " + name)


def test_outputs_overwritten_not_accumulated(ctx, rng):
    """A second call gives the same result: dX and dW are overwritten."""
    r = Run(ctx, SHAPES["3x3_pad1"], "f32", rng)
    for op in (r.forward, r.backward_input, r.backward_weight):
        first = op()
        np.testing.assert_array_equal(op(), first)


def test_f16_accumulates_in_f32(ctx):
    """576 products of 0.9765625 sum to 562.5 exactly in f32; summed in f16
    (spacing 0.25-0.5 above 256) every addition would round, drifting by ~7."""
    s = (1, 64, 1, 4, 4, 3, 3, 1, 1, 1, 1)
    r = Run(ctx, s, "f16", np.random.default_rng(0))
    x = np.full(r.xs, 1000.0, np.float16)
    w = np.full(r.ws, 1.0 / 1024, np.float16)
    r.X.write(x)
    r.Wt.write(w)
    got = r.forward(bias=False)
    ref = ref_forward(to_f64(x), to_f64(w), None, s)
    assert_close(got, ref, np.abs(ref), 2.0 ** -10, "f16 Y")


# ---- finite differences ------------------------------------------------------------

FD_SHAPE = (1, 2, 2, 5, 4, 3, 2, 1, 0, 2, 1)


def test_backward_matches_finite_differences(ctx, rng):
    """L = sum(Y * G): dL/dX and dL/dW by central differences of the f32 forward."""
    s, eps = FD_SHAPE, 1e-2
    r = Run(ctx, s, "f32", rng)
    g = r.dy  # dY = dL/dY = G
    x, w = r.x.copy(), r.w.copy()

    def loss():
        r.X.write(x)
        r.Wt.write(w)
        return float(np.sum(r.forward(bias=True) * to_f64(g)))

    def central(arr):
        grad = np.zeros(arr.shape)
        for idx in np.ndindex(arr.shape):
            keep = arr[idx]
            arr[idx] = keep + eps
            plus = loss()
            arr[idx] = keep - eps
            minus = loss()
            arr[idx] = keep
            grad[idx] = (plus - minus) / (2 * eps)
        return grad

    fd_dx, fd_dw = central(x), central(w)
    r.X.write(x)
    r.Wt.write(w)
    assert_close(r.backward_input(), fd_dx, 1.0, 2e-3, "dX vs finite differences")
    assert_close(r.backward_weight(), fd_dw, 1.0, 2e-3, "dW vs finite differences")


# ---- helpers -----------------------------------------------------------------------

@pytest.mark.parametrize("args,expected", [
    ((56, 56, 3, 3, 1, 1, 1, 1), (56, 56)),
    ((224, 224, 7, 7, 3, 3, 2, 2), (112, 112)),
    ((11, 9, 5, 3, 1, 2, 2, 2), (5, 6)),
    ((5, 5, 5, 5), (1, 1)),
    ((4, 4, 2, 2, 0, 0, 3, 3), (1, 1)),
    ((3, 4, 2, 2, 3, 3, 1, 2), (8, 5)),
    ((7, 1, 1, 1, 0, 0, 1, 1), (7, 1)),
])
def test_output_shape(args, expected):
    assert tc.conv2d_output_shape(*args) == expected


def test_scratch_bytes():
    assert tc.conv2d_scratch_bytes(8, 64, 56, 56, 3, 3, 1, 1) == 8 * 64 * 9 * 56 * 56 * 4
    assert tc.conv2d_scratch_bytes(8, 64, 56, 56, 3, 3, 1, 1, out_H=56, out_W=56) == 8 * 64 * 9 * 56 * 56 * 4
    assert tc.conv2d_scratch_bytes(2, 3, 11, 9, 5, 3, 1, 2, 2, 2) == 2 * 3 * 15 * 5 * 6 * 4
    assert tc.conv2d_scratch_bytes(1, 1, 1, 1, 1, 1) == 4
    assert tc.conv2d_backward_input_scratch_bytes(8, 64, 56, 56) == 8 * 64 * 56 * 56 * 4
    assert tc.conv2d_backward_input_scratch_bytes(3, 7, 13, 11) == 3 * 7 * 13 * 11 * 4
    with tc.Context("cpu") as ctx:  # also offered on the Context
        assert ctx.conv2d_output_shape(5, 5, 3, 3) == (3, 3)
        assert ctx.conv2d_scratch_bytes(1, 2, 5, 5, 3, 3) == 2 * 9 * 9 * 4
        assert ctx.conv2d_backward_input_scratch_bytes(1, 2, 5, 5) == 2 * 25 * 4


def status_of(call):
    with pytest.raises(tc.TensorcoreError) as e:
        call()
    return e.value.status


@pytest.mark.parametrize("args", [
    (0, 5, 3, 3), (5, 0, 3, 3), (5, 5, 0, 3), (5, 5, 3, -1), (-5, 5, 3, 3),
    (5, 5, 3, 3, -1, 0), (5, 5, 3, 3, 0, 0, 0, 1), (5, 5, 3, 3, 0, 0, 1, -2),
    (5, 5, 8, 3, 1, 0), (5, 5, 3, 6, 0, 0),              # kernel larger than the padded input
    (2**62, 5, 3, 3, 2**62, 0),                         # H + 2 * pad overflows
    (2**64, 5, 3, 3),                                   # does not fit int64
])
def test_output_shape_bad(args):
    assert status_of(lambda: tc.conv2d_output_shape(*args)) == tc.TC_ERR_INVALID_SHAPE


@pytest.mark.parametrize("args,kw", [
    ((0, 64, 56, 56, 3, 3), {}), ((8, 0, 56, 56, 3, 3), {}), ((8, 64, 56, 56, 0, 3), {}),
    ((8, 64, 56, 56, 3, 3, 1, 1, 0, 1), {}),
    ((8, 64, 56, 56, 3, 3, 1, 1), {"out_H": 55}), ((8, 64, 56, 56, 3, 3, 1, 1), {"out_W": 57}),
    ((8, 64, 56, 56, 3, 3, 1, 1), {"out_H": -56}),
    ((2**31, 2**31, 2**20, 2**20, 1, 1), {}),            # sizes overflow 64 bits
    ((1, 2**31, 1, 1, 1, 1), {}),                       # in_channels*kH*kW beyond the BLAS int
])
def test_scratch_bytes_bad(args, kw):
    assert status_of(lambda: tc.conv2d_scratch_bytes(*args, **kw)) == tc.TC_ERR_INVALID_SHAPE


def test_backward_input_scratch_bytes_bad():
    for args in [(0, 1, 1, 1), (1, -1, 1, 1), (1, 1, 0, 1), (1, 1, 1, 0), (2**32, 2**32, 2**32, 1)]:
        assert status_of(lambda: tc.conv2d_backward_input_scratch_bytes(*args)) == tc.TC_ERR_INVALID_SHAPE


# ---- bad input leaves every buffer untouched -------------------------------------

BAD_SHAPE = SHAPES["5x3_stride2_asym_pad"]


class Snapshot:
    def __init__(self, bufs):
        self.bufs = [b for b in bufs if isinstance(b, tc.Buffer)]
        self.before = [b.to_numpy((b.nbytes,), np.uint8).copy() for b in self.bufs]

    def unchanged(self):
        return all(np.array_equal(b.to_numpy((b.nbytes,), np.uint8), v) for b, v in zip(self.bufs, self.before))


OPS = ["forward", "backward_input", "backward_weight"]


def call(r, op, kw=None, **bufs):
    """Calls `op` on r's buffers with some replaced (bufs) and shape kwargs
    overridden (kw); returns the status (0 on success)."""
    k = kwargs(r.s, r.dtype)
    k.update(kw or {})
    b = dict(X=r.X, weight=r.Wt, bias=r.B, Y=r.Y, dY=r.dY, dX=r.dX, dW=r.dW, scratch_col=r.col,
             scratch_dX_f32=r.dx32)
    b.update(bufs)
    ctx = b.pop("ctx", r.ctx)
    args = {"forward": ("X", "weight", "bias", "Y", "scratch_col"),
            "backward_input": ("dY", "weight", "dX", "scratch_col", "scratch_dX_f32"),
            "backward_weight": ("X", "dY", "dW", "scratch_col")}[op]
    snap = Snapshot(b.values())
    try:
        getattr(tc, "conv2d_" + op)(ctx, *(b[a] for a in args), **k)
    except tc.TensorcoreError as e:
        assert snap.unchanged(), "%s failed (%s) but changed a buffer" % (op, e)
        return e.status
    return 0


BAD_SHAPES = [
    ({"batch": 0}, tc.TC_ERR_INVALID_SHAPE),
    ({"in_channels": -1}, tc.TC_ERR_INVALID_SHAPE),
    ({"out_channels": 0}, tc.TC_ERR_INVALID_SHAPE),
    ({"H": 0}, tc.TC_ERR_INVALID_SHAPE),
    ({"W_in": -9}, tc.TC_ERR_INVALID_SHAPE),
    ({"kW": 0}, tc.TC_ERR_INVALID_SHAPE),
    ({"stride_h": 0}, tc.TC_ERR_INVALID_SHAPE),
    ({"stride_w": -1}, tc.TC_ERR_INVALID_SHAPE),
    ({"pad_h": -1}, tc.TC_ERR_INVALID_SHAPE),
    ({"kH": 14}, tc.TC_ERR_INVALID_SHAPE),                 # 14 > 11 + 2 * 1
    ({"kW": 14, "pad_w": 0}, tc.TC_ERR_INVALID_SHAPE),
    ({"out_H": 4}, tc.TC_ERR_INVALID_SHAPE),                # computed: 5
    ({"out_W": 7}, tc.TC_ERR_INVALID_SHAPE),                # computed: 6
    ({"batch": 2**40, "in_channels": 2**40}, tc.TC_ERR_INVALID_SHAPE),
    ({"out_channels": 2**62}, tc.TC_ERR_INVALID_SHAPE),
    ({"batch": 2**64}, tc.TC_ERR_INVALID_SHAPE),            # does not fit int64
    ({"dtype": "bf16"}, tc.TC_ERR_UNSUPPORTED_DTYPE),
    ({"dtype": "i8"}, tc.TC_ERR_UNSUPPORTED_DTYPE),
    ({"dtype": 99}, tc.TC_ERR_UNSUPPORTED_DTYPE),
    ({"out_channels": 6}, tc.TC_ERR_INVALID_ARG),           # weight / Y / dY too small
    ({"batch": 3}, tc.TC_ERR_INVALID_ARG),                  # X / Y / scratch too small
    ({"H": 13}, tc.TC_ERR_INVALID_ARG),                     # X, scratch too small
]


@pytest.fixture
def bad_run(conv_ctx, rng):
    return Run(conv_ctx, BAD_SHAPE, "f32", rng, extra=0)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kw,status", BAD_SHAPES)
def test_bad_shapes(bad_run, op, kw, status):
    assert call(bad_run, op, kw) == status


@pytest.mark.parametrize("op", OPS)
def test_valid_call_succeeds(bad_run, op):
    """The baseline of the bad-input tests is a valid call."""
    assert call(bad_run, op) == 0
    assert call(bad_run, op, {"out_H": 5, "out_W": 6}) == 0


def shrunk(r, buf, by=1):
    """A fresh poisoned buffer `by` bytes smaller than `buf`."""
    return r.poisoned(buf.nbytes - by)


@pytest.mark.parametrize("op,name", [
    ("forward", "X"), ("forward", "weight"), ("forward", "bias"), ("forward", "Y"), ("forward", "scratch_col"),
    ("backward_input", "dY"), ("backward_input", "weight"), ("backward_input", "dX"),
    ("backward_input", "scratch_col"), ("backward_input", "scratch_dX_f32"),
    ("backward_weight", "X"), ("backward_weight", "dY"), ("backward_weight", "dW"),
    ("backward_weight", "scratch_col"),
])
def test_buffers_too_small_or_missing(bad_run, op, name):
    r = bad_run
    current = {"X": r.X, "weight": r.Wt, "bias": r.B, "Y": r.Y, "dY": r.dY, "dX": r.dX, "dW": r.dW,
               "scratch_col": r.col, "scratch_dX_f32": r.dx32}[name]
    assert call(r, op, **{name: shrunk(r, current)}) == tc.TC_ERR_INVALID_ARG
    if name != "bias":  # bias is optional
        assert call(r, op, **{name: None}) == tc.TC_ERR_INVALID_ARG


@pytest.mark.parametrize("op,a,b", [
    ("forward", "Y", "X"), ("forward", "Y", "weight"), ("forward", "Y", "bias"), ("forward", "Y", "scratch_col"),
    ("forward", "scratch_col", "X"),
    ("backward_input", "dX", "dY"), ("backward_input", "dX", "scratch_dX_f32"),
    ("backward_input", "scratch_col", "scratch_dX_f32"), ("backward_input", "scratch_col", "weight"),
    ("backward_weight", "dW", "X"), ("backward_weight", "dW", "scratch_col"), ("backward_weight", "scratch_col", "dY"),
])
def test_aliasing_refused(bad_run, op, a, b):
    """An output or scratch may not share memory with another argument."""
    r = bad_run
    big = r.poisoned(max(1 << 16, r.col.nbytes, r.dx32.nbytes))
    assert call(r, op, **{a: big, b: big}) == tc.TC_ERR_INVALID_ARG


def test_overlapping_wrappers_refused(bad_run):
    """Two buffers over overlapping caller memory count as aliasing too."""
    r = bad_run
    host = np.full(1 << 16, 0xFF, np.uint8)
    y = r.ctx.buffer_from_ptr(host, host.nbytes)
    x = r.ctx.buffer_from_ptr(host[64:], host.nbytes - 64)
    x.write(r.x)
    assert call(r, "forward", X=x, Y=y) == tc.TC_ERR_INVALID_ARG


def test_inputs_may_share_a_buffer(ctx, rng):
    """Read-only arguments may alias each other: X doubles as weight here."""
    s = (1, 2, 2, 3, 3, 3, 3, 0, 0, 1, 1)  # X [1,2,3,3] is the first 18 of weight's [2,2,3,3] elements
    r = Run(ctx, s, "f32", rng)
    both = ctx.buffer_from_array(random_array(rng, (36,), "f32"))
    vals = to_f64(both.to_numpy((36,), np.float32))
    ctx.conv2d_forward(both, both, None, r.Y, r.col, **kwargs(s, "f32"))
    ref = ref_forward(vals[:18].reshape(1, 2, 3, 3), vals.reshape(2, 2, 3, 3), None, s)
    assert_close(r.read(r.Y, r.ys), ref, ref_forward(np.abs(vals[:18]).reshape(1, 2, 3, 3),
                                                     np.abs(vals).reshape(2, 2, 3, 3), None, s), 1e-5)


def test_bad_handles(bad_run):
    r = bad_run
    assert call(r, "forward", ctx=None) == tc.TC_ERR_INVALID_ARG
    with tc.Context("cpu") as other:
        foreign = other.buffer_from_array(r.x)
        assert call(r, "forward", X=foreign) == tc.TC_ERR_INVALID_ARG
        assert call(r, "backward_weight", dW=other.buffer(r.dW.nbytes)) == tc.TC_ERR_INVALID_ARG
    stale = r.poisoned(r.Y.nbytes)
    handle = stale.handle
    tc.buffer_free(stale)
    assert call(r, "forward", Y=handle) == tc.TC_ERR_INVALID_ARG


@pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device")
@pytest.mark.parametrize("op", OPS)
def test_cuda_bad_input_leaves_buffers_untouched(rng, op):
    """Validation is shared, but check one bad call per op on device buffers too."""
    with tc.Context("cuda") as ctx:
        r = Run(ctx, BAD_SHAPE, "f32", rng, extra=0)
        assert call(r, op, {"out_H": 4}) == tc.TC_ERR_INVALID_SHAPE
        assert call(r, op, {"dtype": "bf16"}) == tc.TC_ERR_UNSUPPORTED_DTYPE
        assert call(r, op, scratch_col=shrunk(r, r.col)) == tc.TC_ERR_INVALID_ARG
        assert call(r, op) == 0


# Shapes large enough that the CUDA backend splits the batch into chunks:
# forward/backward_input hold at most 32 MiB of columns per chunk (here one
# image of 37.7 MiB f32 / 18.9 MiB f16 each), backward_weight at most 256 MiB
# of dY (here 134 MiB f32 per image). The CPU runs smaller shapes.
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_chunked_columns(ctx, rng, dtype):
    s = (3, 64, 4, 128, 128, 3, 3, 1, 1, 1, 1) if ctx.device == "cuda" else (2, 8, 4, 24, 24, 3, 3, 1, 1, 1, 1)
    r = Run(ctx, s, dtype, rng)
    x, w, b, dy = to_f64(r.x), to_f64(r.w), to_f64(r.b), to_f64(r.dy)
    assert_close(r.forward(True), ref_forward(x, w, b, s),
                 ref_forward(np.abs(x), np.abs(w), np.abs(b), s) + 1e-3, TOLERANCE[dtype], "Y chunked")
    assert_close(r.backward_input(), ref_backward_input(dy, w, s),
                 ref_backward_input(np.abs(dy), np.abs(w), s) + 1e-3, TOLERANCE[dtype], "dX chunked")
    assert_close(r.backward_weight(), ref_backward_weight(x, dy, s),
                 ref_backward_weight(np.abs(x), np.abs(dy), s) + 1e-3, TOLERANCE[dtype], "dW chunked")


def test_chunked_weight_gradient(ctx, rng):
    s = (2, 1, 2048, 128, 128, 3, 3, 1, 1, 1, 1) if ctx.device == "cuda" else (2, 1, 64, 24, 24, 3, 3, 1, 1, 1, 1)
    r = Run(ctx, s, "f32", rng)
    x, dy = to_f64(r.x), to_f64(r.dy)
    assert_close(r.backward_weight(), ref_backward_weight(x, dy, s),
                 ref_backward_weight(np.abs(x), np.abs(dy), s) + 1e-3, TOLERANCE["f32"], "dW chunked")


def test_capability(ctx):
    caps = ctx.runtime_capabilities()
    assert tc.capability_available(caps, tc.TC_CAPABILITY_CONV2D)
    assert tc.capability_available(caps, "conv2d")
