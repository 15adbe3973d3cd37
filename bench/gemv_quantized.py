#!/usr/bin/env python3
"""Quantized GEMV bandwidth on the CPU: Y[M, N] = X[M, K] @ W[N, K]^T with W
in Q4_0, Q8_0, Q4_K, Q6_K, Q5_0, Q5_1, X and Y f16.

Decode at batch 1 reads every weight once and does two flops per weight, so
the figure of merit is weight bytes / time (GB/s), against the memory
bandwidth a plain copy gets in the same run:
  - "hot":  the same W every call (it may stay in a large last-level cache),
            against a NumPy copy of a buffer of W's size;
  - "cold": a ring of copies of W larger than the last-level cache, so every
            call streams W from DRAM, against a NumPy copy of 1 GiB.
Copy bandwidth is read bytes per second (a copy moves as many bytes again
out); "2T copy" runs two NumPy copies of halves in two threads (NumPy drops
the GIL), matching the two threads the GEMV uses here.

Shapes are N x K: 4096 x 4096 (attention projections of a 7B model),
4096 x 11008 (ffn_down: K = 11008) and 11008 x 4096 (ffn_up/gate).

Two kernels per case: "int8", the default for f16 activations on AVX512-VNNI
processors (activations quantised to 8 bits, integer dot products, as
llama.cpp does), and "exact", the f32 dequantise-and-FMA kernel that f32
activations always use (selected here with TC_CPU_ISA=avx512: AVX-512
without VNNI). Formats without an integer kernel (Q5_1) run the exact one in
both columns.

    python bench/gemv_quantized.py [--quick] [--write] [--formats q5_0,q5_1]
--write records the table in bench/results/gemv-quantized-cpu.md with the
date, processor, thread count and machine load; with --formats, a section
for those formats only, added to (or replacing its earlier self in) that file.
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
import tensorcore as tc  # noqa: E402

FORMATS = ["q4_0", "q8_0", "q4_k", "q6_k", "q5_0", "q5_1"]
SHAPES = [(4096, 4096), (4096, 11008), (11008, 4096)]
COLD_BYTES = 1200 << 20  # ring of W copies per cold measurement, beyond this machine's 480 MB L3


def weights(rng, fmt, N, K):
    """Random blocks with small finite f16 scales (any quant bytes are valid)."""
    be, bb = tc.quant_block_info(fmt)
    nb = N * K // be
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    d = np.full(nb, 0.01, np.float16).view(np.uint8).reshape(nb, 2)
    if fmt in ("q4_0", "q8_0", "q5_0"):
        raw[:, 0:2] = d
    elif fmt in ("q4_1", "q5_1", "q4_k", "q5_k"):
        raw[:, 0:2] = d
        raw[:, 2:4] = d
    elif fmt == "q6_k":
        raw[:, 208:210] = d
    return raw.reshape(-1)


def timed(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def copy_bandwidth(nbytes, reps):
    """(1-thread, 2-thread) copy read GB/s over `nbytes`, median of reps."""
    src = np.ones(nbytes // 8, np.float64)
    dst = np.empty_like(src)
    _, t1 = timed(lambda: np.copyto(dst, src), reps)
    half = src.size // 2

    def two():
        t = threading.Thread(target=np.copyto, args=(dst[:half], src[:half]))
        t.start()
        np.copyto(dst[half:], src[half:])
        t.join()
    _, t2 = timed(two, reps)
    return nbytes / t1 / 1e9, nbytes / t2 / 1e9


def bench(ctx, rng, fmt, N, K, M, cold, reps):
    nbytes = tc.quantized_size(fmt, N, K)
    base = weights(rng, fmt, N, K)
    copies = max(1, COLD_BYTES // nbytes) if cold else 1
    ws = []
    for _ in range(copies):
        b = ctx.buffer(nbytes)
        b.write(base)
        ws.append(b)
    X = ctx.buffer_from_array(rng.standard_normal((M, K)).astype(np.float16))
    Y = ctx.buffer(M * N * 2)
    state = {"i": 0}

    def run():
        w = ws[state["i"] % copies]
        state["i"] += 1
        ctx.gemv_quantized(X, w, Y, fmt, M, N, K)
    best, med = timed(run, max(reps, copies if cold else reps), warmup=min(copies, 3) if cold else 3)
    for b in ws:
        b.close()
    X.close()
    Y.close()
    return nbytes, best, med


def load_average():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, hot only")
    ap.add_argument("--write", action="store_true", help="write bench/results/gemv-quantized-cpu.md")
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated formats (default: all)")
    args = ap.parse_args()
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    reps = 5 if args.quick else 20
    rng = np.random.default_rng(0)
    load_before = load_average()
    with tc.Context("cpu") as ctx:
        info = ctx.device_info()
        threads = info.compute_units
        rows = []
        copy_hot = {}
        c1, c2 = copy_bandwidth(1 << 30, 5)
        print("copy 1 GiB: %.1f GB/s (1 thread), %.1f GB/s (2 threads)" % (c1, c2))
        for (N, K) in SHAPES:
            for fmt in formats:
                nbytes = tc.quantized_size(fmt, N, K)
                if nbytes not in copy_hot:
                    copy_hot[nbytes] = copy_bandwidth(nbytes, reps)
                h1, h2 = copy_hot[nbytes]
                for M in (1, 4):
                    for cold in ((False,) if args.quick else (False, True)):
                        ref = c2 if cold else h2
                        res = {}
                        for kernel in ("exact", "int8"):
                            if kernel == "exact":
                                os.environ["TC_CPU_ISA"] = "avx512"
                            else:
                                os.environ.pop("TC_CPU_ISA", None)
                            res[kernel] = bench(ctx, rng, fmt, N, K, M, cold, reps)
                        os.environ.pop("TC_CPU_ISA", None)
                        nb = res["int8"][0]
                        ex, i8, i8best = nb / res["exact"][2] / 1e9, nb / res["int8"][2] / 1e9, nb / res["int8"][1] / 1e9
                        rows.append((fmt, N, K, M, "cold" if cold else "hot", nb / 1e6, res["int8"][2] * 1e6, ex, i8,
                                     i8best, ref, i8 / ref))
                        print("%-5s %5dx%-5d M=%d %-4s %6.2f MB %8.1f us  exact %5.1f  int8 %5.1f (best %5.1f) GB/s"
                              "  2T copy %5.1f: %4.0f%%" % (rows[-1][:11] + (100 * i8 / ref,)))
    load_after = load_average()
    if args.write:
        write_results(rows, info, threads, c1, c2, load_before, load_after,
                      None if formats == FORMATS else formats)


def write_results(rows, info, threads, c1, c2, load_before, load_after, subset=None):
    out = REPO / "bench" / "results" / "gemv-quantized-cpu.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    loaded = max(load_before[0], load_after[0]) > threads * 0.75
    if subset:
        command = "`python bench/gemv_quantized.py --write --formats %s`" % ",".join(subset)
        title = "## Formats %s" % ", ".join(subset)
    else:
        command = "`python bench/gemv_quantized.py --write`"
        title = "# Quantized GEMV on the CPU"
    lines = [
        title,
        "",
        "%s, %s." % (command, datetime.date.today().isoformat()),
        "",
        "- Processor: %s (%s), %d threads (TC_NUM_THREADS), features %s" % (
            info.name, platform.machine(), threads, info.features),
        "- Load average (1 min) before / after: %.2f / %.2f%s" % (
            load_before[0], load_after[0], " -- **the machine was loaded; figures are pessimistic**" if loaded else ""),
        "- Y[M, N] = X[M, K] @ W[N, K]^T, X and Y f16, W in the format shown; shapes are N x K.",
        "- GB/s = weight bytes / median time (best: fastest call). *hot*: the same W every call (it can stay in "
        "the last-level cache); *cold*: a ring of W copies of %d MiB, so W comes from DRAM." % (COLD_BYTES >> 20),
        "- *exact*: dequantise in registers, f32 FMA (every format; f32 activations always). *int8*: the default "
        "for f16 activations on AVX512-VNNI: activations quantised to 8 bits per 32, integer dot products.",
        "- Copy = NumPy copy read bandwidth in the same run; 2T = two threads copying halves. Hot rows compare "
        "with a 2T copy of W's size, cold rows with a 2T copy of 1 GiB: %.1f GB/s (1 thread %.1f GB/s)." % (c2, c1),
        "",
        "| format | N x K | M | W | W MB | int8 time us | exact GB/s | int8 GB/s | int8 best GB/s | 2T copy GB/s "
        "| int8 / copy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fmt, N, K, M, mode, mb, us, ex, i8, best, ref, ratio in rows:
        lines.append("| %s | %dx%d | %d | %s | %.2f | %.0f | %.1f | %.1f | %.1f | %.1f | %.2f |" % (
            fmt, N, K, M, mode, mb, us, ex, i8, best, ref, ratio))
    text = "\n".join(lines) + "\n"
    if subset and out.exists():
        # Keep the rest of the file; this run's section replaces its earlier
        # self (up to the next section) or goes at the end.
        old = out.read_text()
        start = old.find(title + "\n")
        if start >= 0:
            end = old.find("\n## ", start + len(title))
            old = old[:start] + (old[end + 1:] if end >= 0 else "")
        text = old.rstrip("\n") + "\n\n" + text
    out.write_text(text)
    print("wrote", out)


if __name__ == "__main__":
    main()
