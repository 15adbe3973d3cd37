"""2-D convolution (include/tensorcore/conv2d.h).

    Y[n, o, y, x] = bias[o] + sum_{c, i, j} W[o, c, i, j] * Xpad[n, c, y*stride_h + i, x*stride_w + j]

X is NCHW [batch, in_channels, H, W_in], weight OIHW [out_channels,
in_channels, kH, kW], bias [out_channels] or None, Y NCHW [batch,
out_channels, out_H, out_W]; zero padding, dilation 1. dtype "f16" (the
default) or "f32" for every tensor of a call; accumulation is f32.

out_H / out_W: None (or 0, as in C) means computed,
(H + 2*pad_h - kH) // stride_h + 1; a given value must equal the computed one
(else TC_ERR_INVALID_SHAPE).

Scratch: scratch_col needs conv2d_scratch_bytes(...) bytes and scratch_dX_f32
conv2d_backward_input_scratch_bytes(...) bytes (f32 workspaces; they depend on
the shape only, never 0). Both are required: None or a smaller buffer is
TC_ERR_INVALID_ARG. Their contents are unspecified before and after a call.

backward_input overwrites dX and backward_weight overwrites dW (neither
accumulates); there is no bias gradient (it is dY summed over n, y, x).
"""

from ctypes import POINTER, byref, c_int32, c_int64, c_uint64

from .._args import i64
from .._constants import CAPABILITY_ALIASES, dtype_code
from .._errors import check
from .._lib import declare, tc_status
from .._optable import Op
from .._objects import buffer_arg, context_arg, context_method
from .._structs import _Struct

__all__ = ["TC_CAPABILITY_CONV2D", "TCConv2dDesc", "conv2d_output_shape", "conv2d_scratch_bytes",
           "conv2d_backward_input_scratch_bytes", "conv2d_forward", "conv2d_backward_input",
           "conv2d_backward_weight"]

TC_CAPABILITY_CONV2D = 1 << 10
CAPABILITY_ALIASES["conv2d"] = TC_CAPABILITY_CONV2D


class TCConv2dDesc(_Struct):
    """tc_conv2d_desc (out_H / out_W 0 = computed)."""
    _c_name_ = "struct tc_conv2d_desc"
    _fields_ = [
        ("batch", c_int64),
        ("in_channels", c_int64),
        ("out_channels", c_int64),
        ("H", c_int64),
        ("W", c_int64),
        ("kH", c_int64),
        ("kW", c_int64),
        ("pad_h", c_int64),
        ("pad_w", c_int64),
        ("stride_h", c_int64),
        ("stride_w", c_int64),
        ("out_H", c_int64),
        ("out_W", c_int64),
        ("dtype", c_int32),
    ]


_i64 = c_int64
_tc_conv2d_output_shape = declare("tc_conv2d_output_shape", tc_status, _i64, _i64, _i64, _i64, _i64, _i64, _i64,
                                  _i64, POINTER(c_int64), POINTER(c_int64))
_tc_conv2d_scratch_bytes = declare("tc_conv2d_scratch_bytes", tc_status, POINTER(TCConv2dDesc), POINTER(c_uint64))
_tc_conv2d_backward_input_scratch_bytes = declare("tc_conv2d_backward_input_scratch_bytes", tc_status,
                                                  POINTER(TCConv2dDesc), POINTER(c_uint64))
_conv2d_forward = Op("tc_conv2d_forward", TCConv2dDesc)
_conv2d_backward_input = Op("tc_conv2d_backward_input", TCConv2dDesc)
_conv2d_backward_weight = Op("tc_conv2d_backward_weight", TCConv2dDesc)


def _desc(fn, batch=1, in_channels=1, out_channels=1, H=1, W_in=1, kH=1, kW=1, pad_h=0, pad_w=0, stride_h=1,
          stride_w=1, out_H=None, out_W=None, dtype="f32"):
    return TCConv2dDesc(
        batch=i64(batch, fn, "batch"), in_channels=i64(in_channels, fn, "in_channels"),
        out_channels=i64(out_channels, fn, "out_channels"), H=i64(H, fn, "H"), W=i64(W_in, fn, "W_in"),
        kH=i64(kH, fn, "kH"), kW=i64(kW, fn, "kW"), pad_h=i64(pad_h, fn, "pad_h"), pad_w=i64(pad_w, fn, "pad_w"),
        stride_h=i64(stride_h, fn, "stride_h"), stride_w=i64(stride_w, fn, "stride_w"),
        out_H=0 if out_H is None else i64(out_H, fn, "out_H"), out_W=0 if out_W is None else i64(out_W, fn, "out_W"),
        dtype=dtype_code(dtype))


