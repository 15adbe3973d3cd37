"""Distributed collectives, authenticated groups and the remote tensor
endpoint (include/tensorcore/dist.h).

    with ctx.dist("gloo", world_size=4, rank=r, rendezvous_url="gloo+tcp://127.0.0.1:29500") as d:
        d.allreduce(buf, n, dtype="f32", op="sum")

Backends "single" (world 1), "gloo" (host buffers over TCP), "nccl" (CUDA
buffers). Rendezvous URLs: gloo+tcp://host:port (rank 0 hosts it),
file:///dir, single://...; `timeout=` seconds (or ?timeout_ms=N in the URL)
bounds every blocking call: a dead peer is TC_ERR_TIMEOUT, not a hang.

Keys for the authenticated variants are (identity, key_id, secret) tuples or
mappings with those fields; secrets have at least 32 bytes.
"""

import ctypes
import weakref
from ctypes import POINTER, byref, c_char_p, c_int32, c_int64, c_size_t, c_uint64, c_void_p

from .._args import host_memory, i64, size
from .._constants import (CAPABILITY_ALIASES, TC_ERR_INVALID_ARG, TC_ERR_INVALID_SHAPE, TC_ERR_UNSUPPORTED, dtype_code,
                          resolve)
from .._errors import TensorcoreError, TensorcoreTypeError, TensorcoreValueError, check
from .._lib import declare, handle, tc_status, text
from .._objects import Buffer, _Owned, buffer_arg, context_arg, context_method, wrapper_of
from .._structs import _Struct

__all__ = [
    "TC_DIST_SINGLE", "TC_DIST_RING", "TC_DIST_GLOO", "TC_DIST_NCCL",
    "TC_REDUCE_SUM", "TC_REDUCE_AVG", "TC_REDUCE_MAX", "TC_REDUCE_MIN",
    "TC_AUTH_MIN_SECRET_BYTES", "TC_AUTH_MAX_IDENTITY_BYTES",
    "TC_TRANSPORT_AUTH_MIN_SECRET_BYTES", "TC_TRANSPORT_AUTH_MAX_IDENTITY_BYTES",
    "TC_REMOTE_ROLE_WEIGHT_SERVER", "TC_REMOTE_ROLE_COMPUTE_CLIENT",
    "TC_CAPABILITY_DIST_GLOO", "TC_CAPABILITY_DIST_NCCL", "TC_CAPABILITY_DILOCO",
    "DIST_BACKEND_ALIASES", "REDUCE_OP_ALIASES",
    "TCAuthKey", "TCAuthConfig", "TCTransportAuthKey", "TCTransportAuthConfig",
    "DistContext", "Remote",
    "dist_init", "dist_init_authenticated", "mesh_group_init_authenticated", "dist_finalize",
    "dist_world_size", "dist_rank", "dist_backend", "dist_set_timeout", "dist_get_timeout",
    "dist_bytes_sent", "dist_auth_failure_count", "dist_refusal_count", "dist_last_refusal",
    "allreduce", "broadcast", "allgather", "reduce_scatter", "barrier",
    "remote_init", "remote_init_authenticated", "remote_shutdown", "remote_bound_port",
    "remote_register_tensor", "remote_unregister_tensor", "remote_registered_count",
    "remote_connect", "remote_connect_authenticated", "remote_tensor_fetch", "remote_auth_rotate",
    "remote_peer_identity", "remote_peer_key_id", "remote_auth_failure_count",
    "remote_refusal_count", "remote_total_bytes_served", "remote_total_bytes_fetched",
]

TC_DIST_SINGLE = 0
TC_DIST_RING = 1
TC_DIST_GLOO = 2
TC_DIST_NCCL = 3
TC_REDUCE_SUM = 0
TC_REDUCE_AVG = 1
TC_REDUCE_MAX = 2
TC_REDUCE_MIN = 3
TC_AUTH_MIN_SECRET_BYTES = 32
TC_AUTH_MAX_IDENTITY_BYTES = 127
TC_TRANSPORT_AUTH_MIN_SECRET_BYTES = TC_AUTH_MIN_SECRET_BYTES  # the original binding's names
TC_TRANSPORT_AUTH_MAX_IDENTITY_BYTES = TC_AUTH_MAX_IDENTITY_BYTES
TC_REMOTE_ROLE_WEIGHT_SERVER = 0
TC_REMOTE_ROLE_COMPUTE_CLIENT = 1
TC_CAPABILITY_DIST_GLOO = 1 << 15
TC_CAPABILITY_DIST_NCCL = 1 << 16
TC_CAPABILITY_DILOCO = 1 << 17
CAPABILITY_ALIASES.update({"dist_gloo": TC_CAPABILITY_DIST_GLOO, "dist_nccl": TC_CAPABILITY_DIST_NCCL,
                           "diloco": TC_CAPABILITY_DILOCO})

