"""The TensorMap behind simpler_depmap_* (what the level-3 scheduler asks):
the level-2 rules: read-after-write and write-after-write on overlapping
views, write-after-read not tracked, finished tasks impose nothing."""

from __future__ import annotations

import ctypes

import pytest

from simpler import SimplerArgumentError
from simpler._lib import CChipTensor, check, lib
from simpler.task_interface import ArgDirection as D, ChipTensor

BASE = 0x10000000


class Map:
    def __init__(self):
        self.h = ctypes.c_void_p()
        check(lib().simpler_depmap_create(ctypes.byref(self.h)))
        self.next = 1

    def submit(self, *accesses):
        """accesses: (tensor, direction); returns (task id, sorted producers)."""
        tid = self.next
        self.next += 1
        n = len(accesses)
        arr = (CChipTensor * max(1, n))()
        for i, (t, _) in enumerate(accesses):
            arr[i] = t._c
        acc = bytes(int(d) for _, d in accesses) or b"\0"
        out = (ctypes.c_uint64 * 64)()
        cnt = ctypes.c_uint32()
        check(lib().simpler_depmap_submit(self.h, tid, arr, acc, n, out, 64, ctypes.byref(cnt)))
        return tid, sorted(out[i] for i in range(cnt.value))

    def finish(self, *tids):
        check(lib().simpler_depmap_finish(self.h, (ctypes.c_uint64 * max(1, len(tids)))(*tids), len(tids)))

    def __del__(self):
        lib().simpler_depmap_destroy(self.h)


def view(offset_elems, n, size=4096, base=BASE):
    """f32[n] at element offset_elems of a `size`-byte allocation at base."""
    return ChipTensor.make(base, (n,), "float32", start_offset=offset_elems, nbytes=size)


def test_read_after_write_and_write_after_write():
    m = Map()
    w1, p = m.submit((view(0, 64), D.OUT))
    assert p == []
    r1, p = m.submit((view(0, 64), D.IN))
    assert p == [w1]  # RAW
    w2, p = m.submit((view(32, 64), D.OUT))
    assert p == [w1]  # WAW on the overlap; the reader r1 is not waited for (no WAR)
    r2, p = m.submit((view(0, 16), D.IN), (view(80, 8), D.IN))
    assert p == [w1, w2]  # each once
    m.finish(w1)
    _, p = m.submit((view(0, 16), D.IN))
    assert p == []  # finished writers impose nothing
    _, p = m.submit((view(64, 16), D.INOUT))
    assert p == [w2]


def test_disjoint_views_and_allocations_are_independent():
    m = Map()
    a, _ = m.submit((view(0, 32), D.OUT))
    _, p = m.submit((view(32, 32), D.IN))
    assert p == []
    _, p = m.submit((view(0, 32, base=BASE + 8192), D.IN))
    assert p == []
    # Column blocks of a [8, 8] matrix: the per-dimension box test.
    left = ChipTensor.make(BASE + 65536, (8, 4), "float32", strides=(8, 1), nbytes=256)
    right = ChipTensor.make(BASE + 65536, (8, 4), "float32", strides=(8, 1), start_offset=4, nbytes=256)
    wl, _ = m.submit((left, D.OUT))
    _, p = m.submit((right, D.IN))
    assert p == []
    _, p = m.submit((left, D.IN))
    assert p == [wl]


def test_bad_views_are_refused():
    m = Map()
    with pytest.raises(SimplerArgumentError, match="tensor 0"):
        m.submit((view(4090, 64), D.IN))  # outside its allocation
    with pytest.raises(SimplerArgumentError, match="access"):
        m.submit((view(0, 4), 0))  # SCALAR is no access


def test_finish_retires_several_or_none():
    m = Map()
    a, _ = m.submit((view(0, 16), D.OUT))
    b, _ = m.submit((view(16, 16), D.OUT))
    c, _ = m.submit((view(32, 16), D.OUT))
    m.finish()  # nothing to retire
    with pytest.raises(SimplerArgumentError, match="not live"):
        m.finish(a, 999)
    with pytest.raises(SimplerArgumentError, match="named twice"):
        m.finish(a, b, a)
    _, p = m.submit((view(0, 48), D.IN))
    assert p == [a, b, c]  # the refused calls retired nothing
    m.finish(a, c)
    _, p = m.submit((view(0, 48), D.IN))
    assert p == [b]
    with pytest.raises(SimplerArgumentError, match="not live"):
        m.finish(a)
    with pytest.raises(SimplerArgumentError, match="null"):
        check(lib().simpler_depmap_finish(m.h, None, 1))
    with pytest.raises(SimplerArgumentError, match="null"):
        check(lib().simpler_depmap_finish(None, None, 0))
