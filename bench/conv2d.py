#!/usr/bin/env python3
"""Conv2D on the CPU: tensorcore against the same im2col + matmul in NumPy.

Both run in this process on the same inputs (NCHW, OIHW, f32 unless --dtype
says otherwise); GFLOP/s counts 2 * N * K * C*kH*kW * out_H*out_W for each of
forward, backward_input and backward_weight. The NumPy peer builds the column
matrix with sliding_window_view + one copy, multiplies with np.matmul /
np.tensordot (NumPy's BLAS), and does col2im with kH*kW strided adds.

To show what bounds tensorcore's figure, the script also times the GEMMs of
its forward alone (tc.gemm_batched of the per-image products on columns
already built: the ceiling of im2col + GEMM with the same sgemm -- the
build's BLAS or our own kernels, as tc.version() says), and the same sgemm
on a square-ish product over the same columns (what the GEMM could
reach with more filters).

    python bench/conv2d.py                 # ResNet-like 8x64x56x56, 3x3, 64 filters
    python bench/conv2d.py --write         # also write bench/results/conv2d-cpu.md
    python bench/conv2d.py --threads 1     # one thread everywhere, timed by CPU time (for a shared machine)
    python bench/conv2d.py --threads 1 --append   # add that run to the results file
    python bench/conv2d.py --dtype f16 --batch 4 --size 28 --channels 128 --filters 128
"""

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
np = tc = None  # imported by main() after --threads has set the thread counts


def import_libraries():
    global np, tc
    import numpy
    if (ROOT / "python" / "tensorcore" / "__init__.py").exists():
        sys.path.insert(0, str(ROOT / "python"))
    import tensorcore
    np, tc = numpy, tensorcore


CPU_CLOCK = False  # set by main(): with one thread, time by process CPU time


def best_time(fn, reps, warmup=1):
    """(best, median) seconds of `fn` over `reps` runs: wall-clock, or process
    CPU time when everything runs on one thread (then time spent waiting for
    a core on a shared machine is not counted)."""
    clock = time.process_time if CPU_CLOCK else time.perf_counter
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times), float(np.median(times))


# ---- the NumPy peer (f32 im2col + matmul) -------------------------------------------

def np_im2col(x, kH, kW, ph, pw, sh, sw, OH, OW):
    """[N, C*kH*kW, OH*OW] column matrices (one copy of the strided windows)."""
    N, C = x.shape[:2]
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    v = np.lib.stride_tricks.sliding_window_view(xp, (kH, kW), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :OH, :OW]
    return np.ascontiguousarray(v.transpose(0, 1, 4, 5, 2, 3)).reshape(N, C * kH * kW, OH * OW)


def np_forward(x, w, b, geom):
    N, C, K, H, W, kH, kW, ph, pw, sh, sw, OH, OW = geom
    col = np_im2col(x, kH, kW, ph, pw, sh, sw, OH, OW)
    y = np.matmul(w.reshape(K, -1), col)
    if b is not None:
        y += b[None, :, None]
    return y.reshape(N, K, OH, OW)


def np_backward_input(dy, w, geom):
    N, C, K, H, W, kH, kW, ph, pw, sh, sw, OH, OW = geom
    dcol = np.matmul(w.reshape(K, -1).T, dy.reshape(N, K, OH * OW)).reshape(N, C, kH, kW, OH, OW)
    dxp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=dy.dtype)
    for i in range(kH):
        for j in range(kW):
            dxp[:, :, i:i + sh * (OH - 1) + 1:sh, j:j + sw * (OW - 1) + 1:sw] += dcol[:, :, i, j]
    return dxp[:, :, ph:ph + H, pw:pw + W]


def np_backward_weight(x, dy, geom):
    N, C, K, H, W, kH, kW, ph, pw, sh, sw, OH, OW = geom
    col = np_im2col(x, kH, kW, ph, pw, sh, sw, OH, OW)
    return np.tensordot(dy.reshape(N, K, OH * OW), col, axes=([0, 2], [0, 2])).reshape(K, C, kH, kW)


# ---- the benchmark ----------------------------------------------------------------