DIST_BACKEND_ALIASES = {"single": TC_DIST_SINGLE, "ring": TC_DIST_RING, "gloo": TC_DIST_GLOO, "nccl": TC_DIST_NCCL}
REDUCE_OP_ALIASES = {"sum": TC_REDUCE_SUM, "avg": TC_REDUCE_AVG, "mean": TC_REDUCE_AVG, "max": TC_REDUCE_MAX,
                     "min": TC_REDUCE_MIN}
_ROLE_ALIASES = {"weight_server": 0, "server": 0, "compute_client": 1, "client": 1}


def _backend(value):
    return resolve(value, DIST_BACKEND_ALIASES, "dist backend", TC_ERR_INVALID_ARG, "tc_dist_")


def _op(value):
    return resolve(value, REDUCE_OP_ALIASES, "reduce op", TC_ERR_INVALID_ARG, "tc_reduce_")


def _bytes(value, fn, name):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: %s must be str or bytes, got %s" % (
        fn, name, type(value).__name__))


class TCAuthKey(_Struct):
    """struct tc_auth_key."""
    _c_name_ = "struct tc_auth_key"
    _fields_ = [("identity", c_char_p), ("key_id", c_uint64), ("secret", c_void_p), ("secret_bytes", c_size_t)]


class TCAuthConfig(_Struct):
    """struct tc_auth_config."""
    _c_name_ = "struct tc_auth_config"
    _fields_ = [("local_identity", c_char_p), ("active_key_id", c_uint64), ("keys", POINTER(TCAuthKey)),
                ("key_count", c_size_t)]


TCTransportAuthKey = TCAuthKey  # the original binding's names
TCTransportAuthConfig = TCAuthConfig


def _auth_config(fn, local_identity, active_key_id, keys):
    """(TCAuthConfig, keepalive) from (identity, key_id, secret) tuples or
    mappings. Short secrets are refused here with the library's status
    (INVALID_ARG); the library deep-copies everything."""
    if keys is None:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: keys are required" % fn)
    if isinstance(keys, (dict, tuple)) and len(keys) == 3 and not isinstance(keys, list) and (
            isinstance(keys, dict) or isinstance(keys[0], (str, bytes))):
        keys = [keys]  # a single key
    entries = list(keys)
    if not entries:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: the keyring is empty" % fn)
    arr = (TCAuthKey * len(entries))()
    keep = [arr]
    for i, entry in enumerate(entries):
        if isinstance(entry, dict):
            try:
                identity, key_id, secret = entry["identity"], entry["key_id"], entry["secret"]
            except KeyError as e:
                raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: key %d lacks field %s" % (fn, i, e)) from None
        else:
            try:
                identity, key_id, secret = entry
            except (TypeError, ValueError):
                raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: key %d must be (identity, key_id, secret)" % (
                    fn, i)) from None
        ident = _bytes(identity, fn, "identity")
        secret = bytes(secret.encode() if isinstance(secret, str) else secret)
        if len(secret) < TC_AUTH_MIN_SECRET_BYTES:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: key %d (%r) has a %d-byte secret; at least %d "
                                       "bytes are required" % (fn, i, identity, len(secret), TC_AUTH_MIN_SECRET_BYTES))
        sbuf = ctypes.create_string_buffer(secret, len(secret))
        keep += [ident, sbuf]
        arr[i] = TCAuthKey(ident, int(key_id), ctypes.cast(sbuf, c_void_p), len(secret))
    local = None if local_identity is None else _bytes(local_identity, fn, "local_identity")
    keep.append(local)
    cfg = TCAuthConfig(local, 0 if active_key_id is None else int(active_key_id), arr, len(entries))
    return cfg, keep


