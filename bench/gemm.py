#!/usr/bin/env python3
"""CPU GEMM throughput of tensorcore against NumPy, with the targets.

    python bench/gemm.py [--sizes 1024,2048] [--reps 7] [--threads N] [--write]

Square row-major products, no transposes, alpha 1, beta 0. For each size:
fresh random inputs; our result is checked against a float64 (int64 for i8)
NumPy product on a sample of rows; then --reps rounds, each timing every
point (our four dtypes, NumPy f32, tensorcore's OpenBLAS called directly,
and -- where the build links a BLAS -- our own f32 kernels with
TC_CPU_BLAS=0, the row "f32-own") once, after a pause and --warmup untimed
calls; medians are reported. The f32 row is whatever sgemm the build has
(tc.version(): portable_cpu(openblas | scipy-openblas | own-sgemm)). NumPy runs the same dtype
(its f32 matmul is OpenBLAS from its own wheel; f16/i8 matmul are NumPy's
plain loops, timed once and only up to --numpy-slow-max; bf16 has no NumPy
matmul). Targets:
    f32        >= 0.95 x NumPy's f32 matmul
    f16, bf16  >= 0.70 x our own f32
    i8 -> i32  >= 2.00 x our own f32 (GOP/s)
--write puts the table, the machine, the thread count, the library versions,
the OpenBLAS cores and the load into bench/results/gemm-cpu.md.

Two OpenBLAS copies live in this process (NumPy's and the one tensorcore
links). An OpenBLAS worker spins for a while after each call, and on a
2-core machine that halves the speed of whatever runs next (the other copy,
or tensorcore's own thread pool); hence the pause before each timed point.
"""

import argparse
import ctypes
import datetime
import os
import platform
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NOTES_MARK = "<!-- notes: kept by --write -->"
TARGETS = {"f32": ("numpy_f32", 0.95), "f16": ("our_f32", 0.70), "bf16": ("our_f32", 0.70), "i8": ("our_f32", 2.00)}
OWN = "f32-own"  # our own f32 kernels in a build that links a BLAS (TC_CPU_BLAS=0); no target of its own


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1024,2048", help="comma-separated M=N=K")
    p.add_argument("--dtypes", default="f32,f16,bf16,i8")
    p.add_argument("--reps", type=int, default=7, help="timed calls per point (median)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed calls before each timed one (after a pause, short AMX calls on this VM need "
                        "a few milliseconds of work to get back to speed)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for tensorcore and both OpenBLAS copies (sets TC_NUM_THREADS and "
                        "OPENBLAS_NUM_THREADS before loading them); 0 = their default. With 1, points are timed "
                        "by process CPU time, which other work on a shared machine does not inflate")
    p.add_argument("--pause", type=float, default=0.3, help="seconds before each timed point (OpenBLAS spin-down)")
    p.add_argument("--numpy-slow-max", type=int, default=1024,
                   help="largest size at which NumPy's non-BLAS f16/i8 matmul is timed (it runs at ~1 GFLOP/s)")
    p.add_argument("--write", action="store_true", help="write bench/results/gemm-cpu.md")
    return p.parse_args()


