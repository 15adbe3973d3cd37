"""Level 4 with an MPI group: RemoteWorkerSpec(mpi=...) makes the parent
start `mpirun -np 2 python -m simpler.remote_mpi` on loopback, one remote
level-3 worker per rank, rank 0 serving the session. Results against level
3, a task error naming its rank, and a killed rank that must end in a clear
error, a prompt close and nothing left behind (processes, shared memory).
Skips, saying why, without Open MPI's mpirun or mpi4py."""

from __future__ import annotations

import os
import shutil
import signal
import time

from pathlib import Path

import numpy as np
import pytest

from conftest_simpler import alive
from simpler import MpiGroupSpec, RemoteWorkerSpec, SimplerError, Worker
from simpler.remote import protocol as P
from simpler.task_interface import ArgDirection as D, ChipCallable, ChipStorageTaskArgs, ChipTensor, CoreCallable
from simpler.task_interface import DataType

try:
    import mpi4py  # noqa: F401 - present or not (importing it starts no MPI)

    _NO_MPI4PY = None
except ImportError as e:
    _NO_MPI4PY = f"mpi4py is not installed ({e}); scripts/setup.sh installs it"
_NO_MPIRUN = None if shutil.which("mpirun") else "mpirun is not on PATH; install openmpi-bin (scripts/setup.sh does)"
needs_mpi = pytest.mark.skipif(bool(_NO_MPIRUN or _NO_MPI4PY), reason=_NO_MPIRUN or _NO_MPI4PY or "")

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def ranks_import_the_test_orchestrations(monkeypatch):
    # The ranks inherit this environment: they import simpler and the remote
    # callables (simpler_remote_orchs) from here.
    path = [str(HERE.parents[1] / "python"), str(HERE), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))


# Two ranks on a machine that may have fewer cores; as root Open MPI asks
# for consent.
MPIRUN_ARGS = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def group_spec(np_=2, **kw) -> RemoteWorkerSpec:
    kw.setdefault("device_ids", [0])
    return RemoteWorkerSpec(mpi=MpiGroupSpec(np=np_, extra_args=MPIRUN_ARGS), platform="cpu", **kw)


def gemm_chip() -> ChipCallable:
    return ChipCallable.from_tasks([D.IN, D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)]}],
                                   [(0, CoreCallable.builtin("gemm"))])


def args3(ptrs, shapes):
    t = ChipStorageTaskArgs()
    for p, shape, d in zip(ptrs, shapes, (D.IN, D.IN, D.OUT)):
        t.add_tensor(p if isinstance(p, ChipTensor) else ChipTensor.make(p, shape, DataType.FLOAT32), d)
    return t


def scalar_args(v: int) -> ChipStorageTaskArgs:
    t = ChipStorageTaskArgs()
    t.add_scalar(v)
    return t


def group_processes(group) -> list:
    """Pids of live processes started for an MPI group: mpirun, the ranks
    and what they forked (all carry the group's unique connect address)."""
    out = [group.proc.pid] if alive(group.proc.pid) else []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"simpler.remote_mpi" in cmd and group.connect.encode() in cmd and alive(int(d)):
            out.append(int(d))
    return out


def segments_of(pids) -> list:
    return [n for n in os.listdir("/dev/shm") if any(n.startswith(f"simpler_{p}_") for p in pids)]


def assert_gone(group, pids, within=10.0):
    deadline = time.time() + within
    while (group_processes(group) or segments_of(pids)) and time.time() < deadline:
        time.sleep(0.1)
    assert group_processes(group) == [], "processes of the MPI group outlived close()"
    assert segments_of(pids) == [], "shared memory of the MPI group's ranks outlived close()"


