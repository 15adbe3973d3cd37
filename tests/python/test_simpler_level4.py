"""Level 4 over the network: a Worker(4) parent with remote level-3 Workers
served by daemons (python -m simpler.remote_worker) on loopback, each a
subprocess on a port of its own choosing. Authentication, the frame
decoder's bounds, remote memory, and failures (a killed daemon, a silent
session) that must end in a clear error and leave no process behind."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest_simpler import alive
from simpler import RemoteCallable, RemoteWorkerSpec, SimplerError, SimplerUnsupportedError, Worker
from simpler.remote import protocol as P
from tensorcore import TC_ERR_AUTH as _AUTH, TC_ERR_TIMEOUT as _TIMEOUT
from simpler.task_interface import ArgDirection as D, ChipStorageTaskArgs, ChipTensor, CoreCallable, ChipCallable, DataType

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def descendants(pid: int) -> list:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


class Daemon:
    def __init__(self, tmp_path, key: bytes, name: str = "d", extra=()):
        self.key = key
        self.key_file = kf = tmp_path / f"{name}.key"
        fd = os.open(kf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, key + b"\n")  # as docs/simpler.md says: the key's bytes, then one newline the reader drops
        os.close(fd)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(HERE), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen([sys.executable, "-m", "simpler.remote_worker", "--listen", "127.0.0.1:0",
                                      "--key-file", str(kf), *extra], stdout=subprocess.PIPE, env=env, text=True)
        line = self.proc.stdout.readline()
        assert "listening on" in line, line
        self.address = line.split()[-1]
        self.host, self.port = P.parse_address(self.address)

    def spec(self, key=None, **kw):
        kw.setdefault("device_ids", [0])
        return RemoteWorkerSpec(address=self.address, key=self.key if key is None else key, platform="cpu", **kw)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def daemons(tmp_path):
    made = []

    def make(key=None, name=None, extra=()):
        d = Daemon(tmp_path, key or os.urandom(32), name or f"d{len(made)}", extra)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()


def gemm_chip() -> ChipCallable:
    return ChipCallable.from_tasks([D.IN, D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)]}],
                                   [(0, CoreCallable.builtin("gemm"))])


def args3(a, b, c, shapes):
    t = ChipStorageTaskArgs()
    for ptr, shape, d in zip((a, b, c), shapes, (D.IN, D.IN, D.OUT)):
        t.add_tensor(ptr if isinstance(ptr, ChipTensor) else ChipTensor.make(ptr, shape, DataType.FLOAT32), d)
    return t


def _reads_nothing(args):
    pass


def test_a_local_buffer_resolved_for_a_local_task_is_still_refused_to_a_remote_one(daemons):
    d = daemons()
    local = Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1)
    hs = local.register(_reads_nothing)
    try:
        with Worker(4, platform="cpu") as w4:
            w4.add_worker(local)
            r = w4.add_remote_worker(d.spec())
            w4.init()
            t = w4.create_buffer(64).tensor((16,), "float32")
            a = ChipStorageTaskArgs()
            a.add_tensor(t, D.IN)
            w4.run(lambda o, x, c: o.submit_next_level(lambda o3, x3, c3: o3.submit_sub(hs, a), None, worker=0))
            assert t._l3 is not None  # its resolution is kept on it now
            for ts in ((t,), (t, t)):
                args = ChipStorageTaskArgs()
                for x in ts:
                    args.add_tensor(x, D.IN)
                with pytest.raises(ValueError, match="is not memory of"):
                    w4.run(lambda o, x, c: o.submit_next_level("simpler_remote_orchs:nap", args, worker=r))
    finally:
        local.close()


def test_one_local_and_two_remote_level3_workers_match_level3(daemons):
    rng = np.random.default_rng(1)
    m, k, n = 8, 16, 4
    A = [rng.standard_normal((m, k)).astype(np.float32) for _ in range(3)]
    B = [rng.standard_normal((k, n)).astype(np.float32) for _ in range(3)]
    E = rng.standard_normal((n, n)).astype(np.float32)
    shapes = [(m, k), (k, n), (m, n)]

    # Level 3: the three products on three chips of one host.
    l3 = []
    with Worker(3, platform="cpu", device_ids=[0, 1, 2]) as w3:
        h = w3.register(gemm_chip())
        w3.init()
        bufs = [[w3.create_buffer(x.nbytes) for x in (A[i], B[i], np.empty((m, n), np.float32))] for i in range(3)]
        for i in range(3):
            bufs[i][0].numpy((m, k), "float32")[:] = A[i]
            bufs[i][1].numpy((k, n), "float32")[:] = B[i]

        def orch3(o, args, cfg):
            for i in range(3):
                o.submit_next_level(h, args3(*(b.tensor(s, "float32") for b, s in zip(bufs[i], shapes)), shapes),
                                    worker=i)

        w3.run(orch3)
        l3 = [bufs[i][2].numpy((m, n), "float32").copy() for i in range(3)]

    # Level 4: worker 0 local, workers 1 and 2 remote; remote 1 also chains a
    # second product on its own result (the parent orders it after the first).
    d1, d2 = daemons(), daemons()
    local = Worker(3, platform="cpu", device_ids=[0])
    hl = local.register(gemm_chip())
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=10)
    try:
        assert w4.add_worker(local) == 0
        assert w4.add_remote_worker(d1.spec()) == 1
        assert w4.add_remote_worker(d2.spec(num_sub_workers=1)) == 2
        w4.init()
        lb = [w4.create_buffer(x.nbytes) for x in (A[0], B[0], l3[0])]
        lb[0].numpy((m, k), "float32")[:] = A[0]
        lb[1].numpy((k, n), "float32")[:] = B[0]
        rb = {}
        for r in (1, 2):
            rb[r] = [w4.remote_malloc(x.nbytes, r) for x in (A[r], B[r], l3[r])]
            w4.remote_copy_to(rb[r][0], A[r], r)
            w4.remote_copy_to(rb[r][1], B[r], r)
            w4.remote_copy_to(rb[r][2], np.full((m, n), np.nan, np.float32), r)
        pe = w4.remote_malloc(E.nbytes, 1)
        pf = w4.remote_malloc(4 * m * n, 1)
        w4.remote_copy_to(pe, E, 1)

        def l3_orch(o, args, cfg):
            o.submit_next_level(hl, args3(*(b.tensor(s, "float32") for b, s in zip(lb, shapes)), shapes), worker=0)

        def l4(o, args, cfg):
            o.submit_next_level(l3_orch, None, worker=0)
            for r in (1, 2):
                o.submit_next_level(RemoteCallable("simpler_remote_orchs:gemm"), args3(*rb[r], shapes), worker=r)
            o.submit_next_level("simpler_remote_orchs:gemm", args3(rb[1][2], pe, pf, [(m, n), (n, n), (m, n)]),
                                worker=1)

        w4.run(l4)
        got = [lb[2].numpy((m, n), "float32").copy()]
        for r in (1, 2):
            c = np.empty((m, n), np.float32)
            w4.remote_copy_from(c, rb[r][2], r)
            got.append(c)
        F = np.empty((m, n), np.float32)
        w4.remote_copy_from(F, pf, 1)
        for i in range(3):
            np.testing.assert_array_equal(got[i], l3[i])
        np.testing.assert_allclose(F, l3[1].astype(np.float64) @ E, rtol=1e-4, atol=1e-4)
        pids = [ep.pid for ep in w4._remote_eps]
    finally:
        w4.close()
        local.close()
    deadline = time.time() + 10
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids), "session processes outlived close()"


def test_remote_buffers_round_trip_and_are_checked(daemons, monkeypatch):
    d = daemons()
    monkeypatch.setattr(P, "CHUNK_BYTES", 1000)  # several pieces per copy on our side
    monkeypatch.setattr(P, "INLINE_COPY_BYTES", 0)  # every copy streamed
    with Worker(4, platform="cpu") as w4:
        r = w4.add_remote_worker(d.spec())
        w4.init()
        data = np.random.default_rng(2).integers(0, 255, 5000, dtype=np.uint8)
        p = w4.remote_malloc(5000, r)
        w4.remote_copy_to(p, data, r)
        w4.remote_copy_to(p + 10, b"\x01\x02\x03", r)  # an interior update
        out = np.zeros(5000, np.uint8)
        w4.remote_copy_from(out, p, r)
        ref = data.copy()
        ref[10:13] = [1, 2, 3]
        np.testing.assert_array_equal(out, ref)
        with pytest.raises(ValueError, match="not inside one allocation"):
            w4.remote_copy_from(np.zeros(10, np.uint8), p + 4995, r)
        with pytest.raises(ValueError, match="not a remote worker"):
            w4.remote_malloc(16, 7)
        # A local buffer cannot be named by a remote task.
        local = w4.create_buffer(64)

        def bad(o, args, cfg):
            t = ChipStorageTaskArgs()
            t.add_tensor(local.tensor((16,), "float32"), D.IN)
            o.submit_next_level("simpler_remote_orchs:nap", t, worker=r)

        with pytest.raises(ValueError, match="remote_malloc memory"):
            w4.run(bad)
        w4.remote_free(p, r)
        with pytest.raises(ValueError, match="not an allocation"):
            w4.remote_free(p, r)


@contextlib.contextmanager
def _one_remote(daemons):
    """A Worker(4) with one remote worker: (the Worker, its id, its endpoint)."""
    d = daemons()
    with Worker(4, platform="cpu") as w4:
        r = w4.add_remote_worker(d.spec())
        w4.init()
        yield w4, r, w4._remote_ep(r)


def test_streamed_copies_go_straight_into_place_and_a_refused_one_keeps_the_lane_in_step(daemons, monkeypatch):
    # Bigger than a MAC slice on both sides, in data frames of 1 MiB + 1 from
    # this side (the session takes whatever frame size arrives) and of its
    # own size back.
    monkeypatch.setattr(P, "CHUNK_BYTES", (1 << 20) + 1)
    with _one_remote(daemons) as (w4, r, ep):
        p = w4.remote_malloc(3 << 20, r)
        data = np.random.default_rng(3).integers(0, 255, 3 << 20, dtype=np.uint8)
        w4.remote_copy_to(p, data, r)
        out = np.full(3 << 20, 7, np.uint8)
        w4.remote_copy_from(out, p, r)
        np.testing.assert_array_equal(out, data)
        # Ranges the session refuses (the parent's own check bypassed): its data
        # frames are read and dropped, the error names the call, and the lane
        # stays in step for what follows.
        with pytest.raises(SimplerError, match="remote_copy_to: .*not inside one remote allocation"):
            ep.copy_to(p + (3 << 20) - 5, memoryview(bytes(3 << 20)))
        sink = memoryview(bytearray(100))
        with pytest.raises(SimplerError, match="remote_copy_from: .*not inside one remote allocation"):
            ep.copy_from(sink, p + (3 << 20) - 5)
        assert bytes(sink) == bytes(100)
        w4.remote_copy_to(p + 5, b"\x01\x02", r)
        small = np.zeros(8, np.uint8)
        w4.remote_copy_from(small, p, r)
        np.testing.assert_array_equal(small, np.concatenate([data[:5], [1, 2], data[7:8]]))
        # Empty copies are requests without data frames.
        w4.remote_copy_to(p, b"", r)
        w4.remote_copy_from(bytearray(), p, r)


def test_copies_at_the_inline_limit_and_past_it(daemons):
    # (Which frames each size travels in: test_simpler_l4_copies.py.)
    with _one_remote(daemons) as (w4, r, ep):
        n = P.INLINE_COPY_BYTES
        p = w4.remote_malloc(2 * n + 2, r)
        rng = np.random.default_rng(4)
        for size in (1, n, n + 1):  # inline up to the limit, streamed past it
            data = rng.integers(0, 255, size, dtype=np.uint8)
            w4.remote_copy_to(p + 1, data, r)
            out = np.full(size, 7, np.uint8)
            w4.remote_copy_from(out, p + 1, r)
            np.testing.assert_array_equal(out, data)
        # A range the session refuses (the parent's own check bypassed): the error
        # names the call, the destination stays as it was, the lane stays in step.
        with pytest.raises(SimplerError, match="remote_copy_to: .*not inside one remote allocation"):
            ep.copy_to(p + 2 * n, memoryview(bytes(5)))
        sink = memoryview(bytearray(b"\x05" * 100))
        with pytest.raises(SimplerError, match="remote_copy_from: .*not inside one remote allocation"):
            ep.copy_from(sink, p + 2 * n)
        assert bytes(sink) == b"\x05" * 100
        tail = np.zeros(2, np.uint8)
        w4.remote_copy_from(tail, p + n, r)
        np.testing.assert_array_equal(tail, data[-2:])
        w4.remote_copy_to(p, b"\x09", r)
        one = np.zeros(1, np.uint8)
        w4.remote_copy_from(one, p, r)
        assert one[0] == 9


def test_the_channel_receives_into_a_writable_buffer_only():
    from tensorcore import TensorcoreError

    client, server, c_relay, s_relay, keep = _relayed_channels(os.urandom(32))
    client.send(b"0123456789", 10)
    s_relay.sendall(_raw_frame(c_relay))
    with pytest.raises(ValueError, match="read-only"):
        server.recv_into(b"x" * 10, 10)
    dst = np.zeros(16, np.uint8)
    assert server.recv_into(dst, 10) == 10
    assert bytes(dst[:10]) == b"0123456789" and not dst[10:].any()
    client.send(b"0123456789", 10)
    s_relay.sendall(_raw_frame(c_relay))
    with pytest.raises(TensorcoreError, match="10-byte frame"):
        server.recv_into(np.zeros(9, np.uint8), 10)
    for ch in (client, server):
        ch.close()


def test_a_failing_remote_orchestration_fails_the_run_naming_the_worker(daemons):
    d = daemons()
    with Worker(4, platform="cpu") as w4:
        r = w4.add_remote_worker(d.spec())
        w4.init()

        def orch(o, args, cfg):
            o.submit_next_level("simpler_remote_orchs:fail", None, worker=r)

        with pytest.raises(SimplerError, match=r"remote worker 0 .*failed on purpose"):
            w4.run(orch)

        def missing(o, args, cfg):
            o.submit_next_level("simpler_remote_orchs:no_such_fn", None, worker=r)

        with pytest.raises(SimplerError, match="no_such_fn"):
            w4.run(missing)
        w4.run(lambda o, a, c: o.submit_next_level("simpler_remote_orchs:pid", None, worker=r))  # still usable


def test_a_wrong_key_is_refused_before_any_task(daemons):
    d = daemons()
    w4 = Worker(4, platform="cpu")
    w4.add_remote_worker(d.spec(key=os.urandom(32)))
    with pytest.raises(SimplerError, match="authentication failed"):
        w4.init()
    w4.close()
    with pytest.raises(ValueError, match="at least 32"):
        RemoteWorkerSpec(address=d.address, key=b"short")
    # The daemon goes on serving, and the refused session left nothing behind.
    with Worker(4, platform="cpu") as ok:
        ok.add_remote_worker(d.spec())
        ok.init()
    deadline = time.time() + 10
    while descendants(d.proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert descendants(d.proc.pid) == []


def test_a_daemon_killed_mid_task_fails_the_run_in_time_and_close_is_clean(daemons):
    d = daemons()
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=5)
    r = w4.add_remote_worker(d.spec(num_sub_workers=1))
    try:
        w4.init()
        tree = descendants(d.proc.pid)
        assert tree  # the session and its level-3 children

        def orch(o, args, cfg):
            t = ChipStorageTaskArgs()
            t.add_scalar(20000)
            o.submit_next_level("simpler_remote_orchs:nap", t, worker=r)

        h = w4.submit(orch)
        time.sleep(0.3)
        t0 = time.time()
        d.proc.kill()
        with pytest.raises(SimplerError, match=r"remote worker 0 .*lost its session.*while running task"):
            h.wait(30)
        assert time.time() - t0 < 5 + 2
        with pytest.raises(SimplerError, match="lost its session"):
            w4.run(orch)  # later tasks fail at once
    finally:
        w4.close()
    d.proc.wait()
    deadline = time.time() + 10
    while any(alive(p) for p in tree) and time.time() < deadline:
        time.sleep(0.05)
    assert not [p for p in tree if alive(p)], "processes of the killed daemon's session survived"


def test_a_silent_session_is_declared_dead_after_the_timeout(daemons):
    d = daemons()
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=1.0)
    r = w4.add_remote_worker(d.spec())
    try:
        w4.init()
        session = w4._remote_eps[0].pid
        os.kill(session, signal.SIGSTOP)

        def orch(o, args, cfg):
            o.submit_next_level("simpler_remote_orchs:pid", None, worker=r)

        t0 = time.time()
        with pytest.raises(SimplerError, match="remote_session_timeout_s=1 s"):
            w4.run(orch)
        assert time.time() - t0 < 1.0 + 2.5
    finally:
        t0 = time.time()
        w4.close()
        assert time.time() - t0 < 5
        d.proc.kill()  # the stopped session dies with it
    d.proc.wait()
    deadline = time.time() + 10
    while alive(session) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(session)


def test_a_session_silent_in_the_middle_of_copies_fails_them_in_time(daemons):
    """A copy to a stopped session blocks once the sockets' buffers are full;
    one from it waits for a reply: both end with the session's timeout."""
    d = daemons()
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=1.0)
    r = w4.add_remote_worker(d.spec())
    try:
        w4.init()
        p = w4.remote_malloc(64 << 20, r)
        session = w4._remote_eps[0].pid
        os.kill(session, signal.SIGSTOP)
        t0 = time.time()
        with pytest.raises(SimplerError, match="remote_session_timeout_s=1 s"):
            w4.remote_copy_to(p, np.zeros(64 << 20, np.uint8), r)
        assert time.time() - t0 < 1.0 + 2.5
        with pytest.raises(SimplerError, match="remote_session_timeout_s=1 s"):
            w4.remote_copy_from(np.zeros(1 << 20, np.uint8), p, r)
    finally:
        t0 = time.time()
        w4.close()
        assert time.time() - t0 < 5
        d.proc.kill()
    d.proc.wait()
    deadline = time.time() + 10
    while alive(session) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(session)