ARGS = parse_args()
CLOCK = time.process_time if ARGS.threads == 1 else time.perf_counter
if ARGS.threads > 0:  # before NumPy and tensorcore load their thread pools
    os.environ["TC_NUM_THREADS"] = str(ARGS.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402

try:
    import ml_dtypes  # noqa: E402
except ImportError:
    ml_dtypes = None

try:
    import tensorcore as tc  # noqa: E402
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import tensorcore as tc  # noqa: E402


# ---- the environment ---------------------------------------------------------------------------------

def loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def mapped_libs(substr):
    """Paths of loaded shared objects whose name contains substr."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if substr in os.path.basename(path) and path not in out:
                out.append(path)
    return out


def openblas_info(path, prefixes):
    """(config, corename, threads) of an OpenBLAS library already loaded from path."""
    lib = ctypes.CDLL(path)
    res = []
    for fn, restype in (("get_config", ctypes.c_char_p), ("get_corename", ctypes.c_char_p),
                        ("get_num_threads", ctypes.c_int)):
        val = None
        for pre, suf in prefixes:
            f = getattr(lib, pre + fn + suf, None)
            if f is not None:
                f.restype = restype
                val = f()
                val = val.decode() if isinstance(val, bytes) else val
                break
        res.append(val)
    return res


def blas_report():
    """Both OpenBLAS copies: threadpoolctl where installed, else their own API through ctypes."""
    rows = []
    try:
        import threadpoolctl
        for info in threadpoolctl.threadpool_info():
            if info.get("internal_api") == "openblas":
                rows.append({"library": info.get("filepath"), "version": info.get("version"),
                             "core": info.get("architecture"), "threads": info.get("num_threads"),
                             "via": "threadpoolctl"})
    except ImportError:
        pass
    if not rows:
        prefixes = [("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "64_"), ("openblas_", "")]
        for path in mapped_libs("openblas"):
            cfg, core, threads = openblas_info(path, prefixes)
            if cfg is None and core is None:
                continue
            rows.append({"library": path, "version": cfg, "core": core, "threads": threads, "via": "ctypes"})
    for r in rows:
        r["owner"] = "numpy" if "numpy" in (r["library"] or "") else "tensorcore"
    return rows


def i8_path(features):
    """The kernel src/cpu/gemm_i8.cpp picks from the reported features."""
    f = set(features.split(","))
    for name in ("amx_int8", "avx512_vnni", "avx_vnni", "avx2"):
        if name in f:
            return name
    return "scalar"


def build_sgemm():
    """The f32 GEMM the library was built with: openblas, scipy-openblas or own-sgemm."""
    m = re.search(r"portable_cpu\(([^)]*)\)", tc.version())
    return m.group(1) if m else "unknown"


def half_path(features):
    return "amx_bf16 (f16: exact bf16 hi/lo split, 3 products)" if "amx_bf16" in features.split(",") \
        else "widen to f32 + %s sgemm" % build_sgemm()


def own_kernels(fn):
    """fn run with TC_CPU_BLAS=0 (read at every call): tensorcore's own f32 kernels, not the linked BLAS."""
    def run():
        os.environ["TC_CPU_BLAS"] = "0"
        try:
            fn()
        finally:
            del os.environ["TC_CPU_BLAS"]
    return run


# ---- timing -----------------------------------------------------------------------------------------------

def median_time(fn, reps, warmup):
    """Median seconds of fn() over reps calls after warmup calls (for NumPy's slow loops: reps 1)."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = CLOCK()
        fn()
        ts.append(CLOCK() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def round_robin(points):
    """Median seconds of each callable in `points` (name -> fn), timed in turns: each round calls every
    point once more, after a pause and --warmup untimed calls, so that all points see the same load over
    time and no library meets another's spinning OpenBLAS workers."""
    times = {k: [] for k in points}
    for _ in range(ARGS.reps):
        for k, fn in points.items():
            time.sleep(ARGS.pause)
            for _ in range(ARGS.warmup):
                fn()
            t0 = CLOCK()
            fn()
            times[k].append(CLOCK() - t0)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def inputs(dtype, n, rng):
    if dtype == "i8":
        return [rng.integers(-128, 128, size=(n, n), dtype=np.int8) for _ in range(2)]
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    if dtype == "f16":
        return a.astype(np.float16), b.astype(np.float16)
    if dtype == "bf16":
        if ml_dtypes is None:
            raise SystemExit("bf16 needs ml_dtypes")
        return a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    return a, b


def check(dtype, a, b, c, rng):
    """Compares 16 random rows of C with a float64 / int64 product."""
    rows = rng.choice(a.shape[0], size=min(16, a.shape[0]), replace=False)
    if dtype == "i8":
        ref = (a[rows].astype(np.int64) @ b.astype(np.int64))
        ref = ((ref + 2**31) % 2**32 - 2**31).astype(np.int32)
        if not np.array_equal(c[rows], ref):
            raise SystemExit("i8: tensorcore result differs from NumPy")
        return
    ref = a[rows].astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a[rows].astype(np.float64)) @ np.abs(b.astype(np.float64))
    tol = 1e-5 if dtype == "f32" else 1e-2
    err = np.abs(c[rows].astype(np.float64) - ref)
    if not np.all(err <= tol * bound + 1e-6):
        raise SystemExit("%s: tensorcore result off by up to %g (tolerance %g x |a||b|)" % (dtype, err.max(), tol))


