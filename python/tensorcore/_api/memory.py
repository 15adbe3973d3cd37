"""Memory tiers and activation checkpointing (include/tensorcore/memory.h).

Tiers: a buffer's bytes live in L0 (device memory), L1 (host RAM, pinned on
CUDA) or L3 (a spill file); L2/L4 raise TC_ERR_UNSUPPORTED. Tiers are given
as TC_TIER_* or "l0"/"device", "l1"/"host", "l3"/"nvme" (also "disk",
"l2"/"remote_ram", "l4"/"remote_nvme"); hints as TC_TIER_HINT_* or
"hot"/"warm"/"cold"/"ice". Ops accept only L0 buffers (others raise
TC_ERR_INVALID_ARG: promote first); see docs/memory-tiers.md.

Checkpointing: checkpoint_register(buf, recompute_fn, user_data=None) -> id.
discard frees the buffer's storage (the handle stays), realize reallocates
it and calls recompute_fn(user_data), which returns None (ok) or a status
int; an exception inside it becomes TC_ERR_INTERNAL, realize raises
TensorcoreError chained to that exception, and the buffer stays discarded.
"""

import threading
import weakref
from ctypes import CFUNCTYPE, POINTER, byref, c_char_p, c_int32, c_uint64, c_void_p

from .._args import size
from .._constants import TC_ERR_INTERNAL, TC_ERR_INVALID_ARG, resolve
from .._errors import TensorcoreError, TensorcoreTypeError, check
from .._lib import declare, handle, tc_status
from .._objects import Buffer, buffer_arg, buffer_method, context_arg, context_method, stream_arg, \
    wrapper_of

__all__ = [
    "TC_TIER_L0_DEVICE", "TC_TIER_L1_HOST_RAM", "TC_TIER_L2_REMOTE_RAM", "TC_TIER_L3_LOCAL_NVME",
    "TC_TIER_L4_REMOTE_NVME", "TC_TIER_HINT_HOT", "TC_TIER_HINT_WARM", "TC_TIER_HINT_COLD", "TC_TIER_HINT_ICE",
    "TIER_ALIASES", "TIER_HINT_ALIASES", "TIER_NAMES", "tier_code", "tier_hint_code",
    "buffer_set_tier_hint", "buffer_get_tier", "buffer_promote_async", "buffer_demote_async", "buffer_tier_sync",
    "memory_tier_usage", "context_set_memory_budget", "context_set_host_memory_budget", "context_set_spill_dir",
    "checkpoint_register", "checkpoint_discard", "checkpoint_realize", "checkpoint_is_resident",
    "checkpoint_unregister", "checkpoint_total_bytes_discarded", "checkpoint_count_resident",
    "checkpoint_count_discarded",
]

TC_TIER_L0_DEVICE = 0
TC_TIER_L1_HOST_RAM = 1
TC_TIER_L2_REMOTE_RAM = 2
TC_TIER_L3_LOCAL_NVME = 3
TC_TIER_L4_REMOTE_NVME = 4

TC_TIER_HINT_HOT = 0
TC_TIER_HINT_WARM = 1
TC_TIER_HINT_COLD = 2
TC_TIER_HINT_ICE = 3

TIER_ALIASES = {
    "l0": TC_TIER_L0_DEVICE, "device": TC_TIER_L0_DEVICE, "l0_device": TC_TIER_L0_DEVICE,
    "l1": TC_TIER_L1_HOST_RAM, "host": TC_TIER_L1_HOST_RAM, "host_ram": TC_TIER_L1_HOST_RAM,
    "l1_host_ram": TC_TIER_L1_HOST_RAM,
    "l2": TC_TIER_L2_REMOTE_RAM, "remote_ram": TC_TIER_L2_REMOTE_RAM, "l2_remote_ram": TC_TIER_L2_REMOTE_RAM,
    "l3": TC_TIER_L3_LOCAL_NVME, "nvme": TC_TIER_L3_LOCAL_NVME, "local_nvme": TC_TIER_L3_LOCAL_NVME,
    "disk": TC_TIER_L3_LOCAL_NVME, "l3_local_nvme": TC_TIER_L3_LOCAL_NVME,
    "l4": TC_TIER_L4_REMOTE_NVME, "remote_nvme": TC_TIER_L4_REMOTE_NVME, "l4_remote_nvme": TC_TIER_L4_REMOTE_NVME,
}
TIER_HINT_ALIASES = {"hot": TC_TIER_HINT_HOT, "warm": TC_TIER_HINT_WARM, "cold": TC_TIER_HINT_COLD,
                     "ice": TC_TIER_HINT_ICE}
