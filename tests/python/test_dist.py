"""Distributed collectives, authentication and DiLoCo.

Multi-process tests run 2 or 4 ranks of dist_worker.py over loopback gloo
(every rank checks its own results against NumPy); single-process tests
cover the single backend, argument validation, the remote endpoint and the
state blobs. Timeouts are short so a regression fails instead of hanging.
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tensorcore as tc
from conftest import BF16, HAVE_CUDA, REPO

WORKER = Path(__file__).with_name("dist_worker.py")
HAVE_GLOO = tc.capability_available(tc.Context("cpu").runtime_capabilities(), tc.TC_CAPABILITY_DIST_GLOO)
needs_gloo = pytest.mark.skipif(not HAVE_GLOO, reason="gloo backend not built")
KEY = ("group", 1, b"k" * 32)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(scenario, rank, world, url, seed, extra="", env=None):
    """A rank's process. Its output goes to a file, not a pipe: a rank that
    writes more than a pipe holds (TC_TRACE=1) while another is waited for
    would block in the write and stall the group's collectives."""
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = str(REPO / "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TC_NUM_THREADS", "1")
    out = tempfile.TemporaryFile("w+")
    p = subprocess.Popen([sys.executable, str(WORKER), scenario, str(rank), str(world), url, str(seed), extra],
                         stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    p.output_file = out
    return p


def _output(p):
    p.output_file.seek(0)
    text = p.output_file.read()
    p.output_file.close()
    return text


def finish(procs, timeout=60):
    deadline = time.time() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.wait()
            raise AssertionError("a rank hung:\n" + "\n".join(_output(q) for q in procs))
    return [_output(p) for p in procs]


def results(out):
    kv = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            kv.update(dict(item.split("=", 1) for item in line[7:].split()))
    return kv


def run_group(scenario, world, seed, url=None, extra="", timeout=60, env=None):
    url = url or "gloo+tcp://127.0.0.1:%d" % free_port()
    procs = [spawn(scenario, r, world, url, seed, extra, env) for r in range(world)]
    outs = finish(procs, timeout)
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "rank %d failed (exit %s):\n%s" % (r, p.returncode, out)
    return outs


# ---- multi-process ---------------------------------------------------------------

# Where the buffers of a gloo test live: host memory read in place, or
# handled as device memory (TC_DIST_DEVICE_PATH=1: staged through page-locked
# host memory in chunks, the path of a CUDA context's buffers). TC_TRACE names
# every staged collective, so each test also checks which path ran.
PATHS = {"host": {}, "device-path": {"TC_DIST_DEVICE_PATH": "1", "TC_TRACE": "1"}}
STAGED = "staged through host memory"


def check_path(path, outs):
    for out in outs:
        assert (STAGED in out) == (path == "device-path"), out[-2000:]


# DiLoCo's outer step of device parameters runs as the backend's diloco_* ops.
DEVICE_OUTER_STEP = "op=diloco_update"


def check_outer_step_path(path, outs):
    for out in outs:
        assert (DEVICE_OUTER_STEP in out) == (path == "device-path"), out[-2000:]


@needs_gloo
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_and_dtype_matches_numpy(world, path, rng):
    check_path(path, run_group("collectives", world, int(rng.integers(1 << 30)), env=PATHS[path]))


@needs_gloo
@pytest.mark.parametrize("world,path", [(2, "host"), (2, "device-path"), (3, "device-path")])
def test_collectives_of_several_staging_chunks_match_numpy(world, path, rng):
    outs = run_group("collectives_large", world, int(rng.integers(1 << 30)), env=PATHS[path], timeout=120)
    check_path(path, outs)
    if path == "device-path":  # the 10 MB allreduce went in three chunks
        assert any(re.search(r"allreduce \(staged through host memory\).*in 3 chunks", o) for o in outs)


def _nccl_gpus():
    """How many GPUs an NCCL group can use here (0 when NCCL or CUDA is absent)."""
    try:
        with tc.Context("cuda") as c:
            if not tc.capability_available(c.runtime_capabilities(), tc.TC_CAPABILITY_DIST_NCCL):
                return 0
    except tc.TensorcoreError:
        return 0
    return tc.cuda_device_count()


@pytest.mark.skipif(_nccl_gpus() < 2, reason="NCCL with two GPUs not available")
def test_nccl_collectives_on_two_gpus(rng):
    run_group("nccl", 2, int(rng.integers(1 << 30)), timeout=180)


@needs_gloo
def test_three_ranks_and_file_rendezvous(tmp_path, rng):
    run_group("collectives", 3, int(rng.integers(1 << 30)))
    run_group("file", 2, 0, url="file://%s?timeout_ms=20000" % tmp_path)


@needs_gloo
@pytest.mark.parametrize("form", ["keywords", "legacy"])
def test_authenticated_group_refuses_an_impostor_and_forms(form):
    world = 3
    url = "gloo+tcp://127.0.0.1:%d" % free_port()
    procs = [spawn("auth", 0, world, url, 0, form)]
    impostor = spawn("auth_impostor", 1, world, url, 0, "1")
    out_imp = finish([impostor], 30)[0]
    assert impostor.returncode == 0, out_imp
    assert results(out_imp)["status"] == str(tc.TC_ERR_AUTH)
    procs += [spawn("auth", r, world, url, 0, form) for r in range(1, world)]
    outs = finish(procs, 60)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    assert int(results(outs[0])["failures"]) >= 1  # rank 0 counted the refusal


@needs_gloo
def test_wrong_key_is_refused_and_the_others_fail_clearly():
    url = "gloo+tcp://127.0.0.1:%d" % free_port()
    procs = [spawn("auth_bad", r, 2, url, 0) for r in range(2)]
    outs = finish(procs, 30)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    assert float(results(outs[1])["seconds"]) < 2.5  # refused at once, not at the deadline


@needs_gloo
def test_mesh_group_authenticated():
    ports = [free_port() for _ in range(2)]
    run_group("mesh", 2, 0, url="unused", extra=",".join(map(str, ports)))


@needs_gloo
def test_rendezvous_listener_is_closed_once_the_group_has_formed():
    outs = run_group("listener", 3, 0)
    for out in outs:
        assert results(out)["refused"] == "1", out


class _AlteringProxy:
    """Forwards connections to `port`; in the first one, flips a bit of the
    first reply after the handshake (the server's third frame), as an
    attacker on the path would."""

    def __init__(self, port):
        self.port = port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.url = "gloo+tcp://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            first = self.connections == 0
            self.connections += 1
            server = None
            for _ in range(200):  # rank 0 may not listen yet
                try:
                    server = socket.create_connection(("127.0.0.1", self.port))
                    break
                except ConnectionRefusedError:
                    time.sleep(0.05)
            threading.Thread(target=self._pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, 2 if first else None), daemon=True).start()

    @staticmethod
    def _read(s, n):
        b = b""
        while len(b) < n:
            chunk = s.recv(n - len(b))
            if not chunk:
                raise OSError("closed")
            b += chunk
        return b

    def _pump(self, src, dst, alter_frame):
        try:
            index = 0
            while True:
                head = self._read(src, 4)
                body = bytearray(self._read(src, int.from_bytes(head, "little")))
                if index == alter_frame:
                    body[-1] ^= 1  # the MAC's last byte
                dst.sendall(head + bytes(body))
                index += 1
        except OSError:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