# ---- frames --------------------------------------------------------------------

def test_the_decoder_refuses_malformed_frames():
    good = P.encode(P.COMPLETION, P.completion_body(7, 0, "ok"))
    assert P.parse_completion(P.decode(good, P.COMMAND_TYPES)[1]) == (7, 0, "ok")
    cases = {
        "truncated frame": good[:5],
        "magic": b"XXXX" + good[4:],
        "version": good[:4] + struct.pack("<H", 99) + good[6:],
        "announces": good[:-1],
        "unexpected frame type": P.encode(P.HEARTBEAT, P.heartbeat_body(1)),
    }
    for what, frame in cases.items():
        with pytest.raises(P.ProtocolError, match=what):
            P.decode(frame, P.COMMAND_TYPES)
    body = P.task_body(1, "m:f", {}, bytes([1, 3]), bytes(192), [5])
    assert P.parse_task(body)[5] == [5]
    # Pre-encoded name, config and scalars (as a sender caches them) make the same body.
    assert P.task_body(1, b"m:f", b"{}", bytes([1, 3]), bytes(192), struct.pack("<Q", 5)) == body
    cfg_body = P.task_body(2, "m:f", {"block_dim": 2}, b"", b"", [])
    first = P.parse_task(cfg_body)[2]
    first["block_dim"] = 7  # the caller's own dict: the next parse is unaffected
    assert P.parse_task(cfg_body)[1:3] == ("m:f", {"block_dim": 2})
    for cut in (3, 20, len(body) - 1):
        with pytest.raises(P.ProtocolError):
            P.parse_task(body[:cut])
    with pytest.raises(P.ProtocolError, match="at most"):
        P.parse_task(struct.pack("<QII", 1, 0, 0) + struct.pack("<II", 100000, 0))
    with pytest.raises(P.ProtocolError, match="announces"):
        P.parse_completion(struct.pack("<QiI", 1, 1, 50) + b"short")


