"""Contexts, device information and runtime capabilities
(include/tensorcore/context.h)."""

from ctypes import POINTER, byref, c_int32, c_uint64

from .._constants import TC_ERR_INVALID_ARG, capability_code
from .._errors import TensorcoreTypeError, check
from .._lib import declare, handle, tc_shutdown, tc_status
from .._objects import Context, context_arg, context_method, wrapper_of
from .._structs import TCDeviceInfo, TCRuntimeCapabilities

__all__ = ["init", "shutdown", "device_info", "runtime_capabilities", "capability_available"]

_tc_device_info = declare("tc_device_info", tc_status, handle, POINTER(TCDeviceInfo))
_tc_runtime_capabilities = declare("tc_runtime_capabilities", tc_status, handle, POINTER(TCRuntimeCapabilities))
_tc_capability_available = declare("tc_capability_available", c_int32, POINTER(TCRuntimeCapabilities), c_uint64)
# simpler's cpu executor calls it from its core threads; nothing to wrap.
declare("tc_cpu_run_inline", tc_status, c_int32)


def init(device=None, **options):
    """A Context: tc_init() when device is None (TC_DEVICE, else CUDA device 0
    when present, else the CPU), else tc_init_device(device) for "cpu",
    "cuda", "cuda:N". Release it with shutdown(ctx) or ctx.close().
    `options` are Context's keywords (memory_budget=, host_memory_budget=, spill_dir=)."""
    return Context(device, **options)


def shutdown(ctx):
    """tc_shutdown: refused (TC_ERR_INVALID_ARG) while the context has live
    buffers or streams; Context.close() closes them first instead."""
    owner = wrapper_of("context", ctx)
    if owner is not None:
        owner._shutdown()
    else:
        check(tc_shutdown(context_arg(ctx, "tc_shutdown")))


@context_method
def device_info(ctx):
    """TCDeviceInfo: .name, .family, .features (str), .backend, .device_index,
    .compute_units, .compute_capability, .memory_bytes."""
    info = TCDeviceInfo()
    check(_tc_device_info(context_arg(ctx, "tc_device_info"), byref(info)))
    return info


@context_method
def runtime_capabilities(ctx):
    """TCRuntimeCapabilities (versioned record: .version, .known, .available);
    test bits with capability_available()."""
    caps = TCRuntimeCapabilities()
    check(_tc_runtime_capabilities(context_arg(ctx, "tc_runtime_capabilities"), byref(caps)))
    return caps


def capability_available(caps, capability):
    """True when `capability` (a TC_CAPABILITY_* bit or its name, e.g.
    "gemm_f32") is a single bit that is both known and available. Unknown
    bits, masks of several bits and out-of-range values fail closed (False)."""
    if not isinstance(caps, TCRuntimeCapabilities):
        raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "capability_available: caps must come from "
                                  "runtime_capabilities(), got %s" % type(caps).__name__)
    bit = capability_code(capability)
    if not 0 < bit < (1 << 64):
        return False
    return bool(_tc_capability_available(byref(caps), bit))


TCRuntimeCapabilities.is_available = capability_available
