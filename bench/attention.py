#!/usr/bin/env python3
"""CPU attention throughput of tensorcore against a NumPy implementation of the same maths.

    python bench/attention.py [--heads 8] [--seq 1024] [--dims 64,128] [--reps 5] [--threads N] [--write]

Problems: B=1, H=8, Sq=Skv=1024, D in {64, 128}, causal and not, forward
and backward. Ours runs f32, f16 and bf16 (f32 sums); the peer is float32
NumPy in the same process: the two products of the forward (and the five of
the backward) go through np.matmul (OpenBLAS), the softmax through NumPy's
vectorised ufuncs, a causal mask is applied to the full score matrix
(np.where) as NumPy code would, and the backward recomputes P from the LSE
like ours.

FLOP convention: forward 4*B*H*Sq*Skv*D (QK^T and PV, 2 flops per
multiply-add), backward 2.5x that (five products), both halved for causal
(the half of the score matrix that is not masked). The same count divides
both implementations' times, so ratios are time ratios.

Targets: f32 forward and backward >= 1.20x NumPy f32; f16 and bf16 no slower
than our f32 (>= 0.95x, the run-to-run noise of a shared machine).

Each case: fresh random inputs, our results checked against NumPy's, then the
best of --reps timed calls after a warm-up (the machine is shared: the best
call is the one least disturbed), our three dtypes taking turns call by call.
Two OpenBLAS copies live in this process and an OpenBLAS worker spins after
each call, so NumPy and tensorcore are timed in separate phases with a pause
in between. --write puts the table, the
machine, the thread count and the load into bench/results/attention-cpu.md.
"""

import argparse
import datetime
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--dims", default="64,128")
    p.add_argument("--dtypes", default="f32,f16,bf16")
    p.add_argument("--reps", type=int, default=11, help="timed calls per point (the best counts)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=0,
                   help="threads for tensorcore and NumPy's OpenBLAS (set before loading them); 0 = default")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between phases (OpenBLAS spin-down)")
    p.add_argument("--write", action="store_true", help="write bench/results/attention-cpu.md")
    return p.parse_args()


ARGS = parse_args()
if ARGS.threads > 0:  # before NumPy and tensorcore start their thread pools
    os.environ["TC_NUM_THREADS"] = str(ARGS.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402

try:
    import tensorcore as tc  # noqa: E402
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import tensorcore as tc  # noqa: E402

TARGET_NUMPY, TARGET_HALF = 1.20, 0.95


# ---- NumPy: the same maths, materialised -------------------------------------------------------

def causal_mask(sq, skv):
    return np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq)


def numpy_forward(q, k, v, causal, mask):
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    s = np.matmul(q, np.swapaxes(k, -1, -2))
    s *= scale
    if causal:
        s = np.where(mask, s, np.float32(-np.inf))
    m = s.max(axis=-1, keepdims=True)
    s -= m
    np.exp(s, out=s)
    l = s.sum(axis=-1, keepdims=True)
    o = np.matmul(s, v)
    o /= l
    return o, (m + np.log(l))[..., 0]


def numpy_backward(q, k, v, o, do, lse, causal, mask):
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    p = np.matmul(q, np.swapaxes(k, -1, -2))
    p *= scale
    p -= lse[..., None]
    if causal:
        p = np.where(mask, p, np.float32(-np.inf))
    np.exp(p, out=p)
    dv = np.matmul(np.swapaxes(p, -1, -2), do)
    dp = np.matmul(do, np.swapaxes(v, -1, -2))
    dp -= (do * o).sum(axis=-1, keepdims=True)
    dp *= p
    dp *= scale  # dS
    dq = np.matmul(dp, k)
    dk = np.matmul(np.swapaxes(dp, -1, -2), q)
    return dq, dk, dv


# ---- timing -------------------------------------------------------------------------------------------

def loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def cpu_seconds():
    """(busy seconds of the whole machine, CPU seconds of this process): the
    difference over the run is what other processes took."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        busy = float("nan")
    t = os.times()
    return busy, t.user + t.system


def cast(x, dtype):
    return x.astype(tc.numpy_dtype(dtype))


def check(what, got, want, tol):
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
    scale = np.abs(want).max()
    if not err <= tol * scale:
        raise SystemExit("%s: tensorcore differs from NumPy by %g (scale %g)" % (what, err, scale))


def setup_ours(ctx, dtype, data, causal, np_out):
    """(forward, backward) callables of tensorcore in `dtype`, outputs checked against NumPy's."""
    q, k, v, do = (cast(x, dtype) for x in data)
    B, H, S, D = q.shape
    Q, K, V, dO = (ctx.buffer_from_array(x) for x in (q, k, v, do))
    O, dQ, dK, dV = (ctx.buffer(x.nbytes) for x in (q, q, k, k))
    LSE = ctx.buffer(B * H * S * 4)
    dims = dict(batch=B, heads=H, seq_q=S, seq_kv=S, head_dim=D, dtype=dtype, causal=causal)

    def fwd():
        ctx.attention_forward(Q, K, V, O, LSE=LSE, **dims)

    def bwd():
        ctx.attention_backward(Q, K, V, O, dO, LSE, dQ, dK, dV, **dims)

    fwd()
    bwd()
    tol = 1e-4 if dtype == "f32" else 3e-2
    ref_o, ref_lse, ref_dq, ref_dk, ref_dv = np_out
    check("%s O" % dtype, O.to_numpy(q.shape, q.dtype), ref_o, tol)
    check("%s LSE" % dtype, LSE.to_numpy(ref_lse.shape, np.float32), ref_lse, tol)
    for name, buf, ref in (("dQ", dQ, ref_dq), ("dK", dK, ref_dk), ("dV", dV, ref_dv)):
        check("%s %s" % (dtype, name), buf.to_numpy(q.shape, q.dtype), ref, tol * 2)
    return fwd, bwd


