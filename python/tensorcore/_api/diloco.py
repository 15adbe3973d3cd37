"""DiLoCo on a DistContext (include/tensorcore/diloco.h).

    with ctx.dist("gloo", 4, rank, "gloo+tcp://127.0.0.1:29500") as dist:
        with dist.diloco(inner_steps=100, outer_optimizer="nesterov", compress="topk_1pct") as d:
            d.add_parameter("w", w_buf, num_elements=n, dtype="f32")
            for step in range(steps):
                ...inner optimizer step on w_buf...
                if d.step():
                    d.apply_outer()

Aliases: outer optimizers "sgd", "nesterov", "adam"; compression "none",
"fp16", "topk_1pct", "topk_01pct" ("fp8", "lowrank", "signsgd" exist and are
TC_ERR_UNSUPPORTED).
"""

import ctypes
import weakref
from ctypes import POINTER, byref, c_char_p, c_double, c_float, c_int32, c_size_t, c_uint32, c_uint64, c_void_p

from .._args import i64
from .._constants import TC_ERR_INVALID_ARG, dtype_code, resolve
from .._errors import TensorcoreValueError, check
from .._lib import declare, handle, tc_status
from .._objects import _Owned, buffer_arg, wrapper_of
from .._structs import _Struct
from .dist import DistContext, _dist_arg

__all__ = [
    "TC_DILOCO_COMPRESS_NONE", "TC_DILOCO_COMPRESS_FP16", "TC_DILOCO_COMPRESS_FP8", "TC_DILOCO_COMPRESS_TOPK_1PCT",
    "TC_DILOCO_COMPRESS_TOPK_01PCT", "TC_DILOCO_COMPRESS_LOWRANK", "TC_DILOCO_COMPRESS_SIGNSGD",
    "TC_DILOCO_OUTER_SGD", "TC_DILOCO_OUTER_NESTEROV", "TC_DILOCO_OUTER_ADAM",
    "TC_DILOCO_ASYNC_IDLE", "TC_DILOCO_ASYNC_RUNNING", "TC_DILOCO_ASYNC_READY", "TC_DILOCO_ASYNC_FAILED",
    "TC_DILOCO_STATE_ABI_VERSION_1", "TC_DILOCO_STATE_ABI_VERSION_2", "TC_DILOCO_STATE_ABI_VERSION_MIN",
    "TC_DILOCO_STATE_ABI_VERSION_CURRENT", "TC_DILOCO_STATE_V1_HEADER_SIZE", "TC_DILOCO_STATE_V2_HEADER_SIZE",
    "TC_DILOCO_STATE_V2_DIGEST_BYTES", "TC_DILOCO_CAPABILITIES_ABI_VERSION_1",
    "TC_DILOCO_CAPABILITIES_ABI_VERSION_CURRENT",
    "TC_DILOCO_STATE_FEATURE_OUTER_ANCHOR", "TC_DILOCO_STATE_FEATURE_OUTER_MOMENTS",
    "TC_DILOCO_STATE_FEATURE_ERROR_FEEDBACK", "TC_DILOCO_STATE_FEATURE_COUNTERS",
    "TC_DILOCO_STATE_FEATURE_PENDING_ROUND", "TC_DILOCO_STATE_FEATURE_TOPOLOGY_EPOCH",
    "TC_DILOCO_STATE_FEATURE_MEMBERSHIP_EPOCH", "TC_DILOCO_STATE_FEATURE_PAYLOAD_SHA256",
    "TC_DILOCO_STATE_FEATURE_DETERMINISTIC_LAYOUT", "TC_DILOCO_STATE_FEATURE_ATOMIC_RESTORE",
    "DILOCO_COMPRESS_ALIASES", "DILOCO_OUTER_OPTIMIZER_ALIASES",
    "TCDiLoCoConfig", "TCDiLoCoCapabilities", "DiLoCoContext",
    "diloco_config", "diloco_init", "diloco_finalize", "diloco_add_parameter", "diloco_step", "diloco_apply_outer",
    "diloco_async_poll", "diloco_async_wait", "diloco_async_commit", "diloco_capabilities",
    "diloco_outer_optimizer_is_serializable", "diloco_compress_is_serializable", "diloco_state_feature_available",
    "diloco_set_outer_hyperparameters", "diloco_state_set_epochs", "diloco_state_get_epochs", "diloco_state_serialize", "diloco_state_deserialize",
    "diloco_outer_steps_completed", "diloco_inner_steps_completed", "diloco_last_outer_step_seconds",
    "diloco_last_outer_bytes_sent",
]

