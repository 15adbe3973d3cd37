"""Communication domains: a symmetric window per member chip that every
member can address, carved into `buffers`.

cpu: each window is a shared-memory buffer, so a task on any member chip
can name any rank's window (the child maps it). cuda: each window is device
memory of its chip, exported to the other members with CUDA IPC handles,
plus an NCCL communicator per domain (see cuda_domain.py)."""

from __future__ import annotations

from ..task_interface import ChipTensor, DataType


def validate(name, workers, window_size, buffers, chips: int, live: dict):
    """Checks everything before anything is allocated; returns (workers, buffers)."""
    if not isinstance(name, str) or not name:
        raise ValueError("allocate_domain: name must be a non-empty string")
    if name in live:
        raise ValueError(f"allocate_domain: a domain named {name!r} is already allocated")
    workers = list(workers)
    if not workers:
        raise ValueError("allocate_domain: workers is empty")
    for w in workers:
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < chips:
            raise ValueError(f"allocate_domain: worker {w!r} is not a chip of this Worker (0..{chips - 1})")
    if len(set(workers)) != len(workers):
        raise ValueError(f"allocate_domain: workers {workers} repeat a chip")
    if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size <= 0:
        raise ValueError(f"allocate_domain: window_size must be a positive int, got {window_size!r}")
    buffers = list(buffers)
    for b in buffers:
        if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
            raise ValueError(f"allocate_domain: buffer sizes must be positive ints, got {b!r}")
    if sum(buffers) > window_size:
        raise ValueError(f"allocate_domain: buffers {buffers} need {sum(buffers)} bytes; the window holds "
                         f"{window_size}")
    return workers, buffers


class DomainSlice:
    """Buffer i of one rank's window: name it with tensor(shapes, dtype)."""

    def __init__(self, window, offset: int, nbytes: int):
        self._window = window
        self.offset = offset
        self.nbytes = nbytes

    @property
    def ptr(self) -> int:
        return self._window.ptr + self.offset

    def tensor(self, shapes, dtype, offset: int = 0) -> ChipTensor:
        dt = dtype if isinstance(dtype, DataType) else DataType.from_numpy(dtype)
        n = 1
        for s in shapes:
            n *= int(s)
        if offset < 0 or offset + n * dt.itemsize > self.nbytes:
            raise ValueError(f"domain buffer: {n} x {dt.name} at byte {offset} exceed its {self.nbytes} bytes")
        return self._window.tensor(shapes, dt, self.offset + offset)

    def numpy(self, shape=None, dtype="uint8"):
        import numpy as np

        a = self._window.numpy(dtype="uint8")[self.offset:self.offset + self.nbytes].view(dtype)
        return a.reshape(shape) if shape is not None else a


class DomainRank:
    def __init__(self, domain, rank: int, worker: int, window):
        self.domain = domain
        self.rank = rank
        self.worker = worker
        self.window = window  # cpu: a shared Buffer; cuda: a DeviceWindow

    def buffer(self, i: int) -> DomainSlice:
        d = self.domain
        if not 0 <= i < len(d.buffers):
            raise IndexError(f"domain {d.name!r}: buffer {i} (it has {len(d.buffers)})")
        return DomainSlice(self.window, d.offsets[i], d.buffers[i])

    def tensor(self, shapes, dtype, offset: int = 0) -> ChipTensor:
        return self.window.tensor(shapes, dtype, offset)

    def __repr__(self) -> str:
        return f"DomainRank({self.domain.name!r}, rank={self.rank}, worker={self.worker})"


class CommDomain:
    """A handle indexed by domain-local rank; a context manager that frees
    the domain on exit."""

    def __init__(self, owner, name, workers, window_size, buffers):
        self._owner = owner
        self.name = name
        self.workers = workers
        self.window_size = window_size
        self.buffers = buffers
        self.offsets = []
        off = 0
        for b in buffers:
            self.offsets.append(off)
            off += b
        self.ranks: list = []
        self.backend = None  # cuda: the per-domain state of cuda_domain
        self.freed = False

    def __len__(self) -> int:
        return len(self.workers)

    def __getitem__(self, rank: int) -> DomainRank:
        if not -len(self.ranks) <= rank < len(self.ranks):
            raise IndexError(f"domain {self.name!r}: rank {rank} (it has {len(self.ranks)})")
        return self.ranks[rank]

    def rank_of(self, worker: int) -> int:
        return self.workers.index(worker)

    def allreduce(self, buffer: int, count: int, dtype="float32", op: str = "sum") -> None:
        """In place over buffer `buffer` of every rank's window, run from
        host code once the tasks writing it have finished: NCCL on cuda, the
        shared windows directly on cpu."""
        import numpy as np

        if self.freed:
            raise ValueError(f"domain {self.name!r} is freed")
        if isinstance(buffer, bool) or not isinstance(buffer, int) or not 0 <= buffer < len(self.buffers):
            raise IndexError(f"domain {self.name!r}: buffer {buffer!r} (it has {len(self.buffers)})")
        if dtype == "bfloat16":  # NCCL has it; NumPy only through ml_dtypes
            itemsize = 2
        else:
            dt = np.dtype(dtype)  # "float32", np.float32 and np.dtype("float32") alike
            dtype, itemsize = dt.name, dt.itemsize
        if isinstance(count, bool) or not isinstance(count, int) or count < 0 or \
                count * itemsize > self.buffers[buffer]:
            raise ValueError(f"allreduce: count {count!r} x {dtype} does not fit buffer {buffer} "
                             f"({self.buffers[buffer]} bytes)")
        if self._owner.platform == "cuda":
            from . import cuda_domain

            return cuda_domain.allreduce(self._owner, self, buffer, count, dtype, op)

        ops = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
        if op not in ops and op != "avg":
            raise ValueError(f"allreduce: op in {sorted(ops) + ['avg']}")
        views = [r.buffer(buffer).numpy(dtype=dtype)[:count] for r in self.ranks]
        acc = views[0].copy()
        for v in views[1:]:
            acc = (ops["sum"] if op == "avg" else ops[op])(acc, v)
        if op == "avg":
            acc = acc / len(views)
        for v in views:
            v[:] = acc

    def free(self) -> None:
        if not self.freed:
            self.freed = True
            self._owner._free_domain(self)

    def __enter__(self) -> "CommDomain":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        return f"CommDomain({self.name!r}, workers={self.workers}, window_size={self.window_size})"
