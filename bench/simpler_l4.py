#!/usr/bin/env python3
"""Level-4 overhead of the simpler runtime on loopback, next to raw TCP in
the same run.

Round trip: a run of --chain remote tasks on one remote worker, each
naming the same remote buffer INOUT (so each waits for the one before:
per task = one round trip, parent engine to session and back), at a few
TASK sizes (1, 8, 64 tensors); next to it a raw TCP ping-pong between this
process and a forked peer, with request and reply of the same sizes as the
TASK and COMPLETION frames (TCP_NODELAY, Python sockets on both sides).
Target: <= 3x raw.

Copies: remote_copy_to / remote_copy_from of --sizes bytes next to a raw
TCP stream of the same bytes to / from a forked peer that writes them into
(reads them from) memory. Target: >= 0.8x raw. Each copy is timed alone,
ours and raw alike, the best of 6 timings (of 51 up to 1 MiB).

    PYTHONPATH=python python bench/simpler_l4.py [--quick] [--no-write] [--pin]

--pin splits this process's CPUs in two halves: this process (the parent,
and our end of raw TCP) on the first, the daemon, its session and the raw
TCP peer on the second. Unpinned, the kernel may put both ends on one CPU
for some repetitions (on a small VM, raw loopback TCP then runs at about
twice its cross-CPU speed), and the best of the repetitions picks those.
Pinned, each side has CPUs of its own, so the lanes spin before they block
(SIMPLER_L3_SPIN_US=50 unless set): the level-3 policy would otherwise turn
spinning off whenever the load average left by earlier runs (this
benchmark's own included) plus the processes exceeds the CPUs, and round
trips would pay a wake-up on each side.

--breakdown also times, for the one-tensor round trip, the authenticated
channel alone (tensorcore.Channel ping-pong of the same frames, both ends
spinning as the lanes do) and the session's per-task work alone (parse,
start the orchestration, await it, encode the completion; in a forked
process on the peers' CPUs): the rest of the round trip is the parent's.

Starts its own daemon (python -m simpler.remote_worker on 127.0.0.1, a
temporary key) and stops it at the end. Appends a dated section to
bench/results/simpler.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform as pyplatform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

RESULTS = ROOT / "bench" / "results" / "simpler.md"


def empty(orch, args, cfg):
    """The remote orchestration of the round trip: nothing to do."""


# ---- raw TCP peers ------------------------------------------------------------------

def _recv_exact(s, view):
    got = 0
    n = len(view)
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("peer closed")
        got += k


# The peers' CPUs under --pin (None: unpinned).
PEER_CPUS = None


def pin_halves() -> tuple:
    """(ours, the peers') halves of this process's CPUs; pins this process."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    ours, theirs = set(cpus[:len(cpus) // 2]), set(cpus[len(cpus) // 2:])
    os.sched_setaffinity(0, ours)
    return ours, theirs


def _fork_peer(serve):
    """A forked process running serve(conn) on one accepted loopback
    connection; returns (our socket, pid)."""
    lst = socket.create_server(("127.0.0.1", 0))
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            if PEER_CPUS:
                os.sched_setaffinity(0, PEER_CPUS)
            conn, _ = lst.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            serve(conn)
        finally:
            os._exit(0)
    s = socket.create_connection(lst.getsockname())
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lst.close()
    return s, pid


def best_exchange_us(exchange, n: int) -> float:
    """Microseconds per call of exchange() (one request and its reply):
    50 to warm up, then the best of 3 runs of n."""
    for _ in range(50):
        exchange()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            exchange()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def raw_pingpong_us(req: int, resp: int, n: int) -> float:
    def serve(conn):
        buf = bytearray(req)
        out = bytes(resp)
        while True:
            try:
                _recv_exact(conn, memoryview(buf))
            except ConnectionError:
                return
            conn.sendall(out)

    s, pid = _fork_peer(serve)
    try:
        msg, back = bytes(req), memoryview(bytearray(resp))

        def exchange():
            s.sendall(msg)
            _recv_exact(s, back)

        return best_exchange_us(exchange, n)
    finally:
        s.close()
        os.waitpid(pid, 0)


def raw_stream_gbs(nbytes: int, to_peer: bool, reps: int) -> float:
    """Bytes per second (GB/s) moving nbytes from memory here to memory in
    the peer (to_peer) or back, through one loopback connection."""
    def serve(conn):
        buf = memoryview(bytearray(nbytes))
        while True:
            try:
                cmd = conn.recv(1)
            except OSError:
                return
            if not cmd:
                return
            if cmd == b"w":
                _recv_exact(conn, buf)
                conn.sendall(b"k")
            else:
                conn.sendall(buf)

    s, pid = _fork_peer(serve)
    try:
        data = memoryview(np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8).data)
        sink = memoryview(bytearray(nbytes))
        best = float("inf")
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            if to_peer:
                s.sendall(b"w")
                s.sendall(data)
                _recv_exact(s, memoryview(bytearray(1)))
            else:
                s.sendall(b"r")
                _recv_exact(s, sink)
            best = min(best, time.perf_counter() - t0)
        return nbytes / best / 1e9
    finally:
        s.close()
        os.waitpid(pid, 0)