def _string_array(fn, name, items):
    items = [_bytes(x, fn, name) for x in items]
    return (c_char_p * max(len(items), 1))(*items), items


def _with_timeout(url, timeout):
    """Adds ?timeout_ms= for `timeout` seconds to a rendezvous URL."""
    if timeout is None or url is None:
        return url
    ms = int(round(float(timeout) * 1000))
    if ms <= 0:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "timeout must be positive, got %r" % (timeout,))
    return url + ("&" if "?" in url else "?") + "timeout_ms=%d" % ms


_tc_dist_init = declare("tc_dist_init", tc_status, handle, c_int32, c_int32, c_int32, c_char_p, POINTER(handle))
_tc_dist_init_authenticated = declare("tc_dist_init_authenticated", tc_status, handle, c_int32, c_int32, c_int32,
                                      c_char_p, POINTER(c_char_p), c_size_t, POINTER(TCAuthConfig), POINTER(handle))
_tc_mesh_group_init_authenticated = declare("tc_mesh_group_init_authenticated", tc_status, handle, c_int32, c_int32,
                                            POINTER(c_char_p), POINTER(c_char_p), POINTER(TCAuthConfig),
                                            POINTER(handle))
_tc_dist_finalize = declare("tc_dist_finalize", tc_status, handle)
_tc_dist_world_size = declare("tc_dist_world_size", tc_status, handle, POINTER(c_int32))
_tc_dist_rank = declare("tc_dist_rank", tc_status, handle, POINTER(c_int32))
_tc_dist_backend = declare("tc_dist_backend", tc_status, handle, POINTER(c_int32))
_tc_dist_set_timeout = declare("tc_dist_set_timeout", tc_status, handle, c_int64)
_tc_dist_get_timeout = declare("tc_dist_get_timeout", tc_status, handle, POINTER(c_int64))
_tc_dist_bytes_sent = declare("tc_dist_bytes_sent", tc_status, handle, POINTER(c_uint64))
_tc_dist_auth_failure_count = declare("tc_dist_auth_failure_count", tc_status, handle, POINTER(c_uint64))
_tc_dist_refusal_count = declare("tc_dist_refusal_count", tc_status, handle, POINTER(c_uint64))
_tc_dist_last_refusal = declare("tc_dist_last_refusal", tc_status, handle, POINTER(c_char_p))
_tc_allreduce = declare("tc_allreduce", tc_status, handle, handle, c_size_t, c_int32, c_int32)
_tc_broadcast = declare("tc_broadcast", tc_status, handle, handle, c_size_t, c_int32, c_int32)
_tc_allgather = declare("tc_allgather", tc_status, handle, handle, handle, c_size_t, c_int32)
_tc_reduce_scatter = declare("tc_reduce_scatter", tc_status, handle, handle, handle, c_size_t, c_int32, c_int32)
_tc_barrier = declare("tc_barrier", tc_status, handle)

_tc_remote_init = declare("tc_remote_init", tc_status, handle, c_int32, c_char_p, POINTER(handle))
_tc_remote_init_authenticated = declare("tc_remote_init_authenticated", tc_status, handle, c_int32, c_char_p,
                                        POINTER(TCAuthConfig), POINTER(handle))
_tc_remote_shutdown = declare("tc_remote_shutdown", tc_status, handle)
_tc_remote_bound_port = declare("tc_remote_bound_port", tc_status, handle, POINTER(c_int32))
_tc_remote_register_tensor = declare("tc_remote_register_tensor", tc_status, handle, c_char_p, c_void_p, c_size_t)
_tc_remote_unregister_tensor = declare("tc_remote_unregister_tensor", tc_status, handle, c_char_p)
_tc_remote_registered_count = declare("tc_remote_registered_count", tc_status, handle, POINTER(c_size_t))
_tc_remote_connect = declare("tc_remote_connect", tc_status, handle, c_char_p, POINTER(c_int32))
_tc_remote_connect_authenticated = declare("tc_remote_connect_authenticated", tc_status, handle, c_char_p, c_char_p,
                                           POINTER(c_int32))