@needs_gloo
def test_refusals_are_counted_on_a_nonzero_rank():
    """Rank 1's first store reply is altered on the way: rank 1 refuses it,
    counts it, connects again and the group forms; rank 0 saw nothing wrong."""
    port = free_port()
    url = "gloo+tcp://127.0.0.1:%d" % port
    proxy = _AlteringProxy(port)
    try:
        outs = run_group("refusals", 2, 0, url=url, extra=proxy.url)
    finally:
        proxy.close()
    r0, r1 = results(outs[0]), results(outs[1])
    assert int(r1["refusals"]) == 1 and int(r1["auth"]) == 1, outs[1]
    assert "integrity" in r1["last"], outs[1]
    assert proxy.connections == 2  # the altered connection, then the one made again
    assert int(r0["refusals"]) == 0, outs[0]


@needs_gloo
@pytest.mark.parametrize("how", ["exit", "hang"])
def test_dead_or_silent_peer_times_out(how):
    url = "gloo+tcp://127.0.0.1:%d" % free_port()
    procs = [spawn("death", r, 3, url, 0, how) for r in range(3)]
    outs = finish(procs, 40)
    for r in range(2):
        assert procs[r].returncode == 0, outs[r]
        kv = results(outs[r])
        assert kv["status"] == str(tc.TC_ERR_TIMEOUT)
        assert float(kv["seconds"]) < 5


@needs_gloo
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAVE_CUDA, reason="needs a usable CUDA device"))])
@pytest.mark.parametrize("how", ["kill", "hang"])
def test_diloco_worker_killed_mid_outer_step_then_resumed(tmp_path, rng, how, device):
    """A rank dies (or goes silent) just before an outer step's exchange:
    the other gets a clear error within the group timeout (5 s); both
    restart from their last checkpoints (state blob and parameters) and
    finish with the parameters of an uninterrupted run, bit for bit. On
    "cuda" the parameters live in device memory (staged through gloo)."""
    seed = int(rng.integers(1 << 30))
    env = {"TC_TEST_DIST_DEVICE": device}
    full, ck = tmp_path / "full", tmp_path / "ck"
    full.mkdir()
    ck.mkdir()
    run_group("diloco_kill", 2, seed, extra="full:%s" % full, timeout=120, env=env)
    url = "gloo+tcp://127.0.0.1:%d" % free_port()
    procs = [spawn("diloco_kill", r, 2, url, seed, "%s:%s" % (how, ck), env) for r in range(2)]
    outs = finish(procs, 120)
    assert procs[1].returncode == 9, outs[1]
    assert procs[0].returncode == 0, outs[0]
    kv = results(outs[0])
    assert int(kv["status"]) == tc.TC_ERR_TIMEOUT and "5000 ms" in outs[0], outs[0]
    assert float(kv["seconds"]) < 10, outs[0]  # the silent rank stays 12 s
    assert not (ck / "final-0.npy").exists()
    outs = run_group("diloco_kill", 2, seed, extra="resume:%s" % ck, timeout=120, env=env)
    assert all(results(o)["resumed_at"] == "3" for o in outs), outs
    for r in range(2):
        np.testing.assert_array_equal(np.load(ck / ("final-%d.npy" % r)), np.load(full / ("final-%d.npy" % r)))


@needs_gloo
def test_rendezvous_without_peers_times_out(cpu_ctx):
    t0 = time.time()
    with pytest.raises(tc.TensorcoreError) as e:
        cpu_ctx.dist("gloo", 2, 0, "gloo+tcp://127.0.0.1:%d" % free_port(), timeout=1.0)
    assert e.value.status == tc.TC_ERR_TIMEOUT
    assert time.time() - t0 < 5
    with pytest.raises(tc.TensorcoreError) as e:  # a joiner whose rank 0 never comes
        cpu_ctx.dist("gloo", 2, 1, "gloo+tcp://127.0.0.1:%d" % free_port(), timeout=1.0)
    assert e.value.status == tc.TC_ERR_TIMEOUT


@needs_gloo
@pytest.mark.parametrize("world,path", [(2, "host"), (4, "host"), (2, "device-path")])
def test_diloco_anchors_identical_and_outer_step_matches_numpy(world, path, rng):
    outs = run_group("diloco", world, int(rng.integers(1 << 30)), timeout=120, env=PATHS[path])
    check_path(path, outs)
    check_outer_step_path(path, outs)


@needs_gloo
def test_diloco_on_two_ranks_device_path_gives_the_host_paths_bits(rng):
    """Two gloo ranks, the same training both ways: the device path's outer
    steps (the exchange staged, the combine of two ranks' top-k pairs and the
    f16 sum on the device) leave every rank's parameters with the host
    path's bits."""
    seed = int(rng.integers(1 << 30))
    host = [results(o) for o in run_group("diloco_state", 2, seed, env=PATHS["host"])]
    dev = [results(o) for o in run_group("diloco_state", 2, seed, env=PATHS["device-path"])]
    assert len(host[0]) == 3 and host == dev


@needs_gloo
@pytest.mark.parametrize("path", PATHS)
def test_diloco_state_round_trip_continues_bit_identically(path, rng):
    outs = run_group("diloco_state", 2, int(rng.integers(1 << 30)), env=PATHS[path])
    check_path(path, outs)
    check_outer_step_path(path, outs)


# ---- single process: the single backend ------------------------------------------------

def test_single_backend_collectives_are_validated_no_ops(ctx, rng):
    """On every device (a CUDA context's buffers are device memory, copied by
    the device)."""
    cpu_ctx = ctx
    with cpu_ctx.dist("single", 1, 0, "single://test") as d:
        assert (d.world_size, d.rank, d.backend) == (1, 0, tc.TC_DIST_SINGLE)
        x = rng.standard_normal(33).astype(np.float32)
        b = cpu_ctx.buffer_from_array(x)
        for op in ("sum", "avg", "mean", "max", "min", tc.TC_REDUCE_SUM):
            d.allreduce(b, 33, "f32", op)
        d.broadcast(b, 33, "f32", 0)
        assert np.array_equal(b.to_numpy((33,), np.float32), x)
        dst = cpu_ctx.buffer_from_array(np.full(33, np.nan, np.float32))
        d.allgather(b, dst, 33)
        assert np.array_equal(dst.to_numpy((33,), np.float32), x)
        dst.write(np.full(33, np.nan, np.float32))
        d.reduce_scatter(b, dst, 33, "f32", "sum")
        assert np.array_equal(dst.to_numpy((33,), np.float32), x)
        d.barrier()
        assert d.bytes_sent == 0
        # The same validation as a real group.
        with pytest.raises(tc.TensorcoreError) as e:
            d.allreduce(b, 34)
        assert e.value.status == tc.TC_ERR_INVALID_ARG
        with pytest.raises(tc.TensorcoreError) as e:
            d.allreduce(b, 8, "i32")
        assert e.value.status == tc.TC_ERR_UNSUPPORTED_DTYPE
        with pytest.raises(tc.TensorcoreError) as e:
            d.broadcast(b, 8, "f32", root=1)
        assert e.value.status == tc.TC_ERR_INVALID_ARG
    assert tc.dist_init(cpu_ctx).world_size == 1  # defaults: single, world 1
    assert d.closed


