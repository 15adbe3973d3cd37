"""l3_allreduce: an allreduce across a communication domain, built from
chip tasks (a ring-free reduce-scatter then all-gather).

allocate_domain gives every member chip a symmetric window (here two
buffers: `grad` and `sum`) that all members can address: on cpu a shared
buffer, on cuda device memory exported with CUDA IPC. Rank r first writes
its gradient g_r = x_r + y_r into its own `grad`; then it reduces slice r of
every rank's `grad` into its `sum` (reading its peers' windows); then it
gathers the other slices from its peers' `sum`. The TensorMap orders every
read after the writes it needs, across chips. Finally the host-side
collective (domain.allreduce: NCCL on cuda) checks the same result.

    python examples/simpler/l3_allreduce/main.py -p cpu -n 3
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import compile_kernel, l3_args  # noqa: E402
from simpler import Worker  # noqa: E402
from simpler.task_interface import ArgDirection as D, ChipCallable, ChipStorageTaskArgs, CoreCallable  # noqa: E402

GRAD, SUM = 0, 1


def chips(platform):
    add = CoreCallable.build(signature=[D.IN, D.IN, D.OUT], binary=compile_kernel(platform, "add"))
    add_s = CoreCallable.build(signature=[D.IN, D.OUT, D.SCALAR], binary=compile_kernel(platform, "add_scalar"))
    add_chip = ChipCallable.from_tasks([D.IN, D.IN, D.OUT],
                                       [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)]}], [(0, add)])
    copy_chip = ChipCallable.from_tasks([D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1)],
                                                         "scalars": [0.0]}], [(0, add_s)])
    return add_chip, copy_chip


def window(dom, platform, viewer: int, owner: int, buf: int, n: int, offset: int = 0):
    """Elements [offset, offset + n) of `owner`'s buffer `buf`, as chip `viewer` addresses it."""
    if platform == "cpu":
        return dom[owner].buffer(buf).tensor((n,), "float32", 4 * offset)
    return dom[viewer].peer(owner).tensor((n,), "float32", dom.offsets[buf] + 4 * offset)


def run(platform: str = "cpu", devices: int = 2, n: int = 1 << 14) -> np.ndarray:
    rng = np.random.default_rng(11)
    add_chip, copy_chip = chips(platform)
    bounds = [(r * n // devices, (r + 1) * n // devices) for r in range(devices)]
    with Worker(3, platform=platform, device_ids=list(range(devices))) as w:
        h_add, h_copy = w.register(add_chip), w.register(copy_chip)
        w.init()
        xs = [w.create_buffer(4 * n) for _ in range(devices)]
        ys = [w.create_buffer(4 * n) for _ in range(devices)]
        for b in xs + ys:
            b.numpy((n,), "float32")[:] = rng.standard_normal(n)
        keep = {}

        def orch(o, args, cfg):
            dom = o.allocate_domain("grads", list(range(devices)), 8 * n, buffers=[4 * n, 4 * n])
            keep["dom"] = dom

            def task(h, worker, *tensors):
                t = ChipStorageTaskArgs()
                for x in tensors:
                    t.add_tensor(x)
                o.submit_next_level(h, t, worker=worker)

            for r in range(devices):  # g_r = x_r + y_r, into r's own window
                task(h_add, r, xs[r].tensor((n,), "float32"), ys[r].tensor((n,), "float32"),
                     window(dom, platform, r, r, GRAD, n))
            for r in range(devices):  # reduce-scatter: sum[slice r] on rank r
                lo, hi = bounds[r]
                step = hi - lo
                acc = window(dom, platform, r, r, SUM, step, lo)
                task(h_add, r, window(dom, platform, r, 0, GRAD, step, lo), window(dom, platform, r, 1, GRAD, step, lo),
                     acc)
                for k in range(2, devices):
                    task(h_add, r, window(dom, platform, r, r, SUM, step, lo), window(dom, platform, r, k, GRAD, step, lo),
                         window(dom, platform, r, r, SUM, step, lo))
            for r in range(devices):  # all-gather: the other slices from their owners
                for k in range(devices):
                    if k != r:
                        lo, hi = bounds[k]
                        task(h_copy, r, window(dom, platform, r, k, SUM, hi - lo, lo),
                             window(dom, platform, r, r, SUM, hi - lo, lo))

        w.run(orch)
        dom = keep["dom"]
        ref = sum(x.numpy((n,), "float32").astype(np.float64) + y.numpy((n,), "float32") for x, y in zip(xs, ys))
        outs = [w.create_buffer(4 * n) for _ in range(devices)]

        def read_back(buf_index):
            """Every rank's window buffer into a shared buffer, by a chip task (on
            cuda the windows are device memory the host does not map)."""
            for o in outs:
                o.numpy((n,), "float32")[:] = np.nan

            def orch_read(o, args, cfg):
                for r in range(devices):
                    t = ChipStorageTaskArgs()
                    t.add_tensor(window(dom, platform, r, r, buf_index, n))
                    t.add_tensor(outs[r].tensor((n,), "float32"))
                    o.submit_next_level(h_copy, t, worker=r)

            w.run(orch_read)
            return [o.numpy((n,), "float32").copy() for o in outs]

        got = read_back(SUM)
        for r in range(devices):
            np.testing.assert_allclose(got[r], ref, rtol=1e-5, atol=1e-5)
        dom.allreduce(GRAD, n, "float32")  # the host-driven collective (NCCL on cuda)
        for r, g in enumerate(read_back(GRAD)):
            np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5)
        dom.free()
        assert w.live_domains() == {}
        result = got[0]
    print(f"l3_allreduce on {platform}: {devices} ranks x {n} elements ok")
    return result


if __name__ == "__main__":
    a = l3_args(__doc__)
    run(a.platform, a.devices)