_tc_remote_tensor_fetch = declare("tc_remote_tensor_fetch", tc_status, handle, c_int32, c_char_p, c_void_p, c_size_t)
_tc_remote_auth_rotate = declare("tc_remote_auth_rotate", tc_status, handle, POINTER(TCAuthConfig))
_tc_remote_peer_identity = declare("tc_remote_peer_identity", tc_status, handle, c_int32, POINTER(c_char_p))
_tc_remote_peer_key_id = declare("tc_remote_peer_key_id", tc_status, handle, c_int32, POINTER(c_uint64))
_tc_remote_auth_failure_count = declare("tc_remote_auth_failure_count", tc_status, handle, POINTER(c_uint64))
_tc_remote_refusal_count = declare("tc_remote_refusal_count", tc_status, handle, POINTER(c_uint64))
_tc_remote_total_bytes_served = declare("tc_remote_total_bytes_served", tc_status, handle, POINTER(c_uint64))
_tc_remote_total_bytes_fetched = declare("tc_remote_total_bytes_fetched", tc_status, handle, POINTER(c_uint64))


# ---- wrappers -----------------------------------------------------------------

class DistContext(_Owned):
    """One rank of a group. Made by ctx.dist(...) or dist_init(...); a context
    manager. Methods mirror the raw collectives without the dist argument."""

    _kind = "dist"

    def __init__(self, address, context=None):
        self._context = context
        self._diloco = weakref.WeakSet()
        self._adopt(address)
        if context is not None:
            context._add_group(self)

    @property
    def context(self):
        return self._context

    @property
    def world_size(self):
        return dist_world_size(self)

    @property
    def rank(self):
        return dist_rank(self)

    @property
    def backend(self):
        return dist_backend(self)

    @property
    def bytes_sent(self):
        return dist_bytes_sent(self)

    @property
    def auth_failure_count(self):
        return dist_auth_failure_count(self)

    @property
    def refusal_count(self):
        return dist_refusal_count(self)

    @property
    def last_refusal(self):
        return dist_last_refusal(self)

    @property
    def timeout(self):
        """Deadline of every blocking call, in seconds (settable)."""
        return dist_get_timeout(self) / 1000.0

    @timeout.setter
    def timeout(self, seconds):
        dist_set_timeout(self, int(round(float(seconds) * 1000)))

    def allreduce(self, buf, num_elements, dtype="f32", op=TC_REDUCE_SUM):
        allreduce(self, buf, num_elements, dtype, op)

    def broadcast(self, buf, num_elements, dtype="f32", root=0):
        broadcast(self, buf, num_elements, dtype, root)

    def allgather(self, src, dst, num_elements_per_rank, dtype="f32"):
        allgather(self, src, dst, num_elements_per_rank, dtype)

    def reduce_scatter(self, src, dst, num_elements_per_rank, dtype="f32", op=TC_REDUCE_SUM):
        reduce_scatter(self, src, dst, num_elements_per_rank, dtype, op)

    def barrier(self):
        barrier(self)

    def set_timeout(self, timeout_ms):
        dist_set_timeout(self, timeout_ms)

    def diloco(self, config=None, **kwargs):
        """A DiLoCoContext on this group (collective: every rank calls it)."""
        from .diloco import diloco_init
        return diloco_init(self, config, **kwargs)

    def close(self):
        """Closes the DiLoCo contexts built on this group, then leaves it. Idempotent."""
        if self._handle is None:
            return
        first = None
        for child in list(self._diloco):
            try:
                child.close()
            except Exception as e:
                first = first or e
        address = self._handle
        self._forget()
        context, self._context = self._context, None
        try:
            check(_tc_dist_finalize(address))
        finally:
            if context is not None:
                context._child_closed()
        if first is not None:
            raise first

    def _repr_extra(self):
        if self._handle is None:
            return ""
        return " rank=%d/%d" % (self.rank, self.world_size)


