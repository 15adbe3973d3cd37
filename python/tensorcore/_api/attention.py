"""Scaled dot-product attention, forward and backward (include/tensorcore/attention.h).

Q, O, dQ, dO: [batch, heads, seq_q, head_dim]; K, V, dK, dV: [batch, kv_heads,
seq_kv, head_dim], all in `dtype` (f16, bf16 or f32; sums in f32). LSE:
[batch, heads, seq_q] float32, natural log. Query head h reads kv head
h // (heads // kv_heads); kv_heads=0 means heads.

Masks: causal is aligned bottom-right (query i sits at position
i + seq_kv - seq_q and sees keys j <= that position); window_size=W > 0 keeps
keys in (p - W, p], with or without causal. A query that sees no key
(seq_q > seq_kv with a causal or window mask) gets O = 0 and LSE = -inf.
ALiBi adds -slope[h] * (p - j) to each visible score. softmax_scale=None
means 1/sqrt(head_dim).
"""

from ctypes import byref, c_double, c_int32, c_int64, c_void_p

import numpy as np

from .._args import f64, flag, i64
from .._constants import CAPABILITY_ALIASES, TC_ERR_INVALID_ARG, accum_code, dtype_code
from .._errors import TensorcoreTypeError
from .._optable import Op
from .._objects import Buffer, buffer_arg, context_arg, context_method
from .._structs import _Struct
from .buffer import buffer_alloc

__all__ = ["TCAttentionDesc", "TC_CAPABILITY_ATTENTION", "TC_CAPABILITY_ATTENTION_BACKWARD",
           "TC_ATTENTION_MAX_HEAD_DIM", "attention_forward", "attention_forward_async", "attention_backward"]

TC_CAPABILITY_ATTENTION = 1 << 7
TC_CAPABILITY_ATTENTION_BACKWARD = 1 << 8
TC_ATTENTION_MAX_HEAD_DIM = 256
CAPABILITY_ALIASES.update({"attention": TC_CAPABILITY_ATTENTION,
                           "attention_backward": TC_CAPABILITY_ATTENTION_BACKWARD})


class TCAttentionDesc(_Struct):
    """tc_attention_desc."""
    _c_name_ = "struct tc_attention_desc"
    _fields_ = [
        ("batch", c_int64),
        ("heads", c_int64),
        ("kv_heads", c_int64),
        ("seq_q", c_int64),
        ("seq_kv", c_int64),
        ("head_dim", c_int64),
        ("dtype", c_int32),
        ("accum", c_int32),
        ("softmax_scale", c_double),
        ("causal", c_int32),
        ("return_lse", c_int32),
        ("window_size", c_int64),
    ]


_attention_forward = Op("tc_attention_forward", TCAttentionDesc)
_attention_backward = Op("tc_attention_backward", TCAttentionDesc)


def _desc(fn, batch, heads, seq_q, seq_kv, head_dim, dtype, accum, softmax_scale, causal, return_lse, kv_heads,
          window_size):
    return TCAttentionDesc(
        batch=i64(batch, fn, "batch"), heads=i64(heads, fn, "heads"), kv_heads=i64(kv_heads, fn, "kv_heads"),
        seq_q=i64(seq_q, fn, "seq_q"), seq_kv=i64(seq_kv, fn, "seq_kv"), head_dim=i64(head_dim, fn, "head_dim"),
        dtype=dtype_code(dtype), accum=accum_code(accum),
        softmax_scale=0.0 if softmax_scale is None else f64(softmax_scale, fn, "softmax_scale"),
        causal=flag(causal), return_lse=flag(return_lse),
        window_size=i64(window_size, fn, "window_size", TC_ERR_INVALID_ARG))


class _Slopes:
    """The ALiBi slopes argument: None, a Buffer (or raw handle), or an array
    of per-head slopes that is copied into a short-lived library buffer (its
    storage outlives the handle for as long as queued work needs it)."""

    def __init__(self, ctx, slopes, fn):
        self.temp = None
        if slopes is None:
            self.arg = None
        elif isinstance(slopes, (Buffer, int, c_void_p)):
            self.arg = buffer_arg(slopes, fn, "alibi_slopes")
        else:
            try:
                arr = np.ascontiguousarray(slopes, dtype=np.float32).reshape(-1)
            except (TypeError, ValueError):
                raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: alibi_slopes must be a Buffer or an array of "
                                          "float32 slopes, got %s" % (fn, type(slopes).__name__)) from None
            self.temp = buffer_alloc(ctx, max(arr.nbytes, 1))  # too small (and refused) when empty
            if arr.nbytes:
                self.temp.write(arr)
            self.arg = buffer_arg(self.temp, fn, "alibi_slopes")

    def __enter__(self):
        return self.arg

    def __exit__(self, *exc):
        if self.temp is not None:
            self.temp.close()


