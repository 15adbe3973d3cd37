"""What a Python sub-task sees: fn(args), with args.array(i) a writable
NumPy view of tensor i in shared memory (zero-copy) and args.scalar(i)."""

from __future__ import annotations

from ..task_interface import ArgDirection, DataType


class SubTaskArgs:
    def __init__(self, tensors, nt, scalars, ns, dirs, tags, maps):
        self._t = tensors
        self._nt = nt
        self._s = scalars
        self._ns = ns
        self._dirs = dirs
        self._tags = tags
        self._maps = maps

    @property
    def tensor_count(self) -> int:
        return self._nt

    @property
    def scalar_count(self) -> int:
        return self._ns

    def scalar(self, i: int) -> int:
        if not 0 <= i < self._ns:
            raise IndexError(f"scalar {i}: the task has {self._ns}")
        return int(self._s[i])

    def direction(self, i: int) -> ArgDirection:
        return ArgDirection(self._dirs[i])

    def dtype(self, i: int) -> DataType:
        return DataType(self._t[i].dtype)

    def shape(self, i: int) -> tuple:
        t = self._t[i]
        return tuple(t.shapes[k] for k in range(t.ndims))

    def array(self, i: int):
        """Tensor i as a NumPy array over the shared buffer (writes land in
        the buffer; no copy)."""
        import numpy as np

        if not 0 <= i < self._nt:
            raise IndexError(f"tensor {i}: the task has {self._nt}")
        t = self._t[i]
        m, _ = self._maps[self._tags[i] - 1]
        dt = DataType(t.dtype).to_numpy()
        item = dt.itemsize
        offset = t.buffer.addr - m.addr + t.start_offset * item
        shape = tuple(t.shapes[k] for k in range(t.ndims))
        strides = tuple(t.strides[k] * item for k in range(t.ndims))
        return np.ndarray(shape, dtype=dt, buffer=m.mm, offset=offset, strides=strides)

    def __repr__(self) -> str:
        return f"SubTaskArgs(tensors={self._nt}, scalars={self._ns})"