class Remote(_Owned):
    """A remote tensor endpoint (weight server or compute client)."""

    _kind = "remote"

    def __init__(self, address):
        self._published = {}  # name -> object keeping the published memory alive
        self._adopt(address)

    def close(self):
        if self._handle is None:
            return
        address = self._handle
        self._forget()
        self._published = {}
        check(_tc_remote_shutdown(address))

    @property
    def port(self):
        return remote_bound_port(self)

    def register_tensor(self, name, obj, nbytes=None):
        remote_register_tensor(self, name, obj, nbytes)

    def unregister_tensor(self, name):
        remote_unregister_tensor(self, name)

    def registered_count(self):
        return remote_registered_count(self)

    def connect(self, peer_url, expected_peer_identity=None):
        if expected_peer_identity is None:
            return remote_connect(self, peer_url)
        return remote_connect_authenticated(self, peer_url, expected_peer_identity)

    def fetch(self, peer_id, name, dst, nbytes=None):
        remote_tensor_fetch(self, peer_id, name, dst, nbytes)

    def auth_rotate(self, local_identity=None, active_key_id=None, keys=None):
        remote_auth_rotate(self, local_identity, active_key_id, keys)

    def peer_identity(self, peer_id):
        return remote_peer_identity(self, peer_id)

    def peer_key_id(self, peer_id):
        return remote_peer_key_id(self, peer_id)

    @property
    def auth_failure_count(self):
        return remote_auth_failure_count(self)

    @property
    def refusal_count(self):
        return remote_refusal_count(self)


def _dist_arg(obj, fn, name="dist"):
    if isinstance(obj, _Owned):
        return obj._checked(fn, name)
    if isinstance(obj, c_void_p):
        return obj.value
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    if obj is None:
        return None
    raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: %s must be a DistContext or a raw handle, got %s" % (
        fn, name, type(obj).__name__))


_remote_arg = _dist_arg


def _new_dist(ctx, address):
    return DistContext(address, wrapper_of("context", ctx))


# ---- groups -------------------------------------------------------------------

@context_method("dist")
def dist_init(ctx, backend=TC_DIST_SINGLE, world_size=1, rank=0, rendezvous_url=None, *, timeout=None):
    """A DistContext: this process is rank `rank` of `world_size`. Blocks
    until the group has formed (or `timeout` seconds, default
    $TC_DIST_TIMEOUT_MS or 120 s, have passed: TC_ERR_TIMEOUT)."""
    fn = "tc_dist_init"
    out = handle()
    url = _with_timeout(rendezvous_url, timeout)
    check(_tc_dist_init(context_arg(ctx, fn), _backend(backend), i64(world_size, fn, "world_size", TC_ERR_INVALID_ARG),
                        i64(rank, fn, "rank", TC_ERR_INVALID_ARG), None if url is None else _bytes(url, fn, "url"),
                        byref(out)))
    return _new_dist(ctx, out.value)


def _legacy_auth(fn, keys, legacy, rank_identities, local_identity, active_key_id):
    """Accepts both (…, keys) and the original (…, rank_identities, local_identity, active_key_id, keys)."""
    if legacy:
        if len(legacy) != 3 or rank_identities is not None:
            raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: pass keys, or rank_identities, local_identity, "
                                      "active_key_id, keys" % fn)
        rank_identities, (local_identity, active_key_id, keys) = keys, legacy
    return keys, rank_identities, local_identity, active_key_id


@context_method("dist_authenticated")
def dist_init_authenticated(ctx, backend, world_size, rank, rendezvous_url, keys=None, *legacy, rank_identities=None,
                            local_identity=None, active_key_id=None, timeout=None):
    """dist_init with every rendezvous connection mutually authenticated.

    keys: (identity, key_id, secret) tuples or mappings. rank_identities
    (optional, one per rank) binds rank r to the identity it must prove. The
    original argument order (…, rendezvous_url, rank_identities,
    local_identity, active_key_id, keys) is accepted too."""
    fn = "tc_dist_init_authenticated"
    keys, rank_identities, local_identity, active_key_id = _legacy_auth(
        fn, keys, legacy, rank_identities, local_identity, active_key_id)
    cfg, keep = _auth_config(fn, local_identity, active_key_id, keys)
    ids, ids_keep = (None, None) if rank_identities is None else _string_array(fn, "rank identity", rank_identities)
    out = handle()
    url = _with_timeout(rendezvous_url, timeout)
    check(_tc_dist_init_authenticated(
        context_arg(ctx, fn), _backend(backend), i64(world_size, fn, "world_size", TC_ERR_INVALID_ARG),
        i64(rank, fn, "rank", TC_ERR_INVALID_ARG), None if url is None else _bytes(url, fn, "url"), ids,
        0 if rank_identities is None else len(ids_keep), byref(cfg), byref(out)))
    return _new_dist(ctx, out.value)


