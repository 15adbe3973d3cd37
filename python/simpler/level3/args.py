"""What a Python sub-task sees: fn(args), with args.array(i) a writable
NumPy view of tensor i in shared memory (zero-copy) and args.scalar(i).
Tensors stay raw ChipTensor bytes, as the parent wrote them (addressed in
the parent's mapping of their buffer), until asked for."""

from __future__ import annotations

from ..task_interface import ArgDirection, DataType
from . import layout as L

_NP_DTYPES: dict = {}
_np = None  # numpy, imported by the first array()
# Arrays made so far: buffer index -> {tensor bytes: ndarray}. An ndarray
# over a mapping costs several microseconds to make, a view of one already
# made a fraction of that, and tasks name the same tensors run after run.
# A buffer's entries go with its mapping (forget).
_MADE: dict = {}
_MADE_PER_BUFFER = 4096


def forget(idx: int) -> None:
    """Drops the arrays over buffer `idx` (its mapping is going away)."""
    _MADE.pop(idx, None)


def _np_dtype(code: int):
    dt = _NP_DTYPES.get(code)
    if dt is None:
        dt = _NP_DTYPES[code] = DataType(code).to_numpy()
    return dt


class SubTaskArgs:
    __slots__ = ("_raw", "_nt", "_s", "_dirs", "_tags", "_maps")

    def __init__(self, raw, nt, scalars, dirs, tags, maps):
        self._raw = raw
        self._nt = nt
        self._s = scalars
        self._dirs = dirs
        self._tags = tags
        self._maps = maps

    @property
    def tensor_count(self) -> int:
        return self._nt

    @property
    def scalar_count(self) -> int:
        return len(self._s)

    def scalar(self, i: int) -> int:
        if not 0 <= i < len(self._s):
            raise IndexError(f"scalar {i}: the task has {len(self._s)}")
        return self._s[i]

    def _tensor(self, i: int):
        if not 0 <= i < self._nt:
            raise IndexError(f"tensor {i}: the task has {self._nt}")
        return L.TENSOR.unpack_from(self._raw, 96 * i)

    def direction(self, i: int) -> ArgDirection:
        self._tensor(i)
        return ArgDirection(self._dirs[i])

    def dtype(self, i: int) -> DataType:
        return DataType(self._tensor(i)[4])

    def shape(self, i: int) -> tuple:
        f = self._tensor(i)
        return tuple(f[5:5 + f[3]])

    def array(self, i: int):
        """Tensor i as a NumPy array over the shared buffer (writes land in
        the buffer; no copy)."""
        global _np
        if _np is None:
            import numpy

            _np = numpy
        if not 0 <= i < self._nt:
            raise IndexError(f"tensor {i}: the task has {self._nt}")
        idx = self._tags[i] - 1
        key = self._raw[96 * i:96 * i + 96]
        made = _MADE.get(idx)
        if made is not None:
            a = made.get(key)
            if a is not None:
                return a.view()  # a view: whatever the task does to its shape stays its own
        else:
            made = _MADE[idx] = {}
        f = L.TENSOR.unpack_from(key)
        addr, _, start, nd, code = f[:5]
        m, pbase = self._maps[idx]  # addr is an address of the parent's mapping at pbase
        dt = _np_dtype(code)
        item = dt.itemsize
        strides = (item * f[11],) if nd == 1 else tuple(x * item for x in f[11:11 + nd])
        a = _np.ndarray(f[5:5 + nd], dtype=dt, buffer=m.mm, offset=addr - pbase + start * item, strides=strides)
        if len(made) >= _MADE_PER_BUFFER:
            made.clear()
        made[key] = a
        return a.view()

    def __repr__(self) -> str:
        return f"SubTaskArgs(tensors={self._nt}, scalars={len(self._s)})"
