"""Allreduce bus bandwidth of tensorcore's collectives, next to a peer.

CPU: N ranks (default 4) over loopback gloo, f32 sum, 4 KB .. 256 MB, next to
the same collective through torch.distributed (gloo) when PyTorch is
installed, else next to this machine's memcpy bandwidth (one process copying
the same bytes), the ceiling that every loopback byte goes through.

GPU (run on a machine with two or more GPUs; skipped cleanly elsewhere): NCCL
allreduce through tensorcore next to PyTorch's NCCL on the same buffers
(tensorcore wraps PyTorch's device memory with buffer_from_ptr). Target:
tensorcore >= 0.95x PyTorch.

Device buffers over gloo (a GPU machine with gloo built; skipped cleanly
elsewhere): N ranks (default 2, all on cuda:0, or one GPU each when there are
enough) allreduce a CUDA buffer of 4..64 MB through gloo, which tensorcore
stages through page-locked host memory in 4 MiB chunks, the copies of one
chunk overlapping the collective of the previous one. Side by side: the same
bytes done by hand (device -> host copy, allreduce of a host buffer, host ->
device copy, each waited for), and torch.distributed's gloo on CUDA tensors
when PyTorch is installed. Results go to bench/results/dist-gloo-device.md.

    bus bandwidth = bytes * 2 (n - 1) / n / time     (NCCL's definition)

Time per size: the median of several allreduces after warm-up, the slowest
rank's. Results go to bench/results/dist-cpu.md (and dist-gpu.md).

    python bench/dist_allreduce.py [--ranks 4] [--max-mb 256] [--gpu-only|--cpu-only|--device-only]
"""

import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sizes(max_mb):
    out, b = [], 4096
    while b <= max_mb * (1 << 20):
        out.append(b)
        b *= 4
    return out