TIER_NAMES = {TC_TIER_L0_DEVICE: "l0", TC_TIER_L1_HOST_RAM: "l1", TC_TIER_L2_REMOTE_RAM: "l2",
              TC_TIER_L3_LOCAL_NVME: "l3", TC_TIER_L4_REMOTE_NVME: "l4"}


def tier_code(value):
    """A TC_TIER_* value from a constant or a name ("l0", "device", "host", "nvme", "TC_TIER_L3_LOCAL_NVME")."""
    return resolve(value, TIER_ALIASES, "memory tier", TC_ERR_INVALID_ARG, "tc_tier_")


def tier_hint_code(value):
    """A TC_TIER_HINT_* value from a constant or a name ("hot", "warm", "cold", "ice")."""
    return resolve(value, TIER_HINT_ALIASES, "tier hint", TC_ERR_INVALID_ARG, "tc_tier_hint_")


def _int32(value, fn, name):
    v = int(value)
    if not -(1 << 31) <= v < (1 << 31):
        raise TensorcoreError(TC_ERR_INVALID_ARG, "%s: %s = %d does not fit in 32 bits" % (fn, name, v))
    return v


RECOMPUTE_FN = CFUNCTYPE(c_int32, c_void_p)

_tc_buffer_set_tier_hint = declare("tc_buffer_set_tier_hint", tc_status, handle, c_int32)
_tc_buffer_get_tier = declare("tc_buffer_get_tier", tc_status, handle, POINTER(c_int32))
_tc_buffer_promote_async = declare("tc_buffer_promote_async", tc_status, handle, c_int32, handle)
_tc_buffer_demote_async = declare("tc_buffer_demote_async", tc_status, handle, c_int32, handle)
_tc_buffer_tier_sync = declare("tc_buffer_tier_sync", tc_status, handle)
_tc_memory_tier_usage = declare("tc_memory_tier_usage", tc_status, handle, c_int32, POINTER(c_uint64),
                                POINTER(c_uint64))
_tc_context_set_memory_budget = declare("tc_context_set_memory_budget", tc_status, handle, c_uint64)
_tc_context_set_host_memory_budget = declare("tc_context_set_host_memory_budget", tc_status, handle, c_uint64)
_tc_context_set_spill_dir = declare("tc_context_set_spill_dir", tc_status, handle, c_char_p)
_tc_checkpoint_register = declare("tc_checkpoint_register", tc_status, handle, RECOMPUTE_FN, c_void_p,
                                  POINTER(c_uint64))
_tc_checkpoint_discard = declare("tc_checkpoint_discard", tc_status, c_uint64)
_tc_checkpoint_realize = declare("tc_checkpoint_realize", tc_status, c_uint64)
_tc_checkpoint_is_resident = declare("tc_checkpoint_is_resident", c_int32, c_uint64)
_tc_checkpoint_unregister = declare("tc_checkpoint_unregister", tc_status, c_uint64)
_tc_checkpoint_total_bytes_discarded = declare("tc_checkpoint_total_bytes_discarded", c_uint64)
_tc_checkpoint_count_resident = declare("tc_checkpoint_count_resident", c_uint64)
_tc_checkpoint_count_discarded = declare("tc_checkpoint_count_discarded", c_uint64)


# ---- tiers -------------------------------------------------------------------------

