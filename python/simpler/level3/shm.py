"""Shared-memory segments seen from a child: mapped by name with no
resource-tracker registration (the parent owns and unlinks every segment;
a child that registered too would make the tracker warn or unlink twice)."""

from __future__ import annotations

import ctypes
import mmap
import os
import secrets
from multiprocessing import shared_memory

import _posixshmem

# Segments this process creates are named simpler_<pid>_<random>, so a leak
# check can tell them from other programs' (or parallel tests') segments.
PREFIX = "simpler_"


def create(size: int) -> shared_memory.SharedMemory:
    """A new segment of `size` bytes owned by this process."""
    name = "%s%d_%s" % (PREFIX, os.getpid(), secrets.token_hex(6))
    return shared_memory.SharedMemory(name=name, create=True, size=size)


class Mapping:
    """One segment mapped into this process; `addr` is its base address."""

    def __init__(self, name: str, size: int):
        fd = _posixshmem.shm_open("/" + name.lstrip("/"), os.O_RDWR, mode=0o600)
        try:
            # Mapping past the segment's end would fault on first touch (SIGBUS).
            have = os.fstat(fd).st_size
            if have < size:
                raise ValueError(f"shared-memory segment {name} has {have} bytes, not {size}")
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name = name
        self.size = size
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        self.addr = ctypes.addressof(self._anchor)

    @property
    def buf(self) -> memoryview:
        return memoryview(self.mm)

    def close(self) -> None:
        self._anchor = None
        try:
            self.mm.close()
        except BufferError:  # a view is still alive somewhere; the mapping goes at exit
            pass


def buffer_address(buf) -> int:
    """Base address of a writable buffer (a SharedMemory's .buf)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))
