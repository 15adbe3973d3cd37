"""A deterministic mutation fuzzer for the level-4 frame decoder
(python/simpler/remote/protocol.py), for the library's copy server
(simpler_l4_serve), and for a live session process fed the same mutations
through an authenticated channel.

    PYTHONPATH=python:tests/python python3 scripts/fuzz_l4_frames.py --seconds 180 --seed 1 [--no-live]

Inputs are valid frames of every type, mutated: bit flips, random bytes,
truncations, extensions, length fields that lie (the header's and the
bodies' inner counts), spliced frames and foreign types or versions. The
decoder target feeds each one to decode() and the parser of its type; the
only exception allowed out is ProtocolError (what the receivers drop a
connection on). The copy-server target feeds mutated copy requests to a
CopyServer serving one page with poisoned pages on either side, each
followed by a probe: the server must answer the probe or fail with a
status (never crash or hang), and the pages around stay untouched. The
live target forks a session (as the daemon does, on a
loopback TCP pair), opens it, then sends mutated frames MAC'd by a real
channel (so they reach the decoder) and after each one a probe request: the
session must either answer the probe or end the connection, within a
deadline, and exit with status 0 (not a traceback); a session that ended
is replaced by a fresh one. Prints one summary line; the exit status is the
number of failures (capped at 100).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import struct
import sys
import time

from simpler.remote import protocol as P

_PARSERS = {P.TASK: P.parse_task, P.COMPLETION: P.parse_completion, P.CONTROL: P.parse_control,
            P.CONTROL_REPLY: P.parse_reply, P.HEARTBEAT: P.parse_heartbeat, P.SHUTDOWN: lambda body: None}
ALL_TYPES = set(_PARSERS)
_COPY_REQ = struct.Struct("<QQQI")  # request id, address, nbytes, flags (src/runtime/level4_copy.cpp)


def copy_seeds(base: int, live: bool = False) -> list:
    """Copy requests into and out of a page at `base`, inline and streamed
    (with their data frames' bytes appended to the request for the
    in-process target, which sends what is past the request as one data
    frame). A live session gets no streamed copy_to: one announcing more
    bytes than follow waits, as it must, for the rest."""
    out = [P.encode(P.COPY_TO, _COPY_REQ.pack(20, base + 8, 8, 0) + bytes(range(8))),
           P.encode(P.COPY_TO, _COPY_REQ.pack(21, base, 0, 0)),
           P.encode(P.COPY_FROM, _COPY_REQ.pack(22, base + 100, 64, 0)),
           P.encode(P.COPY_FROM, _COPY_REQ.pack(23, base, 4096, 1))]
    if not live:
        out.append(P.encode(P.COPY_TO, _COPY_REQ.pack(24, base + 4000, 96, 1)) + bytes(range(96)))
    return out


def seeds(live: bool = False) -> list:
    """Valid frames of every type the decoder parses (the fuzzer's starting
    points); a live session also gets copy requests (into memory it does
    not have: refused, or malformed: the connection ends)."""
    t96 = bytes(range(96))
    out = [
        P.encode(P.TASK, P.task_body(1, "simpler_remote_orchs:pid", {}, b"", b"", [])),
        P.encode(P.TASK, P.task_body(2, "simpler_remote_orchs:pid", {"block_dim": 2}, bytes([1, 2]), t96 * 2,
                                     [7, 1 << 63])),
        P.encode(P.TASK, P.task_body(3, "no_such_module:f", {"output_prefix": "x"}, bytes([3]), t96, [1])),
        P.encode(P.COMPLETION, P.completion_body(9, -7, "failed: \u00e9")),
        P.encode(P.CONTROL, P.control_body(4, {"op": "copy_from", "addr": 4096, "nbytes": 8})),
        P.encode(P.CONTROL, P.control_body(5, {"op": "copy_to", "addr": 4096}, b"\x00" * 32)),
        P.encode(P.CONTROL, P.control_body(6, {"op": "free", "ptr": 12345})),
        P.encode(P.CONTROL, P.control_body(7, {"op": "export", "ptr": 1})),
        P.encode(P.CONTROL, P.control_body(8, {"op": "release_import", "ptr": 1})),
        P.encode(P.CONTROL_REPLY, P.reply_body(4, 0, {"pid": 1, "health_port": 2}, b"data")),
        P.encode(P.HEARTBEAT, P.heartbeat_body(3)),
        P.encode(P.SHUTDOWN),
    ]
    return out + (copy_seeds(4096, live=True) if live else [])


# Offsets of length fields worth lying in, per frame: the header's body
# length, and the first u32 counts of the bodies.
_LEN_OFFSETS = (8, 12 + 8, 12 + 12, 12 + 16, 12 + 20)


def mutate(rng: random.Random, frame: bytes, pool: list, max_ops: int = 4) -> bytes:
    b = bytearray(frame)
    for _ in range(rng.randint(1, max_ops)):
        op = rng.randrange(10)
        if op == 0 and b:  # bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # random bytes
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 2:  # truncation
            del b[rng.randint(0, len(b)):]
        elif op == 3:  # extension
            b += bytes(rng.randrange(256) for _ in range(rng.choice((1, 3, 8, 96, 500))))
        elif op == 4:  # a length field that lies
            at = rng.choice(_LEN_OFFSETS)
            if at + 4 <= len(b):
                v = rng.choice((0, 1, 0xFFFFFFFF, 0x7FFFFFFF, len(b), len(b) + 1, len(b) - 13,
                                struct.unpack_from("<I", b, at)[0] + rng.choice((-1, 1, 96))))
                struct.pack_into("<I", b, at, v & 0xFFFFFFFF)
        elif op == 5:  # splice with another frame
            other = rng.choice(pool)
            cut = rng.randint(0, len(b))
            b = b[:cut] + other[rng.randint(0, len(other)):]
        elif op == 6 and len(b) >= 8:  # another type or version
            struct.pack_into("<H", b, 4 + 2 * rng.randrange(2), rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xFFFF)))
        elif op == 7:  # the header fixed up to the (mutated) body, so the body parsers get to see it
            if len(b) >= P.HEADER.size:
                struct.pack_into("<I", b, 8, len(b) - P.HEADER.size)
        elif op == 8 and b:  # delete a range
            i = rng.randrange(len(b))
            del b[i:i + rng.randint(1, 16)]
        elif op == 9 and len(b) > P.HEADER.size:  # JSON and names: a byte from a nasty set
            nasty = b'"{}[]\\\x00\xff\xc3:,-0e9'
            b[rng.randrange(P.HEADER.size, len(b))] = nasty[rng.randrange(len(nasty))]
    return bytes(b)


def decode_one(frame: bytes) -> str:
    """'ok' or 'refused'; anything else escapes (a finding)."""
    try:
        ftype, body = P.decode(frame, ALL_TYPES)
        _PARSERS[ftype](body)
        return "ok"
    except P.ProtocolError:
        return "refused"


def fuzz_decoder(seconds: float, seed: int, max_execs: int = 0) -> dict:
    rng = random.Random(seed)
    pool = seeds()
    stats = {"execs": 0, "ok": 0, "refused": 0, "failures": []}
    end = time.monotonic() + seconds
    while time.monotonic() < end and (not max_execs or stats["execs"] < max_execs):
        frame = mutate(rng, rng.choice(pool), pool)
        try:
            stats[decode_one(frame)] += 1
        except Exception as e:  # noqa: BLE001 - the finding
            stats["failures"].append((frame.hex(), f"{type(e).__name__}: {e}"))
        stats["execs"] += 1
        if stats["execs"] % 64 == 0 and len(pool) < 256 and rng.random() < 0.1:
            pool.append(frame)  # some mutants become seeds (deeper mutations)
    return stats


# ---- the library's copy server -----------------------------------------------------------


def _channel_pair(key: bytes):
    import threading

    from tensorcore import Channel

    a, b = socket.socketpair()
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("s", Channel.open(b, server=True, keys=P.keyring(key),
                                                                         timeout=10)))
    t.start()
    c = Channel.open(a, server=False, keys=P.keyring(key), timeout=10)
    t.join()
    return c, got["s"], (a, b)


def fuzz_copy_server(seconds: float, seed: int, max_execs: int = 0) -> dict:
    import numpy as np

    from simpler import SimplerError
    from simpler.remote.copies import CopyServer

    rng = random.Random(seed)
    key = os.urandom(32)
    mem = np.full(3 * 4096, 0x5A, np.uint8)  # the served page in the middle, poisoned pages around it
    page = mem[4096:8192]
    base = page.ctypes.data
    pool = copy_seeds(base)
    stats = {"execs": 0, "answered": 0, "refused": 0, "lanes": 0, "failures": []}
    lane = None
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end and (not max_execs or stats["execs"] < max_execs):
            if lane is None:
                parent, session, socks = _channel_pair(key)
                server = CopyServer(session, 0.2)  # a streamed copy's missing data frames: a short wait
                server.add(base, 4096)
                lane = (parent, session, socks, server)
                stats["lanes"] += 1
            parent, session, socks, server = lane
            frame = mutate(rng, rng.choice(pool), pool, max_ops=2)
            if rng.random() < 0.5 and len(frame) >= P.HEADER.size:
                frame = frame[:8] + struct.pack("<I", len(frame) - P.HEADER.size) + frame[12:]
            stats["execs"] += 1
            n_head = P.HEADER.size + struct.unpack_from("<I", frame, 8)[0] if len(frame) >= P.HEADER.size else 0
            before = mem.copy()
            try:
                split = 0 < n_head < len(frame)
                parent.send(frame[:n_head] if split else frame, 10)
                if split:
                    parent.send(frame[n_head:], 10)  # what is past the request: one data frame
                parent.send(P.encode(P.COPY_FROM, _COPY_REQ.pack(_PROBE, base, 0, 0)), 10)
                answered = False
                for _ in range(3):  # the mutant, the data frame sent after it, the probe
                    if server.next_frame() is None and _probe_answered(parent):
                        answered = True
                        break
                stats["answered" if answered else "refused"] += 1
                if not answered:
                    lane = _close_lane(lane)
            except SimplerError:
                stats["refused"] += 1  # a lane the server gave up on: a fresh one
                lane = _close_lane(lane)
            except Exception as e:  # noqa: BLE001 - the finding
                stats["failures"].append((frame.hex(), f"{type(e).__name__}: {e}"))
                lane = _close_lane(lane)
            if not ((mem[:4096] == before[:4096]).all() and (mem[8192:] == before[8192:]).all()):
                stats["failures"].append((frame.hex(), "bytes outside the served page changed"))
                mem[:] = 0x5A
    finally:
        _close_lane(lane)
    return stats


_PROBE = 1 << 40


def _probe_answered(parent) -> bool:
    """Reads what the server has sent so far (replies, a copy_from's data
    frames): True once the probe's reply is among it."""
    from tensorcore import TensorcoreError

    while True:
        try:
            got = parent.recv(P.MAX_FRAME_BYTES, 0.001)
        except TensorcoreError:
            return False
        if len(got) >= P.HEADER.size + 8 and got[6] == P.COPY_REPLY and \
                struct.unpack_from("<Q", got, P.HEADER.size)[0] == _PROBE:
            return True