def run(args):
    N, C, K, H, W = args.batch, args.channels, args.filters, args.size, args.size
    kH = kW = args.kernel
    ph = pw = args.pad
    sh = sw = args.stride
    OH, OW = tc.conv2d_output_shape(H, W, kH, kW, ph, pw, sh, sw)
    geom = (N, C, K, H, W, kH, kW, ph, pw, sh, sw, OH, OW)
    CKK, P = C * kH * kW, OH * OW
    flops = 2.0 * N * K * CKK * P
    rng = np.random.default_rng(0)
    rows = []
    load = os.getloadavg()[0]
    with tc.Context("cpu") as ctx:
        info = ctx.device_info()
        col = ctx.buffer(tc.conv2d_scratch_bytes(N, C, H, W, kH, kW, ph, pw, sh, sw))
        dx32 = ctx.buffer(tc.conv2d_backward_input_scratch_bytes(N, C, H, W))
        for dtype in args.dtype.split(","):
            npd = {"f32": np.float32, "f16": np.float16}[dtype]
            x = rng.standard_normal((N, C, H, W)).astype(npd)
            w = (rng.standard_normal((K, C, kH, kW)) / np.sqrt(CKK)).astype(npd)
            b = rng.standard_normal(K).astype(npd)
            dy = rng.standard_normal((N, K, OH, OW)).astype(npd)
            X, Wt, B, dY = (ctx.buffer_from_array(a) for a in (x, w, b, dy))
            Y, dX, dW = ctx.buffer(N * K * P * x.itemsize), ctx.buffer(x.nbytes), ctx.buffer(w.nbytes)
            kw = dict(batch=N, in_channels=C, out_channels=K, H=H, W_in=W, kH=kH, kW=kW, pad_h=ph, pad_w=pw,
                      stride_h=sh, stride_w=sw, dtype=dtype)
            x32, w32, b32, dy32 = (a.astype(np.float32) for a in (x, w, b, dy))
            ops = [
                ("forward", lambda: ctx.conv2d_forward(X, Wt, B, Y, col, **kw),
                 lambda: np_forward(x32, w32, b32, geom), Y, (N, K, OH, OW)),
                ("backward_input", lambda: ctx.conv2d_backward_input(dY, Wt, dX, col, dx32, **kw),
                 lambda: np_backward_input(dy32, w32, geom), dX, (N, C, H, W)),
                ("backward_weight", lambda: ctx.conv2d_backward_weight(X, dY, dW, col, **kw),
                 lambda: np_backward_weight(x32, dy32, geom), dW, (K, C, kH, kW)),
            ]
            for name, ours, peer, out, shape in ops:
                ours()
                want = peer()
                got = out.to_numpy(shape, npd).astype(np.float64)
                err = np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30)
                limit = 1e-4 if dtype == "f32" else 2e-2
                if not err <= limit:
                    raise SystemExit("%s %s disagrees with NumPy: max relative error %.3g" % (name, dtype, err))
                t_ours, m_ours = best_time(ours, args.reps)
                t_np, m_np = best_time(peer, args.reps)
                rows.append((name, dtype, t_ours, m_ours, t_np, m_np, err))
        # What bounds the forward: its GEMMs alone (tc.gemm_batched, f32, one
        # [K x CKK] @ [CKK x P] per image on distinct columns, A repeated since
        # strided batches are packed), and the same sgemm's rate on the same columns
        # with as many rows as the columns have (a square-ish GEMM).
        A = ctx.buffer_from_array(np.ascontiguousarray(np.broadcast_to(rng.standard_normal((K, CKK)), (N, K, CKK)),
                                                         dtype=np.float32))
        Bm = ctx.buffer_from_array(rng.standard_normal((N, CKK, P)).astype(np.float32))
        Cm = ctx.buffer(N * max(K, CKK) * P * 4)
        t_gemm, _ = best_time(lambda: ctx.gemm_batched(A, Bm, Cm, N, K, P, CKK, dtype="f32"), args.reps)
        Asq = ctx.buffer_from_array(rng.standard_normal((CKK, CKK)).astype(np.float32))
        t_sq, _ = best_time(lambda: ctx.gemm(Asq, Bm, Cm, CKK, P, CKK, dtype="f32"), args.reps)
    return dict(geom=geom, flops=flops, rows=rows, gemm=t_gemm, square=2.0 * CKK * CKK * P / t_sq, info=info,
                col_bytes=N * CKK * P * 4, load=load)