def test_dist_argument_errors_leave_buffers_untouched(cpu_ctx):
    ctx = cpu_ctx
    ERR = tc.TensorcoreError

    def status(fn, *a, **k):
        with pytest.raises(ERR) as e:
            fn(*a, **k)
        return e.value.status

    assert status(ctx.dist, "single", 2, 0) == tc.TC_ERR_INVALID_ARG
    assert status(ctx.dist, "single", 1, 1) == tc.TC_ERR_INVALID_ARG
    assert status(ctx.dist, "gloo", 0, 0, "gloo+tcp://127.0.0.1:1") == tc.TC_ERR_INVALID_ARG
    assert status(ctx.dist, "ring", 2, 0, "gloo+tcp://127.0.0.1:1") == tc.TC_ERR_UNSUPPORTED
    assert status(ctx.dist, 9, 1, 0) == tc.TC_ERR_INVALID_ARG
    assert status(ctx.dist, "bogus", 1, 0) == tc.TC_ERR_INVALID_ARG
    assert status(ctx.dist, "nccl", 2, 0, "gloo+tcp://127.0.0.1:1") == tc.TC_ERR_UNSUPPORTED  # CPU context
    if HAVE_GLOO:
        for url in (None, "", "http://x:1", "gloo+tcp://127.0.0.1", "gloo+tcp://127.0.0.1:0", "gloo+tcp://:5",
                    "gloo+tcp://127.0.0.1:99999", "gloo+tcp://127.0.0.1:5?timeout_ms=-1",
                    "gloo+tcp://127.0.0.1:5?what=1", "file://relative"):
            assert status(ctx.dist, "gloo", 2, 0, url) == tc.TC_ERR_INVALID_ARG, url
    # Keys: short secrets, empty rings, file:// with authentication.
    assert status(ctx.dist_authenticated, "single", 1, 0, None, [("a", 1, b"x" * 31)]) == tc.TC_ERR_INVALID_ARG
    assert status(ctx.dist_authenticated, "single", 1, 0, None, []) == tc.TC_ERR_INVALID_ARG
    assert status(tc.dist_init_authenticated, ctx, "single", 1, 0, None, [("a", 1, b"x" * 32), ("b", 2, b"y" * 32)]) \
        == tc.TC_ERR_INVALID_ARG  # two identities and no local_identity
    assert status(tc.dist_init_authenticated, ctx, "single", 1, 0, None, [KEY], active_key_id=7) == \
        tc.TC_ERR_INVALID_ARG
    assert status(tc.dist_init_authenticated, ctx, "single", 1, 0, None, [KEY, KEY]) == tc.TC_ERR_INVALID_ARG
    if HAVE_GLOO:
        assert status(ctx.dist_authenticated, "gloo", 2, 0, "file:///tmp/x", [KEY]) == tc.TC_ERR_INVALID_ARG
        assert status(ctx.dist_authenticated, "gloo", 2, 0, "gloo+tcp://127.0.0.1:5", [KEY],
                      rank_identities=["group"]) == tc.TC_ERR_INVALID_ARG  # one identity for two ranks
        assert status(ctx.dist_authenticated, "gloo", 2, 0, "gloo+tcp://127.0.0.1:5", [KEY],
                      rank_identities=["other", "group"]) == tc.TC_ERR_INVALID_ARG  # rank 0 bound elsewhere
    with ctx.dist_authenticated("single", 1, 0, "single://a", {"identity": "g", "key_id": 3, "secret": b"s" * 32}) as d:
        assert d.auth_failure_count == 0
        assert (d.refusal_count, d.last_refusal) == (0, "")
    for fn in (tc.dist_refusal_count, tc.dist_last_refusal):
        assert status(fn, None) == tc.TC_ERR_INVALID_ARG
    with tc.dist_init(ctx) as d:
        x = np.arange(8, dtype=np.float32)
        b = ctx.buffer_from_array(x)
        small = ctx.buffer(16)
        for call, st in ((lambda: d.allreduce(b, 0), tc.TC_ERR_INVALID_SHAPE),
                         (lambda: d.allreduce(b, 8, op=7), tc.TC_ERR_INVALID_ARG),
                         (lambda: d.allreduce(b, 8, op="prod"), tc.TC_ERR_INVALID_ARG),
                         (lambda: d.allreduce(None, 8), tc.TC_ERR_INVALID_ARG),
                         (lambda: d.allgather(b, small, 8), tc.TC_ERR_INVALID_ARG),
                         (lambda: d.allgather(b, b, 8), tc.TC_ERR_INVALID_ARG),
                         (lambda: d.reduce_scatter(b, b, 8), tc.TC_ERR_INVALID_ARG),
                         (lambda: d.reduce_scatter(small, b, 8), tc.TC_ERR_INVALID_ARG),
                         (lambda: d.set_timeout(0), tc.TC_ERR_INVALID_ARG)):
            with pytest.raises(ERR) as e:
                call()
            assert e.value.status == st
            assert np.array_equal(b.to_numpy((8,), np.float32), x)
        with tc.Context("cpu") as other:
            ob = other.buffer(32)
            assert status(d.allreduce, ob, 8) == tc.TC_ERR_INVALID_ARG  # foreign context
        d.timeout = 2.5
        assert d.timeout == 2.5
    assert status(tc.allreduce, d, b, 8) == tc.TC_ERR_INVALID_ARG  # closed
    assert status(tc.allreduce, 0xdead0, b, 8) == tc.TC_ERR_INVALID_ARG  # not a handle


def test_context_closes_its_groups_and_diloco_first():
    ctx = tc.Context("cpu")
    d = ctx.dist("single", 1, 0)
    w = ctx.buffer_from_array(np.ones(4, np.float32))
    lo = d.diloco(inner_steps=1)
    lo.add_parameter("w", w, 4)
    with pytest.raises(tc.TensorcoreError) as e:  # C refuses: a DiLoCo still uses the group
        tc._errors.check(tc._api.dist._tc_dist_finalize(d.handle))
    assert e.value.status == tc.TC_ERR_INVALID_ARG
    with pytest.raises(tc.TensorcoreError) as e:  # raw shutdown refuses while the group is alive
        tc._errors.check(tc._lib.tc_shutdown(ctx.handle))
    assert e.value.status == tc.TC_ERR_INVALID_ARG
    ctx.close()
    assert lo.closed and d.closed and w.closed


