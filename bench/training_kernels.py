#!/usr/bin/env python3
"""Memory throughput of the CPU training kernels against the machine's copy
bandwidth, measured side by side in one process.

    python bench/training_kernels.py [--rows 4096] [--dim 4096] [--dtypes f32,bf16,f16]
                                     [--threads 2] [--reps 7] [--write]

Every kernel is memory-bound, so its figure is GB/s: the bytes its definition
reads plus the bytes it writes (each tensor once, e.g. rmsnorm_forward reads
X and gamma and writes Y and rstd), divided by the time of one call. The peer
is a NumPy copy (memcpy) of the same number of bytes, i.e. half of them read
and half written, timed alternately with the kernel so both see the same
machine state; the ratio is ours / copy's, from the fastest of --reps calls
of each (the least disturbed by other work on a shared machine; the ratio of
the medians is shown beside it), and the target is >= 0.50 on --threads
threads (default 2). Shapes: [rows, dim] for the row-wise kernels,
rows * dim elements for the elementwise ones, [1, 32, rows*dim/4096, 128] for
RoPE, and a [dim, dim] weight for the fused GEMVs (M = 1 and 4 input rows).
One warm-up call precedes the timed ones. --write puts
the tables, the processor, the thread count and the load average into
bench/results/training-kernels-cpu.md; the machine may be shared, so check the
load it reports.
"""

import argparse
import datetime
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = 0.50


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--dim", type=int, default=4096)
    p.add_argument("--dtypes", default="f32,bf16,f16")
    p.add_argument("--threads", type=int, default=2, help="TC_NUM_THREADS for the kernels (0: library default)")
    p.add_argument("--reps", type=int, default=9, help="timed calls per kernel and of the copy")
    p.add_argument("--only", default="", help="comma-separated kernel names to run (default: all)")
    p.add_argument("--write", action="store_true", help="write bench/results/training-kernels-cpu.md")
    return p.parse_args()


