"""The level-3 scheduler (in the parent): tasks, their dependencies, and
their handoff to the children's mailboxes.

A submitted task resolves its tensors (shared buffers or the target
child's device memory), asks the TensorMap (the level-2 one, through
simpler_depmap_*) for its live producers, and waits for them; a ready task
goes to a free task frame of its child, or queues for one. Completions are
collected whenever the parent drives the engine (submits, waits, done()).
A failed task poisons its dependents and fails its run (with the first
error, naming the worker); a child that dies fails what it held.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
import time

from .. import _errors
from .._lib import bare, check, lib
from ..remote.client import RemoteDied
from . import endpoint as E
from . import layout as L
from .endpoint import wait_until

PENDING, READY, RUNNING, DONE, FAILED, CANCELLED = range(6)
# Outstanding tasks above which a submit waits for some to finish (the
# level-3 counterpart of a full task ring).
WINDOW = 16384
_MAX_PRODUCERS = 4096
# Finished tasks leave the TensorMap in batches of this many (one call).
_FINISH_BATCH = 64
# While the orchestration goes on submitting, a child is woken once this
# many of its tasks are posted, or once the oldest has waited WAKE_DELAY_S
# (and at the latest when the orchestration waits or returns): one wakeup
# (a system call, and on a busy host a lost time slice) runs a batch.
WAKE_BATCH = L.FRAMES // 2
WAKE_DELAY_S = 50e-6
# While the orchestration submits, one submit in this many collects finished frames.
POLL_EVERY = 4


class Task:
    __slots__ = ("id", "run", "ep", "kind", "slot", "cfg", "nt", "ns", "tags", "dirs", "tensors", "scalars",
                 "shm", "dev", "pending", "consumers", "state", "in_map", "label")

    def __init__(self, tid, run, ep, kind, slot, label, cfg):
        self.id = tid
        self.run = run
        self.ep = ep
        self.kind = kind
        self.slot = slot
        self.label = label
        self.cfg = cfg
        self.nt = self.ns = self.pending = 0
        self.tags = self.dirs = self.tensors = self.scalars = b""
        self.shm = self.dev = ()  # buffers it uses; device allocations (bases) of its chip it names
        self.consumers = None  # a list once a later task waits for this one
        self.state = PENDING
        self.in_map = False


class Run:
    """One run (one orchestration call): outstanding tasks and first error."""

    def __init__(self, rid: int):
        self.id = rid
        self.outstanding = 0
        self.tasks = 0
        self.error = None  # (status, message)
        self.closed = False  # the orchestration has returned

    @property
    def done(self) -> bool:
        return self.closed and self.outstanding == 0

    def fail(self, status: int, message: str) -> None:
        if self.error is None:
            self.error = (status, message)


class Engine:
    def __init__(self, endpoints, mv, parent_efd: int):
        self.eps = endpoints
        self.chips = [e for e in endpoints if e.role == "chip"]
        self.subs = [e for e in endpoints if e.role == "sub"]
        self.local = self.chips + self.subs  # the children with task frames
        self.remotes = []  # remote level-3 Workers (level 4): see remote/client.py
        self.mv = mv
        self.parent_efd = parent_efd
        h = ctypes.c_void_p()
        check(lib().simpler_depmap_create(ctypes.byref(h)))
        self.depmap = h
        self.next_id = 1
        self.next_run = 1
        self.live = {}  # task id -> Task (unfinished)
        self.inflight = 0  # tasks posted to children's frames and not yet collected
        self.lock = threading.RLock()
        self.defer = False  # set while an orchestration function runs
        self._to_wake = {}  # endpoint -> when its wake was deferred
        self._wake_due = 0.0  # the earliest deferred wake is due then (or earlier)
        self._submits = 0
        self.buffers = {}  # idx -> Buffer
        self.buf_bases = []  # sorted parent base addresses
        self.buf_by_base = {}  # base -> idx
        self.next_buf = 0
        self.config_keys = {}  # config repr -> index (0 = the default)
        self.config_fields = {}
        # Something besides a completion that should end a wait (a level-4
        # session's next frame): a callable, or None; and descriptors whose
        # readiness wakes a wait to check it (the session's command lane).
        self.interrupt = None
        self.watch_fds = ()
        self._lanes = ()  # remote endpoints whose lanes this thread reads while it waits
        self._producers = (ctypes.c_uint64 * _MAX_PRODUCERS)()
        self._nprod = ctypes.c_uint32()
        self._nprod_ref = ctypes.byref(self._nprod)
        self._tid = ctypes.c_uint64()
        # Called once per task each: unprototyped (bare), so every argument
        # below is passed as a ready C value (c_uint64 ids, bytes, plain ints
        # for the uint32 counts).
        self._dm_submit = bare("simpler_depmap_submit")
        self._finished = []  # ids of finished tasks still in the TensorMap (see _flush_finished)

    def close(self) -> None:
        if self.depmap:
            lib().simpler_depmap_destroy(self.depmap)
            self.depmap = None

    # ---- shared buffers -------------------------------------------------------

    def add_buffer(self, buf) -> None:
        E.memory_changed()
        idx = self.next_buf
        self.next_buf += 1
        buf._l3_idx = idx
        buf._l3_engine = self
        self.buffers[idx] = buf
        base = buf.ptr
        bisect.insort(self.buf_bases, base)
        self.buf_by_base[base] = idx

    def drop_buffer(self, buf) -> list:
        """Forgets a closed buffer; returns the children that had mapped it."""
        idx = getattr(buf, "_l3_idx", None)
        if idx is None or self.buffers.pop(idx, None) is None:
            return []
        E.memory_changed()
        base = next((b for b, i in self.buf_by_base.items() if i == idx), None)
        if base is not None:
            del self.buf_by_base[base]
            self.buf_bases.remove(base)
        holders = [ep for ep in self.eps if idx in ep.mapped]
        for ep in holders:
            ep.mapped.discard(idx)
        return holders

    def _find_buffer(self, addr: int):
        i = bisect.bisect_right(self.buf_bases, addr) - 1
        if i >= 0:
            base = self.buf_bases[i]
            idx = self.buf_by_base[base]
            if addr < base + self.buffers[idx].nbytes:
                return idx, base
        return None

    # ---- argument resolution --------------------------------------------------

    def resolve(self, ep, args, tid: int, label: str):
        """(the tensors as ChipTensor bytes rebased onto their allocations
        with TensorMap keys, their tags packed as the frame holds them, the
        buffer indices used, the device bases used, the tensors as the child
        must see them when that differs (a domain peer's window is keyed by
        its owner but addressed by this chip's mapping), else None). ep is
        None for a sub-task.

        A tensor of a shared buffer made by Buffer.tensor keeps its rebased
        bytes (t._l3: buffer index, buffer, bytes, packed tag) and later tasks
        reuse them while that buffer is still registered under that index;
        indices are never reused, so a closed buffer (or a new one at the
        same address) sends the tensor down the full resolution again.

        The whole result is kept on args too (args._l3: endpoint, memory
        generation, result), for an argument list submitted again unchanged
        (add_tensor clears it) while no memory was registered or dropped."""
        cached = getattr(args, "_l3", None)
        if cached is not None and cached[0] is ep and cached[1] == E.memory_generation:
            return cached[2]
        gen = E.memory_generation
        out = self._resolve(ep, args, tid, label)
        args._l3 = (ep, gen, out)
        return out

    def _resolve(self, ep, args, tid: int, label: str):
        tensors = args._tensors
        n = len(tensors)
        if n > L.MAX_TENSORS:
            raise ValueError(f"task {tid} ({label}): {n} tensors (at most {L.MAX_TENSORS})")
        buffers = self.buffers
        if n == 1:  # the common case, without the lists
            cached = tensors[0]._l3
            if cached is not None and buffers.get(cached[0]) is cached[1]:
                return cached[2], cached[3], (cached[0],), (), None
        recs = []
        tags = []
        used = set()
        dev = []
        child = None  # the tensors as the child sees them, where they differ from the keys
        for i, t in enumerate(tensors):
            cached = t._l3
            if cached is not None and buffers.get(cached[0]) is cached[1]:
                idx, _, rec, tag = cached
                recs.append(rec)
                if child is not None:
                    child.append(rec)
                tags.append(tag)
                used.add(idx)
                continue
            rec, child_rec, tag, where = self._resolve_one(ep, t, i, tid, label)
            if child_rec is not rec and child is None:
                child = list(recs)
            recs.append(rec)
            if child is not None:
                child.append(child_rec)
            tags.append(L.U32.pack(tag))
            if tag:
                used.add(tag - 1)
            else:
                dev.append(where)
        return (b"".join(recs), b"".join(tags), tuple(used), tuple(dev),
                b"".join(child) if child is not None else None)

    def _resolve_one(self, ep, t, i: int, tid: int, label: str):
        """(bytes keyed for the TensorMap, bytes for the child (the same
        object unless they differ), tag, device base) of tensor i."""
        raw = bytearray(t._c)
        addr, _, offset, _, dtype = L.TENSOR_FRONT.unpack_from(raw)
        keep = t._keep
        hit = None
        if keep is None and ep is not None:
            hit = ep.find_alloc(addr)
        if hit is not None:
            base, size = hit
            key = child_key = base | ((ep.slot + 1) << L.DEV_TAG_SHIFT)
            if ep.role == "remote":
                child_key = base  # the remote side sees its own addresses
            alias = ep.aliases.get(base)
            if alias is not None and alias != (ep.slot, base):
                # Another chip's memory as this chip maps it: the child
                # gets its own address, the dependencies the owner's.
                key = alias[1] | ((alias[0] + 1) << L.DEV_TAG_SHIFT)
            tag = 0
        elif ep is not None and ep.role == "remote":
            raise ValueError(f"task {tid} ({label}): tensor {i} at 0x{addr:x} is not memory of {ep.label}; a remote "
                             f"task names remote_malloc memory of its worker (fill it with remote_copy_to)")
        else:
            idx = getattr(keep, "_l3_idx", None)
            base = keep.ptr if idx is not None and self.buffers.get(idx) is keep else None
            if base is None or not base <= addr < base + keep.nbytes:  # else a view of its own buffer: no search
                found = self._find_buffer(addr)
                if found is None:
                    where = "create_buffer memory" + ("" if ep is None else f" or device memory of {ep.label}")
                    raise ValueError(f"task {tid} ({label}): tensor {i} at 0x{addr:x} is not {where}")
                idx, base = found
            size = self.buffers[idx].nbytes
            key = child_key = base
            dep = getattr(self.buffers[idx], "_dep_key", None)
            if dep is not None:  # an import of remote memory: ordered with its owner's tasks
                key = dep
            tag = idx + 1
        delta = addr - base
        item = L.ITEMSIZE[dtype] if 0 <= dtype < len(L.ITEMSIZE) else 1
        if delta % item:
            raise ValueError(f"task {tid} ({label}): tensor {i} starts {delta} bytes into its allocation, not a "
                             f"multiple of its element size {item}")
        start = offset + delta // item
        L.TENSOR_HEAD.pack_into(raw, 0, key, size, start)
        rec = child_rec = bytes(raw)
        if child_key != key:
            L.TENSOR_HEAD.pack_into(raw, 0, child_key, size, start)
            child_rec = bytes(raw)
        if tag and keep is self.buffers[tag - 1] and child_rec is rec:  # the cache holds one record for both
            t._l3 = (tag - 1, keep, rec, L.U32.pack(tag))
        return rec, child_rec, tag, base

    # ---- submission -----------------------------------------------------------

    def new_run(self) -> Run:
        r = Run(self.next_run)
        self.next_run += 1
        return r

    def submit(self, run, ep, kind, slot, label, args=None, access=None, cfg=0) -> int:
        """Queues one task; returns its id. `access` holds the tensors'
        ArgDirection values as bytes; ep is None for a sub-task (any sub-worker)."""
        with self.lock:
            live = self.live
            if len(live) >= WINDOW:
                self.wait(lambda: len(live) < WINDOW, None)
            tid = self.next_id
            self.next_id = tid + 1
            task = Task(tid, run, ep, kind, slot, label, cfg)
            run.outstanding += 1
            run.tasks += 1
            live[tid] = task
            if run.error is not None:  # the run has failed: later submits are no-ops
                self._finish(task, CANCELLED, None)
                return tid
            if args is not None and (args._tensors or args._scalars):
                self._bind(task, args, access)
            if not task.pending:
                self._ready(task)
            if self.inflight or self.remotes:
                # A collection looks at every child's oldest frame; a ring holds FRAMES tasks, so
                # collecting on every POLL_EVERY-th submit keeps every child fed. Remote completions
                # (queued by each endpoint's receiver thread) are taken as well: a remote worker gets
                # its next task while the orchestration goes on submitting.
                self._submits += 1
                if not self.defer or self._submits % POLL_EVERY == 0:
                    self.poll()
            if self._to_wake and time.perf_counter() > self._wake_due:
                self._wake_overdue()
            return tid

    def _bind(self, task, args, access) -> None:
        """Resolves a task's arguments, finds its producers in the TensorMap
        and packs what its frame needs."""
        ep, tid, label = task.ep, task.id, task.label
        try:
            arr, tags, shm, dev, child = self.resolve(ep, args, tid, label)
        except BaseException:
            self._fail_now(task, 0, "")
            raise
        nt = len(args._tensors)
        if nt:
            if len(self._finished) >= _FINISH_BATCH:
                self._flush_finished()
            self._tid.value = tid
            st = self._dm_submit(self.depmap, self._tid, arr, access, nt, self._producers, _MAX_PRODUCERS,
                                 self._nprod_ref)
            if st:
                detail = lib().simpler_last_error_detail().decode("utf-8", "replace")
                self._fail_now(task, st, detail)
                raise _errors.error_for(st, f"{label}: {detail}")
            task.in_map = True
            nprod = self._nprod.value
            if nprod:
                live, producers = self.live, self._producers
                for i in range(nprod):
                    # Finished tasks (not yet retired from the map, see _flush_finished) are gone from live.
                    p = live.get(producers[i])
                    if p is not None and p.state < DONE:
                        if p.consumers is None:
                            p.consumers = [task]
                        else:
                            p.consumers.append(task)
                        task.pending += 1
            task.tensors = arr if child is None else child
            task.tags = tags
            task.dirs = access
            task.shm = shm
            task.dev = dev
            task.nt = nt
        ns = len(args._scalars)
        if ns:
            if ns > L.MAX_SCALARS:
                self._fail_now(task, _errors.INVALID_ARG, "too many scalars")
                raise ValueError(f"{label}: {ns} scalars (at most {L.MAX_SCALARS})")
            task.ns = ns
            task.scalars = L.u64s(ns).pack(*args._scalars)

    def _fail_now(self, task, status, message):
        # Cancelled, so that a producer it already waits for does not start it when it finishes.
        task.state = CANCELLED
        self.live.pop(task.id, None)
        task.run.outstanding -= 1
        task.run.tasks -= 1
        if task.in_map:
            self._finished.append(task.id)

    def _flush_finished(self) -> None:
        """Retires finished tasks from the TensorMap, all in one call: until
        then the map may still name them as producers, which submit skips
        (they are no longer live)."""
        ids = self._finished
        if ids:
            n = len(ids)
            arr = (ctypes.c_uint64 * n)(*ids)
            ids.clear()
            check(lib().simpler_depmap_finish(self.depmap, arr, n))

    def _ready(self, task) -> None:
        ep = task.ep
        if ep is None:  # a sub-task goes to the least loaded sub-worker
            subs = self.subs
            if len(subs) == 1:
                ep = subs[0]
            else:
                alive = [e for e in subs if not e.dead] or subs
                ep = min(alive, key=lambda e: len(e.ready) + e.posted)
            task.ep = ep
        task.state = READY
        if ep.dead:
            self._finish(task, FAILED, (_errors.DISPATCH, ep.dead))
            return
        ep.ready.append(task)
        self._dispatch(ep)

    def _dispatch(self, ep) -> None:
        if ep.role == "remote":
            self._dispatch_remote(ep)
            return
        mv = self.mv
        ready, busy = ep.ready, ep.busy
        while ready:
            f = ep.seq % L.FRAMES  # the ring's next frame, free once its last task is collected
            if busy[f] is not None:
                break
            task = ready.popleft()
            if task.run.error is not None:
                self._finish(task, CANCELLED, None)
                continue
            off = ep.frames[f]
            shm = task.shm
            maps = () if not shm or ep.mapped.issuperset(shm) else [i for i in shm if i not in ep.mapped]
            if len(maps) > L.MAX_MAPS:
                ep.control(self.waiter, "map", [self._map_entry(i) for i in maps])
                ep.mapped.update(maps)
                maps = ()
            for j, idx in enumerate(maps):
                b = self.buffers[idx]
                L.MAP.pack_into(mv, off + L.F_MAPS + j * L.MAP_ENTRY, idx, 0, b.nbytes, b.ptr,
                                b.shm.name.encode())
                ep.mapped.add(idx)
            nt, ns = task.nt, task.ns
            if nt:
                mv[off + L.F_TAGS:off + L.F_TAGS + 4 * nt] = task.tags
                mv[off + L.F_DIRS:off + L.F_DIRS + nt] = task.dirs
                mv[off + L.F_TENSORS:off + L.F_TENSORS + 96 * nt] = task.tensors
            if ns:
                mv[off + L.F_SCALARS:off + L.F_SCALARS + 8 * ns] = task.scalars
            seq = ep.seq = (ep.seq + 1) & 0xFFFFFFFF
            L.HDR.pack_into(mv, off + L.F_HDR, seq, task.id, task.kind, task.slot, task.cfg, nt, ns, len(maps))
            mv[off] = L.POSTED  # the state's low byte (the others stay 0); the payload is in place before it
            busy[f] = task
            ep.posted += 1
            task.state = RUNNING
            self.inflight += 1
            if self.defer and ep.posted < WAKE_BATCH:
                # Wake later (coalescing): the child that finishes a task faster than the orchestration
                # submits the next sleeps after each one, and every wake is a syscall plus, on a busy
                # host, a lost time slice for this process; meanwhile more tasks fill the ring, and the
                # child runs them all on one wakeup. flush_wakes() at the latest.
                if ep not in self._to_wake:
                    now = time.perf_counter()
                    if not self._to_wake:
                        self._wake_due = now + WAKE_DELAY_S
                    self._to_wake[ep] = now
            else:
                self._to_wake.pop(ep, None)
                ep.wake()

    def _wake_overdue(self) -> None:
        """Wakes the children whose posts have waited longer than WAKE_DELAY_S."""
        now = time.perf_counter()
        for e, t in list(self._to_wake.items()):
            if now - t > WAKE_DELAY_S:
                del self._to_wake[e]
                e.wake()
        if self._to_wake:
            self._wake_due = min(self._to_wake.values()) + WAKE_DELAY_S

    def _dispatch_remote(self, ep) -> None:
        while ep.ready:
            task = ep.ready.popleft()
            if task.run.error is not None:
                self._finish(task, CANCELLED, None)
                continue
            try:
                ep.post(task)
            except RemoteDied as e:
                self._finish(task, FAILED, (_errors.DISPATCH, f"{e} before task {task.id} ({task.label}) started"))
                continue
            task.state = RUNNING
            ep.running[task.id] = task

    def _collect_remote(self, ep) -> bool:
        got = False
        while ep.completions:
            tid, status, msg = ep.completions.popleft()
            task = ep.running.pop(tid, None)
            if task is None:
                continue
            got = True
            if status:
                self._finish(task, FAILED, (status, f"{ep.label}: task {task.id} ({task.label}) failed: {msg}"))
            else:
                self._finish(task, DONE, None)
        if ep.dead and ep.running:
            for task in list(ep.running.values()):
                self._finish(task, FAILED, (_errors.DISPATCH, f"{ep.dead} while running task {task.id} "
                                            f"({task.label})"))
            ep.running.clear()
            got = True
        return got

    def _remote_pending(self) -> bool:
        return any(ep.running for ep in self.remotes)

    def flush_wakes(self) -> None:
        while self._to_wake:
            self._to_wake.popitem()[0].wake()

    def _map_entry(self, idx):
        b = self.buffers[idx]
        return (idx, b.shm.name, b.nbytes, b.ptr)

    # ---- completion -----------------------------------------------------------

    def poll(self) -> bool:
        """Collects finished frames (no blocking); True if any."""
        got = False
        if self.inflight:
            mv = self.mv
            for ep in self.local:
                # A child finishes its tasks in seq order: collect from the oldest until one still runs.
                # (A finish can post this child's next tasks: posted and seq are read afresh each time.)
                if not ep.posted:
                    continue
                frames, busy = ep.frames, ep.busy
                if mv[frames[(ep.seq - ep.posted) % L.FRAMES]] != L.DONE:  # the state's low byte (see _dispatch)
                    continue
                while ep.posted:
                    f = (ep.seq - ep.posted) % L.FRAMES
                    off = frames[f]
                    if mv[off] != L.DONE:
                        break
                    task = busy[f]
                    busy[f] = None
                    ep.posted -= 1
                    self.inflight -= 1
                    status = L.I32.unpack_from(mv, off + L.F_STATUS)[0]
                    if status:
                        msg = ep.completion(f)[1]
                        self._finish(task, FAILED, (status, f"{ep.label}: task {task.id} ({task.label}) failed: {msg}"))
                    else:
                        mv[off] = L.FREE
                        self._finish(task, DONE, None)
                if ep.ready:
                    self._dispatch(ep)
                got = True
        for ep in self.remotes:
            if ep.completions or (ep.dead and ep.running):
                got = self._collect_remote(ep) or got
        return got

    def _finish(self, task, state, error) -> None:
        if task.state >= DONE:
            return
        task.state = state
        self.live.pop(task.id, None)
        if task.in_map:
            self._finished.append(task.id)
        run = task.run
        run.outstanding -= 1
        consumers = task.consumers
        if consumers is None:
            if error is not None:
                run.fail(*error)
            return
        task.consumers = None
        if state == DONE:
            for c in consumers:
                c.pending -= 1
                if c.pending == 0 and c.state == PENDING:
                    self._ready(c)
        else:
            if error is not None:
                run.fail(*error)
            for c in consumers:
                if c.state == PENDING:
                    c.run.fail(_errors.DISPATCH, f"task {c.id} ({c.label}) not run: producer task {task.id} failed")
                    self._finish(c, CANCELLED, None)

    def on_death(self, ep) -> None:
        msg = ep.mark_dead()
        self.inflight -= ep.posted
        ep.posted = 0
        for f, task in enumerate(ep.busy):
            if task is not None:
                ep.busy[f] = None
                self._finish(task, FAILED, (_errors.DISPATCH, f"{msg} while running task {task.id} ({task.label})"))
        while ep.ready:
            task = ep.ready.popleft()
            self._finish(task, FAILED, (_errors.DISPATCH, f"{msg} before task {task.id} ({task.label}) started"))

    # ---- waiting --------------------------------------------------------------

    def waiter(self, pred, endpoints, timeout=None) -> bool:
        self.flush_wakes()
        fds = self.watch_fds + tuple(fd for fd in (lane.lane_fd() for lane in self._lanes) if fd >= 0)
        return wait_until(pred, endpoints, self.mv, self.parent_efd, timeout, self.on_death, fds)

    def _any_done(self) -> bool:
        if self.interrupt is not None and self.interrupt():
            return True
        for lane in self._lanes:  # remote sessions' frames, read by this (waiting) thread
            if lane.pump() and lane.dead is not None:
                return True
        for ep in self.local:
            if ep.posted and ep.done(ep.oldest_frame()):
                return True
        for ep in self.remotes:
            if ep.completions or (ep.dead and ep.running):
                return True
        return False

    def wait(self, cond, timeout) -> bool:
        """Drives the engine until cond() holds; False on timeout. While it
        waits, this thread reads the remote sessions' lanes itself."""
        if not self.remotes or self._lanes:
            return self._wait(cond, timeout)
        self._lanes = tuple({id(ep.lane): ep.lane for ep in self.remotes}.values())
        for lane in self._lanes:
            lane.attach()
        try:
            return self._wait(cond, timeout)
        finally:
            for lane in self._lanes:
                lane.detach()
            self._lanes = ()

    def _wait(self, cond, timeout) -> bool:
        deadline = None if timeout is None else time.perf_counter() + timeout
        while True:
            self.poll()
            if cond():
                return True
            if not self.inflight and not self._remote_pending():
                # Nothing running and cond() unmet: a child with queued work died or
                # everything left waits on something that cannot finish.
                for ep in self.eps:
                    if ep.ready and not ep.dead:
                        self._dispatch(ep)
                if not self.inflight and not self._remote_pending():
                    if cond():
                        return True
                    raise _errors.SimplerError(_errors.INTERNAL, "level-3 engine stalled: nothing is running")
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                return False
            eps = [e for e in self.local if e.posted]
            self.waiter(self._any_done, eps, left)