def test_capability_bits(cpu_ctx):
    caps = cpu_ctx.runtime_capabilities()
    assert tc.capability_available(caps, "diloco")
    assert tc.capability_available(caps, tc.TC_CAPABILITY_DIST_GLOO) == HAVE_GLOO
    assert not tc.capability_available(caps, tc.TC_CAPABILITY_DIST_NCCL)  # a CPU context


# ---- DiLoCo in one process ------------------------------------------------------------------

def test_diloco_single_rank_outer_step_matches_numpy(ctx, rng):
    """On every device: a CUDA context's parameters are device memory, read
    and written through the host by the outer step."""
    n = 50
    x0 = rng.standard_normal(n).astype(np.float32)
    w = ctx.buffer_from_array(x0)
    assert tc.capability_available(ctx.runtime_capabilities(), "diloco")
    with ctx.dist("single", 1, 0, "single://diloco") as dist:
        with dist.diloco(inner_steps=2, outer_lr=0.5, outer_momentum=0.8, outer_optimizer="nesterov") as d:
            assert (d.world_size, d.rank) == (1, 0)
            d.add_parameter("w", w, num_elements=n, dtype="f32")
            anchor, v = x0.astype(np.float64), np.zeros(n)
            # The rates of the config, then a schedule set between outer steps.
            for outer, (lr, mu) in enumerate([(0.5, 0.8), (0.9, 0.3), (1.0, 0.0)]):
                if outer:
                    d.set_outer_hyperparameters(lr, mu)
                for s in range(2):
                    g = rng.standard_normal(n).astype(np.float32) * 0.1
                    w.write(w.to_numpy((n,), np.float32) - g)
                    due = d.step()
                theta = w.to_numpy((n,), np.float32).astype(np.float64)
                assert due
                d.apply_outer()
                delta = anchor - theta
                v = mu * v + delta
                anchor = anchor - lr * (delta + mu * v)
                np.testing.assert_allclose(w.to_numpy((n,), np.float32), anchor, rtol=1e-5, atol=1e-6)
            assert d.outer_steps_completed == 3 and d.inner_steps_completed == 6
            assert d.last_outer_bytes_sent == 0.0 and d.last_outer_step_seconds >= 0.0
            state, status, rid = d.async_poll()
            assert state == tc.TC_DILOCO_ASYNC_IDLE and rid == 3
            d.async_commit()  # nothing to commit: a no-op


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_diloco_async_keeps_local_progress(ctx, rng, dtype):
    n = 40
    npt = np.float32 if dtype == "f32" else BF16
    x0 = rng.standard_normal(n).astype(npt).astype(np.float32)  # representable in dtype
    w = ctx.buffer_from_array(x0.astype(npt))
    read = lambda: w.to_numpy((n,), npt).astype(np.float32)
    with ctx.dist("single", 1, 0) as dist, dist.diloco(inner_steps=1, outer_lr=1.0, outer_optimizer="sgd",
                                                           async_overlap=True) as d:
        d.add_parameter("w", w, n, dtype=dtype)
        theta1 = (x0 - rng.standard_normal(n)).astype(npt).astype(np.float32)
        w.write(theta1.astype(npt))
        d.step()
        d.apply_outer()  # snapshot Delta = x0 - theta1, exchange in the background
        theta2 = (theta1 - rng.standard_normal(n)).astype(npt).astype(np.float32)
        w.write(theta2.astype(npt))  # training goes on meanwhile
        d.async_wait()
        assert d.async_poll()[0] == tc.TC_DILOCO_ASYNC_READY
        assert d.outer_steps_completed == 0  # not installed before the commit
        d.async_commit()
        # new anchor = theta1 (SGD, lr 1); local progress since the snapshot = theta2 - theta1.
        want = theta1.astype(np.float64) + (theta2.astype(np.float64) - theta1)
        tol = 1e-5 if dtype == "f32" else 1e-2
        np.testing.assert_allclose(read(), want, rtol=tol, atol=tol)
        assert d.outer_steps_completed == 1


# ---- DiLoCo with parameters in device memory -----------------------------------------

# A parameter of more than one 4 MiB staging chunk (and a partial one), and
# one of each 16-bit dtype.
DEVICE_PARAMS = [("big", 1_050_001, "f32"), ("half", 333, "f16"), ("brain", 5_001, "bf16")]
DEVICE_CASES = [(opt, comp, False) for opt in ("sgd", "nesterov", "adam")
                for comp in ("none", "fp16", "topk_1pct", "topk_01pct")] + \
    [("nesterov", "none", True), ("adam", "fp16", True), ("sgd", "topk_1pct", True)]


def _np_type(dtype):
    return {"f32": np.float32, "f16": np.float16, "bf16": BF16}[dtype]


def _assert_same_training(want, want_blob, got, got_blob):
    """Two _diloco_trace runs: every parameter after every outer step, and the state blob, identical."""
    for outer, (a, b) in enumerate(zip(want, got)):
        for (name, _, _), x, y in zip(DEVICE_PARAMS, a, b):
            assert np.array_equal(x, y), "%s after outer step %d" % (name, outer)
    assert _state_without_timing(want_blob) == _state_without_timing(got_blob)


def _state_without_timing(blob):
    """A v2 blob less its digest and last_outer_step_seconds (a wall-clock time)."""
    digest, seconds = slice(24, 56), slice(64 + 100, 64 + 108)
    return blob[:digest.start] + blob[digest.stop:seconds.start] + blob[seconds.stop:]


