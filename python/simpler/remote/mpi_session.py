"""The ranks of an MPI group (python -m simpler.remote_mpi, started by the
parent's mpirun): every rank runs a level-3 Worker; rank 0 also serves the
parent's session, as a daemon's session process does (the same Session:
handshake, manifest, health lane), and routes.

What travels how:
  parent <-> rank 0   the session's authenticated channels: TASK / CONTROL
                      for rank k inside ROUTED(k, frame), COMPLETION and
                      CONTROL_REPLY back (ids are unique in the group, so
                      they need no rank), HEARTBEAT on the health lane.
  rank 0 <-> rank k   MPI point-to-point on COMM_WORLD, tag TAG: pickled
                      ("task", ...), ("control", ...), ("ping", n) and
                      ("stop",) from rank 0; ("completion", ...),
                      ("reply", ...), ("pong", n) and ("closed", k) back.
                      MPI keeps messages of one sender in order, so rank k
                      takes tasks and controls in the parent's frame order,
                      as a session does.
Only the main thread of a rank calls MPI (MPI_THREAD_FUNNELED); every rank
runs its tasks on an executor thread, so rank 0 goes on routing and every
rank goes on answering pings while they run. A rank that leaves pings
unanswered for the session timeout is hung (a dead one mpirun notices
itself): rank 0 says which and aborts the job. Waiting is Iprobe and short
sleeps, not blocking receives, which in Open MPI spin a core each.
"""

from __future__ import annotations

import os
import queue
import select
import sys
import threading
import time

from .. import _errors
from . import protocol as P
from .session import Session

TAG = 7341


def execute(sess: Session, where: str, msg: tuple) -> tuple:
    """Runs one task or control request on this rank's Worker; its answer,
    errors named with the rank (`where`)."""
    if msg[0] == "task":
        _, tid, name, config, dirs, tensors, scalars = msg
        status, text = sess._task(name, config, dirs, tensors, scalars)
        return ("completion", tid, status, f"{where}: {text}" if status else "")
    _, rid, req, data = msg
    try:
        value, out = sess._control(req, data)
        return ("reply", rid, 0, value, bytes(out))  # a copy_from answers with a view of shared memory: MPI pickles bytes
    except Exception as e:  # noqa: BLE001
        return ("reply", rid, getattr(e, "status", _errors.INVALID_ARG), f"{where}: {type(e).__name__}: {e}", b"")


def rank_name(rank: int, info: dict) -> str:
    return f"MPI rank {rank} ({info['host']}, pid {info['pid']})"


class _Poll:
    """Sleeps between polls: short while answers are due, longer when idle."""

    def __init__(self):
        self.idle = 0

    def busy(self) -> None:
        self.idle = 0

    def delay(self) -> float:
        self.idle += 1
        return min(0.01, 0.0002 * (1 << min(self.idle, 6)))


class Executor:
    """Runs one rank's tasks and requests in order on a thread of its own;
    answers() hands back what is done, wait() sleeps until something is."""

    def __init__(self, sess: Session, where: str):
        self.sess = sess
        self.where = where
        self.pending = queue.Queue()
        self.done = queue.Queue()
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.thread = threading.Thread(target=self._run, daemon=True, name="simpler-mpi-executor")
        self.thread.start()

    def _run(self) -> None:
        while True:
            msg = self.pending.get()
            if msg is None:
                return
            self.done.put(execute(self.sess, self.where, msg))
            os.eventfd_write(self.efd, 1)

    def put(self, msg: tuple) -> None:
        self.pending.put(msg)

    def answers(self) -> list:
        try:
            os.eventfd_read(self.efd)
        except BlockingIOError:
            pass
        out = []
        while True:
            try:
                out.append(self.done.get_nowait())
            except queue.Empty:
                return out

    def wait(self, timeout: float) -> None:
        select.select([self.efd], [], [], timeout)

    def stop(self) -> None:
        """Waits for what was queued, then ends the thread."""
        if self.thread is not None:
            self.pending.put(None)
            self.thread.join()
            self.thread = None
        if self.efd >= 0:
            os.close(self.efd)
            self.efd = -1


def serve_rank(comm, sess: Session, where: str, stop: threading.Event) -> None:
    """Rank k > 0: runs what rank 0 sends, in order, until ("stop",);
    answers pings at once, also while a task runs."""
    ex = Executor(sess, where)
    poll = _Poll()
    stopped = False
    while not stop.is_set() and not stopped:
        got = False
        while comm.Iprobe(source=0, tag=TAG):
            msg = comm.recv(source=0, tag=TAG)
            got = True
            if msg[0] == "ping":
                comm.send(("pong", msg[1]), dest=0, tag=TAG)
            elif msg[0] == "stop":
                stopped = True
                break
            else:
                ex.put(msg)
        for ans in ex.answers():
            comm.send(ans, dest=0, tag=TAG)
            got = True
        if got:
            poll.busy()
        else:
            ex.wait(poll.delay())
    if stopped:
        ex.stop()
    sess._close()
    if stopped:
        comm.send(("closed", comm.Get_rank()), dest=0, tag=TAG)