def test_adopted_task_arguments_make_their_tensors_on_demand():
    """A remote task's arguments (ChipStorageTaskArgs._adopt, as the session
    makes them from a TASK frame): every tensor reachable as from a list,
    each made once, the directions checked, and the list growable."""
    from simpler._lib import CChipTensor
    from simpler.task_interface import ArgDirection as D, ChipStorageTaskArgs, ChipTensor, DataType

    made = [ChipTensor.make(0x1000 * (i + 1), (i + 1,), DataType.FLOAT32) for i in range(5)]
    descs = (CChipTensor * 5).from_buffer_copy(b"".join(bytes(t._c) for t in made))
    a = ChipStorageTaskArgs._adopt(descs, bytes([1, 2, 3, 1, 2]), [7, 8])
    assert a.tensor_count == 5 and a.scalar(1) == 8
    assert [t.data_ptr for t in a._tensors] == [t.data_ptr for t in made]
    assert a.tensor(-1).shape == (5,) and a.tensor(-1) is a.tensor(4)  # made once
    assert [t.shape for t in a._tensors[1:3]] == [(2,), (3,)]
    with pytest.raises(IndexError):
        a.tensor(5)
    assert a._directions == [D.IN, D.OUT, D.INOUT, D.IN, D.OUT]
    a.add_tensor(made[0], D.IN)
    assert a.tensor_count == 6 and a.tensor(5) is made[0] and a.tensor(4).shape == (5,)
    for bad in (bytes([1, 0, 1, 1, 1]), bytes([1, 1, 9, 1, 1])):  # SCALAR (0) or no direction at all
        with pytest.raises(ValueError, match="is not IN, OUT or INOUT"):
            ChipStorageTaskArgs._adopt(descs, bad, [])
    with pytest.raises(ValueError, match="a direction each"):
        ChipStorageTaskArgs._adopt(descs, bytes([1, 1]), [])


