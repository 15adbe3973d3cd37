"""The parent's side of one child process: its mailbox block, wakeups,
liveness, and the control channel (pickled request/reply, for rare
operations: registration, memory, domains, shutdown)."""

from __future__ import annotations

import bisect
import os
import pickle
import select
import signal
import time

from .. import _errors
from . import shm
from . import layout as L

# Spin this long before blocking (both sides). A spinning wait keeps a
# task's round trip far below an eventfd wakeup, but only while every
# process has a core of its own: on an oversubscribed host a spinner burns
# the time slice the other side needs (measured on 2 cores: 22 us per task
# blocking at once, 118 us spinning 50 us). set_spin() picks the default
# from the process count and the host's load; SIMPLER_L3_SPIN_US overrides it.
SPIN_S = 0.0
# The first sleep of a waiting side, in ms (see wait_until and child.loop).
FIRST_NAP_MS = 2

# Bumped whenever memory a task may name is registered or dropped (a shared
# buffer, a chip's or a remote worker's allocation): an argument list's
# resolution cached before then is stale (Engine.resolve).
memory_generation = 0


def memory_changed() -> None:
    global memory_generation
    memory_generation += 1

# The longest a control request (registration, malloc, copies, domain
# set-up, NCCL initialisation) may go unanswered before its child is deemed
# hung: the child is then killed, its tasks fail, and the caller gets a
# SimplerTimeoutError naming it. A Worker's `control_timeout_s` sets it per
# endpoint; SIMPLER_L3_CONTROL_TIMEOUT_S overrides this default.
CONTROL_TIMEOUT_S = float(os.environ.get("SIMPLER_L3_CONTROL_TIMEOUT_S", "") or 300.0)


def set_spin(processes: int) -> None:
    global SPIN_S
    env = os.environ.get("SIMPLER_L3_SPIN_US")
    if env:
        SPIN_S = float(env) * 1e-6
    else:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
        SPIN_S = 50e-6 if processes + load <= (os.cpu_count() or 1) else 0.0


class ChildDied(Exception):
    pass


