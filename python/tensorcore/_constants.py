"""The TC_ constants of the C headers, and the string aliases accepted for them.

Values are part of the ABI (include/tensorcore/types.h, context.h). An op
area with constants of its own keeps them in its _api/ module.
"""

import numpy as np

from ._errors import TensorcoreTypeError, TensorcoreValueError

# Status codes (types.h): TC_OK, TC_ERR_*.
from ._status import *  # noqa: E402,F401,F403

# Element types (types.h); 6..9 reserved.
TC_DTYPE_F16 = 0
TC_DTYPE_BF16 = 1
TC_DTYPE_F32 = 2
TC_DTYPE_I8 = 3
TC_DTYPE_I32 = 4
TC_DTYPE_F64 = 5
# A block type (GGUF's Q8_0: 32 values in 34 bytes), accepted only where a
# call says so (the LLaMA KV cache); no per-element size, no NumPy dtype.
TC_DTYPE_Q8_0 = 10

# Backends (types.h); 1-6 and 8 reserved.
TC_BACKEND_NONE = 0
TC_BACKEND_PORTABLE_CPU = 7
TC_BACKEND_CUDA = 9
TC_BACKEND_HIP = 10

# Capability bits (context.h).
TC_CAPABILITY_GEMM_F32 = 1 << 0
TC_CAPABILITY_GEMM_F16 = 1 << 1
TC_CAPABILITY_GEMM_BF16 = 1 << 2
TC_CAPABILITY_GEMM_I8 = 1 << 3
TC_CAPABILITY_GEMM_BATCHED = 1 << 4
TC_CAPABILITY_STREAMS = 1 << 5
TC_CAPABILITY_GEMM_TF32 = 1 << 6
TC_CAPABILITY_TRAINING_KERNELS = 1 << 9
# Activation checkpointing and memory tiers (memory.h; _api/memory.py).
TC_CAPABILITY_CHECKPOINT = 1 << 13
TC_CAPABILITY_MEMORY_TIERS = 1 << 14
TC_CAPABILITIES_VERSION = 1

# String aliases (lower case). The short names are the library's own
# (tc_dtype_name); note "i8" means int8 here, not NumPy's int64.
DTYPE_ALIASES = {
    "f16": TC_DTYPE_F16, "fp16": TC_DTYPE_F16, "float16": TC_DTYPE_F16, "half": TC_DTYPE_F16,
    "bf16": TC_DTYPE_BF16, "bfloat16": TC_DTYPE_BF16,
    "f32": TC_DTYPE_F32, "fp32": TC_DTYPE_F32, "float32": TC_DTYPE_F32, "float": TC_DTYPE_F32,
    "i8": TC_DTYPE_I8, "int8": TC_DTYPE_I8,
    "i32": TC_DTYPE_I32, "int32": TC_DTYPE_I32,
    "f64": TC_DTYPE_F64, "fp64": TC_DTYPE_F64, "float64": TC_DTYPE_F64, "double": TC_DTYPE_F64,
    "q8_0": TC_DTYPE_Q8_0,
}
# Accumulator types use the same names.
ACCUM_ALIASES = DTYPE_ALIASES
DTYPE_NAMES = {TC_DTYPE_F16: "f16", TC_DTYPE_BF16: "bf16", TC_DTYPE_F32: "f32", TC_DTYPE_I8: "i8",
               TC_DTYPE_I32: "i32", TC_DTYPE_F64: "f64", TC_DTYPE_Q8_0: "q8_0"}
DTYPE_SIZES = {TC_DTYPE_F16: 2, TC_DTYPE_BF16: 2, TC_DTYPE_F32: 4, TC_DTYPE_I8: 1, TC_DTYPE_I32: 4, TC_DTYPE_F64: 8}
BACKEND_NAMES = {TC_BACKEND_NONE: "none", TC_BACKEND_PORTABLE_CPU: "portable_cpu", TC_BACKEND_CUDA: "cuda",
                 TC_BACKEND_HIP: "hip"}
CAPABILITY_ALIASES = {
    "gemm_f32": TC_CAPABILITY_GEMM_F32, "gemm_f16": TC_CAPABILITY_GEMM_F16, "gemm_bf16": TC_CAPABILITY_GEMM_BF16,
    "gemm_i8": TC_CAPABILITY_GEMM_I8, "gemm_batched": TC_CAPABILITY_GEMM_BATCHED, "streams": TC_CAPABILITY_STREAMS,
    "gemm_tf32": TC_CAPABILITY_GEMM_TF32,
    "training_kernels": TC_CAPABILITY_TRAINING_KERNELS,
    "checkpoint": TC_CAPABILITY_CHECKPOINT, "memory_tiers": TC_CAPABILITY_MEMORY_TIERS,
}

# NumPy dtype names that map onto tensorcore dtypes (ml_dtypes names bf16 "bfloat16").
_NUMPY_NAMES = {"float16": TC_DTYPE_F16, "bfloat16": TC_DTYPE_BF16, "float32": TC_DTYPE_F32, "int8": TC_DTYPE_I8,
                "int32": TC_DTYPE_I32, "float64": TC_DTYPE_F64}


def resolve(value, aliases, what, status=TC_ERR_INVALID_ARG, prefix=""):
    """A constant from an int or a (case-insensitive) string alias.

    Ints pass through unchecked so the library judges them (an unknown dtype
    value gets the library's own status). Strings may also be spelled as the
    constant's name (`prefix` + alias, e.g. "TC_DTYPE_F16"). Anything else is
    a ValueError (TensorcoreValueError) naming the accepted spellings.
    """
    if isinstance(value, bool):
        raise TensorcoreTypeError(status, "%s must be a TC_ constant or a name, not a bool" % what)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        if prefix and key.startswith(prefix.lower()):
            key = key[len(prefix):]
        if key in aliases:
            return aliases[key]
        raise TensorcoreValueError(status, "unknown %s %r; expected one of %s" % (
            what, value, ", ".join(sorted(set(aliases), key=lambda k: (aliases[k], k)))))
    try:
        index = value.__index__()
    except (AttributeError, TypeError):
        raise TensorcoreTypeError(status, "%s must be an int constant or a string, got %s" % (
            what, type(value).__name__)) from None
    return int(index)


def dtype_code(value, what="dtype"):
    """A TC_DTYPE_* value from a constant, a name ("f16", "BF16", ...) or a NumPy dtype."""
    if value is None:
        raise TensorcoreTypeError(TC_ERR_UNSUPPORTED_DTYPE, "%s must not be None" % what)
    if isinstance(value, (type, np.dtype)):  # np.float16, np.dtype("int8"), ml_dtypes.bfloat16, ...
        try:
            name = np.dtype(value).name
        except TypeError:
            name = None
        if name in _NUMPY_NAMES:
            return _NUMPY_NAMES[name]
        raise TensorcoreValueError(TC_ERR_UNSUPPORTED_DTYPE, "%s %r has no tensorcore equivalent" % (what, value))
    return resolve(value, DTYPE_ALIASES, what, TC_ERR_UNSUPPORTED_DTYPE, "tc_dtype_")


def accum_code(value):
    return dtype_code(value, "accum")


def capability_code(value):
    return resolve(value, CAPABILITY_ALIASES, "capability", TC_ERR_INVALID_ARG, "tc_capability_")


__all__ = [n for n in dir() if n.startswith("TC_")] + [
    "DTYPE_ALIASES", "ACCUM_ALIASES", "DTYPE_NAMES", "DTYPE_SIZES", "BACKEND_NAMES", "CAPABILITY_ALIASES",
    "dtype_code", "accum_code", "capability_code"]
