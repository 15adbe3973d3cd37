"""Argument conversion shared by every area: integers that must fit the C
types, flags, host memory of NumPy arrays and other buffer-protocol objects,
and NumPy dtypes of tensorcore dtypes.

ctypes silently wraps integers that do not fit (c_int64(2**64 + 5) is 5), so
every integer headed for C goes through i64()/size() first.
"""

import numpy as np

from ._constants import (DTYPE_ALIASES, TC_DTYPE_BF16, TC_DTYPE_F16, TC_DTYPE_F32, TC_DTYPE_F64, TC_DTYPE_I8,
                         TC_DTYPE_I32, TC_ERR_INVALID_ARG, TC_ERR_INVALID_SHAPE, TC_ERR_UNSUPPORTED_DTYPE)
from ._errors import TensorcoreTypeError, TensorcoreValueError

try:  # optional: real bfloat16 arrays; without it bf16 data travels as uint16 bit patterns
    import ml_dtypes

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes = None
    BFLOAT16 = None

_INT64_MIN, _INT64_MAX, _SIZE_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1


def _index(value, fn, name, status):
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return int(value.__index__())
    except (AttributeError, TypeError):
        raise TensorcoreTypeError(status, "%s: %s must be an integer, got %s" % (
            fn, name, type(value).__name__)) from None


def i64(value, fn, name, status=TC_ERR_INVALID_SHAPE):
    """An int64 argument (dims, pitches, strides); out of range -> `status`."""
    v = _index(value, fn, name, status)
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise TensorcoreValueError(status, "%s: %s = %d does not fit in 64 bits" % (fn, name, v))
    return v


def size(value, fn, name, status=TC_ERR_INVALID_ARG):
    """A size_t argument (byte counts, offsets): negative or >= 2^64 -> `status`."""
    v = _index(value, fn, name, status)
    if not 0 <= v <= _SIZE_MAX:
        raise TensorcoreValueError(status, "%s: %s = %d is not a valid size" % (fn, name, v))
    return v


def f64(value, fn, name, status=TC_ERR_INVALID_ARG):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TensorcoreTypeError(status, "%s: %s must be a number, got %r" % (fn, name, value)) from None


def flag(value):
    return 1 if value else 0


class HostMemory:
    """Address and extent of a C-contiguous host array; `keep` holds the
    owner alive while C uses the address."""

    __slots__ = ("address", "nbytes", "keep")

    def __init__(self, address, nbytes, keep):
        self.address, self.nbytes, self.keep = address, nbytes, keep


def host_memory(obj, fn, name="arr", writable=False):
    """Host memory of a NumPy array or any buffer-protocol object (bytes,
    bytearray, memoryview, array.array). It must be C-contiguous (and
    writable when `writable`), else TensorcoreValueError."""
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            view = memoryview(obj)
        except TypeError:
            raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: %s must be a NumPy array or a buffer-protocol "
                                      "object, got %s" % (fn, name, type(obj).__name__)) from None
        if not view.c_contiguous:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is not C-contiguous" % (fn, name))
        arr = np.frombuffer(view.cast("B") if view.nbytes else b"", dtype=np.uint8)
        if writable and view.readonly:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is read-only" % (fn, name))
        return HostMemory(arr.ctypes.data, view.nbytes, (obj, view, arr))
    if not arr.flags.c_contiguous:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is not C-contiguous (strides %s); pass "
                                   "np.ascontiguousarray(%s)" % (fn, name, arr.strides, name))
    if writable and not arr.flags.writeable:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is read-only" % (fn, name))
    return HostMemory(arr.ctypes.data, arr.nbytes, arr)


_NUMPY_OF = {
    TC_DTYPE_F16: np.dtype(np.float16),
    TC_DTYPE_F32: np.dtype(np.float32),
    TC_DTYPE_I8: np.dtype(np.int8),
    TC_DTYPE_I32: np.dtype(np.int32),
    TC_DTYPE_F64: np.dtype(np.float64),
    TC_DTYPE_BF16: BFLOAT16 if BFLOAT16 is not None else np.dtype(np.uint16),
}


def numpy_dtype(dtype):
    """The NumPy dtype for a tensorcore dtype name/constant ("bf16" gives
    ml_dtypes.bfloat16 when installed, else uint16 bit patterns) or any NumPy
    dtype. tensorcore names win: "i8" is int8 here, not NumPy's int64."""
    if isinstance(dtype, bool):
        raise TensorcoreTypeError(TC_ERR_UNSUPPORTED_DTYPE, "dtype must not be a bool")
    if isinstance(dtype, int):
        if dtype in _NUMPY_OF:
            return _NUMPY_OF[dtype]
        raise TensorcoreValueError(TC_ERR_UNSUPPORTED_DTYPE, "unknown dtype value %d" % dtype)
    if isinstance(dtype, str) and dtype.strip().lower() in DTYPE_ALIASES:
        code = DTYPE_ALIASES[dtype.strip().lower()]
        if code not in _NUMPY_OF:
            raise TensorcoreValueError(TC_ERR_UNSUPPORTED_DTYPE, "%r is a block type with no NumPy dtype" % dtype)
        return _NUMPY_OF[code]
    try:
        return np.dtype(dtype)
    except TypeError as e:
        raise TensorcoreValueError(TC_ERR_UNSUPPORTED_DTYPE, "unknown dtype %r (%s)" % (dtype, e)) from None