def iterations(nbytes):
    # At least 20 samples a size: single allreduces of 4-64 MB vary by 10-20%
    # from one call to the next on a shared host.
    return max(20, min(50, int(64 * (1 << 20) // max(nbytes, 1))))


def busbw(nbytes, seconds, n):
    return nbytes * 2 * (n - 1) / n / seconds / 1e9


# ---- one rank (a subprocess) ----------------------------------------------------

def rank_main(args):
    rank, world, url, which, max_mb = args.rank, args.world, args.url, args.which, args.max_mb
    times = {}
    if which == "tc-gloo":
        import tensorcore as tc
        with tc.Context("cpu") as ctx, ctx.dist("gloo", world, rank, url, timeout=600) as d:
            for nbytes in sizes(max_mb):
                n = nbytes // 4
                buf = ctx.buffer_from_array(np.ones(n, np.float32))
                its = iterations(nbytes)
                for _ in range(2):
                    d.allreduce(buf, n)
                t = []
                for _ in range(its):
                    d.barrier()
                    t0 = time.perf_counter()
                    d.allreduce(buf, n)
                    t.append(time.perf_counter() - t0)
                times[nbytes] = float(np.median(t))
                buf.close()
    elif which == "torch-gloo":
        import torch
        import torch.distributed as td
        td.init_process_group("gloo", init_method=url.replace("gloo+tcp", "tcp"), world_size=world, rank=rank)
        for nbytes in sizes(max_mb):
            x = torch.ones(nbytes // 4, dtype=torch.float32)
            for _ in range(2):
                td.all_reduce(x)
            t = []
            for _ in range(iterations(nbytes)):
                td.barrier()
                t0 = time.perf_counter()
                td.all_reduce(x)
                t.append(time.perf_counter() - t0)
            times[nbytes] = float(np.median(t))
        td.destroy_process_group()
    elif which == "gpu":
        import torch
        import torch.distributed as td
        import tensorcore as tc
        torch.cuda.set_device(rank)
        td.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % args.torch_port, world_size=world,
                              rank=rank)
        ctx = tc.Context("cuda:%d" % rank)
        d = ctx.dist("nccl", world, rank, url, timeout=600)
        times = {"tc": {}, "torch": {}}
        # Correctness first: every dtype and op on the same memory PyTorch sees.
        for dt, tdt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
            for op, expect in (("sum", world * (world + 1) / 2), ("avg", (world + 1) / 2), ("max", world),
                               ("min", 1)):
                x = torch.full((1 << 20,), float(rank + 1), dtype=tdt, device="cuda")
                buf = tc.buffer_from_ptr(ctx, x.data_ptr(), x.numel() * x.element_size())
                d.allreduce(buf, x.numel(), dtype=dt, op=op)
                torch.cuda.synchronize()
                if not bool(torch.all(x.float() == expect)):
                    raise SystemExit("NCCL allreduce %s %s wrong: %s" % (dt, op, x[:4]))
                buf.close()
        y = torch.full((world * 1000,), float(rank), device="cuda")
        z = torch.zeros(1000, device="cuda")
        d.reduce_scatter(tc.buffer_from_ptr(ctx, y.data_ptr(), y.numel() * 4),
                         tc.buffer_from_ptr(ctx, z.data_ptr(), 4000), 1000)
        torch.cuda.synchronize()
        if not bool(torch.all(z == world * (world - 1) / 2)):
            raise SystemExit("NCCL reduce_scatter wrong")
        d.barrier()
        for nbytes in sizes(max_mb):
            x = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
            buf = tc.buffer_from_ptr(ctx, x.data_ptr(), nbytes)  # the same memory for both
            its = iterations(nbytes) * 2
            for name in ("tc", "torch", "tc", "torch"):  # interleaved, the second pass counts
                fn = (lambda: d.allreduce(buf, nbytes // 4)) if name == "tc" else (lambda: td.all_reduce(x))
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                t = []
                for _ in range(its):
                    td.barrier()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    fn()
                    torch.cuda.synchronize()
                    t.append(time.perf_counter() - t0)
                times[name][nbytes] = float(np.median(t))
            buf.close()
        d.close()
        ctx.close()
        td.destroy_process_group()
    elif which == "gloo-device":
        times = device_rank(rank, world, url, args.url2, max_mb)
    elif which == "torch-gloo-cuda":
        import torch
        import torch.distributed as td
        torch.cuda.set_device(rank % torch.cuda.device_count())
        td.init_process_group("gloo", init_method=url.replace("gloo+tcp", "tcp"), world_size=world, rank=rank)
        for nbytes in device_sizes(max_mb):
            x = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
            for _ in range(2):
                td.all_reduce(x)
            t = []
            for _ in range(iterations(nbytes)):
                td.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                td.all_reduce(x)
                torch.cuda.synchronize()
                t.append(time.perf_counter() - t0)
            times[nbytes] = float(np.median(t))
        td.destroy_process_group()
    print("TIMES " + json.dumps(times), flush=True)


def device_sizes(max_mb):
    return [b for b in (4 << 20, 16 << 20, 64 << 20) if b <= max(max_mb, 4) * (1 << 20)]


def device_rank(rank, world, url, url2, max_mb):
    """gloo allreduce of a CUDA buffer (staged by tensorcore) and, on a CPU
    context's group, the same bytes copied to the host, allreduced there and
    copied back by hand. Checks the staged result against NumPy first."""
    import ctypes
    import tensorcore as tc
    gpus = tc.cuda_device_count()
    times = {"staged": {}, "by_hand": {}}
    with tc.Context("cuda:%d" % (rank % gpus)) as gctx, tc.Context("cpu") as cctx, \
            gctx.dist("gloo", world, rank, url, timeout=600) as dg, cctx.dist("gloo", world, rank, url2, timeout=600) as dc:
        n = (4 << 20) // 4 * 3 + 5  # three chunks and a bit
        x = np.random.default_rng([3, rank]).standard_normal(n).astype(np.float32)
        ref = sum(np.random.default_rng([3, r]).standard_normal(n).astype(np.float64) for r in range(world))
        b = gctx.buffer_from_array(x)
        dg.allreduce(b, n)
        if not np.allclose(b.to_numpy((n,), np.float32), ref, rtol=1e-5, atol=1e-5 * world):
            raise SystemExit("staged gloo allreduce of a CUDA buffer is wrong")
        b.close()
        for nbytes in device_sizes(max_mb):
            n = nbytes // 4
            dev = gctx.buffer_from_array(np.ones(n, np.float32))
            host = cctx.buffer(nbytes)
            view = np.ctypeslib.as_array((ctypes.c_float * n).from_address(host.map()))

            def by_hand():
                dev.read(view)
                dc.allreduce(host, n)
                dev.write(view)

            for name, fn in (("staged", lambda: dg.allreduce(dev, n)), ("by_hand", by_hand)) * 2:
                for _ in range(2):
                    fn()
                t = []
                for _ in range(iterations(nbytes)):
                    dc.barrier()
                    t0 = time.perf_counter()
                    fn()
                    t.append(time.perf_counter() - t0)
                times[name][nbytes] = float(np.median(t))  # the second pass counts
            dev.close()
            host.close()
    return times


def device_bench(world, max_mb):
    """The device-buffer case; a reason string when it cannot run here."""
    import tensorcore as tc
    if tc.cuda_device_count() < 1:
        return "skipped: no CUDA device"
    with tc.Context("cuda:0") as ctx:
        if not tc.capability_available(ctx.runtime_capabilities(), tc.TC_CAPABILITY_DIST_GLOO):
            return "skipped: this tensorcore build has no gloo backend"
    res = run_ranks("gloo-device", world, max_mb, ["--url2", "gloo+tcp://127.0.0.1:%d" % free_port()])
    try:
        import torch.distributed  # noqa: F401
        torch_res = run_ranks("torch-gloo-cuda", world, max_mb)
    except ImportError:
        torch_res = None
    lines = ["# gloo allreduce of CUDA buffers", "",
             "Date: %s. Machine: %s, %d CUDA device(s)." % (datetime.date.today().isoformat(), machine(),
                                                            tc.cuda_device_count()),
             "%d ranks over loopback gloo, f32 sum; `staged`: tensorcore's allreduce of the CUDA buffer (4 MiB chunks "
             "through page-locked memory, copies overlapping the collective); `by hand`: device -> host copy, "
             "allreduce of a CPU context's buffer, host -> device copy. Time = median, slowest rank." % world, "",
             "| size | staged us | staged busbw GB/s | by hand us | by hand busbw GB/s | staged time / by hand (target <= 1.25) |%s" % (
                 " torch gloo (CUDA tensors) busbw GB/s |" if torch_res else ""),
             "|---|---|---|---|---|---|%s" % ("---|" if torch_res else "")]
    for nbytes in device_sizes(max_mb):
        ts = max(r["staged"][str(nbytes)] for r in res)
        th = max(r["by_hand"][str(nbytes)] for r in res)
        line = "| %s | %.0f | %.3f | %.0f | %.3f | %.2fx |" % (fmt_bytes(nbytes), ts * 1e6, busbw(nbytes, ts, world),
                                                              th * 1e6, busbw(nbytes, th, world), ts / th)
        if torch_res:
            tp = max(r[str(nbytes)] for r in torch_res)
            line += " %.3f |" % busbw(nbytes, tp, world)
        lines.append(line)
    out = REPO / "bench" / "results" / "dist-gloo-device.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return "written to %s" % out


def run_ranks(which, world, max_mb, extra=()):
    url = "gloo+tcp://127.0.0.1:%d" % free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TC_NUM_THREADS", "1")  # the collective needs no kernel threads; leave the cores to gloo
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world", str(world), "--url", url,
                               "--which", which, "--max-mb", str(max_mb)] + list(extra),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for r in range(world)]
    results = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError("%s rank failed:\n%s" % (which, out))
        results.append(json.loads([l for l in out.splitlines() if l.startswith("TIMES ")][0][6:]))
    return results


def memcpy_gbps(nbytes):
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    t = []
    for _ in range(max(3, iterations(nbytes))):
        t0 = time.perf_counter()
        np.copyto(b, a)
        t.append(time.perf_counter() - t0)
    return nbytes / float(np.median(t)) / 1e9


def machine():
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "%s, %d cores visible, %s" % (cpu, os.cpu_count(), platform.platform())


def cpu_bench(world, max_mb):
    tc_res = run_ranks("tc-gloo", world, max_mb)
    try:
        import torch.distributed  # noqa: F401
        peer = "torch.distributed (gloo)"
        torch_res = run_ranks("torch-gloo", world, max_mb)
    except ImportError:
        peer, torch_res = None, None
    rows = []
    for nbytes in sizes(max_mb):
        t = max(r[str(nbytes)] for r in tc_res)
        row = {"bytes": nbytes, "tc_us": t * 1e6, "tc_busbw": busbw(nbytes, t, world)}
        if torch_res:
            tp = max(r[str(nbytes)] for r in torch_res)
            row.update(peer_us=tp * 1e6, peer_busbw=busbw(nbytes, tp, world))
        else:
            row.update(memcpy=memcpy_gbps(nbytes))
        rows.append(row)
    return peer, rows


def fmt_bytes(b):
    return "%d KB" % (b >> 10) if b < (1 << 20) else "%d MB" % (b >> 20)


def write_cpu(world, peer, rows, path):
    lines = ["# Distributed allreduce on the CPU (loopback gloo)", "",
             "Date: %s. Machine: %s." % (datetime.date.today().isoformat(), machine()),
             "%d ranks (processes) on one host over loopback TCP, f32 sum, `bench/dist_allreduce.py`." % world,
             "Bus bandwidth = bytes x 2(n-1)/n / time (NCCL's definition); time = median, slowest rank.", ""]
    if peer:
        lines += ["| size | tensorcore us | tensorcore busbw GB/s | %s us | %s busbw GB/s | ratio |" % (peer, peer),
                  "|---|---|---|---|---|---|"]
        for r in rows:
            lines.append("| %s | %.0f | %.3f | %.0f | %.3f | %.2fx |" % (
                fmt_bytes(r["bytes"]), r["tc_us"], r["tc_busbw"], r["peer_us"], r["peer_busbw"],
                r["tc_busbw"] / r["peer_busbw"]))
    else:
        lines += ["PyTorch is not installed here, so the peer is the machine's memcpy bandwidth (NumPy copy of the "
                  "same bytes in one process): every byte of a loopback collective is copied through the kernel "
                  "at least twice, so busbw is bounded well below it.", "",
                  "| size | tensorcore us | tensorcore busbw GB/s | memcpy GB/s | busbw / memcpy |",
                  "|---|---|---|---|---|"]
        for r in rows:
            lines.append("| %s | %.0f | %.3f | %.2f | %.3f |" % (
                fmt_bytes(r["bytes"]), r["tc_us"], r["tc_busbw"], r["memcpy"], r["tc_busbw"] / r["memcpy"]))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def gpu_bench(max_mb):
    try:
        import torch
    except ImportError:
        return "skipped: PyTorch is not installed"
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        return "skipped: %d CUDA device(s); the NCCL comparison needs two" % n
    import tensorcore as tc
    with tc.Context("cuda:0") as ctx:
        if not tc.capability_available(ctx.runtime_capabilities(), tc.TC_CAPABILITY_DIST_NCCL):
            return "skipped: this tensorcore build has no NCCL backend"
    res = run_ranks("gpu", n, max_mb, ["--torch-port", str(free_port())])
    lines = ["# NCCL allreduce: tensorcore vs PyTorch", "",
             "Date: %s. Machine: %s, %d x %s." % (datetime.date.today().isoformat(), machine(), n,
                                                  torch.cuda.get_device_name(0)),
             "%d ranks, one GPU each, f32 sum on the same device buffers; target tensorcore >= 0.95x." % n, "",
             "| size | tensorcore busbw GB/s | PyTorch busbw GB/s | ratio |", "|---|---|---|---|"]
    for nbytes in sizes(max_mb):
        t_tc = max(r["tc"][str(nbytes)] for r in res)
        t_pt = max(r["torch"][str(nbytes)] for r in res)
        lines.append("| %s | %.1f | %.1f | %.3fx |" % (fmt_bytes(nbytes), busbw(nbytes, t_tc, n),
                                                       busbw(nbytes, t_pt, n), t_pt / t_tc))
    out = REPO / "bench" / "results" / "dist-gpu.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return "written to %s" % out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--max-mb", type=int, default=256)
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--gpu-only", action="store_true")
    ap.add_argument("--device-only", action="store_true", help="only the gloo allreduce of CUDA buffers")
    ap.add_argument("--device-ranks", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "dist-cpu.md"))
    # internal: one rank
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--url")
    ap.add_argument("--which")
    ap.add_argument("--torch-port", type=int, default=0)
    ap.add_argument("--url2")
    args = ap.parse_args()
    if args.rank is not None:
        return rank_main(args)
    if not args.gpu_only and not args.device_only:
        peer, rows = cpu_bench(args.ranks, args.max_mb)
        write_cpu(args.ranks, peer, rows, args.out)
    if not args.cpu_only and not args.device_only:
        print("GPU NCCL comparison:", gpu_bench(args.max_mb))
    if not args.cpu_only:
        print("gloo on CUDA buffers:", device_bench(args.device_ranks, args.max_mb))


if __name__ == "__main__":
    main()