def _diloco_trace(ctx, opt, comp, async_overlap, seed, progress_in_round=False, continue_restored=False):
    """Two outer steps of H = 2 deterministic inner steps on DEVICE_PARAMS in
    `ctx`; returns every parameter's bytes after each outer step and the
    state blob. NaN-poisoned parameters before add_parameter would show: it
    broadcasts the buffers' own values, which are written first.
    progress_in_round: an inner step between an asynchronous round's launch
    and its commit (kept on top of the new anchor). continue_restored: the
    restored context runs one more outer step (its bytes appended)."""
    rng = np.random.default_rng(seed)
    params = [(name, n, dt) for name, n, dt in DEVICE_PARAMS if _np_type(dt) is not None]
    init = [rng.standard_normal(n).astype(_np_type(dt)) for _, n, dt in params]
    bufs = [ctx.buffer_from_array(x) for x in init]
    snaps = []

    def inner_step():
        for (name, n, dt), b in zip(params, bufs):
            x = b.to_numpy((n,), _np_type(dt)).astype(np.float32)
            b.write((x - 0.01 * rng.standard_normal(n).astype(np.float32)).astype(_np_type(dt)))

    with ctx.dist("single", 1, 0) as dist, dist.diloco(inner_steps=2, outer_lr=0.7, outer_momentum=0.9,
                                                       outer_optimizer=opt, compress=comp,
                                                       async_overlap=async_overlap) as d:
        for (name, n, dt), b in zip(params, bufs):
            d.add_parameter(name, b, n, dtype=dt)
        for outer in range(2):
            for step in range(2):
                inner_step()
                if d.step():
                    d.apply_outer()
            if async_overlap:
                if progress_in_round:
                    inner_step()
                d.async_wait()
                d.async_commit()
            assert d.outer_steps_completed == outer + 1
            snaps.append([b.to_numpy((n,), _np_type(dt)).view(np.uint8).copy() for (_, n, dt), b in zip(params, bufs)])
        blob = d.serialize_state()
        # The blob restores into a fresh context of the same parameters.
        with dist.diloco(inner_steps=2, outer_lr=0.7, outer_momentum=0.9, outer_optimizer=opt, compress=comp,
                         async_overlap=async_overlap) as d2:
            for (name, n, dt), b in zip(params, bufs):
                d2.add_parameter(name, b, n, dtype=dt)
            d2.deserialize_state(blob)
            assert d2.serialize_state() == blob
            if continue_restored:
                for step in range(2):
                    inner_step()
                    if d2.step():
                        d2.apply_outer()
                if async_overlap:
                    d2.async_wait()
                    d2.async_commit()
                snaps.append([b.to_numpy((n,), _np_type(dt)).view(np.uint8).copy()
                              for (_, n, dt), b in zip(params, bufs)])
    return snaps, blob


@pytest.mark.parametrize("opt,comp,async_overlap", DEVICE_CASES)
def test_diloco_device_path_equals_host_path_bit_for_bit(cpu_ctx, monkeypatch, rng, opt, comp, async_overlap):
    """TC_DIST_DEVICE_PATH=1 handles the parameters as device memory: the
    outer state stays there, the outer step runs as the backend's diloco_*
    ops, the parameters' first broadcast and the state blob are staged through
    page-locked host memory: the same bits as the host path, and the same
    state blob."""
    seed = int(rng.integers(1 << 30))
    host, host_blob = _diloco_trace(cpu_ctx, opt, comp, async_overlap, seed)
    monkeypatch.setenv("TC_DIST_DEVICE_PATH", "1")
    dev, dev_blob = _diloco_trace(cpu_ctx, opt, comp, async_overlap, seed)
    _assert_same_training(host, host_blob, dev, dev_blob)


# Asynchronous rounds with local progress while they run, and a restored
# context that carries on: the commit and the restored device state.
DEVICE_ROUND_CASES = [("sgd", "none"), ("nesterov", "fp16"), ("adam", "topk_1pct"), ("nesterov", "topk_01pct")]


@pytest.mark.parametrize("opt,comp", DEVICE_ROUND_CASES)
@pytest.mark.parametrize("async_overlap", [False, True])
def test_diloco_device_state_restores_and_commits_as_the_host_path(cpu_ctx, monkeypatch, rng, opt, comp,
                                                                    async_overlap):
    """TC_DIST_DEVICE_PATH=1 keeps the outer state in device memory and runs
    the outer step as the backend's diloco_* ops: an asynchronous round with
    an inner step between launch and commit, and a context restored from the
    state blob that runs one more outer step, give the host path's bits."""
    seed = int(rng.integers(1 << 30))
    kw = dict(progress_in_round=async_overlap, continue_restored=True)
    host, host_blob = _diloco_trace(cpu_ctx, opt, comp, async_overlap, seed, **kw)
    monkeypatch.setenv("TC_DIST_DEVICE_PATH", "1")
    dev, dev_blob = _diloco_trace(cpu_ctx, opt, comp, async_overlap, seed, **kw)
    assert len(dev) == 3
    _assert_same_training(host, host_blob, dev, dev_blob)


@pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device")
@pytest.mark.parametrize("opt,comp", DEVICE_ROUND_CASES)
@pytest.mark.parametrize("async_overlap", [False, True])
def test_diloco_cuda_state_restores_and_commits_as_the_cpu(opt, comp, async_overlap, rng):
    """The same on CUDA parameters (the CUDA kernels) against the CPU's host path."""
    seed = int(rng.integers(1 << 30))
    kw = dict(progress_in_round=async_overlap, continue_restored=True)
    with tc.Context("cpu") as cpu, tc.Context("cuda") as gpu:
        want, want_blob = _diloco_trace(cpu, opt, comp, async_overlap, seed, **kw)
        got, got_blob = _diloco_trace(gpu, opt, comp, async_overlap, seed, **kw)
    _assert_same_training(want, want_blob, got, got_blob)


@pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device")
@pytest.mark.parametrize("opt,comp,async_overlap", DEVICE_CASES)
def test_diloco_on_cuda_parameters_equals_the_cpu_result(opt, comp, async_overlap, rng):
    """The outer step of parameters in CUDA memory (the CUDA diloco_* kernels)
    gives the CPU host path's bits and state blob."""
    seed = int(rng.integers(1 << 30))
    with tc.Context("cpu") as cpu, tc.Context("cuda") as gpu:
        want, want_blob = _diloco_trace(cpu, opt, comp, async_overlap, seed)
        got, got_blob = _diloco_trace(gpu, opt, comp, async_overlap, seed)
    _assert_same_training(want, want_blob, got, got_blob)


@pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device")
def test_every_dist_and_diloco_entry_point_with_a_cuda_buffer(rng):
    """Each entry point given CUDA buffers either works (checked against
    NumPy, outputs NaN-poisoned first) or refuses with a status naming the
    buffer; none reads device memory from the host."""
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    with tc.Context("cuda") as ctx:
        b = ctx.buffer_from_array(x)
        dst = ctx.buffer_from_array(np.full(n, np.nan, np.float32))
        with ctx.dist("single", 1, 0, "single://cuda") as d:
            d.allreduce(b, n, "f32", "sum")
            d.broadcast(b, n, "f32", 0)
            assert np.array_equal(b.to_numpy((n,), np.float32), x)
            d.allgather(b, dst, n)
            assert np.array_equal(dst.to_numpy((n,), np.float32), x)
            dst.write(np.full(n, np.nan, np.float32))
            d.reduce_scatter(b, dst, n, "f32", "sum")
            assert np.array_equal(dst.to_numpy((n,), np.float32), x)
            d.barrier()
            with d.diloco(inner_steps=1, outer_optimizer="sgd", outer_lr=1.0, async_overlap=True) as lo:
                lo.add_parameter("w", b, n)
                b.write(x - 1.0)
                assert lo.step()
                lo.apply_outer()
                lo.async_wait()
                lo.async_commit()
                np.testing.assert_allclose(b.to_numpy((n,), np.float32), x - 1.0, rtol=1e-6, atol=1e-6)
                blob = lo.serialize_state()
                lo.deserialize_state(blob)
                assert lo.outer_steps_completed == 1
        if tc.capability_available(ctx.runtime_capabilities(), tc.TC_CAPABILITY_DIST_GLOO):
            with pytest.raises(tc.TensorcoreError) as e:  # gloo is accepted: the rendezvous times out alone
                ctx.dist("gloo", 2, 0, "gloo+tcp://127.0.0.1:%d" % free_port(), timeout=0.5)
            assert e.value.status == tc.TC_ERR_TIMEOUT
        # The remote endpoint serves host memory: a device buffer is refused by name.
        with tc.remote_init(ctx, tc.TC_REMOTE_ROLE_WEIGHT_SERVER, "tcp://127.0.0.1:0") as server:
            with pytest.raises(tc.TensorcoreError) as e:
                server.register_tensor("w", b)
            assert e.value.status == tc.TC_ERR_UNSUPPORTED and "tc_remote_register_tensor" in str(e.value)
        with tc.remote_init(ctx, "client") as client:
            with pytest.raises(tc.TensorcoreError) as e:
                client.fetch(0, "w", b)
            assert e.value.status == tc.TC_ERR_UNSUPPORTED and "tc_remote_tensor_fetch" in str(e.value)
        # A raw device address reaches the library, which asks the device.
        raw = tc.buffer_device_ptr(b)
        with tc.Context("cpu") as cpu, tc.remote_init(cpu, tc.TC_REMOTE_ROLE_WEIGHT_SERVER,
                                                      "tcp://127.0.0.1:0") as host_server:
            host_server.register_tensor("w", x)
            with tc.remote_init(ctx, tc.TC_REMOTE_ROLE_WEIGHT_SERVER, "tcp://127.0.0.1:0") as server:
                with pytest.raises(tc.TensorcoreError) as e:
                    tc.remote_register_tensor(server, "raw", raw, n * 4)
                assert e.value.status == tc.TC_ERR_UNSUPPORTED and "device memory of cuda:" in e.value.detail
            with tc.remote_init(ctx, "client") as client:
                pid = client.connect("tcp://127.0.0.1:%d" % host_server.port)
                with pytest.raises(tc.TensorcoreError) as e:
                    tc.remote_tensor_fetch(client, pid, "w", raw, n * 4)
                assert e.value.status == tc.TC_ERR_UNSUPPORTED and "device memory of cuda:" in e.value.detail
                host = np.full(n, np.nan, np.float32)
                client.fetch(pid, "w", host)  # host memory of the same client works
                assert np.array_equal(host, x)


@pytest.mark.skipif(not HAVE_CUDA or not HAVE_GLOO, reason="needs a usable CUDA device and gloo")
@pytest.mark.parametrize("world", [2])
def test_gloo_collectives_of_cuda_buffers_match_numpy(world, rng):
    """gloo on a CUDA context: each collective staged through page-locked host
    memory, several chunks of it, against float64 NumPy (every rank on cuda:0)."""
    env = {"TC_TEST_DIST_DEVICE": "cuda", "TC_TRACE": "1"}
    outs = run_group("collectives_large", world, int(rng.integers(1 << 30)), env=env, timeout=180)
    assert all(STAGED in o for o in outs)
    run_group("collectives", world, int(rng.integers(1 << 30)), env=env, timeout=180)
    run_group("diloco", world, int(rng.integers(1 << 30)), env=env, timeout=180)


@pytest.mark.skipif(_nccl_gpus() < 2, reason="NCCL with two GPUs not available")
def test_diloco_on_an_nccl_group_of_two_gpus(rng):
    """DiLoCo's exchange through NCCL (device scratch), parameters on each
    rank's GPU: anchors identical, NONE against NumPy, state round trips."""
    run_group("diloco_nccl", 2, int(rng.integers(1 << 30)), timeout=240)


def test_diloco_errors_and_unsupported_modes(cpu_ctx):
    ERR = tc.TensorcoreError
    w = cpu_ctx.buffer_from_array(np.ones(8, np.float32))
    with cpu_ctx.dist("single", 1, 0) as dist:
        for kwargs, st in (({"compress": "fp8"}, tc.TC_ERR_UNSUPPORTED),
                           ({"compress": "lowrank"}, tc.TC_ERR_UNSUPPORTED),
                           ({"compress": "signsgd"}, tc.TC_ERR_UNSUPPORTED),
                           ({"tolerate_dropouts": True}, tc.TC_ERR_UNSUPPORTED),
                           ({"inner_steps": 0}, tc.TC_ERR_INVALID_ARG),
                           ({"outer_lr": 0.0}, tc.TC_ERR_INVALID_ARG),
                           ({"outer_momentum": 1.0}, tc.TC_ERR_INVALID_ARG),
                           ({"outer_eps": 0.0}, tc.TC_ERR_INVALID_ARG),
                           ({"outer_optimizer": 5}, tc.TC_ERR_INVALID_ARG),
                           ({"compress": 9}, tc.TC_ERR_INVALID_ARG)):
            with pytest.raises(ERR) as e:
                dist.diloco(**kwargs)
            assert e.value.status == st, kwargs
        with pytest.raises(ERR) as e:
            dist.diloco(compress="gzip")
        assert e.value.status == tc.TC_ERR_INVALID_ARG
        with dist.diloco(tc.diloco_config(inner_steps=2, compress="topk_01pct")) as d:
            with pytest.raises(ERR) as e:
                d.apply_outer()  # nothing registered
            assert e.value.status == tc.TC_ERR_INVALID_ARG
            for args, st in ((("w", w, 9), tc.TC_ERR_INVALID_ARG), (("w", w, 0), tc.TC_ERR_INVALID_SHAPE),
                             (("w", w, 4, "i8"), tc.TC_ERR_UNSUPPORTED_DTYPE), (("", w, 4), tc.TC_ERR_INVALID_ARG)):
                with pytest.raises(ERR) as e:
                    d.add_parameter(*args)
                assert e.value.status == st, args
            d.add_parameter("w", w, 8)
            with pytest.raises(ERR) as e:
                d.add_parameter("w", cpu_ctx.buffer(32), 8)  # same name
            assert e.value.status == tc.TC_ERR_INVALID_ARG
            with pytest.raises(ERR) as e:
                d.add_parameter("w2", w, 8)  # same memory
            assert e.value.status == tc.TC_ERR_INVALID_ARG
            caps = d.capabilities()
            assert tc.diloco_compress_is_serializable(caps, "topk_1pct")
            assert not tc.diloco_compress_is_serializable(caps, "fp8")
            assert tc.diloco_outer_optimizer_is_serializable(caps, "adam")
            assert tc.diloco_state_feature_available(caps, tc.TC_DILOCO_STATE_FEATURE_PAYLOAD_SHA256)
            assert not tc.diloco_state_feature_available(caps, tc.TC_DILOCO_STATE_FEATURE_PENDING_ROUND)
    build = tc.diloco_capabilities()
    assert build.state_abi_version_current == 2 and build.async_overlap_supported == 1
    assert build.tolerate_dropouts_supported == 0


