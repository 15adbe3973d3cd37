"""Diagnostics (include/tensorcore/diagnostics.h): version, names of codes,
the calling thread's last backend and last failure, the CPU backend's last
kernel family."""

from ctypes import c_char_p

from .._args import i64
from .._constants import DTYPE_ALIASES, TC_ERR_INVALID_ARG
from .._lib import (declare, text, tc_backend_name, tc_dtype_name, tc_last_backend, tc_last_error, tc_last_error_detail,
                    tc_status_string, tc_version)
from .._objects import context_method
from .._optable import TCOpValue, op_call, op_entries

__all__ = ["version", "status_string", "dtype_name", "backend_name", "last_backend", "last_backend_name",
           "last_error", "last_error_detail", "cpu_last_kernel_name", "TCOpValue", "op_entries", "op_call"]

_tc_cpu_last_kernel_name = declare("tc_cpu_last_kernel_name", c_char_p)

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _int32(code, fn):
    """The code as an int, or None when it cannot be an int32 (ctypes would wrap it)."""
    v = i64(code, fn, "code", TC_ERR_INVALID_ARG) if not isinstance(code, int) else code
    return v if _INT32_MIN <= v <= _INT32_MAX else None


def version():
    """"tensorcore X.Y.Z (<build detail>)"."""
    return text(tc_version())


def status_string(code):
    """tc_status_string: "invalid_shape" for -6, "unknown status" for codes outside the ABI."""
    v = _int32(code, "status_string")
    return "unknown status" if v is None else text(tc_status_string(v))


def dtype_name(code):
    """"f16", "bf16", "f32", "i8", "i32", "f64"; "unknown" otherwise. Accepts names too."""
    if isinstance(code, str):
        code = DTYPE_ALIASES.get(code.strip().lower(), -1)
    v = _int32(code, "dtype_name")
    return "unknown" if v is None else text(tc_dtype_name(v))


def backend_name(code):
    """"none", "portable_cpu", "cuda", "hip"; "unknown" otherwise."""
    v = _int32(code, "backend_name")
    return "unknown" if v is None else text(tc_backend_name(v))


@context_method(pass_self=False)
def last_backend():
    """TC_BACKEND_* that ran (or was enqueued to run) this thread's last kernel;
    TC_BACKEND_NONE before any kernel ran on the thread."""
    return int(tc_last_backend())


@context_method(pass_self=False)
def last_backend_name():
    return backend_name(last_backend())


def last_error():
    """Status of this thread's last tensorcore call (the binding raises on failures;
    this is for inspection)."""
    return int(tc_last_error())


def last_error_detail():
    """Detail of this thread's last failing call; "" after a success."""
    return text(tc_last_error_detail())


def cpu_last_kernel_name():
    """The kernel family of the CPU backend's last op in this process,
    "<family>/<level>" (TC_CPU_ISA's levels), e.g. "sgemm/avx512",
    "attention/portable", "sgemm/blas"; "" before any."""
    return text(_tc_cpu_last_kernel_name())
