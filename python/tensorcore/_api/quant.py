"""Quantized weights and the GEMV over them (include/tensorcore/quant.h).

    Y[M, N] = X[M, K] @ W[N, K]^T

W holds N rows of K weights in a ggml block format, byte-compatible with
GGUF tensors (a GGUF matrix has dims [K, N]); X and Y are f16 by default
(dtype="bf16" or "f32" also work), accumulation is f32. Formats are the
TC_QUANT_* constants or their names: "q4_0", "q8_0", "q4_1", "q4_k",
"q5_k", "q6_k", "q8_k", "f16", "bf16", "f32", "q5_0", "q5_1".
"""

from ctypes import POINTER, byref, c_char_p, c_int32, c_int64, c_size_t

from .._args import f64, i64
from .._constants import CAPABILITY_ALIASES, TC_ERR_UNSUPPORTED_DTYPE, dtype_code, resolve
from .._errors import check
from .._lib import declare, tc_status, text
from .._optable import Op
from .._objects import buffer_arg, context_arg, context_method

__all__ = ["TC_QUANT_Q4_0", "TC_QUANT_Q8_0", "TC_QUANT_Q4_1", "TC_QUANT_Q4_K", "TC_QUANT_Q5_K", "TC_QUANT_Q6_K",
           "TC_QUANT_Q8_K", "TC_QUANT_F16", "TC_QUANT_BF16", "TC_QUANT_F32", "TC_QUANT_Q5_0", "TC_QUANT_Q5_1",
           "TC_CAPABILITY_QUANTIZED",
           "QUANT_ALIASES", "QUANT_NAMES", "quant_code", "quant_name", "quant_block_info", "quantized_size",
           "quantize_weights", "dequantize_weights", "gemv_quantized", "gemv_quantized_async",
           "fused_rmsnorm_gemv_quantized"]

TC_QUANT_Q4_0 = 0
TC_QUANT_Q8_0 = 1
TC_QUANT_Q4_1 = 2
TC_QUANT_Q4_K = 3
TC_QUANT_Q5_K = 4
TC_QUANT_Q6_K = 5
TC_QUANT_Q8_K = 6
TC_QUANT_F16 = 7
TC_QUANT_BF16 = 8
TC_QUANT_F32 = 9
TC_QUANT_Q5_0 = 10
TC_QUANT_Q5_1 = 11
TC_CAPABILITY_QUANTIZED = 1 << 11  # context.h
CAPABILITY_ALIASES["quantized"] = TC_CAPABILITY_QUANTIZED

QUANT_NAMES = {TC_QUANT_Q4_0: "q4_0", TC_QUANT_Q8_0: "q8_0", TC_QUANT_Q4_1: "q4_1", TC_QUANT_Q4_K: "q4_k",
               TC_QUANT_Q5_K: "q5_k", TC_QUANT_Q6_K: "q6_k", TC_QUANT_Q8_K: "q8_k", TC_QUANT_F16: "f16",
               TC_QUANT_BF16: "bf16", TC_QUANT_F32: "f32", TC_QUANT_Q5_0: "q5_0", TC_QUANT_Q5_1: "q5_1"}
QUANT_ALIASES = {name: code for code, name in QUANT_NAMES.items()}

_tc_quant_name = declare("tc_quant_name", c_char_p, c_int32)
_tc_quant_block_info = declare("tc_quant_block_info", tc_status, c_int32, POINTER(c_int64), POINTER(c_int64))
_tc_quantized_size = declare("tc_quantized_size", tc_status, c_int32, c_int64, c_int64, POINTER(c_size_t))
_quantize_weights = Op("tc_quantize_weights")
_dequantize_weights = Op("tc_dequantize_weights")
_gemv_quantized = Op("tc_gemv_quantized")
_fused_rmsnorm_gemv_quantized = Op("tc_fused_rmsnorm_gemv_quantized")


def quant_code(fmt):
    """A TC_QUANT_* value from a constant or a name ("q4_0", "Q4_K", "TC_QUANT_Q8_0")."""
    return resolve(fmt, QUANT_ALIASES, "quantized format", TC_ERR_UNSUPPORTED_DTYPE, "tc_quant_")


def quant_name(fmt):
    """"q4_0", ...; "unknown" for values outside TC_QUANT_*."""
    return text(_tc_quant_name(quant_code(fmt)))


