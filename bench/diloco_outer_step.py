"""The DiLoCo outer step alone, on one worker: tensorcore against PyTorch.

Times `apply_outer` of a one-rank group ("single" backend: the exchange is a
no-op, so what is left is the outer step itself) over N f32 parameters, for
Nesterov with each compression: none, fp16 (Delta + error feedback rounded
to f16, the residual kept) and top-k 1% (the k largest |Delta + e|, the rest
kept as error feedback). On a CUDA context the state lives in device memory
and the step runs as our kernels (src/cuda/diloco_outer.cu); on the CPU as
the host loops.

The peer is the same step written with PyTorch tensor ops on the same
device (torch.topk for the selection), timed the same way (median of
--reps, each ended by reading theta back: a 4-byte copy, as the peer's
synchronisation). The ratio printed is ours / PyTorch's time
(lower is better). Bytes: the step reads and writes a few f32 vectors of N
(theta, anchor, momentum, residual), so at N = 26M its floor on an H200 is
tens of microseconds of HBM traffic.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

import numpy as np  # noqa: E402


def ours(device, n, compress, reps):
    import tensorcore as tc
    rng = np.random.default_rng(0)
    with tc.Context(device) as ctx:
        theta = ctx.buffer_from_array(rng.standard_normal(n).astype(np.float32))
        with ctx.dist("single", 1, 0, "single://outer-bench") as dist, \
                dist.diloco(inner_steps=1, outer_lr=0.7, outer_momentum=0.9, outer_optimizer="nesterov",
                            compress=compress) as d:
            d.add_parameter("theta", theta, n)
            times = []
            for r in range(reps + 2):
                d.step()
                theta.to_numpy((1,), np.float32)  # nothing of the last step pending
                t0 = time.perf_counter()
                d.apply_outer()
                theta.to_numpy((1,), np.float32)  # the new theta is written (a 4-byte read back)
                if r >= 2:
                    times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peer(device, n, compress, reps):
    import torch
    dev = torch.device("cuda" if device.startswith("cuda") else "cpu")
    g = torch.Generator(device="cpu").manual_seed(0)
    theta = torch.randn(n, generator=g).to(dev)
    anchor, mom, resid = theta.clone(), torch.zeros_like(theta), torch.zeros_like(theta)
    k = max(1, (n + 99) // 100)

    def step():
        delta = anchor - theta
        if compress == "fp16":
            x = delta + resid
            sent = x.half().float()
            resid.copy_(x - sent)
            delta = sent
        elif compress == "topk_1pct":
            x = delta + resid
            idx = torch.topk(x.abs(), k, sorted=False).indices
            sent = torch.zeros_like(x)
            sent[idx] = x[idx]
            resid.copy_(x - sent)
            delta = sent
        mom.mul_(0.9).add_(delta)
        anchor.sub_(0.7 * (delta + 0.9 * mom))
        theta.copy_(anchor)

    times = []
    for r in range(reps + 2):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if r >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=25_960_960, help="parameters (default: diloco_train.py --preset gpu)")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    print("DiLoCo outer step, one worker, %d f32 parameters, %s, Nesterov (lr 0.7, momentum 0.9)" % (args.n, args.device))
    print("| compression | tensorcore ms | PyTorch ms | ours / PyTorch |")
    print("|---|---|---|---|")
    for compress in ("none", "fp16", "topk_1pct"):
        t = ours(args.device, args.n, compress, args.reps)
        p = peer(args.device, args.n, compress, args.reps) if have_torch else float("nan")
        print("| %s | %.3f | %.3f | %.2fx |" % (compress, t * 1e3, p * 1e3, t / p))


if __name__ == "__main__":
    main()
