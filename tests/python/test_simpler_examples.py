"""The examples under examples/simpler, on every platform present (cpu
always; cuda where the library has it and a GPU answers)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import conftest_simpler  # noqa: F401  (puts examples/simpler on sys.path)
from diamond.main import TestDiamond, TestDiamondHostBuildGraph  # noqa: F401  (scene tests, collected here)
from simpler_setup import available_platforms

PLATFORMS = [pytest.param(p, marks=pytest.mark.skipif(p not in available_platforms(), reason=f"no {p} here"))
             for p in ("cpu", "cuda")]
RUNTIMES = ["tensormap_and_ringbuffer", "host_build_graph"]


def _example(name):
    return importlib.import_module(f"{name}.main")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_hello_worker(platform):
    info = _example("hello_worker").run(platform)
    assert info["platform"] == platform and info["num_cores"] > 0


@pytest.mark.parametrize("platform", PLATFORMS)
def test_worker_malloc(platform):
    out = _example("worker_malloc").run(platform)
    assert out.shape == (1024,) and np.all(out[100:200] == 7.0)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_vector_add(platform, runtime):
    out = _example("vector_add").run(platform, runtime, n=10_000)
    assert np.isfinite(out).all()