@buffer_method("set_tier_hint")
def buffer_set_tier_hint(buf, hint):
    """Records how soon the buffer is needed again: HOT/WARM never move on their
    own; COLD/ICE may be demoted when an allocation would pass the budget."""
    fn = "tc_buffer_set_tier_hint"
    check(_tc_buffer_set_tier_hint(buffer_arg(buf, fn), _int32(tier_hint_code(hint), fn, "hint")))


@buffer_method("get_tier")
def buffer_get_tier(buf):
    """The TC_TIER_* the bytes are in now (the source tier while a move is in flight)."""
    out = c_int32()
    check(_tc_buffer_get_tier(buffer_arg(buf, "tc_buffer_get_tier"), byref(out)))
    return out.value


def _move(c_fn, fn, buf, target_tier, stream):
    tier = _int32(tier_code(target_tier), fn, "target_tier")
    check(c_fn(buffer_arg(buf, fn), tier, None if stream is None else stream_arg(stream, fn)))


@buffer_method("promote_async")
def buffer_promote_async(buf, target_tier=TC_TIER_L0_DEVICE, stream=None):
    """Moves the bytes to a faster tier, ordered on `stream` (None: now).
    Failures of a queued move are raised by tier_sync()."""
    _move(_tc_buffer_promote_async, "tc_buffer_promote_async", buf, target_tier, stream)


@buffer_method("demote_async")
def buffer_demote_async(buf, target_tier=TC_TIER_L0_DEVICE, stream=None):
    """Moves the bytes to a slower tier, ordered on `stream` (None: now)."""
    _move(_tc_buffer_demote_async, "tc_buffer_demote_async", buf, target_tier, stream)


@buffer_method("tier_sync")
def buffer_tier_sync(buf):
    """Waits for the buffer's move in flight; raises its failure (once)."""
    check(_tc_buffer_tier_sync(buffer_arg(buf, "tc_buffer_tier_sync")))


@context_method
def memory_tier_usage(ctx, tier=TC_TIER_L0_DEVICE):
    """(resident_bytes, capacity_bytes) of the context in `tier`: L0 buffer
    bytes / budget or device memory, L1 host bytes / host budget or RAM, L3
    spill-file bytes / free disk space of the spill directory."""
    fn = "tc_memory_tier_usage"
    resident, capacity = c_uint64(), c_uint64()
    check(_tc_memory_tier_usage(context_arg(ctx, fn), _int32(tier_code(tier), fn, "tier"), byref(resident),
                                byref(capacity)))
    return resident.value, capacity.value


def _budget(value, fn, name):
    return 0 if value is None else size(value, fn, name)


@context_method("set_memory_budget")
def context_set_memory_budget(ctx, device_bytes, host_bytes=None):
    """Caps the context's buffer bytes in device memory (None or 0: no cap);
    COLD/ICE buffers are demoted to make room. `host_bytes`, when given,
    also sets the host budget (context_set_host_memory_budget)."""
    fn = "tc_context_set_memory_budget"
    check(_tc_context_set_memory_budget(context_arg(ctx, fn), _budget(device_bytes, fn, "device_bytes")))
    if host_bytes is not None:
        context_set_host_memory_budget(ctx, host_bytes)


@context_method("set_host_memory_budget")
def context_set_host_memory_budget(ctx, host_bytes):
    """Caps the context's buffer bytes in host RAM (L1; None or 0: no cap);
    beyond it COLD/ICE L1 buffers go to disk."""
    fn = "tc_context_set_host_memory_budget"
    check(_tc_context_set_host_memory_budget(context_arg(ctx, fn), _budget(host_bytes, fn, "host_bytes")))


@context_method("set_spill_dir")
def context_set_spill_dir(ctx, path):
    """Directory of the context's L3 spill files (None or "": $TC_TIER_DIR,
    else the system temp dir)."""
    import os
    raw = None if path is None else os.fsencode(path)
    check(_tc_context_set_spill_dir(context_arg(ctx, "tc_context_set_spill_dir"), raw))


# ---- checkpointing -------------------------------------------------------------------

