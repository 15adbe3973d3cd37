"""l3_multi_chip: one level-3 Worker, two chips and a sub-worker.

Each chip adds its half of a and b (the compiled `add` kernel, launched by
the built-in task-list orchestration) into its half of a shared buffer; a
Python sub-task then reads both halves (it waits for both chip tasks: the
dependency comes from the tensors) and writes a checksum per half. All data
lives in create_buffer shared memory: no copies between the processes.

    python examples/simpler/l3_multi_chip/main.py -p cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import compile_kernel, l3_args  # noqa: E402
from simpler import Worker  # noqa: E402
from simpler.task_interface import (ArgDirection as D, ChipCallable, ChipStorageTaskArgs,  # noqa: E402
                                    CoreCallable, DataType)


def collect(args):
    """Sub-task: sums[i] = sum of half i (runs in a sub-worker process)."""
    halves = args.tensor_count - 1
    sums = args.array(halves)
    for i in range(halves):
        sums[i] = args.array(i).astype(np.float64).sum()


def build(platform: str) -> ChipCallable:
    add = CoreCallable.build(signature=[D.IN, D.IN, D.OUT], binary=compile_kernel(platform, "add"))
    return ChipCallable.from_tasks([D.IN, D.IN, D.OUT],
                                   [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)], "block_num": 2}],
                                   [(0, add)])


def run(platform: str = "cpu", devices: int = 2, n: int = 1 << 16) -> np.ndarray:
    rng = np.random.default_rng(3)
    chip = build(platform)
    with Worker(3, platform=platform, device_ids=list(range(devices)), num_sub_workers=1) as w:
        h_add = w.register(chip)
        h_collect = w.register(collect)
        w.init()
        a, b, out = (w.create_buffer(4 * n) for _ in range(3))
        sums = w.create_buffer(8 * devices)
        A, B = a.numpy((n,), "float32"), b.numpy((n,), "float32")
        A[:] = rng.standard_normal(n)
        B[:] = rng.standard_normal(n)
        out.numpy((n,), "float32")[:] = np.nan  # poisoned: every element must be written
        step = n // devices

        def orch(o, args, cfg):
            halves = []
            for d in range(devices):
                lo = d * step
                t = ChipStorageTaskArgs()
                for buf in (a, b, out):
                    t.add_tensor(buf.tensor((step,), DataType.FLOAT32, offset=4 * lo))
                o.submit_next_level(h_add, t, worker=d)
                halves.append(out.tensor((step,), DataType.FLOAT32, offset=4 * lo))
            t = ChipStorageTaskArgs()
            for hv in halves:
                t.add_tensor(hv, D.IN)
            t.add_tensor(sums.tensor((devices,), DataType.FLOAT64), D.OUT)
            o.submit_sub(h_collect, t)

        w.run(orch)
        ref = A.astype(np.float64) + B
        np.testing.assert_allclose(out.numpy((n,), "float32"), ref, rtol=1e-6, atol=1e-6)
        got = sums.numpy((devices,), "float64").copy()
        np.testing.assert_allclose(got, ref.reshape(devices, step).sum(axis=1), rtol=1e-4, atol=1e-3)
    print(f"l3_multi_chip on {platform}: {devices} chips + 1 sub-worker, {n} elements ok; sums {got}")
    return got


if __name__ == "__main__":
    a = l3_args(__doc__)
    run(a.platform, a.devices)
