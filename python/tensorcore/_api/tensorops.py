"""The Metal 4 TensorOps GEMM kernel selector (include/tensorcore/tensorops.h).

Only Apple builds have TensorOps kernels. The original binding returned the
kernel name for a dtype pair, or None when that pair has none; here no pair
has one, so tensorops_gemm_kernel_name() returns None for every valid pair
(the library answers TC_ERR_UNSUPPORTED). Unknown dtype names still raise.
"""

from ctypes import POINTER, byref, c_char_p, c_int32

from .._constants import TC_ERR_UNSUPPORTED, TC_ERR_UNSUPPORTED_DTYPE, accum_code, dtype_code
from .._errors import check
from .._lib import declare, text
from .._structs import TCGemmDesc

__all__ = ["tensorops_gemm_kernel_name"]

_tc_tensorops_gemm_kernel_name = declare("tc_tensorops_gemm_kernel_name", c_char_p, POINTER(TCGemmDesc),
                                         POINTER(c_int32))


def tensorops_gemm_kernel_name(dtype="f16", accum="f32"):
    """The TensorOps GEMM kernel for (dtype, accum), or None when there is none
    (always, outside Apple builds)."""
    desc = TCGemmDesc(M=1, N=1, K=1, dtype=dtype_code(dtype), accum=accum_code(accum), alpha=1.0, beta=0.0, batch=1)
    err = c_int32(0)
    name = _tc_tensorops_gemm_kernel_name(byref(desc), byref(err))
    if name:
        return text(name)
    if err.value in (TC_ERR_UNSUPPORTED, TC_ERR_UNSUPPORTED_DTYPE):
        return None
    check(err.value)
    return None
