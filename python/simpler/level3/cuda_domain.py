"""Communication domains on cuda: each member chip allocates its window
(cuMemAlloc in the device's primary context, the one the level-2 runtime
uses), exports it with cuIpcGetMemHandle, and opens its peers' windows with
cuIpcOpenMemHandle, so every member addresses every window. An NCCL
communicator per domain (ncclCommInitRank, the unique id made by rank 0)
lets host code run collectives (CommDomain.allreduce) and is there for
kernels that take it.

The driver and NCCL are loaded at run time; where either is missing the
domain fails with an error naming the library. Parent side: allocate /
free / allreduce; child side: child_op.
"""

from __future__ import annotations

import ctypes
import os

from .. import _errors
from .endpoint import ChildDied

_NCCL_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6,
                "float32": 7, "float64": 8, "bfloat16": 9}
_NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


# ---- parent side ------------------------------------------------------------------


class DeviceWindow:
    """One rank's window as some chip sees it: a device address there."""

    def __init__(self, ptr: int, nbytes: int):
        self.ptr = ptr
        self.nbytes = nbytes

    def tensor(self, shapes, dtype, offset: int = 0):
        from ..task_interface import ChipTensor, DataType

        dt = dtype if isinstance(dtype, DataType) else DataType.from_numpy(dtype)
        n = 1
        for s in shapes:
            n *= int(s)
        if offset < 0 or offset + n * dt.itemsize > self.nbytes:
            raise ValueError(f"domain window: {n} x {dt.name} at byte {offset} exceed its {self.nbytes} bytes")
        return ChipTensor.make(self.ptr + offset, shapes, dt)


def _collective(worker, eps, op, per_ep_args):
    """Posts `op` to every endpoint, then collects every reply (so the
    members work on it at once: NCCL initialisation needs them all). Every
    reply is read even when one fails, so no channel is left holding an
    unread reply; the first error is raised after that."""
    posted, errors = [], []
    for ep, a in zip(eps, per_ep_args):
        try:
            ep.control_post("domain", op, *a)
            posted.append(ep)
        except BaseException as e:  # noqa: BLE001 - reported after the others are collected
            errors.append(e)
    out = {}
    for ep in posted:
        try:
            out[id(ep)] = ep.control_collect(worker._engine.waiter)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    if errors:
        # The cause before its consequences: a member that failed outright
        # rather than one that then waited for it (NCCL) until its deadline.
        causes = [e for e in errors if not isinstance(e, (ChildDied, _errors.SimplerTimeoutError))]
        err = (causes or errors)[0]
        if isinstance(err, ChildDied):
            err = _errors.SimplerError(_errors.DISPATCH, str(err))
        err.domain_done = [ep for ep in posted if id(ep) in out]  # the members that did the step
        raise err
    return [out[id(ep)] for ep in eps]


def _free_on(worker, eps, name) -> None:
    """Best-effort teardown on `eps` (the live ones): every member first
    drops its NCCL communicator and its mappings of the peers' windows, and
    only then frees its own window, so no window is freed while a peer still
    maps it."""
    for step in ("close", "free"):
        alive = [ep for ep in eps if not ep.dead]
        if not alive:
            return
        try:
            _collective(worker, alive, step, [(name,)] * len(alive))
        except Exception:  # noqa: BLE001 - teardown: one member's failure must not keep the others' memory
            pass


def allocate(worker, d) -> None:
    from .domain import DomainRank

    eps = [worker._chip_ep(w) for w in d.workers]
    try:
        got = _collective(worker, eps, "alloc", [(d.name, d.window_size)] * len(eps))
    except BaseException as e:
        _free_on(worker, getattr(e, "domain_done", []), d.name)
        raise
    ptrs = [g[0] for g in got]
    handles = [g[1] for g in got]
    try:
        views = _collective(worker, eps, "open", [(d.name, handles, r) for r in range(len(eps))])
        uid = eps[0].control(worker._engine.waiter, "domain", "nccl_id", d.name) if len(eps) > 1 else None
        _collective(worker, eps, "nccl_init", [(d.name, uid, len(eps), r) for r in range(len(eps))])
    except BaseException:
        _free_on(worker, eps, d.name)
        raise
    d.backend = {"eps": eps, "ptrs": ptrs, "views": views}
    for r, ep in enumerate(eps):
        for k, p in enumerate(views[r]):
            # Each window is device memory of chip r as r sees it, and names
            # rank k's window for the dependencies (one key per window).
            ep.add_alloc(p, d.window_size, alias=None if k == r else (eps[k].slot, ptrs[k]))
        rank = DomainRank(d, r, d.workers[r], DeviceWindow(ptrs[r], d.window_size))
        rank.peer = (lambda r_: (lambda k: DeviceWindow(views[r_][k], d.window_size)))(r)
        d.ranks.append(rank)


def free(worker, d) -> None:
    eps = d.backend["eps"]
    for r, ep in enumerate(eps):
        for p in d.backend["views"][r]:
            ep.drop_alloc(p)
    _free_on(worker, eps, d.name)
    d.backend = None


