"""diamond: f = (a + b + 1) * (a + b + 2) + (a + b), a DAG with scopes and
runtime-allocated intermediates, written as scene tests for both runtimes
and for levels 2, 3 and 4.

    python examples/simpler/diamond/main.py -p cpu      (standalone)
    pytest examples/simpler/diamond/main.py             (every available platform)
"""

from __future__ import annotations

import sys

import numpy as np

from simpler.task_interface import ArgDirection as D
from simpler_setup import SceneTestCase, TaskArgsBuilder, Tensor, scene_test
from simpler_setup.scene_test import main as scene_main

_K = "../kernels"
CALLABLE = {
    "orchestration": {
        "source": "diamond_orch.cpp",
        "function_name": "diamond_orchestration",
        "signature": [D.IN, D.IN, D.OUT],
    },
    "incores": [
        {"func_id": 0, "source": {"cpu": f"{_K}/cpu/add.cpp", "cuda": f"{_K}/cuda/add.cu"}, "core_type": "aiv",
         "signature": [D.IN, D.IN, D.OUT]},
        {"func_id": 1, "source": {"cpu": f"{_K}/cpu/add_scalar.cpp", "cuda": f"{_K}/cuda/add_scalar.cu"},
         "core_type": "aiv", "signature": [D.IN, D.OUT, D.SCALAR]},
        {"func_id": 2, "source": {"cpu": f"{_K}/cpu/mul.cpp", "cuda": f"{_K}/cuda/mul.cu"}, "core_type": "aiv",
         "signature": [D.IN, D.IN, D.OUT]},
    ],
}

CASES = [
    {"name": "small", "platforms": ["cpu", "cuda"], "config": {}, "params": {"n": 1000, "seed": 0}},
    {"name": "large_two_cores", "platforms": ["cpu", "cuda"], "config": {"block_dim": 2},
     "params": {"n": 128 * 128, "seed": 1}},
]


class _Diamond(SceneTestCase):
    CALLABLE = CALLABLE
    CASES = CASES

    def generate_args(self, params):
        rng = np.random.default_rng(params["seed"])
        n = params["n"]
        return TaskArgsBuilder(
            Tensor("a", rng.standard_normal(n).astype(np.float32)),
            Tensor("b", rng.standard_normal(n).astype(np.float32)),
            Tensor("f", np.full(n, np.nan, np.float32)),
        )

    def compute_golden(self, args, params):
        c = args.a.astype(np.float64) + args.b
        args.f[:] = (c + 1) * (c + 2) + c


@scene_test(level=2, runtime="tensormap_and_ringbuffer")
class TestDiamond(_Diamond):
    pass


@scene_test(level=2, runtime="host_build_graph")
class TestDiamondHostBuildGraph(_Diamond):
    pass


# The same cases through the hierarchy: a Worker(3) hands the ChipCallable to
# its chip; a Worker(4) hands that orchestration to an attached Worker(3).
@scene_test(level=3, runtime="tensormap_and_ringbuffer")
class TestDiamondLevel3(_Diamond):
    pass


@scene_test(level=4, runtime="tensormap_and_ringbuffer")
class TestDiamondLevel4(_Diamond):
    pass


if __name__ == "__main__":
    sys.exit(scene_main())