TC_DILOCO_COMPRESS_NONE = 0
TC_DILOCO_COMPRESS_FP16 = 1
TC_DILOCO_COMPRESS_FP8 = 2
TC_DILOCO_COMPRESS_TOPK_1PCT = 3
TC_DILOCO_COMPRESS_TOPK_01PCT = 4
TC_DILOCO_COMPRESS_LOWRANK = 5
TC_DILOCO_COMPRESS_SIGNSGD = 6
TC_DILOCO_OUTER_SGD = 0
TC_DILOCO_OUTER_NESTEROV = 1
TC_DILOCO_OUTER_ADAM = 2
TC_DILOCO_ASYNC_IDLE = 0
TC_DILOCO_ASYNC_RUNNING = 1
TC_DILOCO_ASYNC_READY = 2
TC_DILOCO_ASYNC_FAILED = 3
TC_DILOCO_STATE_ABI_VERSION_1 = 1
TC_DILOCO_STATE_ABI_VERSION_2 = 2
TC_DILOCO_STATE_ABI_VERSION_MIN = 1
TC_DILOCO_STATE_ABI_VERSION_CURRENT = 2
TC_DILOCO_STATE_V1_HEADER_SIZE = 32
TC_DILOCO_STATE_V2_HEADER_SIZE = 64
TC_DILOCO_STATE_V2_DIGEST_BYTES = 32
TC_DILOCO_CAPABILITIES_ABI_VERSION_1 = 1
TC_DILOCO_CAPABILITIES_ABI_VERSION_CURRENT = 1
TC_DILOCO_STATE_FEATURE_OUTER_ANCHOR = 1 << 0
TC_DILOCO_STATE_FEATURE_OUTER_MOMENTS = 1 << 1
TC_DILOCO_STATE_FEATURE_ERROR_FEEDBACK = 1 << 2
TC_DILOCO_STATE_FEATURE_COUNTERS = 1 << 3
TC_DILOCO_STATE_FEATURE_PENDING_ROUND = 1 << 4
TC_DILOCO_STATE_FEATURE_TOPOLOGY_EPOCH = 1 << 5
TC_DILOCO_STATE_FEATURE_MEMBERSHIP_EPOCH = 1 << 6
TC_DILOCO_STATE_FEATURE_PAYLOAD_SHA256 = 1 << 7
TC_DILOCO_STATE_FEATURE_DETERMINISTIC_LAYOUT = 1 << 8
TC_DILOCO_STATE_FEATURE_ATOMIC_RESTORE = 1 << 9

DILOCO_COMPRESS_ALIASES = {
    "none": 0, "fp16": 1, "fp8": 2, "topk_1pct": 3, "topk_01pct": 4, "topk_0_1pct": 4, "lowrank": 5, "signsgd": 6}
DILOCO_OUTER_OPTIMIZER_ALIASES = {"sgd": 0, "nesterov": 1, "adam": 2}


def _compress(v):
    return resolve(v, DILOCO_COMPRESS_ALIASES, "DiLoCo compression", TC_ERR_INVALID_ARG, "tc_diloco_compress_")


def _optimizer(v):
    return resolve(v, DILOCO_OUTER_OPTIMIZER_ALIASES, "DiLoCo outer optimizer", TC_ERR_INVALID_ARG,
                   "tc_diloco_outer_")


class TCDiLoCoConfig(_Struct):
    """tc_diloco_config."""
    _c_name_ = "struct tc_diloco_config"
    _fields_ = [("inner_steps", c_int32), ("outer_lr", ctypes.c_float), ("outer_momentum", ctypes.c_float),
                ("outer_beta2", ctypes.c_float), ("outer_eps", ctypes.c_float), ("outer_optimizer", c_int32),
                ("compress", c_int32), ("async_overlap", c_int32), ("tolerate_dropouts", c_int32)]


class TCDiLoCoCapabilities(_Struct):
    """struct tc_diloco_capabilities."""
    _c_name_ = "struct tc_diloco_capabilities"
    _fields_ = [("struct_size", c_uint32), ("abi_version", c_uint32), ("state_abi_version_min", c_uint32),
                ("state_abi_version_max", c_uint32), ("state_abi_version_current", c_uint32),
                ("state_header_size", c_uint32), ("state_payload_digest_bytes", c_uint32), ("reserved0", c_uint32),
                ("outer_optimizer_supported_mask", c_uint64), ("outer_optimizer_serializable_mask", c_uint64),
                ("compress_supported_mask", c_uint64), ("compress_serializable_mask", c_uint64),
                ("compress_sparse_wire_mask", c_uint64), ("state_feature_mask", c_uint64),
                ("async_overlap_supported", c_uint32), ("async_state_serializable", c_uint32),
                ("tolerate_dropouts_supported", c_uint32), ("reserved1", c_uint32)]