@needs_mpi
def test_a_local_level3_worker_and_an_mpi_group_match_level3(monkeypatch):
    rng = np.random.default_rng(3)
    m, k, n = 8, 16, 4
    A = [rng.standard_normal((m, k)).astype(np.float32) for _ in range(3)]
    B = [rng.standard_normal((k, n)).astype(np.float32) for _ in range(3)]
    E = rng.standard_normal((n, n)).astype(np.float32)
    shapes = [(m, k), (k, n), (m, n)]

    with Worker(3, platform="cpu", device_ids=[0, 1, 2]) as w3:
        h = w3.register(gemm_chip())
        w3.init()
        bufs = [[w3.create_buffer(x.nbytes) for x in (A[i], B[i], np.empty((m, n), np.float32))] for i in range(3)]
        for i in range(3):
            bufs[i][0].numpy((m, k), "float32")[:] = A[i]
            bufs[i][1].numpy((k, n), "float32")[:] = B[i]
        w3.run(lambda o, a, c: [o.submit_next_level(h, args3([b.tensor(s, "float32") for b, s in zip(bufs[i], shapes)],
                                                             shapes), worker=i) for i in range(3)])
        l3 = [bufs[i][2].numpy((m, n), "float32").copy() for i in range(3)]

    # Worker 0 local; the group's two ranks are workers 1 and 2. Rank 1 also
    # chains a product on its own result (ordered after the first by the parent).
    local = Worker(3, platform="cpu", device_ids=[0])
    hl = local.register(gemm_chip())
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=10)
    try:
        assert w4.add_worker(local) == 0
        ranks = w4.add_remote_worker(group_spec(num_sub_workers=1))
        assert list(ranks) == [1, 2]
        w4.init()
        pids = [ep.pid for ep in w4._remote_eps]
        group = w4._remote_eps[0].group
        assert len(set(pids)) == 2 and all(alive(p) for p in pids)
        lb = [w4.create_buffer(x.nbytes) for x in (A[0], B[0], l3[0])]
        lb[0].numpy((m, k), "float32")[:] = A[0]
        lb[1].numpy((k, n), "float32")[:] = B[0]
        rb = {}
        for r in ranks:
            rb[r] = [w4.remote_malloc(x.nbytes, r) for x in (A[r], B[r], l3[r])]
            w4.remote_copy_to(rb[r][0], A[r], r)
            w4.remote_copy_to(rb[r][1], B[r], r)
            w4.remote_copy_to(rb[r][2], np.full((m, n), np.nan, np.float32), r)
        pe, pf = w4.remote_malloc(E.nbytes, 2), w4.remote_malloc(4 * m * n, 2)
        w4.remote_copy_to(pe, E, 2)

        def l3_orch(o, args, cfg):
            o.submit_next_level(hl, args3([b.tensor(s, "float32") for b, s in zip(lb, shapes)], shapes), worker=0)

        def l4(o, args, cfg):
            o.submit_next_level(l3_orch, None, worker=0)
            for r in ranks:
                o.submit_next_level("simpler_remote_orchs:gemm", args3(rb[r], shapes), worker=r)
            o.submit_next_level("simpler_remote_orchs:gemm", args3([rb[2][2], pe, pf], [(m, n), (n, n), (m, n)]),
                                worker=2)

        w4.run(l4)
        got = [lb[2].numpy((m, n), "float32").copy()]
        for r in ranks:
            c = np.empty((m, n), np.float32)
            w4.remote_copy_from(c, rb[r][2], r)
            got.append(c)
        F = np.empty((m, n), np.float32)
        w4.remote_copy_from(F, pf, 2)
        for i in range(3):
            np.testing.assert_array_equal(got[i], l3[i])
        np.testing.assert_allclose(F, l3[2].astype(np.float64) @ E, rtol=1e-4, atol=1e-4)
        # Memory is per rank: rank 1's allocation is not rank 2's.
        with pytest.raises(ValueError, match="not inside one allocation"):
            w4.remote_copy_from(np.empty(4, np.float32), pe, 1)
        # A copy in several pieces, each an MPI message between rank 0 and rank 1.
        monkeypatch.setattr(P, "CHUNK_BYTES", 100_000)
        blob = rng.integers(0, 255, 1_000_003, dtype=np.uint8)
        pb = w4.remote_malloc(blob.nbytes, 2)
        w4.remote_copy_to(pb, blob, 2)
        back = np.zeros_like(blob)
        w4.remote_copy_from(back, pb, 2)
        np.testing.assert_array_equal(back, blob)
        # The ranks run their tasks at the same time.
        t0 = time.time()
        w4.run(lambda o, a, c: [o.submit_next_level("simpler_remote_orchs:nap", scalar_args(1500), worker=r)
                                for r in ranks])
        assert time.time() - t0 < 2.7
    finally:
        w4.close()
        local.close()
    assert_gone(group, pids)


@needs_mpi
def test_a_task_failing_on_rank_1_names_the_rank_and_the_first_error_wins():
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=10)
    r0, r1 = w4.add_remote_worker(group_spec())
    try:
        w4.init()
        pids = [ep.pid for ep in w4._remote_eps]
        group = w4._remote_eps[0].group

        def orch(o, args, cfg):
            # rank 0 fails too, but later: the run reports rank 1's error
            o.submit_next_level("simpler_remote_orchs:fail_after", scalar_args(1500), worker=r0)
            o.submit_next_level("simpler_remote_orchs:fail", None, worker=r1)

        with pytest.raises(SimplerError, match=rf"remote worker {r1} \(MPI rank 1 of 2\).*MPI rank 1 \(.*pid "
                                               rf"{pids[1]}\): RuntimeError: remote orchestration failed on purpose"):
            w4.run(orch)
        # The group goes on serving both ranks.
        w4.run(lambda o, a, c: [o.submit_next_level("simpler_remote_orchs:pid", None, worker=r) for r in (r0, r1)])
    finally:
        w4.close()
    assert_gone(group, pids)