@context_method("mesh_group_authenticated")
def mesh_group_init_authenticated(ctx, n_peers, my_rank, peer_urls, peer_identities, local_identity=None,
                                  active_key_id=None, keys=None):
    """A gloo group over explicit peers: peer_urls[r] = "tcp://host:port" of
    rank r (rank 0's hosts the rendezvous), peer_identities[r] the identity
    rank r proves. Returns a DistContext."""
    fn = "tc_mesh_group_init_authenticated"
    peer_urls, peer_identities = list(peer_urls), list(peer_identities)
    if len(peer_urls) != int(n_peers) or len(peer_identities) != int(n_peers):
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %d peers need %d URLs and identities (got %d, %d)" % (
            fn, n_peers, n_peers, len(peer_urls), len(peer_identities)))
    cfg, keep = _auth_config(fn, local_identity, active_key_id, keys)
    urls, _u = _string_array(fn, "peer URL", peer_urls)
    ids, _i = _string_array(fn, "peer identity", peer_identities)
    out = handle()
    check(_tc_mesh_group_init_authenticated(context_arg(ctx, fn), i64(n_peers, fn, "n_peers", TC_ERR_INVALID_ARG),
                                            i64(my_rank, fn, "my_rank", TC_ERR_INVALID_ARG), urls, ids, byref(cfg),
                                            byref(out)))
    return _new_dist(ctx, out.value)


def dist_finalize(dist):
    """Leaves the group (closes the DistContext wrapper)."""
    owner = wrapper_of("dist", dist)
    if owner is not None:
        owner.close()
    else:
        check(_tc_dist_finalize(_dist_arg(dist, "tc_dist_finalize")))


def _get(cfn, ctype, obj, fn, argf=_dist_arg):
    out = ctype()
    check(cfn(argf(obj, fn), byref(out)))
    return out.value


def dist_world_size(dist):
    return _get(_tc_dist_world_size, c_int32, dist, "tc_dist_world_size")


def dist_rank(dist):
    return _get(_tc_dist_rank, c_int32, dist, "tc_dist_rank")


def dist_backend(dist):
    return _get(_tc_dist_backend, c_int32, dist, "tc_dist_backend")


def dist_set_timeout(dist, timeout_ms):
    fn = "tc_dist_set_timeout"
    check(_tc_dist_set_timeout(_dist_arg(dist, fn), i64(timeout_ms, fn, "timeout_ms", TC_ERR_INVALID_ARG)))


def dist_get_timeout(dist):
    return _get(_tc_dist_get_timeout, c_int64, dist, "tc_dist_get_timeout")


def dist_bytes_sent(dist):
    return _get(_tc_dist_bytes_sent, c_uint64, dist, "tc_dist_bytes_sent")


def dist_auth_failure_count(dist):
    return _get(_tc_dist_auth_failure_count, c_uint64, dist, "tc_dist_auth_failure_count")


def dist_refusal_count(dist):
    return _get(_tc_dist_refusal_count, c_uint64, dist, "tc_dist_refusal_count")


def dist_last_refusal(dist):
    fn = "tc_dist_last_refusal"
    out = c_char_p()
    check(_tc_dist_last_refusal(_dist_arg(dist, fn), byref(out)))
    return text(out.value)


# ---- collectives ------------------------------------------------------------------

def _count(n, fn, name):
    v = i64(n, fn, name)
    if v <= 0:
        raise TensorcoreValueError(TC_ERR_INVALID_SHAPE, "%s: %s = %d must be > 0" % (fn, name, v))
    return v


def allreduce(dist, buf, num_elements, dtype="f32", op=TC_REDUCE_SUM):
    """In place on `buf`: every rank ends with the reduction ("sum", "avg"/"mean", "max", "min")."""
    fn = "tc_allreduce"
    check(_tc_allreduce(_dist_arg(dist, fn), buffer_arg(buf, fn, "buf"), _count(num_elements, fn, "num_elements"),
                        dtype_code(dtype), _op(op)))