class GroupSession(Session):
    """Rank 0: the parent's session for the whole group."""

    def __init__(self, conn, key: bytes, comm, worker, ranks: list):
        super().__init__(conn, key)
        self.comm = comm
        self.worker = worker  # built before MPI started (it forks)
        self.ranks = ranks  # per rank: pid, host, error (its Worker failed to start)
        self.where = rank_name(0, ranks[0])
        self.executor = None  # rank 0's own tasks and requests
        self.due = [0] * len(ranks)  # answers each rank owes
        self.sends = []  # isend requests in flight
        self.heard = [0.0] * len(ranks)  # when each rank last answered anything
        self._ping = 0
        self._next_ping = 0.0
        self._ranks_stopped = False

    def log(self, msg: str) -> None:
        super().log(f"(MPI rank 0 of {len(self.ranks)}) {msg}")

    def _start_worker(self, req: dict) -> dict:
        for r, info in enumerate(self.ranks):
            if info["error"]:
                status, msg = info["error"]
                raise _errors.error_for(status, f"{rank_name(r, info)}: its level-3 Worker failed to start: {msg}")
        return {"pids": [i["pid"] for i in self.ranks], "hosts": [i["host"] for i in self.ranks]}

    # ---- routing ------------------------------------------------------------------

    def _serve(self) -> None:
        self.executor = Executor(self, self.where)
        fd = self.conn.fileno()
        poll = _Poll()
        interval = max(0.05, self.timeout_s / 4)
        self.heard = [time.monotonic()] * len(self.ranks)
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= self._next_ping:
                self._ping_ranks()
                self._next_ping = now + interval
            wait = poll.delay() if any(self.due) else 0.05
            ready = select.select([fd, self.executor.efd], [], [], min(wait, max(0.0, self._next_ping - now)))[0]
            if fd in ready:
                poll.busy()
                if self._from_parent():
                    return
            for ans in self.executor.answers():
                self._answer(ans)
            if self._answer_ranks():
                poll.busy()
            if self.sends:
                self.sends = [s for s in self.sends if not s.Test()]
            self._check_ranks()

    def _ping_ranks(self) -> None:
        self._ping += 1
        for r in range(1, len(self.ranks)):
            self.sends.append(self.comm.isend(("ping", self._ping), dest=r, tag=TAG))

    def _check_ranks(self) -> None:
        """A rank silent for the session timeout is hung: say which, and end
        the job (the parent reads the line in mpirun's output)."""
        now = time.monotonic()
        for r in range(1, len(self.ranks)):
            if now - self.heard[r] > self.timeout_s:
                print(f"simpler.remote_mpi: {rank_name(r, self.ranks[r])} did not answer within "
                      f"remote_session_timeout_s={self.timeout_s:g} s; ending the group", file=sys.stderr, flush=True)
                self.comm.Abort(3)

    def _from_parent(self) -> bool:
        """Takes one frame; True on SHUTDOWN (answered once every rank has
        closed its Worker)."""
        frame = self.cmd.recv(P.MAX_FRAME_BYTES, self.timeout_s)
        ftype, body = P.decode(frame, {P.TASK, P.CONTROL, P.SHUTDOWN, P.ROUTED})
        if ftype == P.SHUTDOWN:
            self._stop_ranks()
            self.cmd.send(P.encode(P.SHUTDOWN), self.timeout_s)
            return True
        rank = 0
        if ftype == P.ROUTED:
            rank, inner = P.parse_routed(body)
            if rank >= len(self.ranks):
                raise P.ProtocolError(f"ROUTED to rank {rank}; the group has {len(self.ranks)}")
            ftype, body = P.decode(inner, {P.TASK, P.CONTROL})
        msg = ("task",) + P.parse_task(body) if ftype == P.TASK else ("control",) + P.parse_control(body)
        if rank == 0:
            self.executor.put(msg)
        else:
            # Non-blocking: a large message waits for rank k to take it, and
            # routing must go on meanwhile.
            self.sends.append(self.comm.isend(msg, dest=rank, tag=TAG))
            self.due[rank] += 1
        return False

    def _answer(self, ans: tuple) -> None:
        if ans[0] == "completion":
            _, tid, status, text = ans
            self.cmd.send(P.encode(P.COMPLETION, P.completion_body(tid, status, text)), self.timeout_s)
        elif ans[0] == "reply":
            _, rid, status, value, data = ans
            self._reply(rid, status, value, data)

    def _answer_ranks(self) -> bool:
        from mpi4py import MPI

        got = False
        st = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG, status=st):
            src = st.Get_source()
            ans = self.comm.recv(source=src, tag=TAG)
            got = True
            self.heard[src] = time.monotonic()
            if ans[0] in ("completion", "reply"):
                self.due[src] -= 1
                self._answer(ans)
        return got

    # ---- end ----------------------------------------------------------------------

    def _stop_ranks(self) -> None:
        """Asks every other rank to close its Worker and waits (at most the
        session timeout) for each to say it has; answers still due are
        dropped: the parent is going away."""
        if self._ranks_stopped:
            return
        self._ranks_stopped = True
        from mpi4py import MPI

        others = range(1, len(self.ranks))
        for r in others:
            self.sends.append(self.comm.isend(("stop",), dest=r, tag=TAG))
        closed = set()
        deadline = time.monotonic() + self.timeout_s
        st = MPI.Status()
        poll = _Poll()
        while len(closed) < len(others) and time.monotonic() < deadline:
            if self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG, status=st):
                ans = self.comm.recv(source=st.Get_source(), tag=TAG)
                if ans[0] == "closed":
                    closed.add(ans[1])
                poll.busy()
            else:
                time.sleep(poll.delay())
        if len(closed) < len(others):
            self.log(f"ranks {sorted(set(others) - closed)} did not close within {self.timeout_s:g} s")
        if self.executor is not None:
            self.executor.stop()

    def _close(self) -> None:
        self.stop.set()
        try:
            self._stop_ranks()
        except Exception as e:  # noqa: BLE001
            self.log(f"stopping the ranks: {e}")
        super()._close()