# ---- what a round trip is made of (--breakdown) -------------------------------------

def channel_pingpong_us(req: int, resp: int, n: int, spin_us: float) -> float:
    """The authenticated channel alone (tensorcore.Channel, both ends in the
    library, spinning as the lanes do): request and reply of the TASK and
    COMPLETION frames' sizes between this process and a forked peer."""
    from tensorcore import Channel

    keys = [("bench", 1, b"k" * 32)]

    def serve(conn):
        ch = Channel.open(conn, server=True, keys=keys, timeout=10)
        ch.set_spin(round(spin_us))
        out = bytes(resp)
        while True:
            try:
                ch.recv(req, 10, copy=False)
            except Exception:  # noqa: BLE001 - the benchmark closed its end
                return
            ch.send(out, 10)

    s, pid = _fork_peer(serve)
    try:
        ch = Channel.open(s, server=False, keys=keys, timeout=10)
        ch.set_spin(round(spin_us))
        msg = bytes(req)

        def exchange():
            ch.send(msg, 10)
            ch.recv(resp, 10, copy=False)

        us = best_exchange_us(exchange, n)
        ch.close()
        return us
    finally:
        s.close()
        os.waitpid(pid, 0)


def session_task_us(n: int) -> float:
    """What a session does for one task besides its frames: the TASK body
    parsed, the orchestration started on a level-3 Worker like the
    session's (no chips, no sub-workers) and its end awaited, the
    COMPLETION encoded; in a forked process on the peers' CPUs."""
    r, w = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if PEER_CPUS:
                os.sched_setaffinity(0, PEER_CPUS)
            from simpler.remote import protocol as P
            from simpler.remote.session import make_worker
            from simpler.task_interface import ChipStorageTaskArgs

            w3 = make_worker({"platform": "cpu", "device_ids": [], "num_sub_workers": 0})
            frame = P.encode(P.TASK, P.task_body(1, "simpler_l4:empty", {}, bytes(1), bytes(96), []))
            best = float("inf")
            for rep in range(4):
                t0 = time.perf_counter()
                for _ in range(n):
                    tid, name, config, dirs, tensors, scalars = P.parse_task(P.decode(frame, {P.TASK})[1])
                    h = w3.submit(empty, ChipStorageTaskArgs())
                    h.wait()
                    P.encode(P.COMPLETION, P.completion_body(tid, 0, ""))
                if rep:
                    best = min(best, (time.perf_counter() - t0) / n)
            w3.close()
            os.write(w, repr(best * 1e6).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read()
    os.waitpid(pid, 0)
    return float(got)


# ---- level 4 ------------------------------------------------------------------------

class Daemon:
    def __init__(self, tmp: str):
        kf = os.path.join(tmp, "bench.key")
        self.key = os.urandom(32)
        fd = os.open(kf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, self.key + b"\n")  # the key's bytes, then one newline the daemon drops (docs/simpler.md)
        os.close(fd)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT / "bench"), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen([sys.executable, "-m", "simpler.remote_worker", "--listen", "127.0.0.1:0",
                                      "--key-file", kf], stdout=subprocess.PIPE, env=env, text=True)
        if PEER_CPUS:
            os.sched_setaffinity(self.proc.pid, PEER_CPUS)  # before it forks its session
        self.address = self.proc.stdout.readline().split()[-1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.proc.stdout.close()


def frame_sizes(ntensors: int) -> tuple:
    from simpler.remote import protocol as P

    task = P.encode(P.TASK, P.task_body(1, "simpler_l4:empty", {}, bytes(ntensors), bytes(96 * ntensors), []))
    done = P.encode(P.COMPLETION, P.completion_body(1, 0, ""))
    return len(task), len(done)


def remote_roundtrip_us(w4, r, bufs, ntensors: int, chain: int) -> float:
    from simpler import RemoteCallable
    from simpler.task_interface import ArgDirection as D, ChipStorageTaskArgs, ChipTensor, DataType

    fn = RemoteCallable("simpler_l4:empty")
    t = ChipStorageTaskArgs()
    for i in range(ntensors):
        t.add_tensor(ChipTensor.make(bufs[i], (16,), DataType.FLOAT32), D.INOUT)

    def orch(o, args, cfg):
        for _ in range(chain):
            o.submit_next_level(fn, t, worker=r)

    w4.run(orch)  # warm-up (imports the callable there)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        w4.run(orch)
        best = min(best, (time.perf_counter() - t0) / chain)
    return best * 1e6


def remote_copy_gbs(w4, r, ptr, nbytes: int, to_remote: bool, reps: int) -> float:
    data = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    sink = np.empty(nbytes, np.uint8)
    best = float("inf")
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        if to_remote:
            w4.remote_copy_to(ptr, data, r)
        else:
            w4.remote_copy_from(sink, ptr, r)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--chain", type=int, default=300)
    ap.add_argument("--sizes", default="65536,1048576,16777216,67108864")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--note", default="", help="a line added under the tables (what changed)")
    ap.add_argument("--pin", action="store_true", help="this process and its peers on two halves of the CPUs")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the channel alone and the session's per-task work alone (one tensor)")
    a = ap.parse_args(argv)
    global PEER_CPUS
    pinned = ""
    if a.pin:
        ours, PEER_CPUS = pin_halves()
        os.environ.setdefault("SIMPLER_L3_SPIN_US", "50")  # before any Worker or daemon starts
        pinned = f" Pinned: this process on CPUs {sorted(ours)}, the daemon, session and raw peer on {sorted(PEER_CPUS)}."
    chain = 30 if a.quick else a.chain
    sizes = [int(x) for x in a.sizes.split(",")]
    if a.quick:
        sizes = sizes[:2]
    reps = 2 if a.quick else 5
    from simpler import RemoteWorkerSpec, Worker

    load0 = os.getloadavg()[0]
    rows_rt, rows_cp = [], []
    breakdown = None
    spin_us = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        d = Daemon(tmp)
        try:
            with Worker(4, platform="cpu", remote_session_timeout_s=60) as w4:
                r = w4.add_remote_worker(RemoteWorkerSpec(address=d.address, key=d.key, platform="cpu",
                                                          device_ids=[], num_sub_workers=0))
                w4.init()
                from simpler.level3 import endpoint as _endpoint

                spin_us = _endpoint.SPIN_S * 1e6  # the level-3 policy picked it at init (cores and load)
                bufs = [w4.remote_malloc(64, r) for _ in range(64)]
                for nt in (1, 8, 64):
                    req, resp = frame_sizes(nt)
                    ours = remote_roundtrip_us(w4, r, bufs, nt, chain)
                    raw = raw_pingpong_us(req, resp, max(200, chain))
                    rows_rt.append((nt, req, resp, ours, raw))
                    print(f"round trip, {nt} tensors ({req} B / {resp} B): {ours:.1f} us, raw TCP {raw:.1f} us, "
                          f"{ours / raw:.2f}x", flush=True)
                    if a.breakdown and nt == 1:
                        chan = channel_pingpong_us(req, resp, max(200, chain), spin_us)
                        sess = session_task_us(max(200, chain))
                        breakdown = (ours, raw, chan, sess)
                        print(f"  of which: the channel's ping-pong {chan:.1f} us, the session's level-3 work "
                              f"{sess:.1f} us, the rest (the parent's level 4, hand-overs) "
                              f"{ours - chan - sess:.1f} us", flush=True)
                big = w4.remote_malloc(max(sizes), r)
                for n in sizes:
                    # Small copies take microseconds: more timings of each (both sides alike),
                    # so that the best one is one nobody interrupted.
                    nrep = reps if a.quick or n > (1 << 20) else max(reps, 50)
                    for to_remote in (True, False):
                        ours = remote_copy_gbs(w4, r, big, n, to_remote, nrep)
                        raw = raw_stream_gbs(n, to_remote, nrep)
                        rows_cp.append((n, to_remote, ours, raw))
                        print(f"{'copy_to' if to_remote else 'copy_from'} {n} B: {ours:.3f} GB/s, raw TCP "
                              f"{raw:.3f} GB/s, {ours / raw:.2f}x", flush=True)
        finally:
            d.stop()
    load1 = os.getloadavg()[0]
    if a.no_write:
        return 0
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    from simpler_overhead import machine

    out = [f"\n## Level 4: remote tasks and copies on loopback ({now})\n",
           f"Machine: {machine()}, {pyplatform.platform()}, shared with other "
           f"builds and tests: load average {load0:.1f} at the start, {load1:.1f} at the end. One daemon, one "
           f"session (Worker(3) with no chips and no sub-workers), the parent a Worker(4); raw TCP is Python "
           f"sockets between this process and a forked peer, TCP_NODELAY, in the same run. "
           f"`bench/simpler_l4.py`{' --quick' if a.quick else ''}{' --pin' if a.pin else ''}.{pinned} Spin before "
           f"blocking on a lane: {spin_us:.0f} us (the level-3 policy; SIMPLER_L3_SPIN_US sets it). Copies: the "
           f"best of {reps + 1} timings{'' if a.quick else ' (51 up to 1 MiB)'}, ours and raw alike.\n",
           "| round trip | TASK / COMPLETION bytes | remote task us | raw TCP ping-pong us | ratio | target <= 3x |",
           "|---|---|---|---|---|---|"]
    for nt, req, resp, ours, raw in rows_rt:
        out.append(f"| {nt} tensors | {req} / {resp} | {ours:.1f} | {raw:.1f} | {ours / raw:.2f}x | "
                   f"{'met' if ours / raw <= 3 else 'missed'} |")
    out += ["", "| copy | bytes | remote GB/s | raw TCP GB/s | ratio | target >= 0.8x |", "|---|---|---|---|---|---|"]
    for n, to_remote, ours, raw in rows_cp:
        out.append(f"| {'remote_copy_to' if to_remote else 'remote_copy_from'} | {n} | {ours:.3f} | {raw:.3f} | "
                   f"{ours / raw:.2f}x | {'met' if ours / raw >= 0.8 else 'missed'} |")
    if breakdown:
        ours, raw, chan, sess = breakdown
        out += ["", f"A one-tensor round trip of {ours:.1f} us (raw TCP {raw:.1f}): the authenticated channel's "
                f"ping-pong of the same frames {chan:.1f} us, the session's level-3 work per task (parse, start the "
                f"orchestration, await its end, encode the completion) {sess:.1f} us, the rest (the parent's level "
                f"4, thread hand-overs) {ours - chan - sess:.1f} us (`--breakdown`)."]
    if a.note:
        out += ["", a.note]
    with open(RESULTS, "a") as f:
        f.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