def best_times(fns, reps, warmup):
    """Best of `reps` calls of each function, the functions taking turns (so a
    burst of load on the shared machine hits them alike)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def bench_ours(ctx, dtypes, data, causal, np_out):
    """{dtype: (forward s, backward s)}."""
    calls = [setup_ours(ctx, dt, data, causal, np_out) for dt in dtypes]
    tf = best_times([f for f, _ in calls], ARGS.reps, ARGS.warmup)
    tb = best_times([b for _, b in calls], ARGS.reps, ARGS.warmup)
    return {dt: (tf[i], tb[i]) for i, dt in enumerate(dtypes)}


def bench_numpy(data, causal):
    q, k, v, do = data
    mask = causal_mask(q.shape[2], k.shape[2])
    o, lse = numpy_forward(q, k, v, causal, mask)
    grads = numpy_backward(q, k, v, o, do, lse, causal, mask)
    tf, = best_times([lambda: numpy_forward(q, k, v, causal, mask)], ARGS.reps, ARGS.warmup)
    tb, = best_times([lambda: numpy_backward(q, k, v, o, do, lse, causal, mask)], ARGS.reps, ARGS.warmup)
    return tf, tb, (o, lse) + grads


# ---- main -------------------------------------------------------------------------------------------

def main():
    dims = [int(d) for d in ARGS.dims.split(",")]
    dtypes = ARGS.dtypes.split(",")
    rng = np.random.default_rng()
    B, H, S = 1, ARGS.heads, ARGS.seq
    load_before = loadavg()
    busy0, own0, wall0 = *cpu_seconds(), time.perf_counter()
    ctx = tc.Context("cpu")
    info = ctx.device_info()

    results = []  # (D, causal, pass, dtype, seconds, numpy seconds)
    for D in dims:
        for causal in (False, True):
            data = [rng.standard_normal((B, H, S, D), dtype=np.float32) for _ in range(4)]
            time.sleep(ARGS.pause)
            tnf, tnb, np_out = bench_numpy(data, causal)
            time.sleep(ARGS.pause)
            ours = bench_ours(ctx, dtypes, data, causal, np_out)
            for dt in dtypes:
                results.append((D, causal, "forward", dt, ours[dt][0], tnf))
                results.append((D, causal, "backward", dt, ours[dt][1], tnb))
    load_after = loadavg()
    busy1, own1, wall1 = *cpu_seconds(), time.perf_counter()
    others = max(0.0, (busy1 - busy0) - (own1 - own0)) / ((wall1 - wall0) * os.cpu_count())
    ctx.close()

    ours_f32 = {(D, c, ps): t for D, c, ps, dt, t, _ in results if dt == "f32"}
    lines = ["| D | mask | pass | dtype | ours ms | ours GFLOP/s | NumPy f32 GFLOP/s | ours / NumPy f32 | "
             "ours / our f32 | target | result |",
             "|---:|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    verdicts = []
    for D, causal, ps, dt, t, tn in results:
        flops = 4.0 * B * H * S * S * D * (2.5 if ps == "backward" else 1.0) * (0.5 if causal else 1.0)
        g, gn = flops / t / 1e9, flops / tn / 1e9
        r_np = tn / t
        r_own = ours_f32[D, causal, ps] / t if (D, causal, ps) in ours_f32 else None
        if dt == "f32":
            ratio, goal, target = r_np, TARGET_NUMPY, ">= %.2fx NumPy f32" % TARGET_NUMPY
        else:
            ratio, goal, target = r_own, TARGET_HALF, ">= %.2fx our f32" % TARGET_HALF
        verdict = "n/a" if ratio is None else ("PASS" if ratio >= goal else "FAIL")
        verdicts.append(verdict)
        lines.append("| %d | %s | %s | %s | %.1f | %.1f | %.1f | %.2fx | %s | %s | %s |" % (
            D, "causal" if causal else "none", ps, dt, t * 1e3, g, gn, r_np,
            "n/a" if r_own is None else "%.2fx" % r_own, target, verdict))
    table = "\n".join(lines)

    loaded = others > 0.05
    features = str(info.features)
    isa = "avx512" if "avx512f" in features else "avx2" if "avx2" in features else "portable"
    meta = [
        "- date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "- CPU: %s (%d logical CPUs), features: %s" % (info.name, os.cpu_count(), features),
        "- threads: tensorcore %d, NumPy's OpenBLAS %s (NumPy's ufuncs: 1)" % (
            info.compute_units, os.environ.get("OPENBLAS_NUM_THREADS", "default")),
        "- tensorcore: %s, attention vector path: %s (TC_CPU_ISA=%s)" % (
            tc.version(), isa, os.environ.get("TC_CPU_ISA", "(unset)")),
        "- NumPy %s, Python %s" % (np.__version__, platform.python_version()),
        "- problem: B=%d, H=%d, Sq=Skv=%d, D in %s; FLOPs forward 4*B*H*Sq*Skv*D, backward 2.5x, "
        "halved for causal" % (B, H, S, dims),
        "- load: other processes used %.0f%% of the machine's CPU time during the run (1-min load average "
        "%.2f before, %.2f after)%s" % (100 * others, load_before, load_after,
                                        " -- the machine was loaded, numbers are low and noisy" if loaded
                                        else "; the machine was quiet"),
        "- method: best of %d calls after %d warm-up, our dtypes taking turns call by call, fresh random "
        "inputs, our outputs checked against NumPy's; NumPy and tensorcore timed in separate phases, %.1f s "
        "apart" % (ARGS.reps, ARGS.warmup, ARGS.pause),
    ]
    text = "\n".join(meta) + "\n\n" + table + "\n"
    print(text)
    if ARGS.write:
        path = os.path.join(HERE, "results", "attention-cpu.md")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("# CPU attention: tensorcore vs NumPy\n\nWritten by `python bench/attention.py --write`.\n\n"
                    + text)
        print("wrote", os.path.relpath(path))
    return 0 if "FAIL" not in verdicts else 1


if __name__ == "__main__":
    sys.exit(main())