_tc_diloco_init = declare("tc_diloco_init", tc_status, handle, POINTER(TCDiLoCoConfig), POINTER(handle))
_tc_diloco_finalize = declare("tc_diloco_finalize", tc_status, handle)
_tc_diloco_add_parameter = declare("tc_diloco_add_parameter", tc_status, handle, c_char_p, handle, c_size_t, c_int32)
_tc_diloco_step = declare("tc_diloco_step", tc_status, handle, POINTER(c_int32))
_tc_diloco_apply_outer = declare("tc_diloco_apply_outer", tc_status, handle)
_tc_diloco_async_poll = declare("tc_diloco_async_poll", tc_status, handle, POINTER(c_int32), POINTER(c_int32),
                                POINTER(c_uint64))
_tc_diloco_async_wait = declare("tc_diloco_async_wait", tc_status, handle)
_tc_diloco_async_commit = declare("tc_diloco_async_commit", tc_status, handle)
_tc_diloco_capability_query = declare("tc_diloco_capability_query", tc_status, handle, c_uint32,
                                      POINTER(TCDiLoCoCapabilities))
_tc_diloco_set_outer_hyperparameters = declare("tc_diloco_set_outer_hyperparameters", tc_status, handle, c_float,
                                               c_float)
_tc_diloco_state_set_epochs = declare("tc_diloco_state_set_epochs", tc_status, handle, c_uint64, c_uint64)
_tc_diloco_state_get_epochs = declare("tc_diloco_state_get_epochs", tc_status, handle, POINTER(c_uint64),
                                      POINTER(c_uint64))
_tc_diloco_state_size = declare("tc_diloco_state_size", tc_status, handle, c_uint32, POINTER(c_size_t))
_tc_diloco_state_serialize = declare("tc_diloco_state_serialize", tc_status, handle, c_uint32, c_void_p, c_size_t,
                                     POINTER(c_size_t))
_tc_diloco_state_deserialize = declare("tc_diloco_state_deserialize", tc_status, handle, c_uint32, c_void_p,
                                       c_size_t)
_tc_diloco_outer_steps_completed = declare("tc_diloco_outer_steps_completed", tc_status, handle, POINTER(c_uint64))
_tc_diloco_inner_steps_completed = declare("tc_diloco_inner_steps_completed", tc_status, handle, POINTER(c_uint64))
_tc_diloco_last_outer_step_seconds = declare("tc_diloco_last_outer_step_seconds", tc_status, handle,
                                             POINTER(c_double))
_tc_diloco_last_outer_bytes_sent = declare("tc_diloco_last_outer_bytes_sent", tc_status, handle, POINTER(c_double))


class DiLoCoContext(_Owned):
    """DiLoCo over a DistContext; made by dist.diloco(...) or diloco_init(...).
    Holds its DistContext (and the registered buffers) alive."""

    _kind = "diloco"

    def __init__(self, address, dist=None):
        self._dist = dist
        self._params = []  # the Buffers registered, kept alive with the context
        self._adopt(address)
        if dist is not None:
            dist._diloco.add(self)

    @property
    def dist(self):
        return self._dist

    @property
    def world_size(self):
        return self._dist.world_size if self._dist is not None else 1

    @property
    def rank(self):
        return self._dist.rank if self._dist is not None else 0

    def add_parameter(self, name, theta_local, num_elements, dtype="f32"):
        diloco_add_parameter(self, name, theta_local, num_elements, dtype)

    def step(self):
        return diloco_step(self)

    def apply_outer(self):
        diloco_apply_outer(self)

    def async_poll(self):
        return diloco_async_poll(self)

    def async_wait(self):
        diloco_async_wait(self)

    def async_commit(self):
        diloco_async_commit(self)

    def capabilities(self):
        return diloco_capabilities(self)

    def set_outer_hyperparameters(self, outer_lr, outer_momentum):
        """For the following outer steps (a schedule); every rank sets the same."""
        diloco_set_outer_hyperparameters(self, outer_lr, outer_momentum)

    def set_epochs(self, topology_epoch, membership_epoch):
        diloco_state_set_epochs(self, topology_epoch, membership_epoch)

    def get_epochs(self):
        return diloco_state_get_epochs(self)

    def serialize_state(self, abi_version=TC_DILOCO_STATE_ABI_VERSION_CURRENT):
        return diloco_state_serialize(self, abi_version)

    def deserialize_state(self, blob, abi_version=TC_DILOCO_STATE_ABI_VERSION_CURRENT):
        diloco_state_deserialize(self, blob, abi_version)

    @property
    def outer_steps_completed(self):
        return diloco_outer_steps_completed(self)

    @property
    def inner_steps_completed(self):
        return diloco_inner_steps_completed(self)

    @property
    def last_outer_step_seconds(self):
        return diloco_last_outer_step_seconds(self)

    @property
    def last_outer_bytes_sent(self):
        return diloco_last_outer_bytes_sent(self)

    def close(self):
        """Waits for a round in flight, drops it, and frees the context. Idempotent."""
        if self._handle is None:
            return
        address = self._handle
        self._forget()
        dist, self._dist = self._dist, None
        self._params = []
        if dist is not None:
            dist._diloco.discard(self)
        check(_tc_diloco_finalize(address))