@context_method
def attention_forward(ctx, Q, K, V, O, batch, heads, seq_q, seq_kv, head_dim, LSE=None, dtype="f16", accum="f32",
                      softmax_scale=None, causal=True, return_lse=False, kv_heads=0, window_size=0,
                      alibi_slopes=None, *, stream=None):
    """O = softmax(scale * Q K^T + masks/ALiBi) V: synchronously, or enqueued
    on `stream`. Passing LSE implies return_lse (it receives the row
    log-sum-exp)."""
    fn = "tc_attention_forward" if stream is None else "tc_attention_forward_async"
    d = _desc(fn, batch, heads, seq_q, seq_kv, head_dim, dtype, accum, softmax_scale, causal,
              return_lse or LSE is not None, kv_heads, window_size)
    args = (context_arg(ctx, fn), buffer_arg(Q, fn, "Q"), buffer_arg(K, fn, "K"), buffer_arg(V, fn, "V"),
            buffer_arg(O, fn, "O"), buffer_arg(LSE, fn, "LSE"))
    with _Slopes(ctx, alibi_slopes, fn) as slopes:
        _attention_forward(stream, *args, slopes, byref(d), keep=(Q, K, V, O, LSE, alibi_slopes))


@context_method
def attention_forward_async(ctx, Q, K, V, O, batch, heads, seq_q, seq_kv, head_dim, stream, LSE=None, dtype="f16",
                            accum="f32", softmax_scale=None, causal=True, return_lse=False, kv_heads=0,
                            window_size=0, alibi_slopes=None):
    """attention_forward enqueued on `stream`; returns at once. stream.sync() waits."""
    fn = "tc_attention_forward_async"
    d = _desc(fn, batch, heads, seq_q, seq_kv, head_dim, dtype, accum, softmax_scale, causal,
              return_lse or LSE is not None, kv_heads, window_size)
    args = (context_arg(ctx, fn), buffer_arg(Q, fn, "Q"), buffer_arg(K, fn, "K"), buffer_arg(V, fn, "V"),
            buffer_arg(O, fn, "O"), buffer_arg(LSE, fn, "LSE"))
    with _Slopes(ctx, alibi_slopes, fn) as slopes:
        _attention_forward.enqueue(stream, *args, slopes, byref(d), keep=(Q, K, V, O, LSE, alibi_slopes))


@context_method
def attention_backward(ctx, Q, K, V, O, dO, LSE, dQ, dK, dV, batch, heads, seq_q, seq_kv, head_dim, dtype="f16",
                       accum="f32", softmax_scale=None, causal=True, kv_heads=0, window_size=0, alibi_slopes=None,
                       *, stream=None):
    """dQ, dK, dV of attention_forward from dO, given its O and LSE (same
    arguments). dK/dV of a kv head sum over the query heads that read it.
    With `stream`, enqueued there and returns at once."""
    fn = "tc_attention_backward" if stream is None else "tc_attention_backward_async"
    d = _desc(fn, batch, heads, seq_q, seq_kv, head_dim, dtype, accum, softmax_scale, causal, False, kv_heads,
              window_size)
    args = (context_arg(ctx, fn), buffer_arg(Q, fn, "Q"), buffer_arg(K, fn, "K"), buffer_arg(V, fn, "V"),
            buffer_arg(O, fn, "O"), buffer_arg(dO, fn, "dO"), buffer_arg(LSE, fn, "LSE"),
            buffer_arg(dQ, fn, "dQ"), buffer_arg(dK, fn, "dK"), buffer_arg(dV, fn, "dV"))
    with _Slopes(ctx, alibi_slopes, fn) as slopes:
        _attention_backward(stream, *args, slopes, byref(d), keep=(Q, K, V, O, dO, LSE, dQ, dK, dV, alibi_slopes))