def report(args, res):
    N, C, K, H, W, kH, kW, ph, pw, sh, sw, OH, OW = res["geom"]
    flops, info = res["flops"], res["info"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "# conv2d on the CPU: tensorcore vs NumPy im2col + matmul",
        "",
        "- date: %s" % datetime.date.today().isoformat(),
        "- CPU: %s (%d logical CPUs; features %s)" % (info.name, os.cpu_count(), info.features),
        "- threads: tensorcore pool %d, OpenBLAS (ours and NumPy's) OPENBLAS_NUM_THREADS=%s; load average "
        "%.1f when the run started (the machine is shared)" % (
            info.compute_units, os.environ.get("OPENBLAS_NUM_THREADS", "unset (all CPUs)"), res["load"]),
        "- NumPy %s, Python %s, %s" % (np.__version__, platform.python_version(), tc.version()),
        "- shape: X [%d, %d, %d, %d], W [%d, %d, %d, %d], pad %d, stride %d -> Y [%d, %d, %d, %d]; "
        "%.2f GFLOP per pass" % (N, C, H, W, K, C, kH, kW, ph, sh, N, K, OH, OW, flops / 1e9),
        "- command: `python bench/conv2d.py %s`; times are the best of %d runs (median in brackets), %s" % (
            " ".join(sys.argv[1:]), args.reps,
            "process CPU time (one thread everywhere)" if CPU_CLOCK else "wall-clock"),
        "",
        "| pass | dtype | tensorcore ms | tensorcore GFLOP/s | NumPy f32 ms | NumPy GFLOP/s | tensorcore / NumPy |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, dtype, t, m, tn, mn, err in res["rows"]:
        lines.append("| %s | %s | %.2f (%.2f) | %.1f | %.2f (%.2f) | %.1f | %.2fx |" % (
            name, dtype, t * 1e3, m * 1e3, flops / t / 1e9, tn * 1e3, mn * 1e3, flops / tn / 1e9, tn / t))
    t_gemm, col_mb = res["gemm"], res["col_bytes"] / 1e6
    CKK, P = C * kH * kW, OH * OW
    sgemm = "our own f32 kernels" if "own-sgemm" in tc.version() else "the same BLAS"
    lines += [
        "",
        "What bounds it (f32 forward; the backward passes are built the same way):",
        "",
        "- its GEMMs alone (tc.gemm_batched, %d x [%d x %d] @ [%d x %d] on columns already built, %s): "
        "%.2f ms = %.1f GFLOP/s" % (N, K, CKK, CKK, P, sgemm, t_gemm * 1e3, flops / t_gemm / 1e9),
    ]
    fwd = [r for r in res["rows"] if r[0] == "forward" and r[1] == "f32"]
    if fwd:
        t_f = fwd[0][2]
        if t_f >= t_gemm:
            lines.append("- so the forward runs at %.0f%% of its GEMMs' rate; the other %.2f ms are im2col writing "
                         "the %.1f MB column matrix (and the bias)" % (100 * t_gemm / t_f, (t_f - t_gemm) * 1e3,
                                                                      col_mb))
        else:  # cannot happen on a quiet machine
            lines.append("- the forward measured faster than its GEMMs alone: these timings are too noisy to "
                         "split (a busy machine; try --threads 1, timed by CPU time)")
    lines.append("- the GEMMs themselves are short: %d filters against %d-long columns. The same sgemm reaches %.1f "
                 "GFLOP/s on the same columns with %d rows ([%d x %d] @ [%d x %d]); with %d rows the GEMM copies (packs) "
                 "every column element for only %d flops, so memory traffic weighs as much as arithmetic. Layers with "
                 "more filters move towards the square-GEMM rate" % (
                     K, CKK, res["square"] / 1e9, CKK, CKK, CKK, CKK, P, K, 2 * K))
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--filters", type=int, default=64)
    p.add_argument("--size", type=int, default=56)
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--pad", type=int, default=1)
    p.add_argument("--stride", type=int, default=1)
    p.add_argument("--dtype", default="f32,f16", help="comma-separated: f32, f16")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--threads", type=int, help="threads for tensorcore and both OpenBLAS (default: all CPUs)")
    p.add_argument("--write", action="store_true", help="write bench/results/conv2d-cpu.md")
    p.add_argument("--append", action="store_true", help="add this run to bench/results/conv2d-cpu.md")
    args = p.parse_args()
    global CPU_CLOCK
    if args.threads:
        os.environ["TC_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
        CPU_CLOCK = args.threads == 1
    import_libraries()
    text = report(args, run(args))
    print(text)
    out = ROOT / "bench" / "results" / "conv2d-cpu.md"
    if args.write or args.append:
        out.parent.mkdir(parents=True, exist_ok=True)
        if args.append and out.exists():
            text = out.read_text() + "\n" + text.replace("# conv2d on the CPU:", "## another run:", 1)
        out.write_text(text)
        print("wrote", out)


if __name__ == "__main__":
    main()