def allreduce(worker, d, buffer: int, count: int, dtype: str = "float32", op: str = "sum") -> None:
    """In place over buffer `buffer` of every rank's window (a host-driven
    NCCL collective among the domain's chips), once the tasks naming the
    windows have finished."""
    if dtype not in _NCCL_DTYPES or op not in _NCCL_OPS:
        raise ValueError(f"allreduce: dtype in {sorted(_NCCL_DTYPES)}, op in {sorted(_NCCL_OPS)}")
    eps = d.backend["eps"]
    off = d.offsets[buffer]
    eng = worker._engine
    with eng.lock:
        eng.wait(eng.idle, None)  # tasks may still write the windows
        _collective(worker, eps, "allreduce", [(d.name, off, int(count), dtype, op)] * len(eps))


# ---- child side -------------------------------------------------------------------


def _fn(lib, name, argtypes, restype=ctypes.c_int):
    """A function of a library loaded at run time, with its C signature (so
    64-bit pointers and by-value structures are passed as declared)."""
    f = getattr(lib, name)
    f.argtypes = argtypes
    f.restype = restype
    return f


class _IpcHandle(ctypes.Structure):
    """CUipcMemHandle: 64 opaque bytes, passed by value to cuIpcOpenMemHandle.
    Raw bytes (c_ubyte), never c_char: a c_char array field reads back as a
    C string, cut at its first zero byte."""

    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


