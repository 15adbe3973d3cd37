"""The parent's side of one remote level-3 Worker: the endpoint a Worker(4)
engine schedules onto, as it schedules onto a local child's mailbox.

The engine sees the same surface as a local endpoint (ready queue,
allocations for dependency keys, `dead`) plus post(task) and a queue of
completions; the transport behind it is two authenticated channels to the
session process: the command lane (a receiver thread collects COMPLETION
and CONTROL_REPLY frames; a copy's request and reply go through the
library, copies.Copier, read by the thread that copies) and the health
lane (a thread exchanges heartbeats; a session silent for
remote_session_timeout_s is declared dead).
Any failure of either lane kills the endpoint: its running tasks fail with
the reason, later tasks fail at once, like a local child that died.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections import deque

from .. import _errors
from ..level3 import endpoint as _endpoint
from ..level3.endpoint import Endpoint
from ..worker import _host_view
from . import copies
from . import protocol as P


# After the last reading thread detaches, the receiver thread waits this long
# before it watches the lane again (see _receive_loop).
_QUIET_S = 0.02


class RemoteWorkerSpec:
    """Where a remote level-3 Worker runs and what it is made of."""

    def __init__(self, address: str = None, key=None, platform: str = "cpu", device_ids=(0,),
                 num_sub_workers: int = 0, runtime: str = "tensormap_and_ringbuffer", mpi=None):
        # mpi: an MPI group started with mpirun (see mpi_client.MpiGroupSpec)
        # instead of a daemon at `address`; every rank runs a level-3 Worker
        # of the fields below, and the parent makes the key when none is given.
        self.mpi = None
        if mpi is not None:
            from .mpi_client import MpiGroupSpec

            if address is not None:
                raise ValueError("RemoteWorkerSpec: give address (a daemon) or mpi (an MPI group), not both")
            self.mpi = MpiGroupSpec.of(mpi)
            self.host = self.port = None
            key = os.urandom(P.MIN_KEY_BYTES) if key is None else key
        elif address is None:
            raise ValueError("RemoteWorkerSpec: address (HOST:PORT of a daemon) or mpi= is required")
        else:
            self.host, self.port = P.parse_address(address)
        self.address = address
        self.key = P.check_key(key)
        self.platform = platform
        self.device_ids = [int(d) for d in device_ids]
        self.num_sub_workers = int(num_sub_workers)
        self.runtime = runtime

    def __repr__(self) -> str:
        if self.mpi is not None:
            return (f"RemoteWorkerSpec(mpi={self.mpi!r}, platform={self.platform!r}, device_ids={self.device_ids}, "
                    f"num_sub_workers={self.num_sub_workers})")
        return (f"RemoteWorkerSpec(address={self.address!r}, platform={self.platform!r}, "
                f"device_ids={self.device_ids}, num_sub_workers={self.num_sub_workers})")


class RemoteCallable:
    """An orchestration function the remote session imports by name,
    "module:qualname": fn(orch, args, cfg) runs there on its level-3 Worker."""

    def __init__(self, name: str):
        mod, sep, qual = str(name).partition(":")
        if not sep or not mod or not qual:
            raise ValueError(f"RemoteCallable: {name!r} is not 'module:qualname'")
        self.name = str(name)
        self.label = f"remote callable {self.name}"

    def __repr__(self) -> str:
        return f"RemoteCallable({self.name!r})"


class RemoteDied(Exception):
    pass


class RemoteEndpoint:
    role = "remote"
    add_alloc = Endpoint.add_alloc
    drop_alloc = Endpoint.drop_alloc
    find_alloc = Endpoint.find_alloc

    def __init__(self, slot: int, wid: int, spec: RemoteWorkerSpec, timeout_s: float, heap_ring_size: int):
        self.slot = slot
        self.index = wid
        self.spec = spec
        self.label = f"remote worker {wid} ({spec.address})"
        self.timeout_s = timeout_s
        self.heap = heap_ring_size
        self.dead = None
        self.completions = deque()  # (task id, status, message), from the receiver thread
        self.allocs, self.alloc_bases, self.aliases = {}, [], {}
        # Callables and configs by index, with their encodings for TASK frames.
        self.names, self._name_idx, self._name_bytes = [], {}, []
        self.cfgs, self._cfg_idx, self._cfg_bytes = [{}], {}, [b"{}"]  # index 0: the default config
        self.pid = 0  # the session process, on the remote host
        self.wake_fd = -1
        self._cmd = self._health = self._copier = None
        self._socks = []
        self._send_lock = threading.Lock()
        self._cv = threading.Condition()
        self._replies = {}
        self._sinks = {}  # request id -> where its reply's data goes (a copy's destination)
        self._reader = threading.Lock()  # held by the thread reading the command lane
        self._lane = self._lane_rx = None  # select.poll objects of the command lane's socket (engine, receiver)
        self._attached = False  # a waiting thread (the engine's, or one awaiting replies) reads the lane
        self._attach_n = 0
        self._attach_lock = threading.Lock()
        self._detached_at = 0.0  # when the last reading thread detached (time.monotonic)
        self._closing = threading.Event()  # ends the receiver thread's quiet waits
        self._next_rid = 1
        self._threads = []
        self._stopping = False

    # ---- session set-up -------------------------------------------------------

    def open(self, startup_timeout_s: float, wake_fd: int) -> None:
        from tensorcore import Channel, TensorcoreError

        self.wake_fd = wake_fd
        spec = self.spec
        try:
            s = self._connect(startup_timeout_s)
            self._socks.append(s)
            self._cmd = Channel.open(s, server=False, keys=P.keyring(spec.key), timeout=startup_timeout_s,
                                     expected_peer_identity=P.IDENTITY)
            self._cmd.set_spin(round(_endpoint.SPIN_S * 1e6))  # the level-3 spin policy: a reply's wait
            self._copier = copies.Copier(self._cmd, self.timeout_s)
        except (OSError, TensorcoreError) as e:
            raise self._open_error(e) from None
        manifest = {"op": "open", "platform": spec.platform, "runtime": spec.runtime, "device_ids": spec.device_ids,
                    "num_sub_workers": spec.num_sub_workers, "heap_ring_size": self.heap, "timeout_s": self.timeout_s}
        try:
            self._cmd.send(P.encode(P.CONTROL, P.control_body(0, manifest)), startup_timeout_s)
            _, body = P.decode(self._cmd.recv(P.MAX_FRAME_BYTES, startup_timeout_s), {P.CONTROL_REPLY})
            _, status, value, _ = P.parse_reply(body)
        except (OSError, TensorcoreError, P.ProtocolError) as e:
            raise self._open_error(e) from None
        if status:
            raise _errors.error_for(status, f"{self.label}: the session failed to start: {value}")
        self.pid = int(value["pid"])
        self.opened = value
        try:
            # The health port is on the host that answered the command lane.
            h = socket.create_connection((s.getpeername()[0], int(value["health_port"])), timeout=startup_timeout_s)
            self._socks.append(h)
            self._health = Channel.open(h, server=False, keys=P.keyring(spec.key), timeout=startup_timeout_s,
                                        expected_peer_identity=P.IDENTITY)
        except (OSError, TensorcoreError) as e:
            raise self._open_error(e) from None
        self._lane, self._lane_rx = select.poll(), select.poll()  # one per thread: a poll object is not shared
        for p in (self._lane, self._lane_rx):
            p.register(self._socks[0].fileno(), select.POLLIN)
        for target in (self._receive_loop, self._health_loop):
            t = threading.Thread(target=target, daemon=True, name=f"simpler-l4-{target.__name__}")
            t.start()
            self._threads.append(t)

    def _connect(self, timeout_s: float) -> socket.socket:
        """The command lane's socket (an MPI group's rank 0 connects to us instead)."""
        return socket.create_connection((self.spec.host, self.spec.port), timeout=timeout_s)

    def _open_error(self, e) -> Exception:
        status = getattr(e, "status", None)
        if status == _errors.AUTH:
            return _errors.SimplerError(_errors.AUTH, f"{self.label}: authentication failed (wrong key?): {e}")
        if isinstance(e, socket.timeout) or status == _errors.TIMEOUT:
            return _errors.SimplerTimeoutError(_errors.TIMEOUT, f"{self.label}: no session within the startup "
                                               f"timeout: {e}")
        return _errors.SimplerError(_errors.IO if hasattr(_errors, "IO") else _errors.INTERNAL,
                                    f"{self.label}: cannot open a session: {e}")

    # ---- liveness -----------------------------------------------------------------

    def _die(self, why: str) -> None:
        with self._cv:
            if self.dead is None:
                self.dead = f"{self.label} {why}"
            self._cv.notify_all()
        for ch in (self._cmd, self._health):
            if ch is not None:
                ch.shutdown()
        self._wake()

    def _wake(self) -> None:
        if self.wake_fd >= 0:
            try:
                os.eventfd_write(self.wake_fd, 1)
            except OSError:
                pass

    # ---- the command lane ----------------------------------------------------------
    # Two threads may read it, one at a time (_reader): the engine's thread
    # while it waits on the engine (attach/detach around Engine.wait; it
    # watches the lane's socket and reads what arrives itself, so a
    # completion reaches the thread that acts on it without a hand-over),
    # and otherwise the receiver thread (control replies during memory
    # calls, anything that arrives while nobody waits).

    @property
    def lane(self):
        """The endpoint whose channel carries this endpoint's frames."""
        return self

    def lane_fd(self) -> int:
        return self._socks[0].fileno() if self._socks and self.dead is None and not self._stopping else -1

    def attach(self) -> None:
        with self._attach_lock:
            self._attach_n += 1
            self._attached = True

    def detach(self) -> None:
        with self._attach_lock:
            self._attach_n -= 1
            if not self._attach_n:
                self._attached = False
                self._detached_at = time.monotonic()

    def read_until(self, done) -> None:
        """Reads one frame of the lane unless done() holds (a thread
        awaiting a reply reads it itself). The channel's receive watches the
        lane for the spin time before it blocks, so no Python polling loop
        and no other thread's wake-up stand between a reply and its caller.
        While another thread reads the lane, waits for it (up to 0.5 s)."""
        if self.dead is not None or self._stopping:
            time.sleep(0.05)  # nothing more to read: the caller's loop sees why
            return
        if not self._reader.acquire(timeout=0.5):
            return
        try:
            if not done() and not self._stopping:
                self._read_one()
        except Exception as e:  # noqa: BLE001
            # No frame began within the session timeout: the lane is still in step (a frame cut
            # short breaks the channel, and its next receive says so).
            if getattr(e, "status", None) != _errors.TIMEOUT:
                self._lane_failed(e)
        finally:
            self._reader.release()

    def pump(self) -> bool:
        """Reads the frames already on the lane, without waiting for one
        (the engine's thread, attached): True when a frame was taken or the
        lane ended."""
        if self.dead is not None or self._stopping or self._lane is None:
            return False
        if not self._reader.acquire(blocking=False):
            return False  # the receiver thread is reading; it wakes the engine
        try:
            got = False
            while self._lane.poll(0):
                got = True
                if not self._read_one(engine=True):
                    break
            return got
        except Exception as e:  # noqa: BLE001
            self._lane_failed(e)
            return True
        finally:
            self._reader.release()

    def _read_one(self, engine: bool = False) -> bool:
        """Takes one frame (its first bytes have arrived); False on SHUTDOWN."""
        # The channel's own buffer: an MPI rank's copy piece goes from it into its destination.
        return self._take(self._cmd.recv(P.MAX_FRAME_BYTES, self.timeout_s, copy=False), engine)

    def _take(self, frame, engine: bool = False) -> bool:
        """Acts on one frame of the lane; False on SHUTDOWN. (A COPY_REPLY
        reaches only the copy that awaits it: here it is a ProtocolError.)"""
        ftype, body = P.decode(frame, {P.COMPLETION, P.CONTROL_REPLY, P.SHUTDOWN})
        if ftype == P.COMPLETION:
            self.completions.append(P.parse_completion(body))
            if not engine:
                self._wake()
        elif ftype == P.CONTROL_REPLY:
            rid, status, value, data = P.parse_reply(body, copy=False)
            sink = self._sinks.pop(rid, None)
            if sink is not None and not status:
                if len(data) == len(sink):
                    sink[:] = data  # a copy piece's bytes, straight into the caller's buffer
                    status, data = 0, None
                else:
                    why = f"{len(data)} bytes came for a destination of {len(sink)}"
                    status, value, data = _errors.INTERNAL, why, None
            else:
                data = bytes(data)
            with self._cv:
                self._replies[rid] = (status, value, data)
                self._cv.notify_all()
        else:
            self._stopping = True
            with self._cv:
                self._cv.notify_all()
            return False
        return True

    def _lane_failed(self, e) -> None:
        if isinstance(e, P.ProtocolError):
            self._die(f"sent a malformed frame ({e}); the session was dropped")
        elif not self._stopping:
            self._die(f"lost its session: the connection closed or failed ({e}); the remote host or its "
                      f"session process died")

    def _receive_loop(self) -> None:
        try:
            while not self._stopping and self.dead is None:
                if self._attached or time.monotonic() - self._detached_at < _QUIET_S:
                    # A thread reads the lane itself, or did a moment ago and likely will again
                    # (a loop of memory calls or runs): this thread stays off the lane meanwhile, so
                    # no call wakes it (a thread switch each) and it never wakes for their replies.
                    self._closing.wait(_QUIET_S)
                    continue
                if not self._lane_rx.poll(500) or self._attached:
                    continue
                with self._reader:
                    while not self._stopping and self._lane_rx.poll(0):
                        if not self._read_one():
                            return
        except Exception as e:  # noqa: BLE001
            self._lane_failed(e)

    def _health_loop(self) -> None:
        interval = max(0.05, self.timeout_s / 4)
        seq = 0
        try:
            while not self._stopping:
                seq += 1
                self._health.send(P.encode(P.HEARTBEAT, P.heartbeat_body(seq)), self.timeout_s)
                _, body = P.decode(self._health.recv(64, self.timeout_s), P.HEALTH_TYPES)
                if P.parse_heartbeat(body) != seq:
                    raise P.ProtocolError("a heartbeat answered out of order")
                end = time.monotonic() + interval
                while not self._stopping and time.monotonic() < end:
                    time.sleep(min(0.05, interval))
        except Exception as e:  # noqa: BLE001
            if self._stopping:
                return
            if getattr(e, "status", None) == _errors.TIMEOUT:
                self._die(f"did not answer heartbeats within remote_session_timeout_s={self.timeout_s:g} s; "
                          f"declared dead")
            else:
                self._die(f"lost its health lane ({e}); the remote host or its session process died")

    # ---- commands -------------------------------------------------------------------

    def _send(self, frame) -> None:
        """Sends one frame (bytes, or a list of parts: see control_frame)."""
        if self.dead:
            raise RemoteDied(self.dead)
        try:
            with self._send_lock:
                self._cmd.send(frame, self.timeout_s)
        except Exception as e:  # noqa: BLE001
            self._send_failed(e)

    def _send_failed(self, e):
        if getattr(e, "status", None) == _errors.TIMEOUT:  # it stopped reading (a copy fills the sockets)
            self._die(f"took no bytes within remote_session_timeout_s={self.timeout_s:g} s; declared dead")
        else:
            self._die(f"lost its session while sending ({e})")
        raise RemoteDied(self.dead) from None

    def callable_index(self, name: str) -> int:
        i = self._name_idx.get(name)
        if i is None:
            i = self._name_idx[name] = len(self.names)
            self.names.append(name)
            self._name_bytes.append(name.encode())
        return i

    def config_index(self, fields: dict) -> int:
        if not fields:
            return 0
        import json

        k = json.dumps(fields, sort_keys=True)
        i = self._cfg_idx.get(k)
        if i is None:
            i = self._cfg_idx[k] = len(self.cfgs)
            self.cfgs.append(fields)
            self._cfg_bytes.append(json.dumps(fields).encode())
        return i

    def post(self, task) -> None:
        """Sends one ready task. Its tensors are as the remote side sees
        them (Engine.resolve keeps the remote addresses apart from the keys
        tagged with this worker)."""
        body = P.task_body(task.id, self._name_bytes[task.slot], self._cfg_bytes[task.cfg], task.dirs,
                           task.tensors, task.scalars)
        self._send(P.encode(P.TASK, body))

    def control(self, request: dict, data: bytes = b""):
        """One request; waits for its reply while the session lives (the
        waiting thread reads the reply itself)."""
        lane = self.lane
        lane.attach()
        try:
            return self._await(self._request(request, data), request)
        finally:
            lane.detach()

    def copy_to(self, addr: int, view) -> None:
        """Writes `view` (a byte view) at remote address addr."""
        self._copy(copies.COPY_TO, "remote_copy_to", addr, view)

    def copy_from(self, view, addr: int) -> None:
        """Reads len(view) bytes at remote address addr into `view` (a
        writable byte view); a refused range leaves it as it was."""
        self._copy(copies.COPY_FROM, "remote_copy_from", addr, view)

    def _copy(self, op: int, api: str, addr: int, view) -> None:
        """One copy through the library: the request (with a small copy's
        bytes, or followed by its data frames) and its reply, read by this
        thread; frames that arrive before the reply are taken as usual."""
        ptr, n, keep = _host_view(view, op == copies.COPY_FROM)  # keep: alive until the copy is done
        self.attach()  # the receiver thread stays off the lane
        try:
            if not self._reader.acquire(timeout=self.timeout_s):
                raise RemoteDied(f"{self.label}: the command lane stayed busy for {self.timeout_s:g} s")
            try:
                with self._cv:
                    rid = self._next_rid
                    self._next_rid += 1
                if self.dead or self._copier is None:
                    raise RemoteDied(self.dead or f"{self.label}: the session is closed")
                try:
                    with self._send_lock:
                        self._copier.send(op, rid, addr, ptr, n)
                except _errors.SimplerError as e:
                    self._send_failed(e)
                self._await_copy(api)
            finally:
                self._reader.release()
        finally:
            self.detach()

    def _await_copy(self, api: str) -> None:
        """Reads the lane (the reader lock held) until the copy's reply."""
        while True:
            try:
                state, got = self._copier.await_reply()
            except _errors.SimplerError as e:
                if e.status == _errors.TIMEOUT and self.dead is None:
                    continue  # no frame yet; the health lane decides whether the session lives
                self._lane_failed(P.ProtocolError(str(e)) if e.status == _errors.CORRUPT else e)
                raise RemoteDied(self.dead or f"{self.label}: the session was closed during a copy") from None
            if state == "done":
                return
            if state == "refused":
                raise _errors.error_for(got[0], f"{self.label}: {api}: {got[1]}")
            if not self._take(got):
                raise RemoteDied(f"{self.label}: the session ended during a copy")

    def control_many(self, requests, window: int):
        """(value, data) of each (request, data[, sink]) of `requests`, in
        order, keeping up to `window` requests unanswered (a copy's pieces).
        With a sink (a writable buffer of the reply data's exact size) the
        reply's data is written there by the receiving thread, and data
        comes back None."""
        pending = deque()
        lane = self.lane
        lane.attach()  # this thread reads the replies itself
        try:
            for request, data, *sink in requests:
                pending.append((self._request(request, data, sink[0] if sink else None), request))
                if len(pending) >= window:
                    yield self._await(*pending.popleft())
            while pending:
                yield self._await(*pending.popleft())
        finally:
            for rid, _ in pending:  # after a failure: the replies still due are not left behind
                try:
                    self._await(rid, None)
                except Exception:  # noqa: BLE001
                    pass
            lane.detach()

    def _request(self, request: dict, data, sink=None) -> int:
        with self._cv:
            rid = self._next_rid
            self._next_rid += 1
        if sink is not None:
            self._sinks[rid] = sink
        self._send(P.control_frame(rid, request, data))
        return rid

    def _await(self, rid: int, request):
        lane = self.lane
        while True:
            with self._cv:
                if rid in self._replies:
                    status, value, out = self._replies.pop(rid)
                    self._sinks.pop(rid, None)
                    break
                if self.dead:
                    raise RemoteDied(self.dead)
            lane.read_until(lambda: rid in self._replies)
        if status and request is not None:
            raise _errors.error_for(status, f"{self.label}: remote_{request['op']}: {value}")
        return value, out

    # ---- shutdown -------------------------------------------------------------------

    def close(self) -> None:
        """Asks the session to end (it closes its level-3 Worker) and waits
        briefly for its acknowledgement; a dead session is just dropped."""
        # No receiver thread means the session never started (refused, or it
        # failed to open): nobody would see an acknowledgement, so do not wait for one.
        if not self.dead and self._cmd is not None and self._threads:
            try:
                self._send(P.encode(P.SHUTDOWN))
                deadline = time.monotonic() + min(self.timeout_s, 10.0)
                with self._cv:
                    while not self._stopping and not self.dead and time.monotonic() < deadline:
                        self._cv.wait(0.1)
            except RemoteDied:
                pass
        self._stopping = True
        self._closing.set()
        for ch in (self._cmd, self._health):
            if ch is not None:
                ch.shutdown()
        for t in self._threads:
            t.join(5.0)
        # A copy in another thread holds the reader lock while it is in the library: the
        # shutdown above ended its wait, and the copier and channels go only once it is out.
        reading = self._reader.acquire(timeout=5.0)
        try:
            if self._copier is not None:
                self._copier.close()
            for ch in (self._cmd, self._health):
                if ch is not None:
                    ch.close()
            self._cmd = self._health = self._copier = None
        finally:
            if reading:
                self._reader.release()
        for s in self._socks:
            s.close()
        self._socks = []
