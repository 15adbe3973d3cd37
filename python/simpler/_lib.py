"""Loads libsimpler.so and declares its C ABI (include/simpler/simpler.h).

The library is found at $SIMPLER_LIB, next to this package (an installed
wheel), next to $TENSORCORE_LIB, or in the source tree's build/ directory.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from . import _errors

MAX_TENSOR_DIMS = 5
RING_COUNT = 4


class CBuffer(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint64), ("size", ctypes.c_uint64)]


class CChipTensor(ctypes.Structure):
    """Mirror of `ChipTensor` (include/simpler/tensor.h), 96 bytes."""

    _fields_ = [
        ("buffer", CBuffer),
        ("start_offset", ctypes.c_uint64),
        ("ndims", ctypes.c_uint32),
        ("dtype", ctypes.c_int32),
        ("shapes", ctypes.c_uint32 * MAX_TENSOR_DIMS),
        ("scope_tag", ctypes.c_uint32),
        ("strides", ctypes.c_int64 * MAX_TENSOR_DIMS),
    ]


assert ctypes.sizeof(CChipTensor) == 96


class CWorkerConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("level", ctypes.c_int32),
        ("platform", ctypes.c_char_p),
        ("runtime", ctypes.c_char_p),
        ("device_id", ctypes.c_int32),
        ("num_cores", ctypes.c_int32),
        ("heap_ring_size", ctypes.c_uint64),
    ]


class CCallConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("aicpu_thread_num", ctypes.c_int32),
        ("block_dim", ctypes.c_int32),
        ("enable_chip_swimlane", ctypes.c_int32),
        ("enable_dump_args", ctypes.c_int32),
        ("enable_pmu", ctypes.c_int32),
        ("enable_dep_gen", ctypes.c_int32),
        ("enable_scope_stats", ctypes.c_int32),
        ("output_prefix", ctypes.c_char_p),
        ("ring_task_window", ctypes.c_uint64 * RING_COUNT),
        ("ring_heap", ctypes.c_uint64 * RING_COUNT),
        ("ring_dep_pool", ctypes.c_uint64 * RING_COUNT),
    ]


class CTaskArgs(ctypes.Structure):
    _fields_ = [
        ("tensors", ctypes.POINTER(CChipTensor)),
        ("tensor_count", ctypes.c_uint32),
        ("scalars", ctypes.POINTER(ctypes.c_uint64)),
        ("scalar_count", ctypes.c_uint32),
    ]


class CCallableInfo(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int32),
        ("builtin", ctypes.c_int32),
        ("signature_len", ctypes.c_uint32),
        ("child_count", ctypes.c_uint32),
        ("binary_size", ctypes.c_uint64),
        ("digest", ctypes.c_char * 65),
    ]


class CWorkerInfo(ctypes.Structure):
    _fields_ = [
        ("level", ctypes.c_int32),
        ("initialized", ctypes.c_int32),
        ("closed", ctypes.c_int32),
        ("num_cores", ctypes.c_int32),
        ("platform", ctypes.c_char * 16),
        ("runtime", ctypes.c_char * 32),
        ("device", ctypes.c_char * 256),
        ("runs", ctypes.c_uint64),
        ("graph_builds", ctypes.c_uint64),
        ("graph_replays", ctypes.c_uint64),
    ]


def _candidates():
    env = os.environ.get("SIMPLER_LIB")
    if env:
        yield Path(env)
        return
    here = Path(__file__).resolve().parent
    yield here / "libsimpler.so"
    tc = os.environ.get("TENSORCORE_LIB")
    if tc:
        yield Path(tc).resolve().parent / "libsimpler.so"
    root = here.parent.parent
    yield root / "build" / "libsimpler.so"


def library_path() -> Path:
    tried = []
    for p in _candidates():
        tried.append(str(p))
        if p.is_file():
            return p
    raise _errors.SimplerError(
        _errors.NOT_INITIALIZED,
        "libsimpler.so not found (looked at: " + ", ".join(tried) + "); build it with "
        "`cmake -S . -B build -G Ninja && ninja -C build simpler` or set SIMPLER_LIB",
    )


_lib = None

_S = ctypes.c_int32
_P = ctypes.c_void_p
_U64 = ctypes.c_uint64
_U32 = ctypes.c_uint32
_I32 = ctypes.c_int32

_SIGNATURES = {
    "simpler_version": (ctypes.c_char_p, []),
    "simpler_last_error_detail": (ctypes.c_char_p, []),
    "simpler_last_error": (_S, []),
    "simpler_call_config_validate": (_S, [ctypes.POINTER(CCallConfig)]),
    "simpler_worker_create": (_S, [ctypes.POINTER(CWorkerConfig), ctypes.POINTER(_P)]),
    "simpler_worker_init": (_S, [_P]),
    "simpler_worker_close": (_S, [_P]),
    "simpler_worker_destroy": (_S, [_P]),
    "simpler_worker_get_info": (_S, [_P, ctypes.POINTER(CWorkerInfo)]),
    "simpler_malloc": (_S, [_P, _U64, ctypes.POINTER(_U64)]),
    "simpler_free": (_S, [_P, _U64]),
    "simpler_copy_to": (_S, [_P, _U64, _P, _U64]),
    "simpler_copy_from": (_S, [_P, _P, _U64, _U64]),
    "simpler_core_callable_create": (_S, [ctypes.POINTER(_I32), _U32, _P, _U64, ctypes.POINTER(_P)]),
    "simpler_core_callable_builtin": (_S, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "simpler_chip_callable_create": (
        _S,
        [ctypes.POINTER(_I32), _U32, ctypes.c_char_p, ctypes.c_char_p, _P, _U64, ctypes.POINTER(_I32),
         ctypes.POINTER(_P), _U32, ctypes.POINTER(_P)],
    ),
    "simpler_chip_callable_from_tasks": (
        _S,
        [ctypes.POINTER(_I32), _U32, ctypes.c_char_p, ctypes.POINTER(_I32), ctypes.POINTER(_P), _U32,
         ctypes.POINTER(_P)],
    ),
    "simpler_callable_get_info": (_S, [_P, ctypes.POINTER(CCallableInfo)]),
    "simpler_callable_get_signature": (_S, [_P, ctypes.POINTER(_I32), _U32]),
    "simpler_callable_release": (_S, [_P]),
    "simpler_register": (_S, [_P, _P, ctypes.POINTER(_I32)]),
    "simpler_unregister": (_S, [_P, _I32]),
    "simpler_submit": (_S, [_P, _I32, ctypes.POINTER(CTaskArgs), ctypes.POINTER(CCallConfig), ctypes.POINTER(_P)]),
    "simpler_run_wait": (_S, [_P, ctypes.c_double]),
    "simpler_run_sync": (_S, [_P, _I32, ctypes.POINTER(CTaskArgs), ctypes.POINTER(CCallConfig)]),
    "simpler_run_done": (_I32, [_P]),
    "simpler_run_release": (_S, [_P]),
    "simpler_depmap_create": (_S, [ctypes.POINTER(_P)]),
    "simpler_depmap_destroy": (_S, [_P]),
    "simpler_depmap_submit": (_S, [_P, _U64, _P, _P, _U32, _P, _U32, ctypes.POINTER(_U32)]),
    "simpler_depmap_finish": (_S, [_P, ctypes.POINTER(_U64), _U32]),
    "simpler_depmap_size": (_U64, [_P]),
    "simpler_l3_create": (_S, [_P, _U64, ctypes.POINTER(_U32), _U32, ctypes.POINTER(_P)]),
    "simpler_l3_destroy": (_S, [_P]),
    "simpler_l3_notice": (_S, [_P, ctypes.POINTER(_P)]),
    "simpler_l3_add_endpoint": (_S, [_P, _I32, _I32, _I32, ctypes.c_char_p, ctypes.POINTER(_U32)]),
    "simpler_l3_add_template": (_S, [_P, _U32, _U32, ctypes.c_char_p, ctypes.POINTER(_U32)]),
    "simpler_l3_endpoint_dead": (_S, [_P, _U32, ctypes.c_char_p]),
    "simpler_l3_run_close": (_S, [_P, _U32]),
    "simpler_l3_run_release": (_S, [_P, ctypes.POINTER(_U32), _U32]),
    "simpler_l3_run_state": (_I32, [_P, _U32]),
    "simpler_l3_run_error": (_S, [_P, _U32, ctypes.POINTER(_I32), ctypes.c_char_p, _U64, ctypes.POINTER(_U64)]),
    "simpler_l3_submit": (_S, [_P, _U32, _I32, _U32, _U64]),
    "simpler_l3_submit_args": (_S, [_P, _U32, _I32, _U32, _U64, _U32, _U32, _P, _P, _P, _P, _U32, _P, _U32, _P, _U32,
                                    _P]),
    "simpler_l3_submit_one": (_S, [_P, _U32, _I32, _U32, _U64, _U32, _P, _P, _P, _P]),
    "simpler_l3_poll": (_I32, [_P]),
    "simpler_l3_any_done": (_I32, [_P]),
    "simpler_l3_dispatch_all": (_S, [_P]),
    "simpler_l3_flush_wakes": (_S, [_P]),
    "simpler_l3_take_external": (_S, [_P, ctypes.POINTER(_U64), _U32, ctypes.POINTER(_U32)]),
    "simpler_l3_complete": (_S, [_P, _U64, _I32, ctypes.c_char_p]),
    "simpler_l3_maps_needed": (_S, [_P, ctypes.POINTER(_U32), ctypes.POINTER(_U32), _U32, ctypes.POINTER(_U32)]),
    "simpler_l3_mark_mapped": (_S, [_P, _U32, ctypes.POINTER(_U32), _U32]),
    "simpler_l3_buffer_add": (_S, [_P, _U32, _U64, _U64, ctypes.c_char_p]),
    "simpler_l3_buffer_drop": (_S, [_P, _U32, ctypes.POINTER(_U32), _U32, ctypes.POINTER(_U32)]),
    "simpler_l3_uses_buffer": (_I32, [_P, _U32]),
    "simpler_l3_uses_dev": (_I32, [_P, _U32, _U64]),
    "simpler_l4_server_create": (_S, [_P, _U64, _U64, ctypes.c_int64, ctypes.POINTER(_P)]),
    "simpler_l4_server_destroy": (_S, [_P]),
    "simpler_l4_server_add": (_S, [_P, _U64, _U64]),
    "simpler_l4_server_drop": (_S, [_P, _U64]),
    "simpler_l4_serve": (_S, [_P, ctypes.POINTER(_I32), ctypes.POINTER(_P), ctypes.POINTER(_U64)]),
    "simpler_l4_copier_create": (_S, [_P, _U64, _U64, _U64, ctypes.c_int64, ctypes.POINTER(_P)]),
    "simpler_l4_copier_destroy": (_S, [_P]),
    "simpler_l4_copy_send": (_S, [_P, _I32, _U64, _U64, _P, _U64]),
    "simpler_l4_copy_await": (_S, [_P, ctypes.POINTER(_I32)]),
    "simpler_l4_copier_frame": (_S, [_P, ctypes.POINTER(_P), ctypes.POINTER(_U64)]),
    "simpler_l4_copier_refusal": (_S, [_P, ctypes.POINTER(_I32), ctypes.POINTER(ctypes.c_char_p)]),
}


def lib():
    """The loaded library, declared (loaded on first use)."""
    global _lib
    if _lib is None:
        handle = ctypes.CDLL(str(library_path()))
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.restype = res
            fn.argtypes = args
        _lib = handle
    return _lib


_bare = None


def bare(name: str):
    """`name` of the loaded library without argtypes (returning a tc_status
    int), for the few per-task calls where converting every argument costs
    more than the call: the caller passes values that need no conversion
    (ctypes instances, bytes, ints that fit a C int) of the declared types."""
    global _bare
    if _bare is None:
        _bare = ctypes.CDLL(str(library_path()), handle=lib()._handle)
    fn = getattr(_bare, name)
    fn.restype = _S
    return fn


def check(status: int) -> None:
    """Raises the exception for a failing status, with the library's detail."""
    if status != 0:
        detail = lib().simpler_last_error_detail()
        raise _errors.error_for(status, detail.decode("utf-8", "replace") if detail else "")


def version() -> str:
    return lib().simpler_version().decode()