@needs_mpi
def test_a_killed_rank_ends_the_group_with_a_clear_error_and_close_is_clean():
    timeout = 5.0
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=timeout)
    r0, r1 = w4.add_remote_worker(group_spec(num_sub_workers=1))
    try:
        w4.init()
        pids = [ep.pid for ep in w4._remote_eps]
        group = w4._remote_eps[0].group
        assert segments_of(pids)  # each rank's level-3 Worker has its mailbox

        def orch(o, args, cfg):
            o.submit_next_level("simpler_remote_orchs:nap", scalar_args(20000), worker=r0)
            o.submit_next_level("simpler_remote_orchs:nap", scalar_args(20000), worker=r1)

        h = w4.submit(orch)
        time.sleep(0.5)
        t0 = time.time()
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(SimplerError, match=rf"MPI rank \d of 2\).*MPI group of 2 ranks .*rank 1 \(pid {pids[1]}, "
                                               rf".*killed by signal 9.*while running task"):
            h.wait(30)
        assert time.time() - t0 < timeout
        with pytest.raises(SimplerError, match="MPI group of 2 ranks .* ended"):
            w4.run(lambda o, a, c: o.submit_next_level("simpler_remote_orchs:pid", None, worker=r0))
    finally:
        t0 = time.time()
        w4.close()
        assert time.time() - t0 < 5
    assert_gone(group, pids)


@needs_mpi
def test_a_silent_rank_0_is_declared_dead_after_the_timeout_and_close_is_clean():
    timeout = 1.5
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=timeout)
    r0, r1 = w4.add_remote_worker(group_spec())
    stopped = None
    try:
        w4.init()
        pids = [ep.pid for ep in w4._remote_eps]
        group = w4._remote_eps[0].group
        os.kill(pids[0], signal.SIGSTOP)
        stopped = pids[0]
        t0 = time.time()
        with pytest.raises(SimplerError, match=rf"remote worker {r1} \(MPI rank 1 of 2\): MPI group of 2 ranks .*"
                                               rf"remote_session_timeout_s=1.5 s"):
            w4.run(lambda o, a, c: o.submit_next_level("simpler_remote_orchs:nap", scalar_args(10000), worker=r1))
        assert time.time() - t0 < timeout + 2.5
    finally:
        t0 = time.time()
        w4.close()
        assert time.time() - t0 < 10
        if stopped and alive(stopped):  # SIGKILL reaches a stopped process; anything else waits for this
            os.kill(stopped, signal.SIGCONT)
    assert_gone(group, pids)


@needs_mpi
def test_a_hung_rank_ends_the_group_after_the_timeout():
    timeout = 1.5
    w4 = Worker(4, platform="cpu", remote_session_timeout_s=timeout)
    r0, r1 = w4.add_remote_worker(group_spec())
    try:
        w4.init()
        pids = [ep.pid for ep in w4._remote_eps]
        group = w4._remote_eps[0].group
        h = w4.submit(lambda o, a, c: o.submit_next_level("simpler_remote_orchs:nap", scalar_args(20000), worker=r0))
        time.sleep(0.3)
        os.kill(pids[1], signal.SIGSTOP)  # alive, but answers nothing (rank 0 pings it)
        t0 = time.time()
        with pytest.raises(SimplerError, match=rf"MPI group of 2 ranks .* ended: mpirun exited .*MPI rank 1 "
                                               rf"\(.*pid {pids[1]}\) did not answer within "
                                               rf"remote_session_timeout_s=1.5 s.*while running task"):
            h.wait(30)
        assert time.time() - t0 < timeout + 4
    finally:
        w4.close()
    assert_gone(group, pids)


def test_routed_frames_carry_a_rank_and_ordinary_sessions_refuse_them():
    inner = P.encode(P.CONTROL, P.control_body(5, {"op": "malloc", "size": 8}))
    frame = P.encode(P.ROUTED, P.routed_body(3, inner))
    _, body = P.decode(frame, {P.ROUTED})
    rank, got = P.parse_routed(body)
    assert rank == 3 and got == inner
    with pytest.raises(P.ProtocolError, match="truncated ROUTED rank"):
        P.parse_routed(b"\x01")
    with pytest.raises(P.ProtocolError, match="unexpected frame type ROUTED"):
        P.decode(frame, {P.TASK, P.CONTROL, P.SHUTDOWN})  # what a daemon's session accepts


def test_mpi_spec_checks_and_a_missing_mpirun():
    with pytest.raises(ValueError, match="not both"):
        RemoteWorkerSpec(address="127.0.0.1:1", mpi={"np": 2})
    with pytest.raises(ValueError, match="address .* or mpi= is required"):
        RemoteWorkerSpec(key=os.urandom(32))
    with pytest.raises(ValueError, match="np must be a positive int"):
        RemoteWorkerSpec(mpi={"np": 0})
    with pytest.raises(TypeError, match="unexpected keyword"):
        RemoteWorkerSpec(mpi={"ranks": 2})
    spec = RemoteWorkerSpec(mpi={"np": 3})  # the key is made here when none is given
    assert len(spec.key) >= 32 and spec.mpi.np == 3 and "np=3" in repr(spec)
    w4 = Worker(4, platform="cpu")
    w4.add_remote_worker(RemoteWorkerSpec(mpi=MpiGroupSpec(np=2, mpirun="/nonexistent/mpirun")))
    with pytest.raises(SimplerError, match="cannot start '/nonexistent/mpirun'.*openmpi-bin"):
        w4.init()
    w4.close()