def quant_block_info(fmt):
    """(weights per block, bytes per block) of a format."""
    e, b = c_int64(), c_int64()
    check(_tc_quant_block_info(quant_code(fmt), byref(e), byref(b)))
    return e.value, b.value


def quantized_size(fmt, N, K):
    """Exact bytes of an N x K matrix in `fmt` (K a multiple of the block size)."""
    fn = "tc_quantized_size"
    out = c_size_t()
    check(_tc_quantized_size(quant_code(fmt), i64(N, fn, "N"), i64(K, fn, "K"), byref(out)))
    return out.value


@context_method
def quantize_weights(ctx, W_fp16, W_quant, fmt, N, K, dtype="f16", *, stream=None):
    """Quantises W_fp16[N, K] (of `dtype`: f16 by default, bf16 or f32) into
    W_quant, bit-identical to ggml's reference quantisers. Formats q4_0, q4_1,
    q5_0, q5_1, q8_0, q8_k, f16, bf16, f32. With `stream`, enqueued there and returns at once
    (likewise every function here that takes one)."""
    fn = "tc_quantize_weights"
    _quantize_weights(stream, context_arg(ctx, fn), buffer_arg(W_fp16, fn, "W_fp16"),
                      buffer_arg(W_quant, fn, "W_quant"), quant_code(fmt), i64(N, fn, "N"), i64(K, fn, "K"),
                      dtype_code(dtype), keep=(W_fp16, W_quant))


@context_method
def dequantize_weights(ctx, W_quant, Y, fmt, N, K, dtype="f32", row_offset=0, *, stream=None):
    """Y[N, K] (of `dtype`) = rows [row_offset, row_offset + N) of W_quant,
    dequantised; f32 results equal ggml's dequantize_row_* bit for bit."""
    fn = "tc_dequantize_weights"
    _dequantize_weights(stream, context_arg(ctx, fn), buffer_arg(W_quant, fn, "W_quant"), buffer_arg(Y, fn, "Y"),
                        quant_code(fmt), i64(row_offset, fn, "row_offset"), i64(N, fn, "N"), i64(K, fn, "K"),
                        dtype_code(dtype), keep=(W_quant, Y))


def _gemv_args(fn, ctx, X, W_quant, Y, fmt, M, N, K):
    return (context_arg(ctx, fn), buffer_arg(X, fn, "X"), buffer_arg(W_quant, fn, "W_quant"), buffer_arg(Y, fn, "Y"),
            quant_code(fmt), i64(M, fn, "M"), i64(N, fn, "N"), i64(K, fn, "K"))


@context_method
def gemv_quantized(ctx, X, W_quant, Y, fmt, M, N, K, dtype="f16", *, stream=None):
    """Y[M, N] = X[M, K] @ W_quant[N, K]^T. W is streamed once for all M rows."""
    fn = "tc_gemv_quantized" if stream is None else "tc_gemv_quantized_async"
    _gemv_quantized(stream, *_gemv_args(fn, ctx, X, W_quant, Y, fmt, M, N, K), dtype_code(dtype),
                    keep=(X, W_quant, Y))


@context_method
def gemv_quantized_async(ctx, X, W_quant, Y, fmt, M, N, K, stream, dtype="f16"):
    """gemv_quantized enqueued on `stream`; returns at once."""
    fn = "tc_gemv_quantized_async"
    _gemv_quantized.enqueue(stream, *_gemv_args(fn, ctx, X, W_quant, Y, fmt, M, N, K), dtype_code(dtype),
                            keep=(X, W_quant, Y))


@context_method
def fused_rmsnorm_gemv_quantized(ctx, X, gamma, W_quant, Y, fmt, M, N, K, eps=1e-5, dtype="f16", *, stream=None):
    """Y = rmsnorm(X; gamma, eps) @ W_quant^T without writing the normalised X
    out; gamma[K] has `dtype` like X and Y."""
    fn = "tc_fused_rmsnorm_gemv_quantized"
    c, x, w, y, q, m, n, k = _gemv_args(fn, ctx, X, W_quant, Y, fmt, M, N, K)
    _fused_rmsnorm_gemv_quantized(stream, c, x, buffer_arg(gamma, fn, "gamma"), w, y, q, m, n, k,
                                  f64(eps, fn, "eps"), dtype_code(dtype), keep=(X, gamma, W_quant, Y))