class Endpoint:
    """One child: `role` is "chip" or "sub", `index` its id in that role."""

    def __init__(self, slot: int, role: str, index: int, label: str, mv: memoryview):
        self.slot = slot  # block index in the mailbox segment
        self.role = role
        self.index = index
        self.label = label  # "chip worker 0 (device 0)"
        self.mv = mv
        self.base = L.child_base(slot)
        self.frames = [L.frame_base(slot, f) for f in range(L.FRAMES)]
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.pid = 0
        self.pidfd = -1
        self.dead = None  # why it is gone, once it is
        self.configs: dict = {}  # config key -> index in the child
        self.allocs = {}  # device allocations (chip): base -> size
        # Mappings of another chip's memory (a domain peer's window): base ->
        # (owner's slot, owner's base), so dependencies see one tensor however
        # many chips address it.
        self.aliases = {}
        self.alloc_bases = []  # sorted
        self._blob = None
        self.control_timeout_s = CONTROL_TIMEOUT_S
        self._ctrl_op = None  # the request awaiting its reply
        self.kill_reason = None  # why the parent killed the child, once it has

    # ---- device memory (chip) ---------------------------------------------------

    def add_alloc(self, base: int, size: int, alias=None) -> None:
        memory_changed()
        self.allocs[base] = size
        bisect.insort(self.alloc_bases, base)
        if alias is not None:
            self.aliases[base] = alias

    def drop_alloc(self, base: int) -> None:
        memory_changed()
        if self.allocs.pop(base, None) is not None:
            self.alloc_bases.remove(base)
        self.aliases.pop(base, None)

    def find_alloc(self, addr: int):
        """(base, size) of the allocation holding addr, or None."""
        size = self.allocs.get(addr)
        if size is not None:
            return addr, size
        i = bisect.bisect_right(self.alloc_bases, addr) - 1
        if i >= 0:
            base = self.alloc_bases[i]
            if addr < base + self.allocs[base]:
                return base, self.allocs[base]
        return None

    # ---- liveness -------------------------------------------------------------

    def started(self, pid: int) -> None:
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)

    def state(self) -> int:
        return L.U32.unpack_from(self.mv, self.base + L.C_STATE)[0]

    def reap(self, block: bool = False) -> bool:
        """Collects the child's exit status if it has exited; True once gone."""
        if not self.pid:
            return True
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid == 0:
            return False
        if self.dead is None:
            how = f"was killed: {self.kill_reason}" if self.kill_reason else _describe_exit(status)
            self.dead = f"{self.label} (pid {self.pid}) {how}"
        self.pid = 0
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return True

    def mark_dead(self) -> str:
        if self.dead is None:
            self.reap(block=False)
        if self.dead is None:
            self.dead = f"{self.label} (pid {self.pid}) stopped answering"
        return self.dead

    def kill(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close_fds(self) -> None:
        if self.efd >= 0:
            os.close(self.efd)
            self.efd = -1
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    # ---- control --------------------------------------------------------------

    def control(self, waiter, op: str, *args, timeout: float | None = None):
        """Sends one request and waits for the reply (the child takes it
        between tasks), at most `timeout` s (default control_timeout_s).
        Raises the child's error, ChildDied, or SimplerTimeoutError."""
        self.control_post(op, *args)
        return self.control_collect(waiter, timeout)

    def control_post(self, op: str, *args) -> None:
        """The first half of control(): several children can then work on a
        collective request at once (NCCL initialisation)."""
        if self.dead:
            raise ChildDied(self.dead)
        payload = pickle.dumps((op,) + args, protocol=pickle.HIGHEST_PROTOCOL)
        self._blob = None
        if len(payload) > L.CTRL_BYTES:
            self._blob = shm.create(len(payload))
            self._blob.buf[:len(payload)] = payload
            payload = pickle.dumps(("blob", self._blob.name, len(payload)))
        off = self.base + L.CHILD_HEADER
        self.mv[off:off + len(payload)] = payload
        L.U32.pack_into(self.mv, self.base + L.C_CTRL_LEN, len(payload))
        L.U32.pack_into(self.mv, self.base + L.C_CTRL_STATE, L.CTRL_REQUEST)
        self._ctrl_op = op if op != "domain" or not args else f"domain {args[0]}"
        os.eventfd_write(self.efd, 1)

    def control_collect(self, waiter, timeout: float | None = None):
        off = self.base + L.CHILD_HEADER
        limit = self.control_timeout_s if timeout is None else timeout
        try:
            replied = lambda: L.U32.unpack_from(self.mv, self.base + L.C_CTRL_STATE)[0] == L.CTRL_REPLY  # noqa: E731
            ok = waiter(replied, [self], limit)
            if not ok:
                if self.dead is None and not self.reap(block=False):
                    self._stop_unanswering(waiter, limit)
                raise ChildDied(self.mark_dead())
            n = L.U32.unpack_from(self.mv, self.base + L.C_CTRL_LEN)[0]
            kind, value = pickle.loads(bytes(self.mv[off:off + n]))
            L.U32.pack_into(self.mv, self.base + L.C_CTRL_STATE, L.CTRL_IDLE)
        finally:
            self._ctrl_op = None
            if self._blob is not None:
                self._blob.close()
                self._blob.unlink()
                self._blob = None
        if kind == "err":
            status, message = value
            raise _errors.error_for(status, f"{self.label}: {message}")
        return value

    def _stop_unanswering(self, waiter, limit: float) -> None:
        """The child is alive but left a control request unanswered past its
        deadline: it is hung (or far slower than any control operation
        should be). Its control channel can no longer be trusted (a late
        reply would answer the next request), so it is killed; waiting on
        its pidfd lets the waiter's death handler fail its tasks."""
        op, pid = self._ctrl_op, self.pid
        self.kill_reason = f"no reply to control request '{op}' within {limit:g} s"
        self.kill()
        waiter(lambda: False, [self], 5.0)
        self.mark_dead()
        raise _errors.SimplerTimeoutError(
            _errors.TIMEOUT, f"{self.label} (pid {pid}) did not answer control request '{op}' within "
            f"{limit:g} s (control_timeout_s); the child was killed and its tasks failed")


def _describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"was killed by signal {sig} ({name})"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return f"stopped (status {status})"


def wait_until(pred, endpoints, parent_flag_mv, parent_efd: int, timeout: float | None,
               on_death, watch_fds=()) -> bool:
    """Spins, then blocks until pred() holds. A child of `endpoints` that
    dies calls on_death(endpoint); returns False when every endpoint we
    waited on is dead and pred() still fails, or the timeout expired.
    A descriptor of `watch_fds` turning readable also wakes the wait (pred
    is expected to notice it)."""
    if pred():
        return True
    t0 = time.perf_counter()
    deadline = None if timeout is None else t0 + timeout
    spin = SPIN_S
    while spin and time.perf_counter() - t0 < spin:
        if pred():
            return True
    poller = select.poll()
    poller.register(parent_efd, select.POLLIN)
    for fd in watch_fds:
        poller.register(fd, select.POLLIN)
    watched = {}
    for ep in endpoints:
        if ep.pidfd >= 0 and not ep.dead:
            poller.register(ep.pidfd, select.POLLIN)
            watched[ep.pidfd] = ep
    naps = 0
    while True:
        L.U32.pack_into(parent_flag_mv, 0, 1)
        if pred():
            L.U32.pack_into(parent_flag_mv, 0, 0)
            return True
        # The first slice is short: a child's completion can miss the flag
        # (see child.loop), and this bounds what that costs.
        longest = FIRST_NAP_MS if naps == 0 else 100
        naps += 1
        if deadline is None:
            slice_ms = longest
        else:
            left = deadline - time.perf_counter()
            if left <= 0:
                L.U32.pack_into(parent_flag_mv, 0, 0)
                return pred()
            slice_ms = max(1, min(longest, int(left * 1000)))
        events = poller.poll(slice_ms)
        L.U32.pack_into(parent_flag_mv, 0, 0)
        for fd, _ in events:
            if fd == parent_efd:
                try:
                    os.eventfd_read(parent_efd)
                except BlockingIOError:
                    pass
            elif fd in watched:
                ep = watched.pop(fd)
                poller.unregister(fd)
                if pred():
                    return True
                on_death(ep)
        if pred():
            return True
        if endpoints and not watched:
            return False
