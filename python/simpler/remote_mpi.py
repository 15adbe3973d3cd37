"""One rank of an MPI group serving a level-4 parent:

    mpirun -np N [options] python -m simpler.remote_mpi --connect HOST:PORT --config JSON

Worker(4).add_remote_worker(RemoteWorkerSpec(mpi=...)) starts it; the key
comes in $SIMPLER_REMOTE_KEY (hex; mpirun -x forwards it), never on the
command line. Every rank builds its level-3 Worker (forking its children)
before MPI starts, so no fork happens in an MPI process; rank 0 then
connects to the parent and serves the session (simpler/remote/mpi_session.py).
See docs/simpler.md, "MPI groups".
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback


def _start_janitor() -> None:
    """Forks a process whose only job is to unlink this rank's shared
    memory once the rank has gone. A rank killed by a signal (or by mpirun
    aborting the job after another rank died) cannot unlink its segments,
    and they would outlive the job. It leaves mpirun's process group and its
    output pipe, so neither the job's teardown nor its I/O waits for it."""
    from .level3.shm import PREFIX

    rank_pid = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork():
        return
    try:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            pidfd = os.pidfd_open(rank_pid)
            select.select([pidfd], [], [])
        except ProcessLookupError:
            pass
        # Python's resource tracker (also a child of the rank) unlinks what the
        # rank registered unless it was killed with it: let it go first, so the
        # two do not race; whatever is left is swept here.
        time.sleep(0.5)
        mine = f"{PREFIX}{rank_pid}_"
        for name in os.listdir("/dev/shm"):
            if name.startswith(mine):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass
    finally:
        os._exit(0)


def _die_with_parent() -> None:
    # The parent is mpirun (or Open MPI's daemon on another host): a rank
    # must not outlive the job that started it.
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simpler.remote_mpi", description=__doc__.split("\n\n")[0])
    ap.add_argument("--connect", required=True, help="HOST:PORT of the level-4 parent (rank 0 connects there)")
    ap.add_argument("--config", required=True, help="the level-3 Worker of every rank, as JSON")
    a = ap.parse_args(argv)
    config = json.loads(a.config)
    # Only rank 0 uses the key; no process started below inherits it.
    key_hex = os.environ.pop("SIMPLER_REMOTE_KEY", "")
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it closes the group
    _start_janitor()

    from . import _errors
    from .remote import protocol as P
    from .remote.mpi_session import GroupSession, rank_name, serve_rank
    from .remote.session import Session, make_worker

    worker, error = None, None
    try:
        worker = make_worker(config)
    except Exception as e:  # noqa: BLE001 - rank 0 reports it to the parent
        error = (getattr(e, "status", _errors.INVALID_ARG), f"{type(e).__name__}: {e}")

    import mpi4py

    mpi4py.rc.thread_level = "funneled"  # only the main thread calls MPI
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    ranks = comm.gather({"pid": os.getpid(), "host": socket.gethostname(), "error": error}, root=0)
    stop = threading.Event()
    try:
        if rank == 0:
            key = P.check_key(bytes.fromhex(key_hex))
            host, port = P.parse_address(a.connect)
            conn = socket.create_connection((host, port), timeout=10.0)
            sess = GroupSession(conn, key, comm, worker, ranks)

            def on_term(*_):  # mpirun is ending the job: close the Worker (its shared memory) on the way out
                sess.stop.set()
                if sess.cmd is not None:
                    sess.cmd.shutdown()

            signal.signal(signal.SIGTERM, on_term)
            try:
                sess.run()
            finally:
                sess._close()  # also when the session never started: every rank's Worker closes
        else:
            sess = Session(None, b"")
            sess.worker = worker
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            serve_rank(comm, sess, rank_name(rank, {"pid": os.getpid(), "host": socket.gethostname()}), stop)
    except BaseException:  # noqa: BLE001 - end the whole job, not just this rank
        traceback.print_exc()
        sys.stderr.flush()
        if worker is not None:
            try:
                worker.close()
            except Exception:  # noqa: BLE001
                pass
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