ARGS = parse_args()
if ARGS.threads > 0:  # before the library starts its thread pool
    os.environ["TC_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402

try:
    import tensorcore as tc  # noqa: E402
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import tensorcore as tc  # noqa: E402

F32 = 4


def loadavg():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def l3_size():
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def kernel_path(info):
    """The instruction set the kernels run with (cpu/simd.h's choice)."""
    feats = set(info.features.split(","))
    cap = os.environ.get("TC_CPU_ISA", "")
    if cap == "portable" or not {"avx2", "fma", "f16c"} <= feats:
        return "portable"
    if cap == "avx2" or not {"avx512f", "avx512bw", "avx512vl"} <= feats:
        return "AVX2"
    if cap == "avx512" or "avx512_bf16" not in feats:
        return "AVX-512"
    return "AVX-512 with AVX512-BF16 conversions"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Bench:
    def __init__(self, ctx, rng):
        self.ctx, self.rng = ctx, rng
        self.rows = []

    def buf(self, n, dtype, scale=1.0, shift=0.0):
        """A buffer of n elements of dtype holding normal random values (every page touched)."""
        a = (self.rng.standard_normal(n, dtype=np.float32) * scale + shift).astype(tc.numpy_dtype(dtype))
        return self.ctx.buffer_from_array(a)

    def run(self, name, nbytes, fn):
        """Times fn() and a NumPy copy of nbytes (half read, half written), alternately."""
        if ARGS.only and name not in ARGS.only.split(","):
            return
        half = nbytes // 2
        src = np.ones(half, np.uint8)
        dst = np.zeros(half, np.uint8)
        fn()
        np.copyto(dst, src)
        ours, copy = [], []
        for _ in range(ARGS.reps):
            t0 = time.perf_counter()
            fn()
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            np.copyto(dst, src)
            copy.append(time.perf_counter() - t0)
        t, tcopy = min(ours), min(copy)
        med = float(np.median(copy)) / float(np.median(ours))
        row = (name, nbytes, t, nbytes / t / 1e9, nbytes / tcopy / 1e9, tcopy / t, med)
        self.rows.append(row)
        print("  %-24s %8.1f MB %8.2f ms %7.2f GB/s   copy %7.2f GB/s   ratio %.2f (medians %.2f) %s" % (
            name, nbytes / 1e6, t * 1e3, row[3], row[4], row[5], med, "" if row[5] >= TARGET else "(below target)"),
            flush=True)


def bench_dtype(ctx, dtype):
    rng = np.random.default_rng(0)
    b = Bench(ctx, rng)
    N, D = ARGS.rows, ARGS.dim
    e = tc.DTYPE_SIZES[tc.dtype_code(dtype)]
    nd = N * D
    # RMSNorm / LayerNorm
    X, dY, G, Bt = b.buf(nd, dtype), b.buf(nd, dtype), b.buf(D, dtype, shift=1.0), b.buf(D, dtype)
    Y, dX = b.buf(nd, dtype), b.buf(nd, dtype)
    R, Mu, dG, dB = b.buf(N, "f32"), b.buf(N, "f32"), b.buf(D, "f32"), b.buf(D, "f32")
    tc.layernorm_forward(ctx, X, G, Bt, Y, Mu, R, N, D, dtype=dtype)  # valid statistics for the backward passes
    b.run("rmsnorm_forward", 2 * nd * e + D * e + N * F32,
          lambda: tc.rmsnorm_forward(ctx, X, G, Y, R, N, D, dtype=dtype))
    b.run("rmsnorm_backward", 3 * nd * e + D * e + N * F32 + D * F32,
          lambda: tc.rmsnorm_backward(ctx, X, G, dY, R, dX, dG, N, D, dtype=dtype))
    b.run("layernorm_forward", 2 * nd * e + 2 * D * e + 2 * N * F32,
          lambda: tc.layernorm_forward(ctx, X, G, Bt, Y, Mu, R, N, D, dtype=dtype))
    b.run("layernorm_backward", 3 * nd * e + D * e + 2 * N * F32 + 2 * D * F32,
          lambda: tc.layernorm_backward(ctx, X, G, dY, Mu, R, dX, N, D, dgamma=dG, dbeta=dB, dtype=dtype))
    # softmax
    b.run("softmax_forward", 2 * nd * e, lambda: tc.softmax_forward(ctx, X, Y, N, D, dtype=dtype))
    b.run("softmax_backward", 3 * nd * e, lambda: tc.softmax_backward(ctx, Y, dY, dX, N, D, dtype=dtype))
    # RoPE: the same number of elements as [1, 32, S, 128]
    H, hd = 32, 128
    S = max(1, nd // (H * hd))
    theta = np.arange(S)[:, None] * 10000.0 ** (-np.arange(hd // 2) * 2.0 / hd)
    C = ctx.buffer_from_array(np.cos(theta).astype(np.float32))
    Sn = ctx.buffer_from_array(np.sin(theta).astype(np.float32))
    rope_bytes = 2 * H * S * hd * e + 2 * S * (hd // 2) * F32
    for inter in (False, True):
        tag = "interleaved" if inter else "half"
        b.run("rope_forward_" + tag, rope_bytes,
              lambda: tc.rope_forward(ctx, X, C, Sn, 1, H, S, hd, dtype=dtype, interleaved=inter))
    b.run("rope_backward_half", rope_bytes, lambda: tc.rope_backward(ctx, X, C, Sn, 1, H, S, hd, dtype=dtype))
    # SwiGLU on rows * dim elements
    Up, dU = b.buf(nd, dtype), b.buf(nd, dtype)
    b.run("swiglu_forward", 3 * nd * e, lambda: tc.swiglu_forward(ctx, X, Up, Y, nd, dtype=dtype))
    b.run("swiglu_backward", 5 * nd * e, lambda: tc.swiglu_backward(ctx, X, Up, dY, dX, dU, nd, dtype=dtype))
    b.run("geglu_forward", 3 * nd * e, lambda: tc.geglu_forward(ctx, X, Up, Y, nd, dtype=dtype))
    b.run("geglu_backward", 5 * nd * e, lambda: tc.geglu_backward(ctx, X, Up, dY, dX, dU, nd, dtype=dtype))
    del Up, dU
    # AdamW: f32 state, gradients in dtype
    P, Mm, V = b.buf(nd, "f32"), b.buf(nd, "f32", scale=0.01), b.buf(nd, "f32", scale=0.0, shift=1e-4)
    b.run("adamw_step", 6 * nd * F32 + nd * e,
          lambda: tc.adamw_step(ctx, P, Mm, V, dY, dtype, nd, 1e-4, 0.9, 0.999, 1e-8, 0.01, 0.5, 0.05))
    del P, Mm, V
    # fused norm + GEMV: W [dim, dim]
    K = Nw = D
    W = b.buf(Nw * K, dtype, scale=0.02)
    Xs, Ys = b.buf(8 * K, dtype), b.buf(8 * Nw, dtype)
    for M in (1, 4):
        nbytes = Nw * K * e + M * K * e + K * e + M * Nw * e
        b.run("fused_rmsnorm_gemv M=%d" % M, nbytes,
              lambda: tc.fused_rmsnorm_gemv(ctx, Xs, G, W, Ys, M, Nw, K, dtype=dtype))
    b.run("fused_layernorm_gemv M=1", Nw * K * e + 3 * K * e + Nw * e,
          lambda: tc.fused_layernorm_gemv(ctx, Xs, G, Bt, W, Ys, 1, Nw, K, dtype=dtype))
    return b.rows


def main():
    load0 = loadavg()
    with tc.Context("cpu") as ctx:
        info = ctx.device_info()
        print("tensorcore %s on %s, %d threads, features %s; load %.2f %.2f %.2f" % (
            tc.version(), info.name, info.compute_units, info.features, *load0))
        tables = {}
        for dtype in ARGS.dtypes.split(","):
            print("%s, [%d, %d]:" % (dtype, ARGS.rows, ARGS.dim))
            tables[dtype] = bench_dtype(ctx, dtype)
    load1 = loadavg()
    print("load after: %.2f %.2f %.2f" % load1)
    below = [(d, r[0], r[5]) for d, rows in tables.items() for r in rows if r[5] < TARGET]
    print("all kernels >= %.2f x copy" % TARGET if not below else "below target: %s" % below)
    if ARGS.write:
        write(info, tables, load0, load1)


def write(info, tables, load0, load1):
    path = os.path.join(HERE, "results", "training-kernels-cpu.md")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = [
        "# Training kernels on the CPU: memory throughput against copy bandwidth",
        "",
        "Produced by `python bench/training_kernels.py %s`." % " ".join(sys.argv[1:]),
        "",
        "- date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "- processor: %s (%s), %d logical CPUs, L3 %s; features: %s" % (
            cpu_model(), platform.machine(), os.cpu_count(), l3_size(), info.features),
        "- kernels: %s path; threads: %d (TC_NUM_THREADS); %s; NumPy %s" % (
            kernel_path(info), info.compute_units, tc.version(), np.__version__),
        "- load average before / after: %.2f / %.2f (1 min)%s" % (
            load0[0], load1[0],
            "; other work was running on this shared machine, so the figures are lower bounds"
            if max(load0[0], load1[0]) >= 0.5 else ""),
        "",
        "GB/s = (bytes the op reads + bytes it writes, each tensor once) / time of one call. The peer is a "
        "NumPy copy of the same number of bytes (half read, half written), timed alternately with the kernel; "
        "ratio = ours / copy from the fastest of %d alternating calls of each (the ratio of the medians "
        "beside it), target >= %.2f. With a large L3 both the copy and the kernels run partly from cache at "
        "these sizes, so the peer is the machine's copy speed for that footprint, not DRAM's." % (ARGS.reps, TARGET),
        "",
    ]
    for dtype, rows in tables.items():
        lines += ["## %s, rows x dim = %d x %d" % (dtype, ARGS.rows, ARGS.dim), "",
                  "| kernel | MB moved | ms | GB/s | copy GB/s | ratio | ratio of medians | target |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for name, nbytes, t, gbs, cgbs, ratio, med in rows:
            lines.append("| %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |" % (
                name, nbytes / 1e6, t * 1e3, gbs, cgbs, ratio, med, "ok" if ratio >= TARGET else "below"))
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("wrote", path)


if __name__ == "__main__":
    main()
