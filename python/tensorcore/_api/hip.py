"""The HIP backend's entry points (include/tensorcore/hip.h).

This build has no HIP runtime, so they answer deterministically:
hip_device_count() is 0, hip_last_kernel_name() is "", and hip_init,
hip_device_info_get, hip_device_at and hip_select_device raise
TensorcoreError(TC_ERR_UNSUPPORTED, "... tensorcore was built without HIP")
after their arguments are checked (a closed context or a negative index is
TC_ERR_INVALID_ARG). Device info comes back as a dict of the struct's fields,
as the original binding returned it.
"""

from ctypes import POINTER, byref, c_char, c_char_p, c_int32, c_uint8, c_uint32, c_uint64

from .._args import i64
from .._errors import check
from .._lib import declare, handle, tc_status, text
from .._objects import context_arg, context_method
from .._structs import _str_fields, _Struct

__all__ = ["TC_HIP_VENDOR_UNKNOWN", "TC_HIP_VENDOR_INTEL", "TC_HIP_VENDOR_NVIDIA", "TC_HIP_VENDOR_AMD",
           "TC_HIP_VENDOR_ARM_MALI", "TCHipDeviceInfo", "hip_init", "hip_device_info_get", "hip_device_count",
           "hip_device_at", "hip_select_device", "hip_last_kernel_name"]

TC_HIP_VENDOR_UNKNOWN = 0
TC_HIP_VENDOR_INTEL = 1
TC_HIP_VENDOR_NVIDIA = 2
TC_HIP_VENDOR_AMD = 3
TC_HIP_VENDOR_ARM_MALI = 4


class TCHipDeviceInfo(_Struct):
    """tc_hip_device_info."""
    _c_name_ = "struct tc_hip_device_info"
    _fields_ = [
        ("vendor", c_int32),
        ("device_name", c_char * 128),
        ("driver_version", c_char * 64),
        ("opencl_version", c_char * 64),
        ("global_memory_bytes", c_uint64),
        ("local_memory_bytes", c_uint64),
        ("compute_units", c_uint32),
        ("max_workgroup_size", c_uint32),
        ("preferred_subgroup_size", c_uint32),
        ("supports_fp16", c_uint8),
        ("supports_fp64", c_uint8),
        ("supports_int8_dot", c_uint8),
        ("unified_memory", c_uint8),
    ]


_str_fields(TCHipDeviceInfo, "device_name", "driver_version", "opencl_version")

_tc_hip_init = declare("tc_hip_init", tc_status, handle)
_tc_hip_device_info_get = declare("tc_hip_device_info_get", tc_status, handle, POINTER(TCHipDeviceInfo))
_tc_hip_device_count = declare("tc_hip_device_count", c_int32)
_tc_hip_device_at = declare("tc_hip_device_at", tc_status, c_int32, POINTER(TCHipDeviceInfo))
_tc_hip_select_device = declare("tc_hip_select_device", tc_status, handle, c_int32)
_tc_hip_last_kernel_name = declare("tc_hip_last_kernel_name", c_char_p)


def _index(index, fn):
    v = i64(index, fn, "index")
    return max(min(v, (1 << 31) - 1), -(1 << 31))  # out-of-range values stay out of range (negative or too big)


@context_method
def hip_init(ctx):
    """Initialises the HIP backend for the context (TC_ERR_UNSUPPORTED here)."""
    check(_tc_hip_init(context_arg(ctx, "tc_hip_init")))


@context_method("hip_device_info")
def hip_device_info_get(ctx):
    """The context's HIP device as a dict of TCHipDeviceInfo fields (TC_ERR_UNSUPPORTED here)."""
    info = TCHipDeviceInfo()
    check(_tc_hip_device_info_get(context_arg(ctx, "tc_hip_device_info_get"), byref(info)))
    return info.as_dict()


def hip_device_count():
    """Number of HIP devices (0 here)."""
    return int(_tc_hip_device_count())


def hip_device_at(index):
    """HIP device `index` as a dict of TCHipDeviceInfo fields (TC_ERR_UNSUPPORTED here)."""
    info = TCHipDeviceInfo()
    check(_tc_hip_device_at(_index(index, "tc_hip_device_at"), byref(info)))
    return info.as_dict()


@context_method
def hip_select_device(ctx, index):
    """Selects HIP device `index` for the context (TC_ERR_UNSUPPORTED here)."""
    check(_tc_hip_select_device(context_arg(ctx, "tc_hip_select_device"), _index(index, "tc_hip_select_device")))


def hip_last_kernel_name():
    """The last HIP kernel this thread launched ("": none ever runs in this build)."""
    return text(_tc_hip_last_kernel_name())
