"""The level-3 scheduler (in the parent): tasks, their dependencies, and
their handoff to the children's mailboxes.

The per-task path runs in the library (simpler_l3_*, src/runtime/
level3_sched.cpp): task records, the TensorMap, ready queues, the frames
posted to the children and collected from them, and each run's count of
outstanding tasks and first error, one call per submitted task. This
module resolves a task's arguments (shared buffers or the target child's
device memory) and drives the rest: waiting (the children's pidfds, remote
sessions' lanes, timeouts), control requests (a task naming more new
buffers than its frame can map), remote workers' tasks (taken from the
scheduler once ready, sent, their completions reported back), and a
child's death. A failed task poisons its dependents and fails its run
(with the first error, naming the worker); a child that dies fails what it
held.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
import time
import weakref

from .. import _errors
from .._lib import bare, check, lib
from ..remote.client import RemoteDied
from . import endpoint as E
from . import layout as L
from .endpoint import ChildDied, wait_until

# Outstanding tasks above which a submit waits for some to finish (the
# level-3 counterpart of a full task ring).
WINDOW = 16384
# The scheduler's notice flags (runtime/level3_sched.h).
_EXTERNAL_READY, _MAPS_NEEDED = 1, 2
_ROLES = {"chip": 0, "sub": 1, "remote": 2}
_TAKE = 64  # remote tasks taken from the scheduler per call


class _Notice(ctypes.Structure):
    """What the scheduler publishes without a call (simpler_l3_notice)."""
    _fields_ = [("flags", ctypes.c_uint32), ("defer", ctypes.c_uint32), ("live", ctypes.c_uint64),
                ("inflight", ctypes.c_uint64), ("external_running", ctypes.c_uint64),
                ("deferred_wakes", ctypes.c_uint64)]


def layout_values() -> list:
    """layout.py's values in the order the library checks them (Layout::kNames)."""
    return [L.FRAMES, L.FRAME_BYTES, L.GLOBAL_BYTES, L.CHILD_HEADER, L.CTRL_BYTES, L.F_HDR, L.F_STATUS, L.F_MAPS,
            L.F_TAGS, L.F_DIRS, L.F_TENSORS, L.F_SCALARS, L.F_MSG, L.MAX_TENSORS, L.MAX_SCALARS, L.MAX_MAPS,
            L.MAP_ENTRY, L.NAME_BYTES, L.C_SLEEPING, L.FREE, L.POSTED, L.DONE]


class Run:
    """One run (one orchestration call): `done` once closed with no task
    outstanding, `error` the first (status, message) or None. The scheduler
    keeps a record of it from its first task on (`known`); a run without
    tasks never costs a call."""

    __slots__ = ("id", "_eng", "_final", "_closed", "known", "__weakref__")

    def __init__(self, eng, rid: int):
        self.id = rid
        self._eng = eng
        self._final = None  # (done, error) once the scheduler is gone
        self._closed = False
        self.known = False

    @property
    def done(self) -> bool:
        if not self.known:
            return self._closed
        if self._final is not None:
            return self._final[0]
        state = self._eng._run_state(self._eng.sched, self.id)  # bit 0 done, bit 1 failed
        if state < 0:  # no record: its tasks were all refused before the scheduler saw them
            return self._closed
        return state == 1 or state == 3

    @property
    def error(self):
        if not self.known:
            return None
        if self._final is not None:
            return self._final[1]
        state = self._eng._run_state(self._eng.sched, self.id)
        if state < 0 or not state & 2:
            return None
        return self._eng._run_error(self.id)

    @property
    def closed(self) -> bool:
        """The orchestration has returned: the run is done once its tasks are."""
        return self._closed

    @closed.setter
    def closed(self, value: bool) -> None:
        if value and not self._closed:
            self._closed = True
            if self.known and self._final is None:
                self._eng._run_close(self._eng.sched, self.id)

    def __del__(self):
        # Any thread may collect a Run: the scheduler is only called under the
        # engine's lock, so the release waits for a later run of the engine.
        if getattr(self, "known", False) and self._final is None:
            self._eng._released.append(self.id)  # (list.append is atomic)


def _kept(buffers, tensors):
    """The resolution kept on a lone tensor of a shared buffer (t._l3, see
    Engine.resolve) while that buffer is still registered under its index;
    else None."""
    if len(tensors) == 1:
        kept = tensors[0]._l3
        if kept is not None and buffers.get(kept[0]) is kept[1]:
            return kept
    return None