class _UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank."""

    _fields_ = [("internal", ctypes.c_ubyte * 128)]


def _from_bytes(cls, raw, what: str):
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != ctypes.sizeof(cls):
        n = len(raw) if isinstance(raw, (bytes, bytearray)) else type(raw).__name__
        raise _errors.SimplerError(_errors.INTERNAL, f"{what}: expected {ctypes.sizeof(cls)} bytes, got {n}")
    return cls.from_buffer_copy(raw)


class _Cuda:
    """The driver API, in the device's primary context (the one the level-2
    runtime and NCCL use)."""

    def __init__(self, device: int):
        try:
            cu = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise _errors.SimplerUnsupportedError(_errors.UNSUPPORTED, f"communication domains on cuda need the CUDA "
                                                  f"driver (libcuda.so.1): {e}") from None
        P, U64, SZ = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
        self.cuGetErrorName = _fn(cu, "cuGetErrorName", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])
        self.cuInit = _fn(cu, "cuInit", [ctypes.c_uint])
        self.cuDeviceGet = _fn(cu, "cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int])
        self.cuDevicePrimaryCtxRetain = _fn(cu, "cuDevicePrimaryCtxRetain", [ctypes.POINTER(P), ctypes.c_int])
        self.cuCtxSetCurrent = _fn(cu, "cuCtxSetCurrent", [P])
        self.cuCtxSynchronize = _fn(cu, "cuCtxSynchronize", [])
        self.cuMemAlloc = _fn(cu, "cuMemAlloc_v2", [ctypes.POINTER(U64), SZ])
        self.cuMemFree = _fn(cu, "cuMemFree_v2", [U64])
        self.cuMemsetD8 = _fn(cu, "cuMemsetD8_v2", [U64, ctypes.c_ubyte, SZ])
        self.cuIpcGetMemHandle = _fn(cu, "cuIpcGetMemHandle", [ctypes.POINTER(_IpcHandle), U64])
        self.cuIpcOpenMemHandle = _fn(cu, "cuIpcOpenMemHandle_v2", [ctypes.POINTER(U64), _IpcHandle, ctypes.c_uint])
        self.cuIpcCloseMemHandle = _fn(cu, "cuIpcCloseMemHandle", [U64])
        self.check(self.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        ctx = P()
        self.check(self.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
        self.ctx = ctx
        self.current()

    def current(self) -> None:
        self.check(self.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def check(self, r: int, what: str) -> None:
        if r:
            name = ctypes.c_char_p()
            self.cuGetErrorName(r, ctypes.byref(name))
            raise _errors.SimplerError(_errors.DISPATCH, f"{what}: CUDA error {r} ({(name.value or b'?').decode()})")


class _Nccl:
    def __init__(self):
        lib = None
        for name in ("libnccl.so.2", "libnccl.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise _errors.SimplerUnsupportedError(_errors.UNSUPPORTED, "communication domains on cuda need NCCL "
                                                  "(libnccl.so.2), which this machine does not have")
        # NVLink multicast (NVLS) stays off: NCCL reads this when a
        # communicator is created (this runs in a chip child, whose
        # environment is its own).
        os.environ["NCCL_NVLS_ENABLE"] = "0"
        P, I = ctypes.c_void_p, ctypes.c_int
        self.ncclGetErrorString = _fn(lib, "ncclGetErrorString", [I], ctypes.c_char_p)
        self.ncclGetUniqueId = _fn(lib, "ncclGetUniqueId", [ctypes.POINTER(_UniqueId)])
        self.ncclCommInitRank = _fn(lib, "ncclCommInitRank", [ctypes.POINTER(P), I, _UniqueId, I])
        self.ncclCommDestroy = _fn(lib, "ncclCommDestroy", [P])
        # (sendbuff, recvbuff, count, datatype, op, comm, stream)
        self.ncclAllReduce = _fn(lib, "ncclAllReduce", [P, P, ctypes.c_size_t, I, I, P, P])

    def check(self, r: int, what: str) -> None:
        if r:
            msg = self.ncclGetErrorString(r) or b"?"
            raise _errors.SimplerError(_errors.DISPATCH, f"{what}: NCCL error {r} ({msg.decode()})")


def _close(st, cuda, d) -> None:
    """Destroys the domain's communicator and unmaps the peers' windows,
    all of it even when one step fails (the first failure is raised)."""
    first = None
    if d["comm"] is not None:
        comm, d["comm"] = d["comm"], None
        nccl = st["_nccl"]
        try:
            nccl.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
        except _errors.SimplerError as e:
            first = e
    peers, d["peers"] = d["peers"], []
    for p in peers:
        try:
            cuda.check(cuda.cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle")
        except _errors.SimplerError as e:
            first = first or e
    if first is not None:
        raise first


def _nccl_of(st) -> _Nccl:
    if "_nccl" not in st:
        st["_nccl"] = _Nccl()  # loaded once per child, on first use
    return st["_nccl"]


def child_op(child, action: str, *args):
    st = child.domains
    if "_cuda" not in st:
        st["_cuda"] = _Cuda(child.spec["device_id"])
    cuda = st["_cuda"]
    cuda.current()
    if action == "alloc":
        name, size = args
        ptr = ctypes.c_uint64()
        cuda.check(cuda.cuMemAlloc(ctypes.byref(ptr), size), "cuMemAlloc")
        handle = _IpcHandle()
        try:
            cuda.check(cuda.cuMemsetD8(ptr.value, 0, size), "cuMemsetD8")
            cuda.check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")  # zeroed before any peer reads it
            cuda.check(cuda.cuIpcGetMemHandle(ctypes.byref(handle), ptr.value), "cuIpcGetMemHandle")
        except BaseException:
            cuda.cuMemFree(ptr.value)  # the parent frees only the members whose alloc succeeded
            raise
        st[name] = {"own": ptr.value, "peers": [], "comm": None, "size": size}
        return ptr.value, bytes(handle)  # all 64 bytes (the buffer protocol, not the field)
    if action == "nccl_id":
        nccl = _nccl_of(st)
        uid = _UniqueId()
        nccl.check(nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return bytes(uid)
    d = st.get(args[0])
    if d is None:
        if action in ("close", "free"):
            return None  # never allocated here (a failed alloc), or already freed
        raise ValueError(f"domain {args[0]!r} is not allocated on this chip")
    if action == "open":
        _, handles, rank = args
        views = []
        for k, h in enumerate(handles):
            if k == rank:
                views.append(d["own"])
                continue
            raw = _from_bytes(_IpcHandle, h, f"the IPC handle of rank {k}")
            p = ctypes.c_uint64()
            cuda.check(cuda.cuIpcOpenMemHandle(ctypes.byref(p), raw, 1),  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
                       f"cuIpcOpenMemHandle (rank {k}'s window)")
            d["peers"].append(p.value)
            views.append(p.value)
        return views
    if action == "nccl_init":
        _, uid, nranks, rank = args
        if nranks == 1:
            return None
        nccl = _nccl_of(st)
        u = _from_bytes(_UniqueId, uid, "the NCCL unique id")
        comm = ctypes.c_void_p()
        nccl.check(nccl.ncclCommInitRank(ctypes.byref(comm), nranks, u, rank), "ncclCommInitRank")
        d["comm"] = comm
        return None
    if action == "allreduce":
        _, off, count, dtype, op = args
        if d["comm"] is None:
            return None  # one rank: nothing to reduce
        nccl = st["_nccl"]
        p = d["own"] + off
        # The legacy default stream (null): ordered after the level-2 runtime's work, synchronised below.
        nccl.check(nccl.ncclAllReduce(p, p, count, _NCCL_DTYPES[dtype], _NCCL_OPS[op], d["comm"], None),
                   "ncclAllReduce")
        cuda.check(cuda.cuCtxSynchronize(), "cuCtxSynchronize (after ncclAllReduce)")
        return None
    if action == "close":  # first half of the teardown: what refers to the peers
        _close(st, cuda, d)
        return None
    if action == "free":  # second half: the own window, once no peer maps it
        del st[args[0]]
        try:
            _close(st, cuda, d)  # (a member whose close step failed or never came)
        finally:
            cuda.check(cuda.cuMemFree(d["own"]), "cuMemFree")
        return None
    raise ValueError(f"domain operation {action!r}")
