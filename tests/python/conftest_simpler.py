"""Fixtures of the simpler tests (imported by conftest.py): shared compiled
callables, so every kernel is built once per session (and cached on disk)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from simpler.remote.mpi_client import process_alive as alive  # noqa: F401  (the tests' name for it)

ROOT = Path(__file__).resolve().parents[2]
SOURCES = Path(__file__).resolve().parent / "simpler_sources"
EXAMPLES = ROOT / "examples" / "simpler"

if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


class Cases:
    """ChipCallables over cases_orch.cpp's entry points (cpu kernels)."""

    def __init__(self):
        from simpler.task_interface import ArgDirection as D, ChipCallable, CoreCallable
        from simpler_setup import KernelCompiler

        self.kc = KernelCompiler(platform="cpu")
        inc = self.kc.get_orchestration_include_dirs()
        k = lambda name: self.kc.compile_incore(SOURCES / name, extra_include_dirs=inc)  # noqa: E731
        self.orch = self.kc.compile_orchestration("tensormap_and_ringbuffer", SOURCES / "cases_orch.cpp")
        self.children = [
            (0, CoreCallable.build([D.INOUT], k("inc.cpp"))),
            (1, CoreCallable.build([D.INOUT], k("segv.cpp"))),
            (2, CoreCallable.build([D.INOUT], k("abort.c"))),
            (3, CoreCallable.build([D.INOUT, D.SCALAR], k("sleep_ms.cpp"))),
        ]
        self.no_entry = k("no_entry.cpp")
        self._D = D
        self._ChipCallable = ChipCallable

    def chip(self, func_name: str, signature=None, config_name: str = ""):
        D = self._D
        sig = signature if signature is not None else [D.INOUT, D.SCALAR]
        return self._ChipCallable.build(signature=sig, func_name=func_name, binary=self.orch, children=self.children,
                                        config_name=config_name)


@pytest.fixture(scope="session")
def cases():
    return Cases()


@pytest.fixture(scope="session")
def cpu_worker():
    from simpler import Worker

    w = Worker(2, platform="cpu")
    w.init()
    yield w
    w.close()


def device_f32(worker, values):
    """A device copy of `values` (float32) and its ChipTensor."""
    import numpy as np

    from simpler.task_interface import ChipTensor, DataType

    a = np.asarray(values, dtype=np.float32)
    p = worker.malloc(a.nbytes)
    worker.copy_to(p, a)
    return p, ChipTensor.make(p, a.shape, DataType.FLOAT32)


def read_f32(worker, ptr, n):
    import numpy as np

    out = np.empty(n, np.float32)
    worker.copy_from(out, ptr)
    return out

