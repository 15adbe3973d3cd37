#!/usr/bin/env python3
"""Bandwidth of tensorcore's memory-tier moves against the plain copies they
are made of.

    python bench/memory_tiers.py [--device cpu|cuda] [--mib 64,256] [--reps 5] [--dir D] [--write]

For each size: a buffer of random bytes is moved L0 -> L1 -> L0 and
L0 -> L3 -> L0 synchronously, --reps times; the median time of each move is
reported as GB/s, with the peer in the same process on the same bytes: the
same move done by hand, into fresh memory as a move must use:
    L0 <-> L1 on the CPU: np.empty + np.copyto
    L0  -> L3: os.write of the bytes to a new file in the same directory
    L3  -> L0: np.empty + os.readv of that file
and, for reference, the copy into memory already touched (the ceiling no
move can reach: its target is always new memory). On CUDA the L0 <-> L1 peer
is not run (the copy is cudaMemcpy from pinned memory). Every move is
checked bit for bit once. Targets: each move >= 0.8 x its peer.
--write puts the table, the machine and the date into bench/results/memory-tiers.md.
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "python"))
import tensorcore as tc  # noqa: E402

TARGET = 0.8


def median_time(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peer_write(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:done + (1 << 30)])
    finally:
        os.close(fd)


def peer_read(path, out):
    fd = os.open(path, os.O_RDONLY)
    try:
        view = memoryview(out).cast("B")
        done = 0
        while done < len(view):
            done += os.readv(fd, [view[done:done + (1 << 30)]])
    finally:
        os.close(fd)


def bench_size(ctx, nbytes, reps, spill, on_cpu):
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    buf = ctx.buffer_from_array(data)
    rows = []

    def move(target):
        (buf.promote_async if tc.tier_code(target) < buf.get_tier() else buf.demote_async)(target)

    def pair(a, b):  # time a -> b and b -> a, alternating
        t_ab, t_ba = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            move(b)
            t1 = time.perf_counter()
            move(a)
            t2 = time.perf_counter()
            t_ab.append(t1 - t0)
            t_ba.append(t2 - t1)
        return statistics.median(t_ab), statistics.median(t_ba)

    # Bit-exact once through every tier.
    for t in ("l1", "l3", "l0"):
        move(t)
    assert (buf.to_numpy(nbytes, np.uint8) == data).all()

    down1, up1 = pair("l0", "l1")
    down3, up3 = pair("l0", "l3")
    other = np.empty_like(data)
    peer_copy = median_time(lambda: np.copyto(np.empty_like(data), data), reps) if on_cpu else None
    warm_copy = median_time(lambda: np.copyto(other, data), reps) if on_cpu else None
    path = os.path.join(spill, "peer.bin")
    peer_w = median_time(lambda: peer_write(path, data), reps)
    peer_r = median_time(lambda: peer_read(path, np.empty_like(data)), reps)
    warm_r = median_time(lambda: peer_read(path, other), reps)
    assert (other == data).all()
    os.unlink(path)
    gb = nbytes / 1e9
    inv = (lambda t: gb / t if t else None)
    rows.append(("L0 -> L1", gb / down1, inv(peer_copy), "np.empty + np.copyto", inv(warm_copy)))
    rows.append(("L1 -> L0", gb / up1, inv(peer_copy), "np.empty + np.copyto", inv(warm_copy)))
    rows.append(("L0 -> L3", gb / down3, gb / peer_w, "os.write (new file)", None))
    rows.append(("L3 -> L0", gb / up3, gb / peer_r, "np.empty + os.readv", gb / warm_r))
    buf.close()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--mib", default="64,256")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="spill directory (default: a new one under the temp dir)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()

    spill = args.dir or tempfile.mkdtemp(prefix="tc-bench-tiers-")
    lines = []
    with tc.Context(args.device, spill_dir=spill) as ctx:
        info = ctx.device_info()
        header = "| size | move | tensorcore GB/s | peer GB/s | peer | ratio | target | into touched memory GB/s |"
        lines += [header, "|---|---|---|---|---|---|---|---|"]
        ok = True
        fmt = (lambda v: "%.2f" % v if v else "-")
        for mib in (int(m) for m in args.mib.split(",")):
            for name, ours, peer, peer_name, warm in bench_size(ctx, mib << 20, args.reps, spill,
                                                                args.device == "cpu"):
                if peer is None:
                    lines.append("| %d MiB | %s | %.2f | - | - | - | - | - |" % (mib, name, ours))
                    continue
                ratio = ours / peer
                ok &= ratio >= TARGET
                lines.append("| %d MiB | %s | %.2f | %.2f | %s | %.2f | %s | %s |" % (
                    mib, name, ours, peer, peer_name, ratio, "met" if ratio >= TARGET else "MISSED", fmt(warm)))
    st = os.statvfs(spill)
    fs_line = "spill directory %s (%.0f GiB free)" % (spill, st.f_bavail * st.f_frsize / 2**30)
    machine = "%s, %s, %d CPUs, %s" % (info.name, platform.platform(), os.cpu_count(), fs_line)
    print("device %s: %s" % (args.device, machine))
    print("\n".join(lines))
    if args.write:
        out = os.path.join(HERE, "results", "memory-tiers.md")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write("# Memory-tier moves (bench/memory_tiers.py)\n\n")
            f.write("%s, device %s: %s. Median of %d moves each; target: each move >= %.1f x its peer.\n\n" % (
                datetime.date.today().isoformat(), args.device, machine, args.reps, TARGET))
            f.write("\n".join(lines) + "\n")
        print("wrote", out)
    if not args.dir:
        os.rmdir(spill)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
