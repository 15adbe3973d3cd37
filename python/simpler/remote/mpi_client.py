"""The parent's side of an MPI group: a level-3 group started with mpirun,
every rank a level-3 Worker (python -m simpler.remote_mpi), rank 0 the
one that talks to us.

The group is N remote workers of the parent, one per rank, not one worker
of N ranks' capacity: each rank has its own memory (remote_malloc lands on
one rank's host), and the engine keys dependencies and checks tensors per
endpoint, so a rank is exactly what one endpoint describes. The ranks share
one session: MpiGroup is a RemoteEndpoint that the engine never sees; it
launches mpirun, takes rank 0's connection on a port of its own, runs the
same authenticated channel pair (command lane, health lane) as a daemon's
session, and carries each rank's TASK and CONTROL frames wrapped in a
ROUTED frame. MpiRankEndpoint is what the engine schedules onto.

Any rank dying ends the whole group (mpirun aborts the job); the error
names the rank when mpirun's report does.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque

from .. import _errors
from . import protocol as P
from .client import RemoteDied, RemoteEndpoint

# Environment variables a rank on another host needs as the parent has them
# (mpirun's -x forwards them; local ranks inherit them anyway).
_FORWARD_ENV = ("PYTHONPATH", "TENSORCORE_LIB", "SIMPLER_LIB", "SIMPLER_PLATFORM", "SIMPLER_CPU_CORES",
                "SIMPLER_LOG_LEVEL", "SIMPLER_CACHE_DIR", "SIMPLER_INCLUDE_DIR")
KEY_ENV = "SIMPLER_REMOTE_KEY"

# mpirun (Open MPI) on a rank that died: "mpirun noticed that process rank 1
# with PID 0 on node vm exited on signal 9 (Killed)."
# Rank 0 on a rank that stopped answering, before it aborts the job.
_RANK0_SAYS = "simpler.remote_mpi: "
_NOTICED = re.compile(r"process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?")


class MpiGroupSpec:
    """How to start an MPI group (the `mpi=` of RemoteWorkerSpec).

    np          ranks (each runs a level-3 Worker of the RemoteWorkerSpec's
                platform, device_ids and num_sub_workers)
    hosts       None (all ranks on this host) or host names for mpirun --host
    mpirun      the launcher
    extra_args  more mpirun options (--oversubscribe, --allow-run-as-root, ...)
    python      the ranks' interpreter (default: this one)
    listen      the address the parent takes rank 0's connection on
                (default 127.0.0.1 without hosts, 0.0.0.0 with)
    connect_host the parent's address as rank 0 reaches it (default
                127.0.0.1 without hosts, this host's name with)
    """

    def __init__(self, np: int, hosts=None, mpirun: str = "mpirun", extra_args=(), python: str = None,
                 listen: str = None, connect_host: str = None):
        if isinstance(np, bool) or not isinstance(np, int) or np < 1:
            raise ValueError(f"MpiGroupSpec: np must be a positive int, got {np!r}")
        self.np = np
        self.hosts = None if hosts is None else [str(h) for h in hosts]
        self.mpirun = str(mpirun)
        self.extra_args = [str(a) for a in extra_args]
        self.python = python or sys.executable
        local = self.hosts is None
        self.listen = listen or ("127.0.0.1" if local else "0.0.0.0")
        self.connect_host = connect_host or ("127.0.0.1" if local else socket.gethostname())

    @classmethod
    def of(cls, mpi) -> "MpiGroupSpec":
        if isinstance(mpi, cls):
            return mpi
        if isinstance(mpi, dict):
            return cls(**mpi)
        raise TypeError(f"RemoteWorkerSpec: mpi= takes an MpiGroupSpec or a dict of its fields, got "
                        f"{type(mpi).__name__}")

    def command(self, connect: str, config: str) -> list:
        cmd = [self.mpirun, "-np", str(self.np)]
        if self.hosts:
            cmd += ["--host", ",".join(self.hosts)]
        cmd += self.extra_args
        for name in (KEY_ENV,) + _FORWARD_ENV:
            if name == KEY_ENV or name in os.environ:
                cmd += ["-x", name]
        return cmd + [self.python, "-m", "simpler.remote_mpi", "--connect", connect, "--config", config]

    def __repr__(self) -> str:
        return f"MpiGroupSpec(np={self.np}, hosts={self.hosts}, mpirun={self.mpirun!r}, extra_args={self.extra_args})"


class MpiRank:
    """One rank's place among a level-4 Worker's next-level workers (what
    add_remote_worker records for it until init() opens the group)."""

    def __init__(self, spec, rank: int, shared: dict):
        self.spec = spec
        self.rank = rank
        self._shared = shared  # the ranks of one group share its MpiGroup

    @classmethod
    def group(cls, spec) -> list:
        shared = {}
        return [cls(spec, r, shared) for r in range(spec.mpi.np)]

    def endpoint(self, slot: int, wid: int, timeout_s: float, heap_ring_size: int) -> "MpiRankEndpoint":
        g = self._shared.get("group")
        if g is None:
            g = self._shared["group"] = MpiGroup(self.spec, wid, timeout_s, heap_ring_size)
        return MpiRankEndpoint(g, self.rank, slot, wid)


class _CompletionRouter:
    """Stands in for the group's completion queue: the receive loop it
    inherits appends each COMPLETION here, and the completion goes to the
    queue of the rank endpoint that posted the task."""

    def __init__(self, owners: dict):
        self.owners = owners

    def append(self, completion) -> None:
        ep = self.owners.pop(completion[0], None)
        if ep is not None:
            ep.completions.append(completion)


class MpiGroup(RemoteEndpoint):
    """The session of one MPI group (see the module docstring)."""

    def __init__(self, spec, first_wid: int, timeout_s: float, heap_ring_size: int):
        super().__init__(-1, first_wid, spec, timeout_s, heap_ring_size)
        self.mpi = spec.mpi
        self.label = f"MPI group of {self.mpi.np} ranks"
        self.owners = {}  # task id -> the rank endpoint that posted it
        self.completions = _CompletionRouter(self.owners)
        self.proc = None  # mpirun
        self.connect = None  # the address rank 0 connects to ("HOST:PORT")
        self.pids, self.hosts = [], []
        self.output = deque(maxlen=60)  # mpirun's last lines (its report on a dead rank)
        self._exited = threading.Event()
        self._watcher = None
        self._listener = None
        self._opened = self._closed = False

    # ---- start ------------------------------------------------------------------

    def open(self, startup_timeout_s: float, wake_fd: int) -> None:
        if self._opened:  # the first rank opens the group for all
            return
        self._opened = True
        super().open(startup_timeout_s, wake_fd)
        self.pids = [int(p) for p in self.opened["pids"]]
        self.hosts = list(self.opened["hosts"])

    def _connect(self, timeout_s: float) -> socket.socket:
        import json

        spec, mpi = self.spec, self.mpi
        self._listener = socket.create_server((mpi.listen, 0))
        self.connect = f"{mpi.connect_host}:{self._listener.getsockname()[1]}"
        config = json.dumps({"platform": spec.platform, "runtime": spec.runtime, "device_ids": spec.device_ids,
                             "num_sub_workers": spec.num_sub_workers, "heap_ring_size": self.heap})
        env = dict(os.environ)
        env[KEY_ENV] = spec.key.hex()  # not on the command line, where any user could read it
        cmd = mpi.command(self.connect, config)
        try:
            # A session of its own: closing can signal mpirun's whole group.
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True, text=True,
                                         errors="replace")
        except OSError as e:
            raise _errors.SimplerError(_errors.INVALID_ARG, f"{self.label}: cannot start {mpi.mpirun!r}: {e} "
                                       f"(install Open MPI: openmpi-bin)") from None
        self.label = f"MPI group of {mpi.np} ranks (mpirun pid {self.proc.pid})"
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="simpler-l4-mpirun")
        self._watcher.start()
        deadline = time.monotonic() + timeout_s
        while True:
            if select.select([self._listener], [], [], 0.2)[0]:
                conn, _ = self._listener.accept()
                break
            if self.proc.poll() is not None:
                self._exited.wait(2.0)
                raise _errors.SimplerError(_errors.DISPATCH, f"{self.label}: mpirun exited with status "
                                           f"{self.proc.returncode} before rank 0 connected{self._report(True)}")
            if time.monotonic() > deadline:
                raise socket.timeout(f"rank 0 did not connect to {self.connect} within {timeout_s:g} s")
        self._listener.close()
        self._listener = None
        conn.settimeout(timeout_s)
        return conn

    def _watch(self) -> None:
        """Keeps mpirun's output (the ranks' stderr too, echoed to ours) and
        ends the group when mpirun exits unasked."""
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.output.append(line)
            print(f"[mpi {self.proc.pid}] {line}", file=sys.stderr, flush=True)
        self.proc.wait()
        self._exited.set()
        if not self._stopping:
            self._die(f"ended: mpirun exited with status {self.proc.returncode}")

    def _report(self, tail: bool = False) -> str:
        """What mpirun said about the rank that ended the job, or (tail)
        its last line."""
        ours = [ln for ln in self.output if ln.startswith(_RANK0_SAYS)]
        if ours:  # rank 0 ended the job: a rank stopped answering
            return f"; {ours[-1][len(_RANK0_SAYS):]}"
        text = "\n".join(self.output)
        m = _NOTICED.search(text)
        if m:
            rank = int(m.group(1))
            pid = self.pids[rank] if rank < len(self.pids) else int(m.group(2))
            sig = f"signal {m.group(4)}" + (f" ({m.group(5)})" if m.group(5) else "")
            return f"; rank {rank} (pid {pid}, node {m.group(3)}) was killed by {sig}"
        lines = [ln.strip() for ln in self.output if ln.strip() and not ln.startswith("---")]
        if tail and lines:
            return f": {lines[-1]}"
        return ""

    def _die(self, why: str) -> None:
        # A lost connection usually means a rank died and mpirun aborted the
        # job; its report on which rank comes as it exits: wait briefly for it.
        # A rank 0 silent past the timeout is no such job: no wait.
        if (self.dead is None and not self._stopping and self.proc is not None
                and not why.startswith("did not answer heartbeats")):
            if self._exited.wait(2.0):  # one account, whichever thread saw the end first
                why = f"ended: mpirun exited with status {self.proc.returncode}"
            why += self._report()
        super()._die(why)

    # ---- end --------------------------------------------------------------------

    def close(self) -> None:
        """Ends the session (rank 0 stops every rank's Worker), then waits
        for mpirun; one that lingers is terminated, then killed, with its
        process group, and so are ranks of this host still alive."""
        if self._closed:
            return
        self._closed = True
        opened = bool(self._threads)
        if not opened:  # open() failed before the lanes ran: no acknowledgement can come
            self._stopping = True
        # After a SHUTDOWN the ranks close their Workers and mpirun ends by
        # itself; a group that never opened, or whose session died, gets a
        # moment before it is stopped.
        grace = min(self.timeout_s, 10.0) if opened and self.dead is None else 1.0
        super().close()
        p = self.proc
        if p is not None:
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
                    try:
                        p.wait(3.0)
                        break
                    except subprocess.TimeoutExpired:
                        pass
            # Ranks die with mpirun (their parent-death signal), so this is
            # only for one that was somehow left behind on this host.
            here = socket.gethostname()
            for pid, host in zip(self.pids, self.hosts):
                if host == here and process_alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            if self._watcher is not None:
                self._watcher.join(5.0)
            if p.stdout is not None:
                p.stdout.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None


def process_alive(pid: int) -> bool:
    """Whether process pid exists and is not a zombie (a /proc read)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class MpiRankEndpoint(RemoteEndpoint):
    """One rank of a group, as the engine sees it: a remote level-3 worker
    whose frames travel through the group's session."""

    def __init__(self, group: MpiGroup, rank: int, slot: int, wid: int):
        self.group = group
        self.rank = rank
        self._dead = None
        super().__init__(slot, wid, group.spec, group.timeout_s, group.heap)
        self.label = f"remote worker {wid} (MPI rank {rank} of {group.mpi.np})"
        # Replies arrive on the group's receive thread, into its table; request
        # ids stay unique across the ranks sharing it.
        self._cv = group._cv
        self._replies = group._replies
        self._sinks = group._sinks
        self._next_rid = (rank << 40) + 1

    @property
    def dead(self):
        if self._dead is None and self.group.dead is not None:
            self._dead = f"{self.label}: {self.group.dead}"
        return self._dead

    @dead.setter
    def dead(self, why) -> None:
        self._dead = why

    def open(self, startup_timeout_s: float, wake_fd: int) -> None:
        self.wake_fd = wake_fd
        self.group.open(startup_timeout_s, wake_fd)
        self.pid = self.group.pids[self.rank]

    @property
    def lane(self):
        return self.group

    def _send(self, frame: bytes) -> None:
        try:
            self.group._send(P.routed_frame(self.rank, frame))
        except RemoteDied:
            raise RemoteDied(self.dead) from None

    def post(self, task) -> None:
        self.group.owners[task.id] = self
        try:
            super().post(task)
        except BaseException:
            self.group.owners.pop(task.id, None)
            raise

    def copy_to(self, addr: int, view) -> None:
        """A copy to a rank travels in pieces inside CONTROL frames (rank 0
        passes each on as an MPI message), a few unanswered at once."""
        pieces = (({"op": "copy_to", "addr": addr + at}, view[at:at + k])
                  for at, k in P.data_pieces(view.nbytes, P.COPY_PIECE_BYTES))
        for _ in self.control_many(pieces, P.COPY_WINDOW):
            pass

    def copy_from(self, view, addr: int) -> None:
        """Each piece's reply lands in its slice of view (the receiving thread
        writes it; a reply that does not fit its slice fails the copy)."""
        pieces = (({"op": "copy_from", "addr": addr + at, "nbytes": k}, b"", view[at:at + k])
                  for at, k in P.data_pieces(view.nbytes, P.COPY_PIECE_BYTES))
        for _ in self.control_many(pieces, P.COPY_WINDOW):
            pass

    def close(self) -> None:
        self.group.close()
