"""Memory of a level-3 Worker: device memory of each chip (malloc, free,
copies through the control channel) and shared buffers (create_buffer),
which the children map by name."""

from __future__ import annotations

import ctypes
import os

from .. import _errors
from ..worker import Buffer, _host_view
from . import shm
from .endpoint import ChildDied


class SharedBuffer(Buffer):
    """A create_buffer of a level-3 Worker: closing it also unmaps it in the
    children that mapped it."""

    def __init__(self, nbytes: int, owner):
        super().__init__(nbytes)
        self._owner = owner

    def close(self) -> None:
        if self._owner is not None and os.getpid() != self._owner._pid:
            return  # a child's copy: the parent owns the segment
        if not self._closed and self._owner is not None:
            self._owner._buffer_closed(self)
        super().close()


class ImportedBuffer(SharedBuffer):
    """Another process's shared segment mapped here by name (level 4:
    remote_import of an export): addressed and handed to the children like
    a create_buffer, but closing it only unmaps it; the segment belongs to
    the process that made it. `_dep_key`, when set, is the TensorMap key of
    the exported allocation, so tasks naming the import are ordered with
    the owner's tasks on the same bytes."""

    def __init__(self, name: str, nbytes: int, owner, dep_key=None):
        self.shm = shm.Mapping(name, nbytes)
        self.nbytes = nbytes
        self._closed = False
        self._ptr = None
        self._owner = owner
        self._dep_key = dep_key

    def close(self) -> None:
        if self._owner is not None and os.getpid() != self._owner._pid:
            return
        if self._closed:
            return
        if self._owner is not None:
            self._owner._buffer_closed(self)
        self._closed = True
        self.shm.close()


class MemoryOps:
    """The memory half of HierWorker."""

    def malloc(self, size: int, worker_id: int = 0) -> int:
        """Device memory on chip child `worker_id`; returns its address there."""
        eng = self._live()
        ep = self._chip_ep(worker_id)
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"malloc: size must be a positive int, got {size!r}")
        with eng.lock:
            ptr = self._control(ep, "malloc", size)
            ep.add_alloc(ptr, size)
        return ptr

    def free(self, ptr: int, worker_id: int = 0) -> None:
        eng = self._live()
        ep = self._chip_ep(worker_id)
        with eng.lock:
            if ep.find_alloc(int(ptr)) is None:
                raise ValueError(f"free: 0x{int(ptr):x} is not an allocation of {ep.label}")
            if eng.uses_dev(ep, int(ptr)):
                raise ValueError(f"free: 0x{int(ptr):x} on {ep.label} is named by a task that has not finished")
            self._control(ep, "free", int(ptr))
            ep.drop_alloc(int(ptr))

    def _control(self, ep, op, *args):
        try:
            return ep.control(self._engine.waiter, op, *args)
        except ChildDied as e:
            raise _errors.SimplerError(_errors.DISPATCH, str(e)) from None

    def _staged(self, obj, writable: bool):
        """(shm name, size, nbytes, temp SharedMemory or None, host view) for a copy."""
        if isinstance(obj, Buffer):
            return obj.shm.name, obj.nbytes, obj.nbytes, None, None
        addr, size, keep = _host_view(obj, writable)
        if size is None:
            raise ValueError("copy: at level 3 the host side is a Buffer or an object with the buffer protocol")
        tmp = shm.create(max(1, size))
        return tmp.name, max(1, size), size, tmp, (addr, size, keep)

    def copy_to(self, dst: int, src, nbytes: int | None = None, worker_id: int = 0) -> None:
        """Host -> device memory of chip `worker_id`; src a Buffer (no copy in
        the parent) or any object with the buffer protocol."""
        eng = self._live()
        ep = self._chip_ep(worker_id)
        name, size, n, tmp, host = self._staged(src, writable=False)
        try:
            if tmp is not None:
                ctypes.memmove(ctypes.addressof(ctypes.c_char.from_buffer(tmp.buf)), host[0], host[1])
            n = n if nbytes is None else int(nbytes)
            if n > size:
                raise ValueError(f"copy_to: {n} bytes asked for, the source has {size}")
            with eng.lock:
                self._control(ep, "copy_to", int(dst), name, size, n)
        finally:
            if tmp is not None:
                tmp.close()
                tmp.unlink()

    def copy_from(self, dst, src: int, nbytes: int | None = None, worker_id: int = 0) -> None:
        """Device memory of chip `worker_id` -> host (a Buffer or writable buffer)."""
        eng = self._live()
        ep = self._chip_ep(worker_id)
        name, size, n, tmp, host = self._staged(dst, writable=True)
        try:
            n = n if nbytes is None else int(nbytes)
            if n > size:
                raise ValueError(f"copy_from: {n} bytes asked for, the destination has {size}")
            with eng.lock:
                self._control(ep, "copy_from", int(src), name, size, n)
            if tmp is not None:
                ctypes.memmove(host[0], ctypes.addressof(ctypes.c_char.from_buffer(tmp.buf)), n)
        finally:
            if tmp is not None:
                tmp.close()
                tmp.unlink()

    def create_buffer(self, nbytes: int) -> Buffer:
        """Shared host memory the children address without copying; closed
        (and unlinked) by close() at the latest."""
        if self._closed:
            raise _errors.SimplerError(_errors.NOT_INITIALIZED, "the Worker is closed")
        b = SharedBuffer(nbytes, self)
        self._buffers.append(b)
        if self._engine is not None:
            self._engine.add_buffer(b)
        return b

    def _buffer_closed(self, b) -> None:
        if b in self._buffers:
            self._buffers.remove(b)
        eng = self._engine
        if eng is not None and not self._closed:
            with eng.lock:
                idx = getattr(b, "_l3_idx", None)
                # Tasks still naming the buffer finish first (a domain freed
                # inside its orchestration, a buffer closed early).
                eng.wait(lambda: not eng.uses_buffer(idx), None)
                for ep in eng.drop_buffer(b):
                    if not ep.dead:
                        try:
                            ep.control(eng.waiter, "unmap", [b._l3_idx])
                        except ChildDied:
                            pass

