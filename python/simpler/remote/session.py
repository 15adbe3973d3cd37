"""The remote side of a level-4 session: one process per session, forked
by the daemon (simpler.remote_worker) for each connection.

It proves itself and checks the client's proof before reading anything
else, takes the manifest (the first CONTROL frame), builds its level-3
Worker (forking that Worker's children while this process is still
single-threaded), opens the health lane, and only then starts threads.
Tasks run one at a time in frame order (the parent sends a task only once
its inputs are complete, so order is all that is needed here); control
requests are taken between tasks, as a level-3 child takes them.
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

from .. import _errors
from . import protocol as P

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
        self.callables = {}
        self.timeout_s = 30.0
        self.stop = threading.Event()
        self.cmd = self.health = None

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
            extra = self._start(req)
        except Exception as e:  # noqa: BLE001
            self._reply(rid, getattr(e, "status", _errors.INVALID_ARG), f"{type(e).__name__}: {e}")
            raise
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

    def _start(self, req: dict) -> dict:
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
        self.cmd.shutdown()

    def _reply(self, rid: int, status: int, value, data: bytes = b"") -> None:
        self.cmd.send(P.encode(P.CONTROL_REPLY, P.reply_body(rid, status, value, data)), self.timeout_s)

    def _serve(self) -> None:
        fd = self.conn.fileno()
        while not self.stop.is_set():
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            frame = self.cmd.recv(P.MAX_FRAME_BYTES, self.timeout_s)
            ftype, body = P.decode(frame, {P.TASK, P.CONTROL, P.SHUTDOWN})
            if ftype == P.SHUTDOWN:
                self.cmd.send(P.encode(P.SHUTDOWN), self.timeout_s)
                return
            if ftype == P.CONTROL:
                rid, req, data = P.parse_control(body)
                try:
                    value, out = self._control(req, data)
                    self._reply(rid, 0, value, out)
                except Exception as e:  # noqa: BLE001
                    self._reply(rid, getattr(e, "status", _errors.INVALID_ARG), f"{type(e).__name__}: {e}")
                continue
            tid, name, config, dirs, tensors, scalars = P.parse_task(body)
            status, msg = self._task(name, config, dirs, tensors, scalars)
            self.cmd.send(P.encode(P.COMPLETION, P.completion_body(tid, status, msg)), self.timeout_s)

    def _task(self, name, config, dirs, tensors, scalars):
        from .._lib import CChipTensor
        from ..task_interface import ArgDirection, CallConfig, ChipStorageTaskArgs, ChipTensor

        try:
            fn = self.callables.get(name)
            if fn is None:
                fn = self.callables[name] = resolve_callable(name)
            args = ChipStorageTaskArgs()
            for d, raw in zip(dirs, tensors):
                args.add_tensor(ChipTensor(CChipTensor.from_buffer_copy(raw)), ArgDirection(d))
            for s in scalars:
                args.add_scalar(s)
            self.worker.run(fn, args, CallConfig.from_dict(config) if config else None)
            return 0, ""
        except _errors.SimplerError as e:
            return e.status, str(e)
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)
            where = f" ({tb[-1].filename}:{tb[-1].lineno})" if tb else ""
            return _errors.INTERNAL, f"{type(e).__name__}: {e}{where}"

    def _buffer_at(self, addr: int, n: int):
        for base, b in self.buffers.items():
            if base <= addr and addr + n <= base + b.nbytes:
                return b
        raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"[0x{addr:x}, +{n}) is not inside one remote "
                                           f"allocation of this session")

    def _control(self, req: dict, data: bytes):
        op = req["op"]
        if op == "malloc":
            size = int(req["size"])
            if size <= 0:
                raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"malloc of {size} bytes")
            b = self.worker.create_buffer(size)
            self.buffers[b.ptr] = b
            return b.ptr, b""
        if op == "free":
            b = self.buffers.pop(int(req["ptr"]), None)
            if b is None:
                raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"0x{int(req['ptr']):x} is not a remote "
                                                   f"allocation of this session")
            b.close()
            return None, b""
        if op == "copy_to":
            addr = int(req["addr"])
            self._buffer_at(addr, len(data))
            ctypes.memmove(addr, data, len(data))
            return None, b""
        if op == "copy_from":
            addr, n = int(req["addr"]), int(req["nbytes"])
            if not 0 <= n <= P.CHUNK_BYTES:
                raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"copy_from of {n} bytes in one request")
            self._buffer_at(addr, n)
            return None, ctypes.string_at(addr, n)
        if op in ("export", "import", "release_import"):
            raise _errors.SimplerUnsupportedError(_errors.UNSUPPORTED, f"remote_{op}: sharing remote memory "
                                                  f"between sessions is not supported yet")
        raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"unknown control request {op!r}")

    def _close(self) -> None:
        self.stop.set()
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
