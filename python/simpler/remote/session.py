"""The remote side of a level-4 session: one process per session, forked
by the daemon (simpler.remote_worker) for each connection.

It proves itself and checks the client's proof before reading anything
else, takes the manifest (the first CONTROL frame), builds its level-3
Worker (forking that Worker's children while this process is still
single-threaded), opens the health lane, and only then starts threads.
One thread, the driver, serves the command lane and owns the level-3
Worker: it reads each frame itself (no hand-over between threads). The
driver starts tasks in frame order, up to the Worker's capacity at once
(its sub-workers, at least one): each task's orchestration function runs
in the driver and returns once it has submitted, so the tasks' work
overlaps in the children while the driver waits on the engine for
whichever finishes first, or for the next frame (the engine's poll
watches the lane's socket).
The parent sends a task only once its inputs are complete, so starting
tasks as they arrive keeps the parent's dependencies; completions go back
as each task ends, and the parent matches them by task id. Control
requests are taken as they arrive, also while tasks run (memory calls are
not ordered with tasks in flight, as at level 3); a copy's bytes move
straight between the socket and the remote memory. While an
orchestration function itself runs, frames wait in the socket.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import select
import signal
import socket
import sys
import threading
import traceback
from collections import deque

from .. import _errors
from .._lib import CChipTensor
from ..level3 import endpoint as _endpoint
from ..task_interface import CallConfig, ChipStorageTaskArgs
from . import protocol as P
from .copies import CopyServer

HANDSHAKE_S = 10.0


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def resolve_callable(name: str):
    """The object named "module:qualname", imported here."""
    mod, sep, qual = name.partition(":")
    if not sep or not mod or not qual:
        raise ValueError(f"remote callable {name!r} is not 'module:qualname'")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"remote callable {name!r} is not callable")
    return obj


def make_worker(req: dict):
    """The level-3 Worker a manifest describes, initialised: it forks its
    children, so call it while this process has no other thread."""
    from ..level3.worker import HierWorker

    w = HierWorker(3, platform=req["platform"], runtime=req.get("runtime", "tensormap_and_ringbuffer"),
                   device_ids=list(req.get("device_ids", [0])), num_sub_workers=int(req.get("num_sub_workers", 0)),
                   heap_ring_size=int(req.get("heap_ring_size", 0) or 0))
    try:
        w.init()
    except BaseException:
        w.close()
        raise
    return w


class Session:
    def __init__(self, conn: socket.socket, key: bytes):
        self.conn = conn
        self.key = key
        self.worker = None
        self.buffers = {}  # base address -> Buffer (remote_malloc)
        self.imports = {}  # base address -> ImportedBuffer (another session's export, mapped here)
        self.callables = {}
        self.timeout_s = 30.0
        self.stop = threading.Event()
        self.cmd = self.health = None
        self.capacity = 1  # tasks run at once: the level-3 Worker's sub-workers, at least one
        self._lane = None  # poll object of the command lane's socket (the driver's)
        self.copies = None  # CopyServer: the lane's reader, serving copies into the ranges below

    def log(self, msg: str) -> None:
        print(f"simpler.remote_worker session {os.getpid()}: {msg}", file=sys.stderr, flush=True)

    def run(self) -> None:
        from tensorcore import Channel, TensorcoreError

        try:
            self.cmd = Channel.open(self.conn, server=True, keys=P.keyring(self.key), timeout=HANDSHAKE_S)
        except TensorcoreError as e:
            self.log(f"refused a connection from {self._peer()}: {e}")
            return
        try:
            self._open()
            self._serve()
        except Exception as e:  # noqa: BLE001 - the session ends; say why
            self.log(f"ended: {type(e).__name__}: {e}")
        finally:
            self._close()

    def _peer(self) -> str:
        try:
            return "%s:%d" % self.conn.getpeername()[:2]
        except OSError:
            return "a peer"

    def _open(self) -> None:
        from tensorcore import Channel

        ftype, body = P.decode(self.cmd.recv(P.MAX_FRAME_BYTES, HANDSHAKE_S), {P.CONTROL})
        rid, req, _ = P.parse_control(body)
        if req.get("op") != "open":
            raise P.ProtocolError(f"the first request is {req.get('op')!r}, not 'open'")
        self.timeout_s = float(req.get("timeout_s", 30.0))
        try:
            extra = self._start_worker(req)
        except Exception as e:  # noqa: BLE001
            self._reply(rid, getattr(e, "status", _errors.INVALID_ARG), f"{type(e).__name__}: {e}")
            raise
        self.capacity = max(1, self.worker.num_sub_workers)
        # The level-3 spin policy (set by the Worker's init) for the lane's
        # own waits too: a copy's data frames, sends into a full socket.
        self.cmd.set_spin(round(_endpoint.SPIN_S * 1e6))
        self.copies = CopyServer(self.cmd, self.timeout_s)
        host = self.conn.getsockname()[0]
        lst = socket.create_server((host, 0))
        self._reply(rid, 0, dict(extra, pid=os.getpid(), health_port=lst.getsockname()[1]))
        lst.settimeout(HANDSHAKE_S)
        try:
            hconn, _ = lst.accept()
        finally:
            lst.close()
        with hconn:
            self.health = Channel.open(hconn, server=True, keys=P.keyring(self.key), timeout=HANDSHAKE_S)
        threading.Thread(target=self._health_loop, daemon=True).start()

    def _start_worker(self, req: dict) -> dict:
        """Builds the level-3 Worker the manifest describes; returns what the
        reply adds to the session's pid and health port (an MPI group's rank
        0 builds its Worker before the manifest, and reports its ranks)."""
        self.worker = make_worker(req)
        return {}

    def _health_loop(self) -> None:
        """Echoes the parent's heartbeats; a parent silent for the session
        timeout is gone: the session ends (and with it its children)."""
        try:
            while not self.stop.is_set():
                f = self.health.recv(64, self.timeout_s)
                _, body = P.decode(f, P.HEALTH_TYPES)
                self.health.send(P.encode(P.HEARTBEAT, P.heartbeat_body(P.parse_heartbeat(body))), self.timeout_s)
        except Exception as e:  # noqa: BLE001
            if not self.stop.is_set():
                self.log(f"the parent stopped answering on the health lane ({e}); ending the session")
        self.stop.set()
        self.cmd.shutdown()  # wakes the driver: its lane reads the end

    def _reply(self, rid: int, status: int, value, data=b"") -> None:
        self.cmd.send(P.reply_frame(rid, status, value, data), self.timeout_s)

    # ---- the command lane ------------------------------------------------------

    def _readable(self) -> bool:
        """A frame (or the connection's end) is waiting on the command lane."""
        return bool(self._lane.poll(0))

    def _take(self, frame, backlog) -> bool:
        """Acts on one frame of the command lane (copies were served by the
        library before it); True on SHUTDOWN. A control request is served at
        once, a task joins the backlog."""
        ftype, body = P.decode(frame, {P.TASK, P.CONTROL, P.SHUTDOWN})
        if ftype == P.SHUTDOWN:
            return True
        if ftype == P.CONTROL:
            rid, req, data = P.parse_control(body, copy=False)  # an MPI rank's copy piece: a view of the frame
            self._serve_control(rid, req, data)
        else:
            backlog.append(P.parse_task(body))
        return False

    def _serve(self) -> None:
        """The driver, the command lane's only reader: it takes frames when
        it has nothing else to do, and between tasks; while tasks run it
        waits on the engine and on the lane at once (the engine's poll
        watches the lane's socket), so a frame is read by the thread that
        acts on it, without a hand-over."""
        eng = self.worker._engine
        self._lane = select.poll()
        self._lane.register(self.conn.fileno(), select.POLLIN)
        eng.watch_fds = (self.conn.fileno(),)
        eng.interrupt = self._readable  # a frame arrived: stop waiting on the engine
        backlog = deque()  # tasks received, not started (the Worker is at capacity)
        running = []  # (task id, RunHandle, args kept alive)
        ending = False
        while True:
            block = not running and not backlog  # idle: the lane's channel spins before it blocks (set_spin)
            while not ending and (block or self._readable()):
                try:
                    # A copy is served in the library; another frame is in the channel's
                    # own buffer, which _take acts on before the next receive.
                    frame = self.copies.next_frame()
                except _errors.SimplerError as e:
                    if e.status == _errors.TIMEOUT and not self.stop.is_set():
                        continue  # no frame began: the lane is idle, and still in step
                    raise ConnectionError(f"the command lane closed or failed ({e})") from None
                block = False
                if frame is not None:
                    ending = self._take(frame, backlog)
            still = []
            for tid, h, keep in running:
                if h._run.done:
                    self._complete_run(tid, h._run)
                else:
                    still.append((tid, h, keep))
            running = still
            while backlog and len(running) < self.capacity and not ending:
                tid, name, config, dirs, tensors, scalars = backlog.popleft()
                started = self._start_task(name, config, dirs, tensors, scalars)
                if isinstance(started, tuple):
                    self._complete(tid, *started)
                elif started[0]._run.done:  # nothing it submitted still runs: answer now, not after a wait
                    self._complete_run(tid, started[0]._run)
                else:
                    running.append((tid, started[0], started[1]))
            if ending and not running:
                # SHUTDOWN: every task started has reported; tasks never started are dropped
                # (the parent drains its runs before it closes). Stopping first: the
                # parent closes the health lane once it has the answer.
                self.stop.set()
                self.cmd.send(P.encode(P.SHUTDOWN), self.timeout_s)
                return
            if running:
                with eng.lock:
                    eng.wait(lambda: (not ending and self._readable()) or any(r[1]._run.done for r in running),
                             None)

    def _complete_run(self, tid: int, run) -> None:
        err = run.error
        self._complete(tid, *((0, "") if err is None else (err[0], str(_errors.error_for(*err)))))

    def _complete(self, tid: int, status: int, msg: str) -> None:
        self.cmd.send(P.encode(P.COMPLETION, P.completion_body(tid, status, msg)), self.timeout_s)

    def _serve_control(self, rid: int, req: dict, data: bytes) -> None:
        try:
            value, out = self._control(req, data)
            self._reply(rid, 0, value, out)
        except Exception as e:  # noqa: BLE001
            self._reply(rid, getattr(e, "status", _errors.INVALID_ARG), f"{type(e).__name__}: {e}")

    def _task(self, name, config, dirs, tensors, scalars):
        """One task run to its end: (status, message). An MPI rank's executor
        thread runs its tasks this way, one at a time."""
        started = self._start_task(name, config, dirs, tensors, scalars)
        if isinstance(started, tuple):
            return started
        handle, _args = started  # the args stay alive until the run is over
        try:
            handle.wait()
            return 0, ""
        except _errors.SimplerError as e:
            return e.status, str(e)

    def _start_task(self, name, config, dirs, tensors, scalars):
        """Runs the task's orchestration function (it returns once it has
        submitted its tasks): (RunHandle, args) while the run goes on, or
        (status, message) when it failed at once."""
        try:
            fn = self.callables.get(name)
            if fn is None:
                fn = self.callables[name] = resolve_callable(name)
            # One copy of all the descriptors (tensors: their bytes back to back); a ChipTensor over an
            # element is made when the orchestration asks for it.
            descs = (CChipTensor * len(dirs)).from_buffer_copy(tensors) if dirs else ()
            args = ChipStorageTaskArgs._adopt(descs, dirs, scalars)
            return [self.worker.submit(fn, args, CallConfig.from_dict(config) if config else None), args]
        except _errors.SimplerError as e:
            return e.status, str(e)
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)
            where = f" ({tb[-1].filename}:{tb[-1].lineno})" if tb else ""
            return _errors.INTERNAL, f"{type(e).__name__}: {e}{where}"

    def _allocation(self, ptr: int):
        """The Buffer remote_malloc returned at `ptr`."""
        b = self.buffers.get(ptr)
        if b is None:
            raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"0x{ptr:x} is not a remote allocation of this "
                                               f"session")
        return b

    def _buffer_at(self, addr: int, n: int):
        for base, b in list(self.buffers.items()) + list(self.imports.items()):
            if base <= addr and addr + n <= base + b.nbytes:
                return b
        raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"[0x{addr:x}, +{n}) is not inside one remote "
                                           f"allocation of this session")

    def _view_at(self, addr: int, n: int) -> memoryview:
        """The bytes [addr, addr + n) of the one allocation (or import) that
        holds them, as a view of its shared memory."""
        b = self._buffer_at(addr, n)
        return b.shm.buf[addr - b.ptr:addr - b.ptr + n]

    def _serve_copies(self, b, on: bool) -> None:
        """Lets the lane's copies reach buffer b, or no longer (an MPI rank
        other than 0 has no lane: its copies come as CONTROL pieces)."""
        if self.copies is not None:
            if on:
                self.copies.add(b.ptr, b.nbytes)
            else:
                self.copies.drop(b.ptr)

    def _control(self, req: dict, data: bytes):
        op = req["op"]
        if op == "malloc":
            size = int(req["size"])
            if size <= 0:
                raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"malloc of {size} bytes")
            b = self.worker.create_buffer(size)
            self._serve_copies(b, True)
            self.buffers[b.ptr] = b
            return b.ptr, b""
        if op == "free":
            b = self._allocation(int(req["ptr"]))
            self._serve_copies(b, False)
            del self.buffers[b.ptr]
            b.close()
            return None, b""
        if op == "copy_to":
            self._view_at(int(req["addr"]), len(data))[:] = data
            return None, b""
        if op == "copy_from":
            addr, n = int(req["addr"]), int(req["nbytes"])
            if not 0 <= n <= P.CHUNK_BYTES:
                raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"copy_from of {n} bytes in one request")
            return None, self._view_at(addr, n)  # a view: the reply frame is the only copy
        if op == "export":
            b = self._allocation(int(req["ptr"]))
            return {"name": b.shm.name, "nbytes": b.nbytes, "host": P.host_id()}, b""
        if op == "import":
            return self._import(str(req["name"]), int(req["nbytes"]), str(req["host"])), b""
        if op == "release_import":
            b = self.imports.pop(int(req["ptr"]), None)
            if b is None:
                raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"0x{int(req['ptr']):x} is not an import "
                                                   f"of this session")
            self._serve_copies(b, False)
            b.close()
            return None, b""
        raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"unknown control request {op!r}")

    def _import(self, name: str, nbytes: int, host: str) -> int:
        """Maps another session's exported segment into this session's
        level-3 Worker (its children map it by name when a task names it)."""
        from ..level3 import shm
        from ..level3.memory import ImportedBuffer

        if host != P.host_id():
            raise _errors.SimplerUnsupportedError(
                _errors.UNSUPPORTED, f"the export lives on another host ({host}; this is {P.host_id()}); shared "
                f"memory carries imports, so the importer must run on the exporter's host")
        if not name.startswith(shm.PREFIX) or "/" in name or nbytes <= 0:
            raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"{name!r} ({nbytes} bytes) is not an export")
        try:
            b = ImportedBuffer(name, nbytes, self.worker)
        except (OSError, ValueError) as e:
            raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"cannot map the export {name}: {e}") from None
        self.worker._buffers.append(b)
        self.worker._engine.add_buffer(b)
        self._serve_copies(b, True)
        self.imports[b.ptr] = b
        return b.ptr

    def _close(self) -> None:
        self.stop.set()
        if self.copies is not None:  # before the memory it serves goes
            self.copies.close()
        if self.worker is not None:
            try:
                self.worker.close()
            except Exception as e:  # noqa: BLE001
                self.log(f"closing the level-3 Worker: {e}")
        for ch in (self.cmd, self.health):
            if ch is not None:
                ch.shutdown()


def serve_connection(conn: socket.socket, key: bytes) -> None:
    """The body of a forked session process; never returns."""
    code = 0
    try:
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sess = Session(conn, key)

        def stop(*_):  # the daemon is stopping: close the level-3 Worker (its shared memory) on the way out
            sess.stop.set()
            if sess.cmd is not None:
                sess.cmd.shutdown()

        signal.signal(signal.SIGTERM, stop)
        sess.run()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os._exit(code)