def broadcast(dist, buf, num_elements, dtype="f32", root=0):
    """In place on `buf`: every rank ends with root's values."""
    fn = "tc_broadcast"
    check(_tc_broadcast(_dist_arg(dist, fn), buffer_arg(buf, fn, "buf"), _count(num_elements, fn, "num_elements"),
                        dtype_code(dtype), i64(root, fn, "root", TC_ERR_INVALID_ARG)))


def allgather(dist, src, dst, num_elements_per_rank, dtype="f32"):
    """dst (world_size * n elements) receives rank r's src at r * n."""
    fn = "tc_allgather"
    check(_tc_allgather(_dist_arg(dist, fn), buffer_arg(src, fn, "src"), buffer_arg(dst, fn, "dst"),
                        _count(num_elements_per_rank, fn, "num_elements_per_rank"), dtype_code(dtype)))


def reduce_scatter(dist, src, dst, num_elements_per_rank, dtype="f32", op=TC_REDUCE_SUM):
    """dst receives this rank's block (n elements) of the reduction of src (world_size * n)."""
    fn = "tc_reduce_scatter"
    check(_tc_reduce_scatter(_dist_arg(dist, fn), buffer_arg(src, fn, "src"), buffer_arg(dst, fn, "dst"),
                             _count(num_elements_per_rank, fn, "num_elements_per_rank"), dtype_code(dtype), _op(op)))


def barrier(dist):
    check(_tc_barrier(_dist_arg(dist, "tc_barrier")))


# ---- remote endpoint ------------------------------------------------------------------

def _role(role):
    return resolve(role, _ROLE_ALIASES, "remote role", TC_ERR_INVALID_ARG, "tc_remote_role_")


def remote_init(ctx, role, bind_url=None):
    """An unauthenticated endpoint: a weight server listening on bind_url
    ("tcp://host:port", port 0 = any), or a compute client (bind_url None)."""
    fn = "tc_remote_init"
    out = handle()
    check(_tc_remote_init(context_arg(ctx, fn), _role(role), None if bind_url is None else _bytes(bind_url, fn, "url"),
                          byref(out)))
    return Remote(out.value)


def remote_init_authenticated(ctx, role, bind_url, local_identity=None, active_key_id=None, keys=None):
    """An endpoint whose every connection runs the mutual handshake."""
    fn = "tc_remote_init_authenticated"
    cfg, keep = _auth_config(fn, local_identity, active_key_id, keys)
    out = handle()
    check(_tc_remote_init_authenticated(context_arg(ctx, fn), _role(role),
                                        None if bind_url is None else _bytes(bind_url, fn, "url"), byref(cfg),
                                        byref(out)))
    return Remote(out.value)


def remote_shutdown(remote):
    owner = wrapper_of("remote", remote)
    if owner is not None:
        owner.close()
    else:
        check(_tc_remote_shutdown(_remote_arg(remote, "tc_remote_shutdown", "remote")))


def remote_bound_port(remote):
    return _get(_tc_remote_bound_port, c_int32, remote, "tc_remote_bound_port")


def _memory(fn, obj, nbytes, writable):
    """(address, nbytes, keepalive) of a Buffer, an array/buffer object or an int address."""
    if isinstance(obj, Buffer):
        n = obj.nbytes if nbytes is None else size(nbytes, fn, "nbytes")
        if n > obj.nbytes:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: nbytes %d exceeds the buffer's %d" % (
                fn, n, obj.nbytes))
        try:
            address = obj.map()
        except TensorcoreError as e:
            if e.status != TC_ERR_UNSUPPORTED:
                raise
            # The endpoint sends and receives bytes the host reads in place.
            raise TensorcoreError(TC_ERR_UNSUPPORTED, "%s: the buffer is device memory; the remote endpoint serves "
                                  "and fetches host memory (copy it through a host array)" % fn) from None
        return address, n, obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        if nbytes is None:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: nbytes is required with a raw address" % fn)
        return obj, size(nbytes, fn, "nbytes"), None
    mem = host_memory(obj, fn, writable=writable)
    n = mem.nbytes if nbytes is None else size(nbytes, fn, "nbytes")
    if n > mem.nbytes:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: nbytes %d exceeds the array's %d" % (fn, n, mem.nbytes))
    return mem.address, n, mem


