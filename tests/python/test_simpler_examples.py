"""The examples under examples/simpler, on every platform present (cpu
always; cuda where the library has it and a GPU answers)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import conftest_simpler  # noqa: F401  (puts examples/simpler on sys.path)
from diamond.main import (  # noqa: F401  (scene tests, collected here)
    TestDiamond,
    TestDiamondHostBuildGraph,
    TestDiamondLevel3,
    TestDiamondLevel4,
)
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


# ---- level 3: two or more cpu "devices" here; two GPUs where present ---------------------

L3_EXAMPLES = ["l3_multi_chip", "l3_child_memory", "l3_allreduce", "l3_tp_ffn"]


@pytest.mark.parametrize("name", L3_EXAMPLES)
def test_level3_example_cpu(name):
    _example(name).run("cpu", 2)


def test_level3_allreduce_three_ranks():
    out = _example("l3_allreduce").run("cpu", 3, n=1000)
    assert out.shape == (1000,)


def _two_gpus() -> bool:
    from common import gpu_count
    from simpler._lib import version

    return "cuda" in version() and gpu_count() >= 2


@pytest.mark.parametrize("name", L3_EXAMPLES)
def test_level3_example_cuda(name):
    """In a fresh process: this one may have touched CUDA already, and a
    level-3 Worker forks its chips before any CUDA call."""
    import subprocess
    import sys

    if not _two_gpus():
        pytest.skip("needs a CUDA build and two GPUs")
    main = conftest_simpler.EXAMPLES / name / "main.py"
    r = subprocess.run([sys.executable, str(main), "-p", "cuda", "-n", "2"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("level", [3, 4])
def test_a_hierarchical_scene_test_compares_what_the_chip_wrote(level):
    """The level-3/4 path copies the chip's outputs back before comparing: a
    wrong golden fails, a right one passes with the chip's outputs."""
    import inspect
    from pathlib import Path

    from diamond.main import _Diamond
    from simpler_setup import scene_test

    class Wrong(_Diamond):
        def compute_golden(self, args, params):
            super().compute_golden(args, params)
            args.f[3] += 1.0

    case = {"name": "small", "platforms": ["cpu"], "params": {"n": 64, "seed": 5}}
    src = Path(inspect.getfile(_Diamond)).resolve().parent
    scene_test(level=level)(Wrong)
    Wrong._st_dir = src
    with pytest.raises(AssertionError, match="Golden mismatch on 'f': 1 of 64"):
        Wrong().run_case(case, "cpu")
    right = scene_test(level=level)(type("Right", (_Diamond,), {}))
    right._st_dir = src
    out = right().run_case(case, "cpu")
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    c = a.astype(np.float64) + b
    np.testing.assert_allclose(out["f"], (c + 1) * (c + 2) + c, rtol=1e-5, atol=1e-5)