# The exception a recompute callback raised on this thread, for realize to chain.
_tls = threading.local()


class _Recompute:
    """The C callback of one checkpoint: calls recompute_fn(user_data)."""

    def __init__(self, fn, user_data, buf):
        self.fn, self.user_data = fn, user_data
        self.buffer = weakref.ref(buf) if isinstance(buf, Buffer) else None
        self.c_fn = RECOMPUTE_FN(self)

    def __call__(self, _ignored):
        try:
            result = self.fn(self.user_data)
            if result is None:
                return 0
            if isinstance(result, bool) or not isinstance(result, int):
                raise TypeError("recompute_fn must return None or a status int, got %r" % (result,))
            if not -(1 << 31) <= result < (1 << 31):
                raise ValueError("recompute_fn returned %d, which is not a status" % result)
            return result
        except BaseException as e:  # must not unwind through C
            _tls.error = e
            return TC_ERR_INTERNAL

    def buffer_gone(self):
        """True when the Buffer wrapper was closed (which unregistered the checkpoint in C)."""
        if self.buffer is None:
            return False
        b = self.buffer()
        return b is None or b.closed


_callbacks = {}  # checkpoint id -> _Recompute, alive while C may call it
_callbacks_lock = threading.Lock()


def checkpoint_register(buf, recompute_fn, user_data=None):
    """Registers an owned buffer for discard/realize; returns the checkpoint id."""
    fn = "tc_checkpoint_register"
    if not callable(recompute_fn):
        raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: recompute_fn must be callable, got %s" % (
            fn, type(recompute_fn).__name__))
    owner = wrapper_of("buffer", buf)
    cb = _Recompute(recompute_fn, user_data, owner if owner is not None else buf)
    out = c_uint64()
    check(_tc_checkpoint_register(buffer_arg(buf, fn), cb.c_fn, None, byref(out)))
    with _callbacks_lock:
        for stale in [i for i, c in _callbacks.items() if c.buffer_gone()]:
            del _callbacks[stale]  # freed buffers were unregistered by the library
        _callbacks[out.value] = cb
    return out.value


def _id(checkpoint_id, fn):
    v = int(checkpoint_id)
    if not 0 <= v < (1 << 64):
        raise TensorcoreError(TC_ERR_INVALID_ARG, "%s: checkpoint id %d is out of range" % (fn, v))
    return v


def checkpoint_discard(checkpoint_id):
    """Frees the buffer's storage; the handle stays (ops on it raise until realized)."""
    check(_tc_checkpoint_discard(_id(checkpoint_id, "tc_checkpoint_discard")))


def checkpoint_realize(checkpoint_id):
    """Reallocates the storage and runs the recompute callback (nothing when resident)."""
    cid = _id(checkpoint_id, "tc_checkpoint_realize")
    _tls.error = None
    status = _tc_checkpoint_realize(cid)
    error, _tls.error = getattr(_tls, "error", None), None
    if status == 0:
        return
    try:
        check(status)
    except TensorcoreError as e:
        if error is None:
            raise
        raise TensorcoreError(e.status, "%s: %s: %s" % (e.detail, type(error).__name__, error)) from error


def checkpoint_is_resident(checkpoint_id):
    """True when the checkpoint is registered and its buffer has storage."""
    return bool(_tc_checkpoint_is_resident(_id(checkpoint_id, "tc_checkpoint_is_resident")))


def checkpoint_unregister(checkpoint_id):
    """Forgets the checkpoint (a discarded buffer stays without storage)."""
    cid = _id(checkpoint_id, "tc_checkpoint_unregister")
    check(_tc_checkpoint_unregister(cid))
    with _callbacks_lock:
        _callbacks.pop(cid, None)


def checkpoint_total_bytes_discarded():
    """Bytes of all registered checkpoints that are discarded now."""
    return int(_tc_checkpoint_total_bytes_discarded())


def checkpoint_count_resident():
    return int(_tc_checkpoint_count_resident())


def checkpoint_count_discarded():
    return int(_tc_checkpoint_count_discarded())