class _RemoteTask:
    """What a remote worker's task needs to be sent (RemoteEndpoint.post)
    and named in its messages."""

    __slots__ = ("id", "ep", "slot", "cfg", "label", "dirs", "tensors", "scalars")

    def __init__(self, tid, ep, slot, cfg, label, dirs, tensors, scalars):
        self.id, self.ep, self.slot, self.cfg, self.label = tid, ep, slot, cfg, label
        self.dirs, self.tensors, self.scalars = dirs, tensors, scalars


class Engine:
    def __init__(self, endpoints, mv, parent_efd: int):
        self.eps = endpoints
        self.chips = [e for e in endpoints if e.role == "chip"]
        self.subs = [e for e in endpoints if e.role == "sub"]
        self.local = self.chips + self.subs  # the children with task frames
        self.remotes = []  # remote level-3 Workers (level 4): add_remote, remote/client.py
        self.mv = mv
        self.parent_efd = parent_efd
        values = layout_values()
        h = ctypes.c_void_p()
        check(lib().simpler_l3_create(ctypes.addressof(ctypes.c_char.from_buffer(mv)), len(mv),
                                      (ctypes.c_uint32 * len(values))(*values), len(values), ctypes.byref(h)))
        self.sched = h
        p = ctypes.c_void_p()
        check(lib().simpler_l3_notice(h, ctypes.byref(p)))
        self.notice = _Notice.from_address(p.value)
        self._by_k = []  # scheduler endpoint index -> endpoint
        for ep in endpoints:
            self._add_endpoint(ep, ep.slot)
        self.next_id = 1
        self.lock = threading.RLock()
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
        self._templates = {}  # (kind, callable slot, label) -> the scheduler's template
        self._remote_tasks = {}  # task id -> _RemoteTask, until its completion
        self._dead_known = set()  # endpoints whose death the scheduler has been told
        self._death_seen = False
        self._released = []  # ids of runs nobody holds any more (Run.__del__)
        self._runs = {}  # run id -> weak reference (runs the scheduler knows), for close()
        self.next_run = 1
        self._tid = ctypes.c_uint64()
        self._ids = (ctypes.c_uint64 * _TAKE)()
        self._n = ctypes.c_uint32()
        # Called once per task (or per wait step) each: unprototyped (bare),
        # so every argument is passed as a ready C value (c_void_p, the
        # c_uint64 id, bytes or None, plain ints for the 32-bit ones).
        self._submit = bare("simpler_l3_submit")
        self._submit_args = bare("simpler_l3_submit_args")
        self._submit_one = bare("simpler_l3_submit_one")
        self._poll = bare("simpler_l3_poll")
        self._any_done_c = bare("simpler_l3_any_done")
        self._run_state = bare("simpler_l3_run_state")
        self._run_close = bare("simpler_l3_run_close")
        self._flush = bare("simpler_l3_flush_wakes")

    def _add_endpoint(self, ep, block: int) -> None:
        k = ctypes.c_uint32()
        check(lib().simpler_l3_add_endpoint(self.sched, _ROLES[ep.role], block, -1 if ep.role == "remote" else ep.efd,
                                            ep.label.encode(), ctypes.byref(k)))
        ep._k = k.value
        self._by_k.append(ep)

    def add_remote(self, ep) -> None:
        """A remote level-3 Worker (level 4), its session open."""
        self._add_endpoint(ep, -1)
        self.remotes.append(ep)

    def close(self) -> None:
        if self.sched:
            for ref in list(self._runs.values()):
                run = ref()
                if run is not None and run._final is None:
                    run._final = (run.done, run.error)
            lib().simpler_l3_destroy(self.sched)
            self.sched = None

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
        check(lib().simpler_l3_buffer_add(self.sched, idx, base, buf.nbytes, buf.shm.name.encode()))

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
        holders = (ctypes.c_uint32 * len(self._by_k))()
        n = ctypes.c_uint32()
        check(lib().simpler_l3_buffer_drop(self.sched, idx, holders, len(self._by_k), ctypes.byref(n)))
        return [self._by_k[k] for k in holders[:n.value]]

    def _find_buffer(self, addr: int):
        i = bisect.bisect_right(self.buf_bases, addr) - 1
        if i >= 0:
            base = self.buf_bases[i]
            idx = self.buf_by_base[base]
            if addr < base + self.buffers[idx].nbytes:
                return idx, base
        return None

    def uses_buffer(self, idx: int) -> bool:
        """Whether an unfinished task names shared buffer idx."""
        return bool(lib().simpler_l3_uses_buffer(self.sched, idx))

    def uses_dev(self, ep, base: int) -> bool:
        """Whether an unfinished task of ep names its device allocation at base."""
        return bool(lib().simpler_l3_uses_dev(self.sched, ep._k, base))

    def _run_error(self, rid: int):
        st, n = ctypes.c_int32(), ctypes.c_uint64()
        buf = ctypes.create_string_buffer(4096)
        check(lib().simpler_l3_run_error(self.sched, rid, ctypes.byref(st), buf, len(buf), ctypes.byref(n)))
        if not st.value:
            return None
        if n.value > len(buf):
            buf = ctypes.create_string_buffer(n.value)
            check(lib().simpler_l3_run_error(self.sched, rid, ctypes.byref(st), buf, len(buf), ctypes.byref(n)))
        return st.value, buf.raw[:n.value].decode("utf-8", "replace")

    def idle(self) -> bool:
        """No task submitted and unfinished."""
        return not self.sched or not self.notice.live

    # ---- argument resolution --------------------------------------------------

    def resolve(self, ep, args, tid: int, label: str):
        """(the tensors as ChipTensor bytes rebased onto their allocations
        with TensorMap keys, their tags packed as the frame holds them, the
        buffer indices used (packed u32) and how many, the device bases used
        (packed u64) and how many, the tensors as the child must see them
        when that differs (a domain peer's window is keyed by its owner but
        addressed by this chip's mapping), else None). ep is None for a
        sub-task.

        A tensor of a shared buffer made by Buffer.tensor keeps its rebased
        bytes (t._l3: buffer index, buffer, bytes, packed tag, packed index)
        and later tasks reuse them while that buffer is still registered
        under that index;
        indices are never reused, so a closed buffer (or a new one at the
        same address) sends the tensor down the full resolution again.

        The whole result is kept on args too (args._l3: endpoint, memory
        generation, result), for an argument list submitted again unchanged
        (add_tensor clears it) while no memory was registered or dropped."""
        # A kept resolution names this process's shared memory: never a remote task's tensor.
        remote = ep is not None and ep.role == "remote"
        one = None if remote else _kept(self.buffers, args._tensors)
        if one is not None:
            return one[2], one[3], one[4], 1, None, 0, None
        cached = getattr(args, "_l3", None)
        if cached is not None and cached[0] is ep and cached[1] == E.memory_generation:
            return cached[2]
        gen = E.memory_generation
        out = self._resolve(ep, args, tid, label, remote)
        args._l3 = (ep, gen, out)
        return out

    def _resolve(self, ep, args, tid: int, label: str, remote: bool):
        """resolve()'s full pass; a remote endpoint's tensors are all resolved
        as remote memory (none uses a kept resolution)."""
        tensors = args._tensors
        n = len(tensors)
        if n > L.MAX_TENSORS:
            raise ValueError(f"task {tid} ({label}): {n} tensors (at most {L.MAX_TENSORS})")
        buffers = self.buffers
        recs = []
        tags = []
        used = set()
        dev = []
        child = None  # the tensors as the child sees them, where they differ from the keys
        for i, t in enumerate(tensors):
            cached = None if remote else t._l3
            if cached is not None and buffers.get(cached[0]) is cached[1]:
                idx, _, rec, tag, _ = cached
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
        return (b"".join(recs), b"".join(tags), L.u32s(len(used)).pack(*used), len(used),
                L.u64s(len(dev)).pack(*dev), len(dev), b"".join(child) if child is not None else None)

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
            t._l3 = (tag - 1, keep, rec, L.U32.pack(tag), L.U32.pack(tag - 1))
        return rec, child_rec, tag, base

    # ---- submission -----------------------------------------------------------

    def new_run(self) -> Run:
        rid = self.next_run
        self.next_run = rid + 1
        return Run(self, rid)

    def _know(self, run) -> None:
        """The run's first task: the scheduler records the run with it."""
        run.known = True
        self._runs[run.id] = weakref.ref(run)
        if len(self._released) >= 64:  # runs nobody holds any more (see Run.__del__), released together
            ids = [self._released.pop() for _ in range(len(self._released))]
            for rid in ids:
                self._runs.pop(rid, None)
            check(lib().simpler_l3_run_release(self.sched, (ctypes.c_uint32 * len(ids))(*ids), len(ids)))

    def _template(self, kind: int, slot: int, label: str) -> int:
        tpl = ctypes.c_uint32()
        check(lib().simpler_l3_add_template(self.sched, kind, slot, label.encode(), ctypes.byref(tpl)))
        self._templates[(kind, slot, label)] = tpl.value
        return tpl.value

    def submit(self, run, ep, kind, slot, label, args=None, access=None, cfg=0) -> int:
        """Queues one task; returns its id. `access` holds the tensors'
        ArgDirection values as bytes; ep is None for a sub-task (any sub-worker)."""
        with self.lock:
            notice = self.notice
            if notice.live >= WINDOW:
                self.wait(lambda: notice.live < WINDOW, None)
            tid = self.next_id
            self.next_id = tid + 1
            if not run.known:
                self._know(run)
            tpl = self._templates.get((kind, slot, label))
            if tpl is None:
                tpl = self._template(kind, slot, label)
            k = -1 if ep is None else ep._k
            self._tid.value = tid
            remote = ep is not None and ep.role == "remote"
            if args is not None and (args._tensors or args._scalars):
                one = None if args._scalars or remote else _kept(self.buffers, args._tensors)
                if one is not None:
                    # resolve()'s first case without resolve (the usual sub-task or chip task
                    # with one tensor): two calls fewer.
                    st = self._submit_one(self.sched, run.id, k, tpl, self._tid, cfg, one[2], one[3], access, one[4])
                else:
                    st = self._submit_with_args(run, ep, k, tpl, tid, slot, label, args, access, cfg, remote)
            elif cfg or remote:
                st = self._submit_args(self.sched, run.id, k, tpl, self._tid, cfg, 0, None, None, None, None, 0, None,
                                       0, None, 0, None)
                if remote and not st:
                    self._remote_tasks[tid] = _RemoteTask(tid, ep, slot, cfg, label, b"", b"", b"")
            else:
                st = self._submit(self.sched, run.id, k, tpl, self._tid)
            if st:
                detail = lib().simpler_last_error_detail().decode("utf-8", "replace")
                raise _errors.error_for(st, detail)
            if notice.flags:
                self._service()
            if self.remotes:
                self._collect_remotes()
            return tid

    def _submit_with_args(self, run, ep, k, tpl, tid, slot, label, args, access, cfg, remote) -> int:
        """Resolves a task's arguments and hands it to the scheduler (which
        finds its producers and packs its frame); a status."""
        nt = len(args._tensors)
        if nt:
            arr, tags, shm, nshm, dev, ndev, child = self.resolve(ep, args, tid, label)
        else:
            arr = tags = shm = dev = child = None
            nshm = ndev = 0
        ns = len(args._scalars)
        if ns > L.MAX_SCALARS:
            raise ValueError(f"{label}: {ns} scalars (at most {L.MAX_SCALARS})")
        scalars = L.u64s(ns).pack(*args._scalars) if ns else None
        st = self._submit_args(self.sched, run.id, k, tpl, self._tid, cfg, nt, arr, child, tags, access, ns, scalars,
                               nshm, shm, ndev, dev)
        if remote and not st:
            self._remote_tasks[tid] = _RemoteTask(tid, ep, slot, cfg, label, access or b"",
                                                  (child if child is not None else arr) or b"", scalars or b"")
        return st

    def _service(self) -> None:
        """What the scheduler leaves to this side (its notice flags): a
        child's buffers to map by a control request before its next task,
        remote tasks to send."""
        notice = self.notice
        while notice.flags:
            if notice.flags & _MAPS_NEEDED:
                k, n = ctypes.c_uint32(), ctypes.c_uint32()
                idx = (ctypes.c_uint32 * L.MAX_TENSORS)()
                check(lib().simpler_l3_maps_needed(self.sched, ctypes.byref(k), idx, L.MAX_TENSORS, ctypes.byref(n)))
                if n.value:
                    ep = self._by_k[k.value]
                    maps = list(idx[:n.value])
                    try:
                        ep.control(self.waiter, "map", [self._map_entry(i) for i in maps])
                    except ChildDied:
                        self.on_death(ep)  # its tasks fail, naming it
                        continue
                    check(lib().simpler_l3_mark_mapped(self.sched, k.value, idx, n.value))
                continue
            if notice.flags & _EXTERNAL_READY:
                check(lib().simpler_l3_take_external(self.sched, self._ids, _TAKE, ctypes.byref(self._n)))
                for tid in self._ids[:self._n.value]:
                    task = self._remote_tasks[tid]
                    try:
                        task.ep.post(task)
                    except RemoteDied as e:
                        self._remote_tasks.pop(tid, None)
                        self._complete(tid, _errors.DISPATCH, f"{e} before task {tid} ({task.label}) started")

    def _complete(self, tid: int, status: int, message: str) -> None:
        check(lib().simpler_l3_complete(self.sched, tid, status, message.encode()))

    def _collect_remotes(self) -> bool:
        """Reports remote completions (queued by each endpoint's receiver
        thread) and remote workers found dead; True if any."""
        got = False
        for ep in self.remotes:
            q = ep.completions
            while q:
                tid, status, msg = q.popleft()
                task = self._remote_tasks.pop(tid, None)
                if task is None:
                    continue
                got = True
                self._complete(tid, status, f"{ep.label}: task {tid} ({task.label}) failed: {msg}" if status else "")
            if ep.dead and ep._k not in self._dead_known:
                self._tell_dead(ep, ep.dead)
                for tid in [t for t, task in self._remote_tasks.items() if task.ep is ep]:
                    del self._remote_tasks[tid]
                got = True
        if self.notice.flags:
            self._service()
        return got

    def _tell_dead(self, ep, why: str) -> None:
        self._dead_known.add(ep._k)
        check(lib().simpler_l3_endpoint_dead(self.sched, ep._k, why.encode()))

    @property
    def defer(self) -> bool:
        """Set while an orchestration function runs: wakes are coalesced
        and finished frames collected every few submits."""
        return bool(self.notice.defer)

    @defer.setter
    def defer(self, on: bool) -> None:
        self.notice.defer = 1 if on else 0  # the scheduler reads it there

    def flush_wakes(self) -> None:
        if self.notice.deferred_wakes:
            self._flush(self.sched)

    def _map_entry(self, idx):
        b = self.buffers[idx]
        return (idx, b.shm.name, b.nbytes, b.ptr)

    # ---- completion -----------------------------------------------------------

    def poll(self) -> bool:
        """Collects finished frames and remote completions (no blocking); True if any."""
        got = bool(self._poll(self.sched)) if self.notice.inflight else False
        if self.remotes:
            got = self._collect_remotes() or got
        elif self.notice.flags:
            self._service()
        return got

    def on_death(self, ep) -> None:
        msg = ep.mark_dead()
        if ep._k not in self._dead_known:
            self._tell_dead(ep, msg)
        self._death_seen = True  # ends the wait that saw it (_any_done)

    def _tell_local_deaths(self) -> None:
        """Children found dead by a path other than a wait (a control
        request's reap): their tasks fail now."""
        for ep in self.local:
            if ep.dead and ep._k not in self._dead_known:
                self._tell_dead(ep, ep.dead)

    # ---- waiting --------------------------------------------------------------

    def waiter(self, pred, endpoints, timeout=None) -> bool:
        self.flush_wakes()
        fds = self.watch_fds + tuple(fd for fd in (lane.lane_fd() for lane in self._lanes) if fd >= 0)
        return wait_until(pred, endpoints, self.mv, self.parent_efd, timeout, self.on_death, fds)

    def _any_done(self) -> bool:
        if self._death_seen:
            self._death_seen = False
            return True
        if self.interrupt is not None and self.interrupt():
            return True
        for lane in self._lanes:  # remote sessions' frames, read by this (waiting) thread
            if lane.pump() and lane.dead is not None:
                return True
        if self._any_done_c(self.sched):
            return True
        for ep in self.remotes:
            if ep.completions or (ep.dead and ep._k not in self._dead_known):
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
        notice = self.notice
        while True:
            self.poll()
            if cond():
                return True
            if not notice.inflight and not notice.external_running:
                # Nothing running and cond() unmet: a child with queued work died or
                # everything left waits on something that cannot finish.
                self._tell_local_deaths()
                check(lib().simpler_l3_dispatch_all(self.sched))
                if notice.flags:
                    self._service()
                if not notice.inflight and not notice.external_running:
                    if cond():
                        return True
                    raise _errors.SimplerError(_errors.INTERNAL, "level-3 engine stalled: nothing is running")
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                return False
            self.waiter(self._any_done, [e for e in self.local if not e.dead], left)