@pytest.mark.parametrize("path", PATHS)
def test_diloco_state_blobs_refuse_corruption(cpu_ctx, rng, monkeypatch, path):
    """Host state and device state (TC_DIST_DEVICE_PATH=1) alike."""
    for key, value in PATHS[path].items():
        monkeypatch.setenv(key, value)
    n = 64
    w = cpu_ctx.buffer_from_array(rng.standard_normal(n).astype(np.float32))
    with cpu_ctx.dist("single", 1, 0) as dist, dist.diloco(inner_steps=1, outer_optimizer="adam",
                                                           compress="fp16") as d:
        d.add_parameter("w", w, n)
        for _ in range(2):
            w.write(w.to_numpy((n,), np.float32) * 0.9)
            d.step()
            d.apply_outer()
        blob = d.serialize_state()
        assert blob[:8] == b"TCDLSTA2" and len(blob) > tc.TC_DILOCO_STATE_V2_HEADER_SIZE
        v1 = d.serialize_state(tc.TC_DILOCO_STATE_ABI_VERSION_1)
        assert v1[:8] == b"TCDLSTA1"
        before = d.serialize_state()

        def refused(b, version=tc.TC_DILOCO_STATE_ABI_VERSION_2):
            current = d.serialize_state()
            with pytest.raises(tc.TensorcoreError) as e:
                d.deserialize_state(b, version)
            assert d.serialize_state() == current  # nothing changed
            return e.value.status

        for i in (0, 9, 20, 40, 70, len(blob) - 1):  # header, digest, payload
            bad = bytearray(blob)
            bad[i] ^= 0x40
            assert refused(bytes(bad)) in (tc.TC_ERR_CORRUPT, tc.TC_ERR_INVALID_ARG), i
        bad = bytearray(blob)
        bad[-5] ^= 1
        assert refused(bytes(bad)) == tc.TC_ERR_CORRUPT  # caught by the digest
        for cut in (0, 10, 63, 64, len(blob) - 1):
            assert refused(blob[:cut]) == tc.TC_ERR_CORRUPT, cut
        assert refused(blob + b"\0") == tc.TC_ERR_CORRUPT
        assert refused(v1) == tc.TC_ERR_INVALID_ARG  # v1 blob, v2 asked for
        assert refused(v1[:-3], tc.TC_DILOCO_STATE_ABI_VERSION_1) == tc.TC_ERR_CORRUPT
        assert refused(blob, 3) == tc.TC_ERR_INVALID_ARG
        d.deserialize_state(v1, tc.TC_DILOCO_STATE_ABI_VERSION_1)
        assert d.serialize_state() == before
        d.set_epochs(3, 4)
        assert refused(blob) == tc.TC_ERR_INVALID_ARG  # epochs (0, 0) in the blob differ
        d.set_epochs(0, 0)
        d.deserialize_state(blob)
    with cpu_ctx.dist("single", 1, 0) as dist, dist.diloco(inner_steps=1, outer_optimizer="sgd") as other:
        other.add_parameter("w", w, n)
        with pytest.raises(tc.TensorcoreError) as e:
            other.deserialize_state(blob)  # another optimizer / compression
        assert e.value.status == tc.TC_ERR_INVALID_ARG


def test_diloco_outer_hyperparameters_are_validated(cpu_ctx, rng):
    """Bad rates are refused with the config's checks and change nothing;
    an unfinished asynchronous round refuses a change until committed."""
    n = 16
    w = cpu_ctx.buffer_from_array(rng.standard_normal(n).astype(np.float32))
    with cpu_ctx.dist("single", 1, 0) as dist, dist.diloco(inner_steps=1, outer_lr=0.7, outer_momentum=0.9,
                                                            async_overlap=True) as d:
        d.add_parameter("w", w, n)
        before = d.serialize_state()
        for lr, mu in ((0.0, 0.5), (-1.0, 0.5), (float("nan"), 0.5), (float("inf"), 0.5), (0.5, 1.0), (0.5, -0.1),
                       (0.5, float("nan"))):
            with pytest.raises(tc.TensorcoreError) as e:
                d.set_outer_hyperparameters(lr, mu)
            assert e.value.status == tc.TC_ERR_INVALID_ARG and "outer_" in str(e.value)
        assert d.serialize_state() == before
        with pytest.raises(tc.TensorcoreError):
            tc.diloco_set_outer_hyperparameters(None, 0.5, 0.5)
        d.step()
        d.apply_outer()  # launches a round
        with pytest.raises(tc.TensorcoreError) as e:
            d.set_outer_hyperparameters(0.5, 0.5)
        assert e.value.status == tc.TC_ERR_INVALID_ARG and "asynchronous round" in str(e.value)
        d.async_commit()
        d.set_outer_hyperparameters(0.5, 0.5)


def test_diloco_refuses_a_parameter_where_its_outer_step_does_not_run(cpu_ctx, monkeypatch):
    """A context decides at init where its outer step runs (host, or device
    memory under TC_DIST_DEVICE_PATH=1); a parameter added after the switch
    changed is refused by name, and nothing is registered."""
    w = cpu_ctx.buffer_from_array(np.ones(8, np.float32))
    for init_env, add_env in (({}, {"TC_DIST_DEVICE_PATH": "1"}), ({"TC_DIST_DEVICE_PATH": "1"}, {})):
        monkeypatch.delenv("TC_DIST_DEVICE_PATH", raising=False)
        for key, value in init_env.items():
            monkeypatch.setenv(key, value)
        with cpu_ctx.dist("single", 1, 0) as dist, dist.diloco(inner_steps=1) as d:
            monkeypatch.delenv("TC_DIST_DEVICE_PATH", raising=False)
            for key, value in add_env.items():
                monkeypatch.setenv(key, value)
            with pytest.raises(tc.TensorcoreError) as e:
                d.add_parameter("w", w, 8)
            assert e.value.status == tc.TC_ERR_INVALID_ARG and "'w'" in e.value.detail
            with pytest.raises(tc.TensorcoreError) as e:
                d.apply_outer()  # nothing registered
            assert e.value.status == tc.TC_ERR_INVALID_ARG


# ---- the remote endpoint ------------------------------------------------------------