def _session_closes(sock, timeout=10.0) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_malformed_and_truncated_frames_end_the_connection(daemons):
    from tensorcore import Channel

    d = daemons()
    # Before the handshake: a length prefix announcing more than arrives.
    with socket.create_connection((d.host, d.port)) as s:
        s.sendall(struct.pack("<I", 1000) + b"abc")
        s.shutdown(socket.SHUT_WR)
        assert _session_closes(s)
    # After a valid handshake: a frame that is not a level-4 frame, and a
    # CONTROL frame cut short.
    # (Copy requests that do not add up: test_simpler_l4_copies.py.)
    for payload in (b"garbage that is no frame", P.encode(P.CONTROL, P.control_body(0, {"op": "open"}))[:-3],
                    P.encode(P.TASK, P.task_body(1, "m:f", {}, b"", b"", []))):
        with socket.create_connection((d.host, d.port)) as s:
            ch = Channel.open(s, server=False, keys=P.keyring(d.key), timeout=10)
            ch.send(payload, 10)
            with pytest.raises(Exception):
                ch.recv(P.MAX_FRAME_BYTES, 10)
            ch.close()
    # The daemon is unharmed.
    with Worker(4, platform="cpu") as w4:
        w4.add_remote_worker(d.spec())
        w4.init()


