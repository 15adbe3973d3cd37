"""CUDA device management and diagnostics (include/tensorcore/cuda.h).

These work in every build: without CUDA or without a GPU, cuda_device_count()
is 0 and the rest raise TensorcoreError(TC_ERR_NO_DEVICE) saying why."""

from ctypes import POINTER, byref, c_char_p, c_int32

from .._args import i64
from .._errors import check
from .._lib import declare, handle, tc_status, text
from .._objects import context_arg, context_method
from .._structs import TCDeviceInfo

__all__ = ["cuda_init", "cuda_is_active", "cuda_device_count", "cuda_device_at", "cuda_select_device",
           "cuda_last_kernel_name"]

_tc_cuda_device_count = declare("tc_cuda_device_count", c_int32)
_tc_cuda_device_at = declare("tc_cuda_device_at", tc_status, c_int32, POINTER(TCDeviceInfo))
_tc_cuda_init = declare("tc_cuda_init", tc_status, handle)
_tc_cuda_is_active = declare("tc_cuda_is_active", tc_status, handle, POINTER(c_int32))
_tc_cuda_select_device = declare("tc_cuda_select_device", tc_status, handle, c_int32)
_tc_cuda_last_kernel_name = declare("tc_cuda_last_kernel_name", c_char_p)


def cuda_device_count():
    """Number of usable CUDA devices (0 without CUDA or a GPU)."""
    return int(_tc_cuda_device_count())


def cuda_device_at(index):
    """TCDeviceInfo of CUDA device `index`, without creating a context."""
    info = TCDeviceInfo()
    check(_tc_cuda_device_at(i64(index, "tc_cuda_device_at", "index"), byref(info)))
    return info


@context_method
def cuda_init(ctx):
    """Makes the context run on CUDA (device 0): a no-op for a CUDA context;
    a CPU context must own no buffers or streams yet."""
    check(_tc_cuda_init(context_arg(ctx, "tc_cuda_init")))


@context_method
def cuda_is_active(ctx):
    """True when the context's ops run on CUDA."""
    out = c_int32()
    check(_tc_cuda_is_active(context_arg(ctx, "tc_cuda_is_active"), byref(out)))
    return bool(out.value)


@context_method
def cuda_select_device(ctx, index):
    """Moves a context that owns no buffers or streams to CUDA device `index`."""
    check(_tc_cuda_select_device(context_arg(ctx, "tc_cuda_select_device"),
                                 i64(index, "tc_cuda_select_device", "index")))


def cuda_last_kernel_name():
    """The last CUDA kernel or library call this thread launched ("" before any)."""
    return text(_tc_cuda_last_kernel_name())