def remote_register_tensor(remote, name, ptr, nbytes=None):
    """Publishes memory (a Buffer, an array, or an int address with nbytes)
    under `name`; the endpoint keeps the Python object alive."""
    fn = "tc_remote_register_tensor"
    address, n, keep = _memory(fn, ptr, nbytes, False)
    check(_tc_remote_register_tensor(_remote_arg(remote, fn, "remote"), _bytes(name, fn, "name"), address, n))
    owner = wrapper_of("remote", remote)
    if owner is not None:
        owner._published[name] = keep


def remote_unregister_tensor(remote, name):
    fn = "tc_remote_unregister_tensor"
    check(_tc_remote_unregister_tensor(_remote_arg(remote, fn, "remote"), _bytes(name, fn, "name")))
    owner = wrapper_of("remote", remote)
    if owner is not None:
        owner._published.pop(name, None)


def remote_registered_count(remote):
    return _get(_tc_remote_registered_count, c_size_t, remote, "tc_remote_registered_count")


def remote_connect(remote, peer_url):
    """Connects a compute client to a server; returns the peer id."""
    fn = "tc_remote_connect"
    out = c_int32()
    check(_tc_remote_connect(_remote_arg(remote, fn, "remote"), _bytes(peer_url, fn, "peer_url"), byref(out)))
    return out.value


def remote_connect_authenticated(remote, peer_url, expected_peer_identity):
    """Connects and authenticates both ways; the server must prove expected_peer_identity."""
    fn = "tc_remote_connect_authenticated"
    out = c_int32()
    check(_tc_remote_connect_authenticated(_remote_arg(remote, fn, "remote"), _bytes(peer_url, fn, "peer_url"),
                                           _bytes(expected_peer_identity, fn, "expected_peer_identity"), byref(out)))
    return out.value


def remote_tensor_fetch(remote, peer_id, name, dst_ptr, nbytes=None):
    """Copies tensor `name` from peer into dst (a Buffer, a writable array, or an int address with nbytes)."""
    fn = "tc_remote_tensor_fetch"
    address, n, keep = _memory(fn, dst_ptr, nbytes, True)
    check(_tc_remote_tensor_fetch(_remote_arg(remote, fn, "remote"), i64(peer_id, fn, "peer_id", TC_ERR_INVALID_ARG),
                                  _bytes(name, fn, "name"), address, n))
    del keep


def remote_auth_rotate(remote, local_identity=None, active_key_id=None, keys=None):
    """Replaces the keyring used by future handshakes."""
    fn = "tc_remote_auth_rotate"
    cfg, keep = _auth_config(fn, local_identity, active_key_id, keys)
    check(_tc_remote_auth_rotate(_remote_arg(remote, fn, "remote"), byref(cfg)))


def remote_peer_identity(remote, peer_id):
    fn = "tc_remote_peer_identity"
    out = c_char_p()
    check(_tc_remote_peer_identity(_remote_arg(remote, fn, "remote"), i64(peer_id, fn, "peer_id", TC_ERR_INVALID_ARG),
                                   byref(out)))
    return text(out.value)


def remote_peer_key_id(remote, peer_id):
    fn = "tc_remote_peer_key_id"
    out = c_uint64()
    check(_tc_remote_peer_key_id(_remote_arg(remote, fn, "remote"), i64(peer_id, fn, "peer_id", TC_ERR_INVALID_ARG),
                                 byref(out)))
    return out.value


def remote_auth_failure_count(remote):
    """Refused handshakes (a DistContext answers for its rendezvous)."""
    if isinstance(remote, DistContext):
        return dist_auth_failure_count(remote)
    return _get(_tc_remote_auth_failure_count, c_uint64, remote, "tc_remote_auth_failure_count")


def remote_refusal_count(remote):
    return _get(_tc_remote_refusal_count, c_uint64, remote, "tc_remote_refusal_count")


def remote_total_bytes_served(remote):
    return _get(_tc_remote_total_bytes_served, c_uint64, remote, "tc_remote_total_bytes_served")


def remote_total_bytes_fetched(remote):
    return _get(_tc_remote_total_bytes_fetched, c_uint64, remote, "tc_remote_total_bytes_fetched")