def _diloco_arg(obj, fn):
    return _dist_arg(obj, fn, "diloco")


def diloco_config(inner_steps=100, outer_lr=1.0, outer_momentum=0.9, outer_beta2=0.999, outer_eps=1e-8,
                  outer_optimizer=TC_DILOCO_OUTER_NESTEROV, compress=TC_DILOCO_COMPRESS_NONE, async_overlap=False,
                  tolerate_dropouts=False):
    """A TCDiLoCoConfig from values and aliases (validated by diloco_init)."""
    fn = "diloco_config"
    steps = i64(inner_steps, fn, "inner_steps", TC_ERR_INVALID_ARG)
    return TCDiLoCoConfig(inner_steps=steps if -2**31 <= steps < 2**31 else -1, outer_lr=float(outer_lr), outer_momentum=float(outer_momentum),
        outer_beta2=float(outer_beta2), outer_eps=float(outer_eps), outer_optimizer=_optimizer(outer_optimizer),
        compress=_compress(compress), async_overlap=1 if async_overlap else 0,
        tolerate_dropouts=1 if tolerate_dropouts else 0)


def diloco_init(dist, config=None, **kwargs):
    """A DiLoCoContext on `dist` (collective). `config` is a TCDiLoCoConfig,
    or pass diloco_config's keywords."""
    fn = "tc_diloco_init"
    if config is not None and kwargs:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: pass config or keywords, not both" % fn)
    cfg = config if config is not None else diloco_config(**kwargs)
    out = handle()
    check(_tc_diloco_init(_dist_arg(dist, fn), byref(cfg), byref(out)))
    return DiLoCoContext(out.value, wrapper_of("dist", dist))


def diloco_finalize(diloco):
    owner = wrapper_of("diloco", diloco)
    if owner is not None:
        owner.close()
    else:
        check(_tc_diloco_finalize(_diloco_arg(diloco, "tc_diloco_finalize")))


def diloco_add_parameter(diloco, name, theta_local, num_elements, dtype="f32"):
    """Registers a parameter buffer (collective; rank 0's values are broadcast)."""
    fn = "tc_diloco_add_parameter"
    n = i64(num_elements, fn, "num_elements")
    if n <= 0:
        raise TensorcoreValueError(-6, "%s: num_elements = %d must be > 0" % (fn, n))
    name_b = name.encode("utf-8") if isinstance(name, str) else bytes(name)
    check(_tc_diloco_add_parameter(_diloco_arg(diloco, fn), name_b, buffer_arg(theta_local, fn, "theta_local"), n,
                                   dtype_code(dtype)))
    owner = wrapper_of("diloco", diloco)
    if owner is not None:
        owner._params.append(theta_local)


def diloco_step(diloco):
    """Counts one inner step; True when an outer step is due."""
    out = c_int32()
    check(_tc_diloco_step(_diloco_arg(diloco, "tc_diloco_step"), byref(out)))
    return bool(out.value)


def diloco_apply_outer(diloco):
    check(_tc_diloco_apply_outer(_diloco_arg(diloco, "tc_diloco_apply_outer")))


def diloco_async_poll(diloco):
    """(state, worker_status, round_id) without blocking."""
    state, ws, rid = c_int32(), c_int32(), c_uint64()
    check(_tc_diloco_async_poll(_diloco_arg(diloco, "tc_diloco_async_poll"), byref(state), byref(ws), byref(rid)))
    return state.value, ws.value, rid.value


