"""General matrix multiply (include/tensorcore/gemm.h).

    C = alpha * op(A) @ op(B) + beta * C      row-major, op = transpose or not

A is M x K (K x M with transpose_a), B is K x N (N x K with transpose_b), C is
M x N; lda/ldb/ldc are row pitches in elements (0 = packed); batched strides
are in elements (0 = packed). dtype/accum pairs: f32/f32, f16/f32, f16/f16,
bf16/f32, i8/i32 (C is int32; alpha and beta must be integers).
"""

from ctypes import byref
from functools import lru_cache

from .._args import f64, flag, i64
from .._constants import accum_code, dtype_code
from .._objects import buffer_arg, context_arg, context_method
from .._optable import Op
from .._structs import TCGemmDesc

__all__ = ["gemm", "gemm_async", "gemm_batched"]

_gemm = Op("tc_gemm", TCGemmDesc)
_gemm_batched = Op("tc_gemm_batched", TCGemmDesc)


def _desc(*args):
    """The descriptor of a call. A loop of GEMMs repeats the same shapes, and
    converting and checking a dozen arguments costs more host time than a
    small GEMM takes on a GPU, so descriptors are cached by their arguments
    (the C functions take them as const). Unhashable arguments are checked
    and converted afresh."""
    try:
        return _cached_desc(*args)
    except TypeError:
        return _make_desc(*args)


def _make_desc(fn, M, N, K, dtype, accum, alpha, beta, transpose_a, transpose_b, lda, ldb, ldc, allow_tf32,
               batch=1, stride_a=0, stride_b=0, stride_c=0):
    return TCGemmDesc(
        M=i64(M, fn, "M"), N=i64(N, fn, "N"), K=i64(K, fn, "K"),
        dtype=dtype_code(dtype), accum=accum_code(accum),
        alpha=f64(alpha, fn, "alpha"), beta=f64(beta, fn, "beta"),
        transpose_a=flag(transpose_a), transpose_b=flag(transpose_b),
        lda=i64(lda, fn, "lda"), ldb=i64(ldb, fn, "ldb"), ldc=i64(ldc, fn, "ldc"),
        batch=i64(batch, fn, "batch"),
        stride_a=i64(stride_a, fn, "stride_a"), stride_b=i64(stride_b, fn, "stride_b"),
        stride_c=i64(stride_c, fn, "stride_c"),
        allow_tf32=flag(allow_tf32))


_cached_desc = lru_cache(maxsize=256, typed=True)(_make_desc)  # typed: 4.0 or True is not 4


def _operands(fn, ctx, A, B, C):
    return (context_arg(ctx, fn), buffer_arg(A, fn, "A"), buffer_arg(B, fn, "B"), buffer_arg(C, fn, "C"))


@context_method
def gemm(ctx, A, B, C, M, N, K, dtype="f16", accum="f32", alpha=1.0, beta=0.0,
         transpose_a=False, transpose_b=False, lda=0, ldb=0, ldc=0, *, allow_tf32=False, stream=None):
    """C = alpha * op(A) @ op(B) + beta * C: synchronously, or enqueued on
    `stream` (tc_gemm_async), returning at once.

    allow_tf32 lets a GPU run f32 on TF32 tensor cores (ignored on the CPU)."""
    fn = "tc_gemm" if stream is None else "tc_gemm_async"
    d = _desc(fn, M, N, K, dtype, accum, alpha, beta, transpose_a, transpose_b, lda, ldb, ldc, allow_tf32)
    _gemm(stream, *_operands(fn, ctx, A, B, C), byref(d), keep=(A, B, C))


@context_method
def gemm_async(ctx, A, B, C, M, N, K, stream, dtype="f16", accum="f32", alpha=1.0, beta=0.0,
               transpose_a=False, transpose_b=False, lda=0, ldb=0, ldc=0, *, allow_tf32=False):
    """gemm enqueued on `stream`; returns at once. stream.sync() waits."""
    fn = "tc_gemm_async"
    d = _desc(fn, M, N, K, dtype, accum, alpha, beta, transpose_a, transpose_b, lda, ldb, ldc, allow_tf32)
    _gemm.enqueue(stream, *_operands(fn, ctx, A, B, C), byref(d), keep=(A, B, C))


@context_method
def gemm_batched(ctx, A, B, C, batch, M, N, K, dtype="f16", accum="f32", alpha=1.0, beta=0.0,
                 transpose_a=False, transpose_b=False, lda=0, ldb=0, ldc=0, stride_a=0, stride_b=0, stride_c=0,
                 *, allow_tf32=False, stream=None):
    """`batch` GEMMs; matrix b of A starts b * stride_a elements in (0 = packed),
    likewise B and C. Batches of C may not overlap. With `stream`, enqueued
    there (tc_gemm_batched_async) and returns at once."""
    fn = "tc_gemm_batched" if stream is None else "tc_gemm_batched_async"
    d = _desc(fn, M, N, K, dtype, accum, alpha, beta, transpose_a, transpose_b, lda, ldb, ldc, allow_tf32,
              batch, stride_a, stride_b, stride_c)
    _gemm_batched(stream, *_operands(fn, ctx, A, B, C), byref(d), keep=(A, B, C))