def _relayed_channels(key):
    """A client and a server Channel whose frames a test moves itself
    (socket pairs on each side), after relaying the handshake."""
    import threading

    from tensorcore import Channel

    c_ours, c_relay = socket.socketpair()
    s_ours, s_relay = socket.socketpair()
    opened = {}
    t = threading.Thread(target=lambda: opened.setdefault("server", Channel.open(s_ours, server=True,
                                                                                 keys=P.keyring(key), timeout=10)))
    t.start()
    u = threading.Thread(target=lambda: opened.setdefault("client", Channel.open(c_ours, server=False,
                                                                                 keys=P.keyring(key), timeout=10)))
    u.start()
    for i in range(4):  # hello, challenge, proof, accept
        src, dst = (c_relay, s_relay) if i % 2 == 0 else (s_relay, c_relay)
        dst.sendall(_raw_frame(src))
    t.join()
    u.join()
    return opened["client"], opened["server"], c_relay, s_relay, (c_ours, s_ours)


def _raw_frame(sock) -> bytes:
    """One frame as it travels: the u32 length, then what it announces."""
    def exact(n):
        out = b""
        while len(out) < n:
            got = sock.recv(n - len(out))
            assert got, "the peer closed"
            out += got
        return out

    head = exact(4)
    return head + exact(struct.unpack("<I", head)[0])


def test_the_channel_refuses_altered_replayed_and_reordered_frames():
    from tensorcore import TensorcoreError

    key = os.urandom(32)
    # A frame sent as parts arrives whole; copy=False gives the channel's own buffer.
    client, server, c_relay, s_relay, keep = _relayed_channels(key)
    frame = P.control_frame(7, {"op": "copy_to", "addr": 0}, np.arange(5000, dtype=np.uint16).view(np.uint8))
    assert isinstance(frame, list) and len(frame) == 2
    client.send(frame, 10)
    raw = _raw_frame(c_relay)
    assert len(raw) == 4 + P.parts_bytes(frame) + 16  # the payload as sent, then a 16-byte tag
    s_relay.sendall(raw)
    view = server.recv(P.MAX_FRAME_BYTES, 10, copy=False)
    assert isinstance(view, memoryview) and bytes(view) == b"".join(bytes(p) for p in frame)
    _, body = P.decode(view, {P.CONTROL})
    assert P.parse_control(body)[2] == np.arange(5000, dtype=np.uint16).tobytes()
    # The same bytes again (a replay): refused, and the channel is done.
    s_relay.sendall(raw)
    with pytest.raises(TensorcoreError) as e:
        server.recv(P.MAX_FRAME_BYTES, 10)
    assert e.value.status == _AUTH and "MAC" in str(e.value)
    for ch in (client, server):
        ch.close()
    # A bit flipped in the frame's header, in its data, or in its tag.
    for at in (4 + 1, 4 + 100, -1):
        client, server, c_relay, s_relay, keep = _relayed_channels(key)
        client.send(P.encode(P.TASK, P.task_body(1, "m:f", {}, bytes(2), bytes(192), [])), 10)
        raw = bytearray(_raw_frame(c_relay))
        raw[at] ^= 0x04
        s_relay.sendall(raw)
        with pytest.raises(TensorcoreError) as e:
            server.recv(P.MAX_FRAME_BYTES, 10)
        assert e.value.status == _AUTH, at
        for ch in (client, server):
            ch.close()
    # Two frames delivered in the wrong order.
    client, server, c_relay, s_relay, keep = _relayed_channels(key)
    client.send(P.encode(P.HEARTBEAT, P.heartbeat_body(1)), 10)
    client.send(P.encode(P.HEARTBEAT, P.heartbeat_body(2)), 10)
    first, second = _raw_frame(c_relay), _raw_frame(c_relay)
    s_relay.sendall(second + first)
    with pytest.raises(TensorcoreError) as e:
        server.recv(64, 10)
    assert e.value.status == _AUTH
    # An idle receive times out without breaking a channel.
    with pytest.raises(TensorcoreError) as e:
        client.recv(64, 0.05)
    assert e.value.status == _TIMEOUT
    for ch in (client, server):
        ch.close()