def _close_lane(lane):
    if lane is not None:
        parent, session, socks, server = lane
        server.close()
        for ch in (parent, session):
            ch.shutdown()
            ch.close()
        for s in socks:
            s.close()
    return None


# ---- the live session -------------------------------------------------------------


class LiveSession:
    """A session process forked as the daemon forks one, on a loopback TCP
    pair, opened with a manifest of no chips and no sub-workers (cheap)."""

    def __init__(self, key: bytes, deadline_s: float):
        from tensorcore import Channel

        from simpler.remote.session import serve_connection

        self.deadline_s = deadline_s
        lst = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(lst.getsockname())
        server, _ = lst.accept()
        lst.close()
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            client.close()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)  # sessions log every refused frame; keep the fuzzer's output readable
            serve_connection(server, key)  # never returns
        server.close()
        self.sock = client
        self.ch = Channel.open(client, server=False, keys=P.keyring(key), timeout=deadline_s,
                               expected_peer_identity=P.IDENTITY)
        manifest = {"op": "open", "platform": "cpu", "device_ids": [], "num_sub_workers": 0, "timeout_s": 30.0}
        self.ch.send(P.encode(P.CONTROL, P.control_body(0, manifest)), deadline_s)
        _, body = P.decode(self.ch.recv(P.MAX_FRAME_BYTES, deadline_s), {P.CONTROL_REPLY})
        _, status, value, _ = P.parse_reply(body)
        if status:
            raise RuntimeError(f"the session did not open: {value}")
        self.health_sock = socket.create_connection(("127.0.0.1", int(value["health_port"])))
        self.health = Channel.open(self.health_sock, server=False, keys=P.keyring(key), timeout=deadline_s,
                                   expected_peer_identity=P.IDENTITY)
        self.next_probe = 1 << 40

    def probe(self, frame: bytes) -> str:
        """Sends `frame` then a probe; 'alive' (the probe was answered) or
        'ended' (the connection closed). Raises TimeoutError on a hang."""
        from tensorcore import TensorcoreError

        rid = self.next_probe
        self.next_probe += 1
        try:
            self.ch.send(frame, self.deadline_s)
            self.ch.send(P.encode(P.CONTROL, P.control_body(rid, {"op": "copy_from", "addr": 0, "nbytes": 0})),
                         self.deadline_s)
        except TensorcoreError:
            return "ended"
        end = time.monotonic() + self.deadline_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("the session neither answered the probe nor closed")
            try:
                got = self.ch.recv(P.MAX_FRAME_BYTES, left)
            except TensorcoreError as e:
                if e.status == -14:  # TIMEOUT
                    raise TimeoutError("the session neither answered the probe nor closed") from None
                return "ended"
            ftype, body = P.decode(got, P.COMMAND_TYPES | {P.COPY_REPLY})  # a copy mutant's reply, then the probe's
            if ftype == P.CONTROL_REPLY and P.parse_reply(body)[0] == rid:
                return "alive"
            if ftype == P.SHUTDOWN:  # the mutant was a SHUTDOWN: the session acknowledged and ends
                return "ended"

    def finish(self) -> int:
        """Closes our ends and reaps the session: its exit status."""
        for ch in (self.ch, self.health):
            ch.shutdown()
            ch.close()
        self.sock.close()
        self.health_sock.close()
        end = time.monotonic() + self.deadline_s
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        raise TimeoutError("the session did not exit after its connection closed")


