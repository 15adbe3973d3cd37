#!/usr/bin/env python3
"""Host cost of one op call: bench/op_overhead.c (softmax, RMSNorm and GEMM
on 2x2 / 1x4 tensors, synchronous, and GEMM enqueued on a stream) built
against each library given, side by side, with PyTorch's own per-op cost on
the same tiny tensors as the peer when torch is importable.

    python bench/op_overhead.py --lib build/libtensorcore.so [--lib OTHER] [--device cpu|cuda]

Prints ns per call for each library and the ratio to the first one."""

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_c(lib, device, calls):
    lib = Path(lib).resolve()
    with tempfile.TemporaryDirectory() as d:
        exe = Path(d) / "op_overhead"
        subprocess.run(["cc", "-O2", "-I", str(ROOT / "include"), str(ROOT / "bench" / "op_overhead.c"), "-o",
                        str(exe), "-L", str(lib.parent), "-l:" + lib.name, "-Wl,-rpath," + str(lib.parent)],
                       check=True)
        out = subprocess.run([str(exe), device, str(calls)], check=True, capture_output=True, text=True,
                             env=dict(os.environ, LD_LIBRARY_PATH=str(lib.parent))).stdout
    return {k: float(v) for k, v in (line.split() for line in out.splitlines())}


def torch_costs(device, calls):
    try:
        import torch
    except ImportError:
        return {}
    dev = "cuda" if device.startswith("cuda") else "cpu"
    if dev == "cuda" and not torch.cuda.is_available():
        return {}
    x, g = torch.zeros(1, 4, device=dev), torch.zeros(4, device=dev)
    a = torch.zeros(2, 2, device=dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    ops = {"softmax_forward": lambda: torch.softmax(x, dim=1),
           "rmsnorm_forward": lambda: torch.nn.functional.rms_norm(x, (4,), g, 1e-5),
           "gemm": lambda: torch.mm(a, a)}
    out = {}
    for name, fn in ops.items():
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
                sync()
            best = min(best, time.perf_counter() - t0)
        out[name] = best / calls * 1e9
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", action="append", required=True, help="a libtensorcore.so (repeat to compare)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--calls", type=int, default=100000)
    a = p.parse_args()
    results = [(lib, run_c(lib, a.device, a.calls)) for lib in a.lib]
    peer = torch_costs(a.device, max(1000, a.calls // 10))
    names = list(results[0][1])
    print("device %s, ns per call (best of 5)" % a.device)
    print("| op | " + " | ".join(lib for lib, _ in results) + (" | torch" if peer else "") + " |")
    for n in names:
        cells = ["%.0f" % r[n] + ("" if i == 0 else " (%.2fx)" % (r[n] / results[0][1][n]))
                 for i, (_, r) in enumerate(results)]
        print("| %s | %s%s |" % (n, " | ".join(cells), " | %.0f" % peer[n] if n in peer else (" | -" if peer else "")))


if __name__ == "__main__":
    main()