def test_a_peer_of_the_old_handshake_version_is_refused(daemons):
    d = daemons()
    with socket.create_connection((d.host, d.port)) as s:
        hello = b"TCAUTH01" + bytes([1, 2]) + struct.pack("<Q", 0xFFFFFFFF) + os.urandom(32)
        s.sendall(struct.pack("<I", len(hello)) + hello)
        assert _raw_frame(s)[4:] == b"R"  # refused at the hello, before any challenge
        assert _session_closes(s)
    # The daemon is unharmed.
    with Worker(4, platform="cpu") as w4:
        w4.add_remote_worker(d.spec())
        w4.init()


def test_level4_argument_checks(daemons):
    with pytest.raises(ValueError, match="level-4"):
        Worker(3, platform="cpu").add_remote_worker(RemoteWorkerSpec(address="127.0.0.1:1", key=os.urandom(32)))
    with pytest.raises(ValueError, match="HOST:PORT"):
        RemoteWorkerSpec(address="nowhere", key=os.urandom(32))
    with pytest.raises(ValueError, match="module:qualname"):
        RemoteCallable("no_colon")
    # Timeouts that the channel's milliseconds cannot hold (or no number at all) are refused up front.
    for key in ("remote_session_timeout_s", "startup_timeout_s", "control_timeout_s"):
        for bad in (0, -1, float("nan"), float("inf"), 2e9, True, "5"):
            with pytest.raises(ValueError, match=key):
                Worker(4, platform="cpu", **{key: bad})
    Worker(4, platform="cpu", remote_session_timeout_s=1e9, startup_timeout_s=0.5, control_timeout_s=3).close()