def ours_point(ctx, dtype, n, a, b, rng, keep):
    """A call of tensorcore's gemm on buffers holding a and b, checked once against NumPy."""
    accum = "i32" if dtype == "i8" else "f32"
    out_dtype = np.int32 if dtype == "i8" else a.dtype
    A, B = ctx.buffer_from_array(a), ctx.buffer_from_array(b)
    C = ctx.buffer_from_array(np.zeros((n, n), dtype=out_dtype))
    keep.extend((A, B, C))

    def run():
        ctx.gemm(A, B, C, M=n, N=n, K=n, dtype=dtype, accum=accum)

    run()
    c = np.empty((n, n), dtype=out_dtype)
    C.read(c)
    check(dtype, a, b, c, rng)
    return run


def blas_direct_point(n, a, b):
    """cblas_sgemm of the system OpenBLAS tensorcore links, called directly: the library without tensorcore."""
    paths = [p for p in mapped_libs("openblas") if "numpy" not in p and "scipy_openblas" not in p]
    if not paths:
        return None
    f = ctypes.CDLL(paths[0]).cblas_sgemm
    f.restype = None
    f.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                       ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    c = np.empty((n, n), np.float32)

    def run(a=a, b=b, c=c):  # the defaults keep the arrays alive as long as the call
        f(101, 111, 111, n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n, 0.0, c.ctypes.data, n)

    return run


def numpy_slow(dtype, n, a, b):
    """Seconds of one NumPy f16 or i8 product (plain loops, no BLAS), or None where it is not timed."""
    if dtype not in ("f16", "i8") or n > ARGS.numpy_slow_max:
        return None
    if dtype == "i8":  # int8 @ int8 would wrap in int8: accumulate in int32 like ours
        a32, b32 = a.astype(np.int32), b.astype(np.int32)
        return median_time(lambda: a32 @ b32, 1, 0)
    return median_time(lambda: a @ b, 1, 0)


# ---- main -----------------------------------------------------------------------------------------------

