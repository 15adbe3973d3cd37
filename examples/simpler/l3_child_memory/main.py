"""l3_child_memory: weights that stay on the chips across runs.

Each chip gets its own weight matrix once (Worker.malloc(size, worker_id) +
copy_to, or orch.malloc(worker_id, size) from an orchestration); every later
run sends only the activations (shared memory) and reuses the device-resident
weights: y_d = x @ W_d with the built-in gemm, on every chip at once.

    python examples/simpler/l3_child_memory/main.py -p cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import l3_args  # noqa: E402
from simpler import Worker  # noqa: E402
from simpler.task_interface import (ArgDirection as D, ChipCallable, ChipStorageTaskArgs, ChipTensor,  # noqa: E402
                                    CoreCallable, DataType)


def run(platform: str = "cpu", devices: int = 2, m: int = 16, k: int = 64, n: int = 32, steps: int = 4):
    rng = np.random.default_rng(5)
    gemm = ChipCallable.from_tasks([D.IN, D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)]}],
                                   [(0, CoreCallable.builtin("gemm"))])
    weights = [rng.standard_normal((k, n)).astype(np.float32) for _ in range(devices)]
    with Worker(3, platform=platform, device_ids=list(range(devices))) as w:
        h = w.register(gemm)
        w.init()
        ptrs = []
        for d in range(devices):
            p = w.malloc(4 * k * n, worker_id=d)  # device memory of chip d
            w.copy_to(p, weights[d], worker_id=d)
            ptrs.append(p)
        x = w.create_buffer(4 * m * k)
        ys = [w.create_buffer(4 * m * n) for _ in range(devices)]

        def orch(o, args, cfg):
            for d in range(devices):
                t = ChipStorageTaskArgs()
                t.add_tensor(x.tensor((m, k), DataType.FLOAT32))
                t.add_tensor(ChipTensor.make(ptrs[d], (k, n), DataType.FLOAT32))  # resident on chip d
                t.add_tensor(ys[d].tensor((m, n), DataType.FLOAT32))
                o.submit_next_level(h, t, worker=d)

        for step in range(steps):
            X = x.numpy((m, k), "float32")
            X[:] = rng.standard_normal((m, k))
            for y in ys:
                y.numpy(dtype="float32")[:] = np.nan
            w.run(orch)
            for d in range(devices):
                np.testing.assert_allclose(ys[d].numpy((m, n), "float32"), X.astype(np.float64) @ weights[d],
                                           rtol=1e-4, atol=1e-4)
        for d in range(devices):
            w.free(ptrs[d], worker_id=d)
    print(f"l3_child_memory on {platform}: {steps} runs reused the weights of {devices} chips")
    return steps


if __name__ == "__main__":
    a = l3_args(__doc__)
    run(a.platform, a.devices)