def test_the_daemon_refuses_a_key_file_others_can_read(tmp_path):
    kf = tmp_path / "open.key"
    kf.write_bytes(os.urandom(32))
    os.chmod(kf, 0o644)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "simpler.remote_worker", "--listen", "127.0.0.1:0", "--key-file",
                        str(kf)], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "chmod 600" in p.stderr
    os.chmod(kf, 0o600)
    kf.write_bytes(b"too short\n")
    p = subprocess.run([sys.executable, "-m", "simpler.remote_worker", "--listen", "127.0.0.1:0", "--key-file",
                        str(kf)], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "at least 32" in p.stderr


# ---- concurrency in a session ----------------------------------------------------

def _stamp_args(ptr, ms):
    t = ChipStorageTaskArgs()
    t.add_tensor(ChipTensor.make(ptr, (2,), DataType.FLOAT64), D.OUT)
    t.add_scalar(ms)
    return t


def test_two_long_tasks_on_one_remote_worker_overlap(daemons):
    d = daemons()
    nap_ms = 800
    with Worker(4, platform="cpu") as w4:
        r = w4.add_remote_worker(d.spec(num_sub_workers=2))
        w4.init()
        stamps = [w4.remote_malloc(16, r) for _ in range(2)]

        def orch(o, args, cfg):
            for p in stamps:
                o.submit_next_level("simpler_remote_orchs:slow_stamp", _stamp_args(p, nap_ms), worker=r)

        w4.run(orch)
        spans = []
        for p in stamps:
            out = np.zeros(2, np.float64)
            w4.remote_copy_from(out, p, r)
            spans.append(out)
        assert all(s[1] - s[0] >= nap_ms / 1000 for s in spans), spans
        # Both ran at once: each started before the other ended.
        assert max(s[0] for s in spans) < min(s[1] for s in spans), spans

        # A failure next to a long task: the run reports the failure, after
        # the long task has finished (its stamp is written).
        p = stamps[0]
        w4.remote_copy_to(p, np.zeros(2), r)

        def mixed(o, args, cfg):
            o.submit_next_level("simpler_remote_orchs:slow_stamp", _stamp_args(p, 300), worker=r)
            o.submit_next_level("simpler_remote_orchs:fail", None, worker=r)

        with pytest.raises(SimplerError, match="failed on purpose"):
            w4.run(mixed)
        out = np.zeros(2, np.float64)
        w4.remote_copy_from(out, p, r)
        assert out[1] > out[0] > 0


def test_completions_that_arrive_during_copies_reach_their_run(daemons, monkeypatch):
    """A copy reads the lane itself until its reply: a task's COMPLETION
    that comes first is taken on the way, and the run still ends."""
    d = daemons()
    with Worker(4, platform="cpu") as w4:
        r = w4.add_remote_worker(d.spec(num_sub_workers=1))
        w4.init()
        ep = w4._remote_ep(r)
        stamp, scratch = w4.remote_malloc(16, r), w4.remote_malloc(4096, r)
        seen = []
        real_take = ep._take
        monkeypatch.setattr(ep, "_take", lambda frame, engine=False: (seen.append(bytes(frame[6:8])),
                                                                      real_take(frame, engine))[1])

        def orch(o, args, cfg):
            o.submit_next_level("simpler_remote_orchs:slow_stamp", _stamp_args(stamp, 50), worker=r)

        h = w4.submit(orch)
        rng = np.random.default_rng(21)
        t0 = time.time()
        while time.time() - t0 < 0.5:
            data = rng.integers(0, 255, 4096, dtype=np.uint8)
            w4.remote_copy_to(scratch, data, r)
            out = np.zeros(4096, np.uint8)
            w4.remote_copy_from(out, scratch, r)
            np.testing.assert_array_equal(out, data)
        assert struct.pack("<H", P.COMPLETION) in seen  # taken by a copy's wait
        h.wait(10)
        out = np.zeros(2)
        w4.remote_copy_from(out, stamp, r)
        assert out[1] - out[0] >= 0.05


def test_a_session_without_sub_workers_runs_one_task_at_a_time(daemons):
    d = daemons()
    with Worker(4, platform="cpu") as w4:
        r = w4.add_remote_worker(d.spec(num_sub_workers=1))
        w4.init()
        stamps = [w4.remote_malloc(16, r) for _ in range(2)]

        def orch(o, args, cfg):
            for p in stamps:
                o.submit_next_level("simpler_remote_orchs:slow_stamp", _stamp_args(p, 200), worker=r)

        w4.run(orch)
        spans = []
        for p in stamps:
            out = np.zeros(2, np.float64)
            w4.remote_copy_from(out, p, r)
            spans.append(sorted(out))
        spans.sort()
        assert spans[0][1] <= spans[1][0], spans  # capacity 1: the second started after the first ended


# ---- export / import ---------------------------------------------------------------

def _affine_args(ptr, mul, add, nap_ms, n=16):
    t = ChipStorageTaskArgs()
    t.add_tensor(ChipTensor.make(ptr, (n,), DataType.FLOAT32), D.INOUT)
    for s in (mul, add, nap_ms):
        t.add_scalar(s)
    return t


def test_exported_memory_is_shared_by_another_session_and_the_parent_in_task_order(daemons):
    import ctypes

    import simpler_remote_orchs as R
    from simpler import RemoteExport, SimplerUnsupportedError

    d0, d1 = daemons(), daemons()
    local = Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1)
    h_local = local.register(R.affine_sub)
    w4 = Worker(4, platform="cpu")
    try:
        assert w4.add_worker(local) == 0
        owner = w4.add_remote_worker(d0.spec(num_sub_workers=1))
        peer = w4.add_remote_worker(d1.spec(num_sub_workers=1))
        w4.init()
        x = np.arange(16, dtype=np.float32)
        p = w4.remote_malloc(x.nbytes, owner)
        w4.remote_copy_to(p, x, owner)
        exp = w4.remote_export(p, owner)
        assert isinstance(exp, RemoteExport) and exp.worker == owner and exp.nbytes == x.nbytes
        q = w4.remote_import(exp, peer)
        mine = w4.remote_import(exp)  # this process: the local workers' tasks name it
        view = np.frombuffer((ctypes.c_char * x.nbytes).from_address(mine), np.float32)
        np.testing.assert_array_equal(view, x)  # the owner's bytes, no copy

        def local_orch(o, args, cfg):
            o.submit_sub(h_local, _affine_args(mine, 3, 0, 0))

        def orch(o, args, cfg):
            # peer: x*2 after a nap; then owner: +1; then the parent's local worker: *3. Each must wait
            # for the one before (they name the same bytes through three addresses), else the
            # nap-free later ones would go first and the result differ.
            o.submit_next_level("simpler_remote_orchs:affine", _affine_args(q, 2, 0, 300), worker=peer)
            o.submit_next_level("simpler_remote_orchs:affine", _affine_args(p, 1, 1, 0), worker=owner)
            o.submit_next_level(local_orch, None, worker=0)

        w4.run(orch)
        want = (x * 2 + 1) * 3
        np.testing.assert_array_equal(view, want)
        got = np.zeros_like(x)
        w4.remote_copy_from(got, q, peer)  # copies through an import too
        np.testing.assert_array_equal(got, want)

        # Lifetimes: the owner cannot free what others map; releases are checked.
        with pytest.raises(ValueError, match="imported by remote worker 2, this Worker"):
            w4.remote_free(p, owner)
        w4.remote_release_import(q, peer)
        with pytest.raises(ValueError, match="not an import"):
            w4.remote_release_import(q, peer)
        # The session stopped serving copies there too (the parent's own check bypassed).
        with pytest.raises(SimplerError, match="remote_copy_from: .*not inside one remote allocation"):
            w4._remote_ep(peer).copy_from(memoryview(bytearray(x.nbytes)), q)
        with pytest.raises(ValueError, match="not inside one allocation"):
            w4.remote_copy_from(got, q, peer)
        del view
        w4.remote_release_import(mine)
        with pytest.raises(ValueError, match="not an import"):
            w4.remote_release_import(mine, 0)
        w4.remote_free(p, owner)
        with pytest.raises(SimplerError, match="remote_copy_to: .*not inside one remote allocation"):
            w4._remote_ep(owner).copy_to(p, memoryview(x.tobytes()))  # freed: no longer served either
        with pytest.raises(ValueError, match="not a live export"):
            w4.remote_import(exp, peer)

        # Misuse: unknown handles, the owner importing its own memory, exports of a part or of an
        # import, and an export from another host.
        with pytest.raises(TypeError, match="remote_export returned"):
            w4.remote_import(0x1234, peer)
        p2 = w4.remote_malloc(64, owner)
        exp2 = w4.remote_export(p2, owner)
        with pytest.raises(ValueError, match="owns this memory"):
            w4.remote_import(exp2, owner)
        with pytest.raises(ValueError, match="whole allocation"):
            w4.remote_export(p2 + 8, owner)
        q2 = w4.remote_import(exp2, peer)
        with pytest.raises(ValueError, match="is an import"):
            w4.remote_export(q2, peer)
        exp2.host = "elsewhere/0"
        with pytest.raises(SimplerUnsupportedError, match="another host"):
            w4.remote_import(exp2, peer)
        with pytest.raises(SimplerUnsupportedError, match="another host"):
            w4.remote_import(exp2)
        # An import still mapped at close() is released with its session.
    finally:
        w4.close()
        local.close()