def test_remote_endpoint_authentication_rotation_and_fetch(cpu_ctx, rng):
    server_keys = [("weights/server-a", 201, b"S" * 32), ("client-b", 301, b"C" * 40)]
    client_keys = [("client-b", 301, b"C" * 40), ("weights/server-a", 201, b"S" * 32)]
    payload = rng.standard_normal(1000).astype(np.float32)
    with tc.remote_init_authenticated(cpu_ctx, tc.TC_REMOTE_ROLE_WEIGHT_SERVER, "tcp://127.0.0.1:0",
                                      "weights/server-a", 201, server_keys) as server, \
            tc.remote_init_authenticated(cpu_ctx, "client", None, "client-b", 301, client_keys) as client:
        url = "tcp://127.0.0.1:%d" % server.port
        server.register_tensor("w", payload)
        buf = cpu_ctx.buffer_from_array(payload * 2)
        server.register_tensor("wbuf", buf)
        assert server.registered_count() == 2
        pid = tc.remote_connect_authenticated(client, url, "weights/server-a")
        assert tc.remote_peer_identity(client, pid) == "weights/server-a"
        assert tc.remote_peer_key_id(client, pid) == 201
        out = np.full(1000, np.nan, np.float32)
        tc.remote_tensor_fetch(client, pid, "w", out)
        assert np.array_equal(out, payload)
        dst = cpu_ctx.buffer(4000)
        client.fetch(pid, "wbuf", dst)
        assert np.array_equal(dst.to_numpy((1000,), np.float32), payload * 2)
        assert tc.remote_total_bytes_fetched(client) == 8000
        assert server.peer_identity(0) == "client-b"
        with pytest.raises(tc.TensorcoreError) as e:
            client.fetch(pid, "missing", out)
        assert e.value.status == tc.TC_ERR_INVALID_ARG
        with pytest.raises(tc.TensorcoreError) as e:
            client.fetch(pid, "w", np.zeros(10, np.float32))  # wrong size
        assert e.value.status == tc.TC_ERR_INVALID_ARG
        # The server must prove the identity the client expects.
        with pytest.raises(tc.TensorcoreError) as e:
            client.connect(url, "weights/server-b")
        assert e.value.status == tc.TC_ERR_AUTH
        # A client with a wrong secret is refused and counted.
        with tc.remote_init_authenticated(cpu_ctx, "client", None, "client-b", 301,
                                          [("client-b", 301, b"X" * 40), ("weights/server-a", 201, b"S" * 32)]) as bad:
            with pytest.raises(tc.TensorcoreError) as e:
                bad.connect(url, "weights/server-a")
            assert e.value.status == tc.TC_ERR_AUTH
        # An unauthenticated client is refused too.
        with tc.remote_init(cpu_ctx, "client") as plain:
            with pytest.raises(tc.TensorcoreError) as e:
                plain.connect(url)
            assert e.value.status == tc.TC_ERR_AUTH
        deadline = time.time() + 5
        while server.auth_failure_count < 2 and time.time() < deadline:
            time.sleep(0.01)
        assert server.auth_failure_count == 2
        assert server.refusal_count == 2  # every refusal so far was one of authentication
        assert client.refusal_count == client.auth_failure_count == 1  # the server that proved another identity
        # Rotation: the server drops the old client key; new connections with it fail, the old connection lives on.
        server.auth_rotate("weights/server-a", 202, [("weights/server-a", 202, b"T" * 32),
                                                     ("client-b", 302, b"D" * 32)])
        with pytest.raises(tc.TensorcoreError) as e:
            client.connect(url, "weights/server-a")
        assert e.value.status == tc.TC_ERR_AUTH
        client.fetch(pid, "w", out)  # the live connection keeps its keys
        client.auth_rotate("client-b", 302, [("client-b", 302, b"D" * 32), ("weights/server-a", 202, b"T" * 32)])
        pid2 = client.connect(url, "weights/server-a")
        assert client.peer_key_id(pid2) == 202
        server.unregister_tensor("w")
        assert server.registered_count() == 1
    with pytest.raises(tc.TensorcoreError) as e:
        tc.remote_init_authenticated(cpu_ctx, 0, "tcp://127.0.0.1:0", "a", 1, [("a", 1, b"short")])
    assert e.value.status == tc.TC_ERR_INVALID_ARG
    with pytest.raises(tc.TensorcoreError) as e:
        tc.remote_init(cpu_ctx, 5, "tcp://127.0.0.1:0")
    assert e.value.status == tc.TC_ERR_INVALID_ARG


def test_remote_endpoint_refuses_a_buffer_it_cannot_map_by_name(cpu_ctx, monkeypatch):
    """A device buffer has no host address (tc_buffer_map refuses it): the
    endpoint's calls refuse it naming themselves, before touching anything."""
    b = cpu_ctx.buffer(64)

    def unmappable():
        raise tc.TensorcoreError(tc.TC_ERR_UNSUPPORTED, "tc_buffer_map: buffer lives in device memory")

    monkeypatch.setattr(b, "map", unmappable)
    with tc.remote_init(cpu_ctx, tc.TC_REMOTE_ROLE_WEIGHT_SERVER, "tcp://127.0.0.1:0") as server:
        with pytest.raises(tc.TensorcoreError) as e:
            server.register_tensor("w", b)
        assert e.value.status == tc.TC_ERR_UNSUPPORTED and "tc_remote_register_tensor" in str(e.value)
        assert server.registered_count() == 0
    with tc.remote_init(cpu_ctx, "client") as client:
        with pytest.raises(tc.TensorcoreError) as e:
            client.fetch(0, "w", b)
        assert e.value.status == tc.TC_ERR_UNSUPPORTED and "tc_remote_tensor_fetch" in str(e.value)


@pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device")
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_diloco_train_example_on_cuda_follows_the_cpu_run(backend, tmp_path):
    """examples/diloco_train.py --device cuda: the model, AdamW, the
    allreduce and the outer step on the GPU follow the CPU run from the same
    weights and batches. Not bit for bit (the GPU's products sum in another
    order): the first loss agrees to f32 rounding, the later ones closely,
    and the weights within AdamW's step size (an update whose gradient is
    near zero may take the other sign)."""
    if backend == "gloo" and not HAVE_GLOO:
        pytest.skip("gloo not built")
    if backend == "nccl" and _nccl_gpus() < 2:
        pytest.skip("NCCL with two GPUs not available")
    steps, lr = 4, 3e-3
    args = ["--workers", "2", "--steps", str(steps), "--H", "2", "--dim", "16", "--layers", "1", "--heads", "2",
            "--ffn", "32", "--batch", "2", "--eval-batches", "1", "--warmup", "1", "--lr", str(lr), "--corpus",
            "licenses", "--tf32", "off"]
    env = dict(os.environ, PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    example = str(REPO / "examples" / "diloco_train.py")
    for name, extra in (("cpu", []), ("cuda", ["--device", "cuda", "--backend", backend])):
        p = subprocess.run([sys.executable, example] + args + extra + ["--out", str(tmp_path / name)], env=env,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for mode in ("ddp", "diloco"):
        for rank in range(2):
            want = json.loads((tmp_path / "cpu" / ("%s_rank%d.json" % (mode, rank))).read_text())["train"]
            got = json.loads((tmp_path / "cuda" / ("%s_rank%d.json" % (mode, rank))).read_text())["train"]
            assert got[0] == pytest.approx(want[0], rel=1e-5), (mode, rank)
            assert got == pytest.approx(want, rel=1e-3), (mode, rank)
        a = np.load(tmp_path / "cpu" / ("%s_theta.npy" % mode))
        b = np.load(tmp_path / "cuda" / ("%s_theta.npy" % mode))
        assert np.median(np.abs(a - b)) < 1e-5, mode
        assert np.max(np.abs(a - b)) <= 4 * lr * steps, mode