def diloco_async_wait(diloco):
    check(_tc_diloco_async_wait(_diloco_arg(diloco, "tc_diloco_async_wait")))


def diloco_async_commit(diloco):
    check(_tc_diloco_async_commit(_diloco_arg(diloco, "tc_diloco_async_commit")))


def diloco_capabilities(diloco=None, abi_version=TC_DILOCO_CAPABILITIES_ABI_VERSION_CURRENT):
    """TCDiLoCoCapabilities of the build (diloco None) or of a context."""
    caps = TCDiLoCoCapabilities(struct_size=ctypes.sizeof(TCDiLoCoCapabilities))
    h = None if diloco is None else _diloco_arg(diloco, "tc_diloco_capability_query")
    check(_tc_diloco_capability_query(h, int(abi_version), byref(caps)))
    return caps


def _mask_has(mask, bit_index):
    return 0 <= bit_index < 64 and bool(int(mask) >> bit_index & 1)


def diloco_outer_optimizer_is_serializable(capabilities, optimizer):
    v = _optimizer(optimizer)
    return _mask_has(capabilities.outer_optimizer_supported_mask, v) and _mask_has(
        capabilities.outer_optimizer_serializable_mask, v)


def diloco_compress_is_serializable(capabilities, compress):
    v = _compress(compress)
    return _mask_has(capabilities.compress_supported_mask, v) and _mask_has(capabilities.compress_serializable_mask, v)


def diloco_state_feature_available(capabilities, feature):
    bit = int(feature)
    return bit != 0 and (int(capabilities.state_feature_mask) & bit) == bit


def diloco_set_outer_hyperparameters(diloco, outer_lr, outer_momentum):
    check(_tc_diloco_set_outer_hyperparameters(_diloco_arg(diloco, "tc_diloco_set_outer_hyperparameters"),
                                               float(outer_lr), float(outer_momentum)))


def diloco_state_set_epochs(diloco, topology_epoch, membership_epoch):
    check(_tc_diloco_state_set_epochs(_diloco_arg(diloco, "tc_diloco_state_set_epochs"), int(topology_epoch),
                                      int(membership_epoch)))


def diloco_state_get_epochs(diloco):
    t, m = c_uint64(), c_uint64()
    check(_tc_diloco_state_get_epochs(_diloco_arg(diloco, "tc_diloco_state_get_epochs"), byref(t), byref(m)))
    return t.value, m.value


def diloco_state_serialize(diloco, abi_version=TC_DILOCO_STATE_ABI_VERSION_CURRENT):
    """The DiLoCo-owned state as bytes (v2 by default; 1 for the v1 format)."""
    fn = "tc_diloco_state_serialize"
    h = _diloco_arg(diloco, fn)
    n = c_size_t()
    check(_tc_diloco_state_size(h, int(abi_version), byref(n)))
    buf = ctypes.create_string_buffer(n.value)
    written = c_size_t()
    check(_tc_diloco_state_serialize(h, int(abi_version), buf, n.value, byref(written)))
    return buf.raw[:written.value]


def diloco_state_deserialize(diloco, state, abi_version=TC_DILOCO_STATE_ABI_VERSION_CURRENT):
    """Restores state written by diloco_state_serialize (restore the parameter buffers first)."""
    fn = "tc_diloco_state_deserialize"
    data = bytes(state)
    buf = ctypes.create_string_buffer(data, len(data))
    check(_tc_diloco_state_deserialize(_diloco_arg(diloco, fn), int(abi_version), buf, len(data)))


def _getter(cfn, ctype, name):
    def get(diloco):
        out = ctype()
        check(cfn(_diloco_arg(diloco, name), byref(out)))
        return out.value
    get.__name__ = name[3:]
    return get


diloco_outer_steps_completed = _getter(_tc_diloco_outer_steps_completed, c_uint64, "tc_diloco_outer_steps_completed")
diloco_inner_steps_completed = _getter(_tc_diloco_inner_steps_completed, c_uint64, "tc_diloco_inner_steps_completed")
diloco_last_outer_step_seconds = _getter(_tc_diloco_last_outer_step_seconds, c_double,
                                         "tc_diloco_last_outer_step_seconds")
diloco_last_outer_bytes_sent = _getter(_tc_diloco_last_outer_bytes_sent, c_double, "tc_diloco_last_outer_bytes_sent")