# ---- the daemon ----------------------------------------------------------------------

def test_sessions_over_the_daemons_limit_are_refused_with_a_message(daemons):
    d = daemons(extra=["--max-sessions", "1"])
    first = Worker(4, platform="cpu")
    first.add_remote_worker(d.spec())
    try:
        first.init()
        session = first._remote_eps[0].pid
        second = Worker(4, platform="cpu")
        second.add_remote_worker(d.spec())
        t0 = time.time()
        with pytest.raises(SimplerError, match="serves at most 1 sessions at once and 1 are open"):
            second.init()
        assert time.time() - t0 < 10  # answered, not left to time out
        second.close()
    finally:
        first.close()
    # Once the session is gone the daemon serves again.
    deadline = time.time() + 10
    while alive(session) and time.time() < deadline:
        time.sleep(0.05)
    with Worker(4, platform="cpu") as third:
        r = third.add_remote_worker(d.spec())
        third.init()
        third.run(lambda o, a, c: o.submit_next_level("simpler_remote_orchs:pid", None, worker=r))


def _rewrite_key(path, key: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, key + b"\n")
    os.close(fd)


def test_sighup_rotates_the_daemons_key(daemons):
    d = daemons()
    old_key, new_key = d.key, os.urandom(32)
    before = Worker(4, platform="cpu")
    r = before.add_remote_worker(d.spec())
    try:
        before.init()
        _rewrite_key(d.key_file, new_key)
        d.proc.send_signal(signal.SIGHUP)
        assert "reloaded the key file" in d.proc.stdout.readline()
        stale = Worker(4, platform="cpu")
        stale.add_remote_worker(d.spec(key=old_key))
        with pytest.raises(SimplerError, match="authentication failed"):
            stale.init()
        stale.close()
        with Worker(4, platform="cpu") as fresh:
            fr = fresh.add_remote_worker(d.spec(key=new_key))
            fresh.init()
            fresh.run(lambda o, a, c: o.submit_next_level("simpler_remote_orchs:pid", None, worker=fr))
        # The session opened under the old key goes on.
        before.run(lambda o, a, c: o.submit_next_level("simpler_remote_orchs:pid", None, worker=r))
        # A file that holds no usable key is refused; the daemon keeps the key it has.
        _rewrite_key(d.key_file, b"short")
        d.proc.send_signal(signal.SIGHUP)
        assert "kept its key" in d.proc.stdout.readline()
        with Worker(4, platform="cpu") as again:
            again.add_remote_worker(d.spec(key=new_key))
            again.init()
    finally:
        before.close()


def test_the_daemon_is_installed_as_a_console_script():
    import importlib
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    mod, _, fn = scripts["simpler-remote-worker"].partition(":")
    main = getattr(importlib.import_module(mod), fn)
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert main(["--listen", "nowhere", "--key-file", "/nonexistent"]) == 2


def test_a_short_fuzz_of_the_frame_decoder_the_copy_server_and_a_live_session():
    """A bounded run of scripts/fuzz_l4_frames.py (the long run's figures
    are in bench/results/fuzzing.md): only ProtocolError comes out of the
    decoder, the library's copy server answers or refuses mutated copies
    without touching memory outside its range, and a session fed mutated
    frames answers or ends the connection, never hangs or dies with a
    traceback."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz_l4_frames", REPO / "scripts" / "fuzz_l4_frames.py")
    fz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fz)
    d = fz.fuzz_decoder(30.0, seed=11, max_execs=20000)
    assert d["execs"] == 20000 and d["failures"] == [], d["failures"][:3]
    assert d["ok"] > 0 and d["refused"] > 0  # both paths were exercised
    c = fz.fuzz_copy_server(60.0, seed=13, max_execs=1500)
    assert c["execs"] == 1500 and c["failures"] == [], c["failures"][:3]
    assert c["answered"] > 0 and c["refused"] > 0
    s = fz.fuzz_live(60.0, seed=12, max_execs=40)
    assert s["execs"] == 40 and s["failures"] == [], s["failures"][:3]
    assert s["alive"] > 0 and s["ended"] > 0
