"""l3_tp_ffn: a tensor-parallel feed-forward block over two (or more) chips.

    Y = relu(X @ W1) @ W2,   W1 [D, H] split by columns, W2 [H, D] by rows:
    Y = sum_d relu(X @ W1[:, cols_d]) @ W2[rows_d, :]

Chip d holds W1_d and W2_d in device memory and computes its partial
P_d = relu(X @ W1_d) @ W2_d (built-in gemm, the compiled relu, built-in
gemm; the hidden activations never leave the chip) into a shared buffer; a
Python sub-task sums the partials, waiting for every chip through the
TensorMap (it reads what they wrote).

    python examples/simpler/l3_tp_ffn/main.py -p cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import compile_kernel, l3_args  # noqa: E402
from simpler import Worker  # noqa: E402
from simpler.task_interface import (ArgDirection as D, ChipCallable, ChipStorageTaskArgs, ChipTensor,  # noqa: E402
                                    CoreCallable, DataType)


def reduce_partials(args):
    """Sub-task: Y = sum of the partials (the last tensor is Y)."""
    y = args.array(args.tensor_count - 1)
    acc = args.array(0).astype(np.float32, copy=True)
    for i in range(1, args.tensor_count - 1):
        acc += args.array(i)
    y[...] = acc


def build(platform: str, m: int, hd: int) -> ChipCallable:
    """P = relu(X @ W1) @ W2 on one chip; the hidden [m, hd] lives in the
    chip's heap ring."""
    gemm = CoreCallable.builtin("gemm")
    relu = CoreCallable.build(signature=[D.IN, D.OUT], binary=compile_kernel(platform, "relu"))
    f32 = DataType.FLOAT32
    tasks = [
        {"func_id": 0, "args": [("arg", 0), ("arg", 1), ("new", (m, hd), f32)]},
        {"func_id": 1, "args": [("out", 0, 0), ("new", (m, hd), f32)], "block_num": 4},
        {"func_id": 0, "args": [("out", 1, 0), ("arg", 2), ("arg", 3)]},
    ]
    return ChipCallable.from_tasks([D.IN, D.IN, D.IN, D.OUT], tasks, [(0, gemm), (1, relu)])


class TpFfn:
    """The block with its weights resident on `devices` chips."""

    def __init__(self, w, platform, devices, m, dm, hidden, seed=7):
        rng = np.random.default_rng(seed)
        self.w, self.devices, self.m, self.dm = w, devices, m, dm
        self.hd = hidden // devices
        # Drawn in f32 directly: no f64 temporaries twice the size of the weights.
        self.W1 = rng.standard_normal((dm, hidden), dtype=np.float32) * np.float32(1 / np.sqrt(dm))
        self.W2 = rng.standard_normal((hidden, dm), dtype=np.float32) * np.float32(1 / np.sqrt(hidden))
        self.h_chip = w.register(build(platform, m, self.hd))
        self.h_reduce = w.register(reduce_partials)

    def load(self):
        w, hd = self.w, self.hd
        self.w1, self.w2 = [], []
        for d in range(self.devices):
            cols = slice(d * hd, (d + 1) * hd)
            p1 = w.malloc(4 * self.dm * hd, worker_id=d)
            w.copy_to(p1, np.ascontiguousarray(self.W1[:, cols]), worker_id=d)
            p2 = w.malloc(4 * hd * self.dm, worker_id=d)
            w.copy_to(p2, np.ascontiguousarray(self.W2[cols, :]), worker_id=d)
            self.w1.append(p1)
            self.w2.append(p2)
        self.x = w.create_buffer(4 * self.m * self.dm)
        self.parts = [w.create_buffer(4 * self.m * self.dm) for _ in range(self.devices)]
        self.y = w.create_buffer(4 * self.m * self.dm)

    def orch(self, o, args, cfg):
        m, dm, hd, f32 = self.m, self.dm, self.hd, DataType.FLOAT32
        red = ChipStorageTaskArgs()
        for d in range(self.devices):
            t = ChipStorageTaskArgs()
            t.add_tensor(self.x.tensor((m, dm), f32))
            t.add_tensor(ChipTensor.make(self.w1[d], (dm, hd), f32))
            t.add_tensor(ChipTensor.make(self.w2[d], (hd, dm), f32))
            t.add_tensor(self.parts[d].tensor((m, dm), f32))
            o.submit_next_level(self.h_chip, t, worker=d)
            red.add_tensor(self.parts[d].tensor((m, dm), f32), D.IN)
        if args == "partials":
            return
        red.add_tensor(self.y.tensor((m, dm), f32), D.OUT)
        o.submit_sub(self.h_reduce, red)

    def reference(self, X):
        return np.maximum(X.astype(np.float64) @ self.W1, 0) @ self.W2


def run(platform: str = "cpu", devices: int = 2, m: int = 32, dm: int = 64, hidden: int = 256) -> np.ndarray:
    with Worker(3, platform=platform, device_ids=list(range(devices)), num_sub_workers=1) as w:
        ffn = TpFfn(w, platform, devices, m, dm, hidden)
        w.init()
        ffn.load()
        X = ffn.x.numpy((m, dm), "float32")
        X[:] = np.random.default_rng(1).standard_normal((m, dm))
        ffn.y.numpy(dtype="float32")[:] = np.nan
        w.run(ffn.orch)
        Y = ffn.y.numpy((m, dm), "float32").copy()
        np.testing.assert_allclose(Y, ffn.reference(X), rtol=1e-4, atol=1e-4)
    print(f"l3_tp_ffn on {platform}: [{m}x{dm}] through hidden {hidden} split over {devices} chips ok")
    return Y


if __name__ == "__main__":
    a = l3_args(__doc__)
    run(a.platform, a.devices)