@context_method(pass_self=False)
def conv2d_output_shape(H, W_in, kH, kW, pad_h=0, pad_w=0, stride_h=1, stride_w=1):
    """(out_H, out_W) = ((H + 2*pad_h - kH) // stride_h + 1, (W_in + 2*pad_w - kW) // stride_w + 1)."""
    fn = "tc_conv2d_output_shape"
    args = [i64(v, fn, name) for v, name in ((H, "H"), (W_in, "W_in"), (kH, "kH"), (kW, "kW"), (pad_h, "pad_h"),
                                             (pad_w, "pad_w"), (stride_h, "stride_h"), (stride_w, "stride_w"))]
    out_h, out_w = c_int64(), c_int64()
    check(_tc_conv2d_output_shape(*args, byref(out_h), byref(out_w)))
    return out_h.value, out_w.value


@context_method(pass_self=False)
def conv2d_scratch_bytes(batch, in_channels, H, W_in, kH, kW, pad_h=0, pad_w=0, stride_h=1, stride_w=1, out_H=None,
                         out_W=None):
    """Bytes of scratch_col (f32 im2col columns for the batch):
    batch * in_channels*kH*kW * out_H*out_W * 4, for any dtype and out_channels."""
    fn = "tc_conv2d_scratch_bytes"
    d = _desc(fn, batch, in_channels, 1, H, W_in, kH, kW, pad_h, pad_w, stride_h, stride_w, out_H, out_W)
    out = c_uint64()
    check(_tc_conv2d_scratch_bytes(byref(d), byref(out)))
    return out.value


@context_method(pass_self=False)
def conv2d_backward_input_scratch_bytes(batch, in_channels, H, W_in):
    """Bytes of scratch_dX_f32 (the f32 accumulator of dX): batch * in_channels * H * W_in * 4."""
    fn = "tc_conv2d_backward_input_scratch_bytes"
    d = _desc(fn, batch, in_channels, 1, H, W_in)
    out = c_uint64()
    check(_tc_conv2d_backward_input_scratch_bytes(byref(d), byref(out)))
    return out.value


@context_method
def conv2d_forward(ctx, X, weight, bias, Y, scratch_col, batch, in_channels, out_channels, H, W_in, kH, kW,
                   pad_h=0, pad_w=0, stride_h=1, stride_w=1, out_H=None, out_W=None, dtype="f16", *, stream=None):
    """Y = conv(X, weight) + bias (bias may be None). Y is overwritten. With
    `stream`, enqueued there and returns at once (likewise the backward passes)."""
    fn = "tc_conv2d_forward" if stream is None else "tc_conv2d_forward_async"
    d = _desc(fn, batch, in_channels, out_channels, H, W_in, kH, kW, pad_h, pad_w, stride_h, stride_w, out_H, out_W,
              dtype)
    _conv2d_forward(stream, context_arg(ctx, fn), buffer_arg(X, fn, "X"), buffer_arg(weight, fn, "weight"),
                    buffer_arg(bias, fn, "bias"), buffer_arg(Y, fn, "Y"), buffer_arg(scratch_col, fn, "scratch_col"),
                    byref(d), keep=(X, weight, bias, Y, scratch_col))


@context_method
def conv2d_backward_input(ctx, dY, weight, dX, scratch_col, scratch_dX_f32, batch, in_channels, out_channels, H,
                          W_in, kH, kW, pad_h=0, pad_w=0, stride_h=1, stride_w=1, out_H=None, out_W=None,
                          dtype="f16", *, stream=None):
    """dX = dL/dX from dY = dL/dY (the transposed convolution). dX is overwritten."""
    fn = "tc_conv2d_backward_input" if stream is None else "tc_conv2d_backward_input_async"
    d = _desc(fn, batch, in_channels, out_channels, H, W_in, kH, kW, pad_h, pad_w, stride_h, stride_w, out_H, out_W,
              dtype)
    _conv2d_backward_input(stream, context_arg(ctx, fn), buffer_arg(dY, fn, "dY"), buffer_arg(weight, fn, "weight"),
                           buffer_arg(dX, fn, "dX"), buffer_arg(scratch_col, fn, "scratch_col"),
                           buffer_arg(scratch_dX_f32, fn, "scratch_dX_f32"), byref(d),
                           keep=(dY, weight, dX, scratch_col, scratch_dX_f32))


@context_method
def conv2d_backward_weight(ctx, X, dY, dW, scratch_col, batch, in_channels, out_channels, H, W_in, kH, kW,
                           pad_h=0, pad_w=0, stride_h=1, stride_w=1, out_H=None, out_W=None, dtype="f16", *,
                           stream=None):
    """dW = dL/dW from X and dY, summed over the batch. dW is overwritten; no bias gradient."""
    fn = "tc_conv2d_backward_weight" if stream is None else "tc_conv2d_backward_weight_async"
    d = _desc(fn, batch, in_channels, out_channels, H, W_in, kH, kW, pad_h, pad_w, stride_h, stride_w, out_H, out_W,
              dtype)
    _conv2d_backward_weight(stream, context_arg(ctx, fn), buffer_arg(X, fn, "X"), buffer_arg(dY, fn, "dY"),
                            buffer_arg(dW, fn, "dW"), buffer_arg(scratch_col, fn, "scratch_col"), byref(d),
                            keep=(X, dY, dW, scratch_col))