def fuzz_live(seconds: float, seed: int, deadline_s: float = 10.0, max_execs: int = 0) -> dict:
    rng = random.Random(seed)
    pool = seeds(live=True)
    key = os.urandom(32)
    stats = {"execs": 0, "alive": 0, "ended": 0, "sessions": 0, "failures": []}
    end = time.monotonic() + seconds
    sess = None
    try:
        while time.monotonic() < end and (not max_execs or stats["execs"] < max_execs):
            if sess is None:
                sess = LiveSession(key, deadline_s)
                stats["sessions"] += 1
            # One mutation at a time, and now and then a seed as it is: a session ends at the first
            # frame it refuses, so heavier mutants would rarely get past the first check.
            seed_frame = rng.choice(pool)
            frame = seed_frame if rng.random() < 0.2 else mutate(rng, seed_frame, pool, max_ops=1)
            if rng.random() < 0.5 and len(frame) >= P.HEADER.size:
                # Half the mutants get an honest header, so more of them reach the body parsers and
                # the session's handlers instead of ending the connection at the header.
                frame = frame[:8] + struct.pack("<I", len(frame) - P.HEADER.size) + frame[12:]
            stats["execs"] += 1
            try:
                outcome = sess.probe(frame)
            except TimeoutError as e:
                stats["failures"].append((frame.hex(), f"hang: {e}"))
                outcome = "ended"
            stats[outcome] += 1
            if outcome == "ended":
                try:
                    code = sess.finish()
                    if code != 0:
                        stats["failures"].append((frame.hex(), f"the session exited with status {code}"))
                except TimeoutError as e:
                    stats["failures"].append((frame.hex(), str(e)))
                sess = None
    finally:
        if sess is not None:
            sess.ch.send(P.encode(P.SHUTDOWN), deadline_s)
            sess.finish()
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="per target")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-live", action="store_true", help="the decoder only")
    a = ap.parse_args(argv)
    failures = []
    t0 = time.monotonic()
    d = fuzz_decoder(a.seconds, a.seed)
    print(f"decoder: {d['execs']} execs in {time.monotonic() - t0:.0f} s ({d['ok']} parsed, {d['refused']} refused), "
          f"{len(d['failures'])} failures", flush=True)
    failures += d["failures"]
    t0 = time.monotonic()
    c = fuzz_copy_server(a.seconds, a.seed)
    print(f"copy server: {c['execs']} execs in {time.monotonic() - t0:.0f} s over {c['lanes']} lanes "
          f"({c['answered']} answered, {c['refused']} refused), {len(c['failures'])} failures", flush=True)
    failures += c["failures"]
    if not a.no_live:
        t0 = time.monotonic()
        s = fuzz_live(a.seconds, a.seed)
        print(f"live session: {s['execs']} execs in {time.monotonic() - t0:.0f} s over {s['sessions']} sessions "
              f"({s['alive']} answered, {s['ended']} ended the connection), {len(s['failures'])} failures",
              flush=True)
        failures += s["failures"]
    for frame, why in failures[:20]:
        print(f"FAIL {why}: {frame[:200]}")
    return min(100, len(failures))


if __name__ == "__main__":
    sys.exit(main())