def main():
    sizes = [int(s) for s in ARGS.sizes.split(",")]
    dtypes = ARGS.dtypes.split(",")
    rng = np.random.default_rng()
    load_before = loadavg()
    ctx = tc.Context("cpu")
    info = ctx.device_info()
    features = info.features.decode() if isinstance(info.features, bytes) else str(info.features)
    name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)

    ours, theirs, direct = {}, {}, {}
    rows_of = list(dtypes)
    if "f32" in dtypes and build_sgemm() != "own-sgemm":
        rows_of.insert(dtypes.index("f32") + 1, OWN)
    for n in sizes:
        data = {dt: inputs(dt, n, rng) for dt in dtypes}
        keep = []
        points = {("ours", dt): ours_point(ctx, dt, n, *data[dt], rng, keep) for dt in dtypes}
        if OWN in rows_of:  # checked once like the others, on its own kernels
            os.environ["TC_CPU_BLAS"] = "0"
            try:
                points["ours", OWN] = own_kernels(ours_point(ctx, "f32", n, *data["f32"], rng, keep))
            finally:
                del os.environ["TC_CPU_BLAS"]
        if "f32" in dtypes:
            a, b = data["f32"]
            c = np.empty((n, n), np.float32)
            points["numpy", "f32"] = lambda a=a, b=b, c=c: np.matmul(a, b, out=c)
            blas = blas_direct_point(n, a, b)
            if blas:
                points["direct", "f32"] = blas
        t = round_robin(points)
        for dt in rows_of:
            ours[dt, n] = t["ours", dt]
            theirs[dt, n] = t.get(("numpy", "f32" if dt == OWN else dt)) or \
                (numpy_slow(dt, n, *data[dt]) if dt in data else None)
        direct[n] = t.get(("direct", "f32"))
        for buf in keep:
            buf.close()
    load_after = loadavg()
    ctx.close()

    rows = []
    for dt in rows_of:
        for n in sizes:
            ops = 2.0 * n ** 3
            g = ops / ours[dt, n] / 1e9
            gn = ops / theirs[dt, n] / 1e9 if theirs.get((dt, n)) else None
            gf = 2.0 * n ** 3 / ours["f32", n] / 1e9 if ("f32", n) in ours else None
            gnf = 2.0 * n ** 3 / theirs["f32", n] / 1e9 if theirs.get(("f32", n)) else None
            r_np = g / gnf if gnf else None
            r_own = g / gf if gf else None
            ref, goal = TARGETS.get(dt, (None, None))
            ratio = r_np if ref == "numpy_f32" else r_own
            verdict = "n/a" if ratio is None or goal is None else ("PASS" if ratio >= goal else "FAIL")
            target = "-" if goal is None else ">= %.2fx %s" % (goal, "NumPy f32" if ref == "numpy_f32" else "our f32")
            rows.append((dt, "%dx%dx%d" % (n, n, n), g, gn, r_np, r_own, target, verdict))

    unit = lambda dt: "GOP/s" if dt == "i8" else "GFLOP/s"  # noqa: E731
    fmt = lambda v, spec: "n/a" if v is None else spec % v  # noqa: E731
    header = "| dtype | M x N x K | ours | NumPy (same dtype) | ours / NumPy f32 | ours / our f32 | target | result |"
    lines = [header, "|---|---|---:|---:|---:|---:|---|---|"]
    for dt, shape, g, gn, r_np, r_own, target, verdict in rows:
        lines.append("| %s | %s | %.1f %s | %s | %s | %s | %s | %s |" % (
            dt, shape, g, unit(dt), fmt(gn, "%.2f " + unit(dt)), fmt(r_np, "%.2fx"), fmt(r_own, "%.2fx"),
            target, verdict))
    table = "\n".join(lines)

    blas = blas_report()
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                                          "OMP_NUM_THREADS", "TC_NUM_THREADS", "TC_CPU_ISA")}
    loaded = max(load_before, load_after) > 0.5
    meta = [
        "- date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "- CPU: %s (%d logical CPUs), features: %s" % (name, os.cpu_count(), features),
        "- threads: tensorcore %d; OpenBLAS: %s" % (
            info.compute_units, ", ".join("%s %s" % (b["owner"], b["threads"]) for b in blas)),
        "- tensorcore: %s (%s); f32: %s; i8 kernel: %s; f16/bf16 kernel: %s" % (
            tc.version(), tc.library_path,
            "own kernels (no BLAS in the build)" if build_sgemm() == "own-sgemm" else
            "%s (row f32-own: our own kernels, TC_CPU_BLAS=0)" % build_sgemm(),
            i8_path(features), half_path(features)),
        "- NumPy %s, Python %s" % (np.__version__, platform.python_version()),
    ]
    for b in blas:
        meta.append("- OpenBLAS of %s: %s (core %s, via %s, %s)" % (b["owner"], b["version"], b["core"], b["via"],
                                                                      b["library"]))
    if any(direct.values()):
        meta.append("- f32 through tensorcore's OpenBLAS called directly (cblas_sgemm by ctypes): " + ", ".join(
            "%d^3 %.1f GFLOP/s" % (n, 2.0 * n ** 3 / t / 1e9) for n, t in sorted(direct.items()) if t))
    meta.append("- environment: " + ", ".join("%s=%s" % (k, v if v is not None else "(unset)")
                                               for k, v in env.items()))
    meta.append("- load average (1 min): %.2f before, %.2f after%s" % (
        load_before, load_after, " -- the machine was loaded, numbers are low and noisy" if loaded else ""))
    meta.append("- method: fresh random inputs, results checked against NumPy on 16 rows; median of %d rounds, "
                "each round timing every point once after a %.1f s pause and %d untimed calls (points interleaved, "
                "so drifting load hits all alike); %s" % (
                    ARGS.reps, ARGS.pause, ARGS.warmup,
                    "timed by process CPU time (one thread everywhere)" if CLOCK is time.process_time
                    else "wall-clock"))
    text = "\n".join(meta) + "\n\n" + table + "\n"
    print(text)
    if ARGS.write:
        path = os.path.join(HERE, "results", "gemm-cpu.md")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        notes = ""  # what follows NOTES_MARK in the file is written by hand and kept
        if os.path.exists(path):
            with open(path) as f:
                old = f.read()
            if NOTES_MARK in old:
                notes = old[old.index(NOTES_MARK):]
        with open(path, "w") as f:
            f.write("# CPU GEMM: tensorcore vs NumPy\n\nWritten by `python bench/gemm.py --write`; the notes "
                    "after the marker below are kept.\n\n" + text + ("\n" + notes if notes else ""))
        print("wrote", os.path.relpath(path))
    return 0 if all(r[-1] != "FAIL" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
