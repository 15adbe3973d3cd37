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

from .. import _errors

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
    for ep, a in zip(eps, per_ep_args):
        ep.control_post("domain", op, *a)
    return [ep.control_collect(worker._engine.waiter) for ep in eps]


def allocate(worker, d) -> None:
    from .domain import DomainRank

    eps = [worker._chip_ep(w) for w in d.workers]
    got = _collective(worker, eps, "alloc", [(d.name, d.window_size)] * len(eps))
    ptrs = [g[0] for g in got]
    handles = [g[1] for g in got]
    try:
        views = _collective(worker, eps, "open", [(d.name, handles, r) for r in range(len(eps))])
        uid = eps[0].control("domain", "nccl_id") if len(eps) > 1 else None
        _collective(worker, eps, "nccl_init", [(d.name, uid, len(eps), r) for r in range(len(eps))])
    except BaseException:
        _collective(worker, eps, "free", [(d.name,)] * len(eps))
        raise
    d.backend = {"eps": eps, "ptrs": ptrs, "views": views}
    for r, ep in enumerate(eps):
        for k, p in enumerate(views[r]):
            ep.add_alloc(p, d.window_size)  # each window is device memory of chip r, as r sees it
        rank = DomainRank(d, r, d.workers[r], DeviceWindow(ptrs[r], d.window_size))
        rank.peer = (lambda r_: (lambda k: DeviceWindow(views[r_][k], d.window_size)))(r)
        d.ranks.append(rank)


def free(worker, d) -> None:
    eps = d.backend["eps"]
    for r, ep in enumerate(eps):
        for p in d.backend["views"][r]:
            ep.drop_alloc(p)
    alive = [ep for ep in eps if not ep.dead]
    if alive:
        _collective(worker, alive, "free", [(d.name,)] * len(alive))
    d.backend = None


def allreduce(worker, d, buffer: int, count: int, dtype: str = "float32", op: str = "sum") -> None:
    """In place over buffer `buffer` of every rank's window (a host-driven
    NCCL collective among the domain's chips)."""
    if dtype not in _NCCL_DTYPES or op not in _NCCL_OPS:
        raise ValueError(f"allreduce: dtype in {sorted(_NCCL_DTYPES)}, op in {sorted(_NCCL_OPS)}")
    eps = d.backend["eps"]
    off = d.offsets[buffer]
    _collective(worker, eps, "allreduce", [(d.name, off, int(count), dtype, op)] * len(eps))


# ---- child side -------------------------------------------------------------------


class _Cuda:
    def __init__(self, device: int):
        try:
            self.cu = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise _errors.SimplerUnsupportedError(_errors.UNSUPPORTED, f"communication domains on cuda need the CUDA "
                                                  f"driver (libcuda.so.1): {e}") from None
        self.check(self.cu.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.ctx = ctx
        self.current()

    def current(self) -> None:
        self.check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def check(self, r: int, what: str) -> None:
        if r:
            name = ctypes.c_char_p()
            self.cu.cuGetErrorName(r, ctypes.byref(name))
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
        self.lib = lib

    def check(self, r: int, what: str) -> None:
        if r:
            self.lib.ncclGetErrorString.restype = ctypes.c_char_p
            raise _errors.SimplerError(_errors.DISPATCH, f"{what}: NCCL error {r} "
                                       f"({self.lib.ncclGetErrorString(r).decode()})")


class _UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 bytes, passed by value to ncclCommInitRank."""

    _fields_ = [("internal", ctypes.c_char * 128)]


class _IpcHandle(ctypes.Structure):
    """CUipcMemHandle: 64 bytes, passed by value to cuIpcOpenMemHandle."""

    _fields_ = [("reserved", ctypes.c_char * 64)]


def child_op(child, action: str, *args):
    st = child.domains
    if "_cuda" not in st:
        st["_cuda"] = _Cuda(child.spec["device_id"])
    cuda = st["_cuda"]
    cuda.current()
    cu = cuda.cu
    if action == "alloc":
        name, size = args
        ptr = ctypes.c_uint64()
        cuda.check(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc")
        cuda.check(cu.cuMemsetD8_v2(ptr, 0, ctypes.c_size_t(size)), "cuMemsetD8")
        handle = _IpcHandle()
        cuda.check(cu.cuIpcGetMemHandle(ctypes.byref(handle), ptr), "cuIpcGetMemHandle")
        st[name] = {"own": ptr.value, "peers": [], "comm": None, "size": size}
        return ptr.value, bytes(handle.reserved)
    d = st[args[0]]
    if action == "open":
        _, handles, rank = args
        views = []
        for k, h in enumerate(handles):
            if k == rank:
                views.append(d["own"])
                continue
            p = ctypes.c_uint64()
            raw = _IpcHandle.from_buffer_copy(h)  # passed by value, as the driver declares it
            cuda.check(cu.cuIpcOpenMemHandle_v2(ctypes.byref(p), raw, ctypes.c_uint(1)),  # lazy peer access
                       "cuIpcOpenMemHandle")
            d["peers"].append(p.value)
            views.append(p.value)
        return views
    if action == "nccl_id":
        nccl = st.setdefault("_nccl", _Nccl())
        uid = _UniqueId()
        nccl.check(nccl.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return bytes(uid.internal)
    if action == "nccl_init":
        _, uid, nranks, rank = args
        if nranks == 1:
            return None
        nccl = st.setdefault("_nccl", _Nccl())
        comm = ctypes.c_void_p()
        u = _UniqueId()
        ctypes.memmove(ctypes.addressof(u), uid, 128)
        nccl.check(nccl.lib.ncclCommInitRank(ctypes.byref(comm), nranks, u, rank), "ncclCommInitRank")
        d["comm"] = comm
        return None
    if action == "allreduce":
        _, off, count, dtype, op = args
        if d["comm"] is None:
            return None  # one rank: nothing to reduce
        nccl = st["_nccl"]
        p = ctypes.c_void_p(d["own"] + off)
        nccl.check(nccl.lib.ncclAllReduce(p, p, ctypes.c_size_t(count), _NCCL_DTYPES[dtype], _NCCL_OPS[op],
                                          d["comm"], None), "ncclAllReduce")
        cuda.check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        return None
    if action == "free":
        if d.get("comm") is not None:
            st["_nccl"].lib.ncclCommDestroy(d["comm"])
        for p in d["peers"]:
            cu.cuIpcCloseMemHandle(ctypes.c_uint64(p))
        cu.cuMemFree_v2(ctypes.c_uint64(d["own"]))
        del st[args[0]]
        return None
    raise ValueError(f"domain operation {action!r}")
