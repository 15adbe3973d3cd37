"""Worker at level 3 (one host, several chips): Worker(3, platform=...,
device_ids=[...], num_sub_workers=N). init() forks the children; the
parent runs orchestration functions fn(orch, args, cfg) and hands tasks to
the children through shared-memory mailboxes."""

from __future__ import annotations

import os
import sys

from .. import _errors
from ..task_interface import CallConfig, ChipCallable
from ..worker import CallableHandle, RunHandle, Worker
from . import shm
from . import domain as _domain
from . import layout as L
from .callables import Registry, pickle_callable
from .endpoint import Endpoint, set_spin, wait_until
from .engine import Engine
from .memory import MemoryOps
from .orchestrator import Orchestrator, as_config
from ..remote.ops import RemoteOps

KEYS = {"platform", "runtime", "device_ids", "num_sub_workers", "heap_ring_size", "num_cores", "enable_sdma",
        "startup_timeout_s", "control_timeout_s"}
REMOTE_KEYS = {"remote_heap_ring_size", "remote_session_timeout_s"}
PLATFORMS = ("cpu", "cuda")
RUNTIMES = ("tensormap_and_ringbuffer", "host_build_graph")

# Timeouts end up as milliseconds in the channel and the mailbox waits,
# which take up to 2^40 of them: a number of seconds beyond this (or not a
# number at all) is refused where the Worker is made, not at first use.
_MAX_TIMEOUT_S = 1e9


def _seconds(config: dict, name: str, default):
    v = config.get(name, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= _MAX_TIMEOUT_S:
        raise ValueError(f"Worker: {name} must be a positive number of seconds up to {_MAX_TIMEOUT_S:g}, got {v!r}")
    return v


class RunHandle3(RunHandle):
    """A submitted level-3 run: done(), wait(timeout), result(timeout) (a
    RunHandle over the engine instead of a level-2 run)."""

    def __init__(self, worker, run):
        self._h = None
        self._w = worker
        self._run = run

    def done(self) -> bool:
        eng = self._w._engine
        with eng.lock:
            eng.poll()
        return self._run.done

    def wait(self, timeout: float | None = None) -> None:
        eng = self._w._engine
        with eng.lock:
            ok = eng.wait(lambda: self._run.done, timeout)
        if not ok:
            raise _errors.SimplerTimeoutError(_errors.TIMEOUT, f"the run did not complete within {timeout} s")
        if self._run.error is not None:
            raise _errors.error_for(*self._run.error)

    def result(self, timeout: float | None = None):
        self.wait(timeout)
        return None


class HierWorker(RemoteOps, MemoryOps, Worker):
    """Worker(level >= 3): see the module docstring and docs/simpler.md."""

    def __init__(self, level: int, **config):
        if not isinstance(level, int) or isinstance(level, bool):
            raise TypeError(f"Worker: level must be an int, got {level!r}")
        unknown = sorted(set(config) - KEYS - REMOTE_KEYS - {"device_id"})
        if unknown:
            raise ValueError(f"Worker: unknown config key(s) {unknown}; level-{level} keys are {sorted(KEYS)}")
        if "device_id" in config:
            raise ValueError("Worker: device_id applies to level 2; a level-3 Worker takes device_ids=[...]")
        if level == 3 and set(config) & REMOTE_KEYS:
            k = sorted(set(config) & REMOTE_KEYS)[0]
            raise ValueError(f"Worker: config key '{k}' applies to level 4 and up; this Worker is level 3")
        if config.get("enable_sdma"):
            raise ValueError("Worker: enable_sdma provisions an Ascend a2a3 workspace; the platforms here are cpu, cuda")
        self.level = level
        self.platform = config.get("platform", os.environ.get("SIMPLER_PLATFORM", "cpu"))
        if self.platform in ("a2a3", "a5", "a2a3sim", "a5sim"):
            raise _errors.SimplerArgumentError(
                _errors.INVALID_ARG, f"Worker: platform '{self.platform}' is Ascend hardware (or its simulator), which "
                f"this runtime does not drive; supported platforms: cpu, cuda")
        if self.platform not in PLATFORMS:
            raise _errors.SimplerArgumentError(
                _errors.INVALID_ARG, f"Worker: unknown platform '{self.platform}'; supported platforms: cpu, cuda")
        self.runtime = config.get("runtime", "tensormap_and_ringbuffer")
        if self.runtime not in RUNTIMES:
            raise ValueError(f"Worker: runtime {self.runtime!r} (known: {', '.join(RUNTIMES)})")
        ids = config.get("device_ids", [0] if level == 3 else [])
        if isinstance(ids, int):
            ids = [ids]
        ids = list(ids)
        for d in ids:
            if isinstance(d, bool) or not isinstance(d, int) or d < 0:
                raise ValueError(f"Worker: device_ids must be non-negative ints, got {d!r}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"Worker: device_ids {ids} name a device twice")
        subs = config.get("num_sub_workers", 0)
        for name, v in (("num_sub_workers", subs), ("heap_ring_size", config.get("heap_ring_size") or 0),
                        ("num_cores", config.get("num_cores") or 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"Worker: {name} must be a non-negative int, got {v!r}")
        t = _seconds(config, "startup_timeout_s", 60.0)
        c = _seconds(config, "control_timeout_s", None)
        rt = _seconds(config, "remote_session_timeout_s", 30.0)
        rh = config.get("remote_heap_ring_size") or 0
        if isinstance(rh, bool) or not isinstance(rh, int) or rh < 0:
            raise ValueError(f"Worker: remote_heap_ring_size must be a non-negative int, got {rh!r}")
        self.remote_session_timeout_s = float(rt)
        self.remote_heap_ring_size = rh
        self.device_ids = ids
        self.num_sub_workers = subs
        self.startup_timeout_s = float(t)
        self.control_timeout_s = None if c is None else float(c)
        self._heap = config.get("heap_ring_size") or 0
        self._cores = config.get("num_cores") or 0
        self._registry = Registry()
        self._added: list = []  # child Workers (add_worker)
        self._chip_specs: dict = {}  # chip index -> settings of the Worker(2) it came from (add_worker)
        self._children: list = []  # next-level workers by id: a HierWorker or a RemoteWorkerSpec
        self._remote_eps: list = []
        self._parent = None  # the Worker whose engine this one shares
        self._engine = None
        self._chip_eps: list = []
        self._sub_eps: list = []
        self._all_eps: list = []
        self._mailbox = None
        self._parent_efd = -1
        self._buffers: list = []
        self._domains: dict = {}
        self._initialized = False
        self._closed = False
        self._h = None
        self._pid = os.getpid()  # a forked child's copy of this object must never act on it

    # ---- lifecycle ----------------------------------------------------------

    def add_worker(self, worker) -> int:
        """Attaches a child Worker one level down (before init()); its chips
        and sub-workers join this Worker's engine (one scheduler, one
        TensorMap). Returns its id for submit_next_level(..., worker=id).
        At level 3 the child is a Worker(2): its device becomes one more
        chip (after device_ids), driven with that Worker's runtime,
        heap_ring_size and num_cores."""
        if self._initialized:
            raise ValueError("add_worker: call it before init()")
        if self.level == 3 and isinstance(worker, Worker) and not isinstance(worker, HierWorker):
            return self._add_chip_worker(worker)
        if not isinstance(worker, HierWorker) or worker.level != self.level - 1:
            raise TypeError(f"add_worker: a level-{self.level} Worker takes level-{self.level - 1} Workers "
                            f"(Worker({self.level - 1}, ...))")
        if worker._initialized or worker._parent is not None:
            raise ValueError("add_worker: the child Worker is already initialized or attached")
        if worker.platform != self.platform:
            raise ValueError(f"add_worker: platform {worker.platform!r} differs from {self.platform!r}")
        worker._parent = self
        self._added.append(worker)
        self._children.append(worker)
        return len(self._children) - 1

    def _add_chip_worker(self, worker) -> int:
        if worker._closed or getattr(worker, "_parent", None) is not None:
            raise ValueError("add_worker: the Worker(2) is closed or already attached")
        if worker.info["initialized"]:
            raise ValueError("add_worker: the Worker(2) is initialized (its device is open in this process); "
                             "attach it before init(), its chip child opens the device")
        if worker.platform != self.platform:
            raise ValueError(f"add_worker: platform {worker.platform!r} differs from {self.platform!r}")
        device = worker.device_id
        if device in self.device_ids:
            if self.platform != "cpu":
                raise ValueError(f"add_worker: device {device} is already a chip of this Worker "
                                 f"(device_ids {self.device_ids})")
            # Every cpu chip drives the one cpu device (a level-2 cpu Worker is always device 0):
            # the id only names the chip, so it takes the next free one.
            device = max(self.device_ids) + 1
        worker._parent = self
        self.device_ids.append(device)
        chip = len(self.device_ids) - 1
        self._chip_specs[chip] = {"runtime": worker.runtime, "heap_ring_size": worker._heap,
                                  "num_cores": worker._cores}
        return chip

    def add_remote_worker(self, spec):
        """Attaches a level-3 Worker served by a remote daemon (before
        init(), which opens its session). Returns its id for
        submit_next_level(RemoteCallable(...), args, cfg, worker=id) and the
        remote_* memory calls. A spec with mpi= attaches an MPI group, one
        worker per rank: it returns their ids, in rank order, as a range."""
        from ..remote.client import RemoteWorkerSpec

        if self.level != 4:
            raise ValueError(f"add_remote_worker needs a level-4 Worker (a remote worker is level 3); this Worker "
                             f"is level {self.level}")
        if not isinstance(spec, RemoteWorkerSpec):
            raise TypeError(f"add_remote_worker: expected a RemoteWorkerSpec, got {type(spec).__name__}")
        if self._initialized:
            raise ValueError("add_remote_worker: call it before init()")
        if spec.platform != self.platform:
            raise ValueError(f"add_remote_worker: platform {spec.platform!r} differs from {self.platform!r}")
        if getattr(spec, "mpi", None) is not None:
            from ..remote.mpi_client import MpiRank

            first = len(self._children)
            self._children += MpiRank.group(spec)
            return range(first, len(self._children))
        self._children.append(spec)
        return len(self._children) - 1

    def _leaves(self):
        """(owner, role, index, device) for every child process, depth first."""
        out = []
        if self.level == 3:
            out += [(self, "chip", k, d) for k, d in enumerate(self.device_ids)]
            out += [(self, "sub", k, None) for k in range(self.num_sub_workers)]
        for w in self._added:
            out += w._leaves()
        return out

    def init(self, prewarm_config=None) -> None:
        """Forks the children (before any device call in this process) and
        waits for them to start, at most startup_timeout_s."""
        if self._closed:
            raise _errors.SimplerError(_errors.NOT_INITIALIZED, "the Worker is closed")
        if self._initialized:
            raise _errors.SimplerError(_errors.ALREADY_INITIALIZED, "init: already initialized")
        if self._parent is not None:
            raise ValueError("init: this Worker is attached to a parent Worker; init() the parent")
        if prewarm_config is not None:
            as_config(prewarm_config)
        leaves = self._leaves()
        set_spin(len(leaves) + 1)
        self._mailbox = shm.create(L.segment_bytes(max(1, len(leaves))))
        mv = self._mailbox.buf
        mv[:L.segment_bytes(max(1, len(leaves)))] = bytes(L.segment_bytes(max(1, len(leaves))))
        self._parent_efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        eps = []
        for slot, (owner, role, k, dev) in enumerate(leaves):
            label = f"chip worker {k} (device {dev})" if role == "chip" else f"sub-worker {k}"
            if owner is not self:
                label = f"worker {self._children.index(owner)}: {label}"
            ep = Endpoint(slot, role, k, label, mv)
            if self.control_timeout_s is not None:
                ep.control_timeout_s = self.control_timeout_s
            ep.owner = owner
            ep.device = dev
            eps.append(ep)
        self._all_eps = eps
        try:
            self._engine = Engine(eps, mv, self._parent_efd)
        except BaseException:
            self._shutdown(force=True)
            raise
        for w in [self] + self._added:
            w._engine = self._engine
            w._chip_eps = [e for e in eps if e.owner is w and e.role == "chip"]
            w._sub_eps = [e for e in eps if e.owner is w and e.role == "sub"]
            w._initialized = True
        self._fork_all(eps)
        for w in [self] + self._added:
            for b in w._buffers:
                self._engine.add_buffer(b)
        self._open_remotes(len(eps))

    def _fork_all(self, eps) -> None:
        from .child import Child

        sys.stdout.flush()
        sys.stderr.flush()
        for ep in eps:
            owner = ep.owner
            spec = {"platform": owner.platform, "runtime": owner.runtime, "device_id": ep.device,
                    "heap_ring_size": owner._heap, "num_cores": owner._cores}
            if ep.role == "chip":
                spec.update(owner._chip_specs.get(ep.index, {}))
            callables = owner._registry.for_role(ep.role, ep.index)
            pid = os.fork()
            if pid == 0:  # the child: serve the mailbox, never return
                try:
                    for other in eps:
                        if other is not ep:
                            os.close(other.efd)
                    Child(ep, self._mailbox.buf, self._parent_efd, spec, callables).run()
                finally:
                    os._exit(5)
            ep.started(pid)
        ok = wait_until(lambda: all(e.state() != L.STARTING for e in eps), eps, self._mailbox.buf,
                        self._parent_efd, self.startup_timeout_s, lambda e: e.mark_dead())
        failed = [e for e in eps if e.state() == L.FAILED]
        if failed:
            e = failed[0]
            msg = self._ctrl_error(e)
            self._shutdown(force=True)
            raise _errors.error_for(msg[0], f"Worker init: {e.label} failed to start: {msg[1]}")
        dead = [e for e in eps if e.dead]
        if dead:
            msg = dead[0].dead
            self._shutdown(force=True)
            raise _errors.SimplerError(_errors.DISPATCH, f"Worker init: {msg} during startup")
        if not ok:
            late = [e.label for e in eps if e.state() == L.STARTING]
            self._shutdown(force=True)
            raise _errors.SimplerTimeoutError(_errors.TIMEOUT, f"Worker init: {', '.join(late)} did not start within "
                                              f"startup_timeout_s={self.startup_timeout_s} s")

    def _ctrl_error(self, ep):
        import pickle

        off = ep.base + L.CHILD_HEADER
        n = L.U32.unpack_from(self._mailbox.buf, ep.base + L.C_CTRL_LEN)[0]
        try:
            kind, value = pickle.loads(bytes(self._mailbox.buf[off:off + n]))
            return value
        except Exception:
            return (_errors.INTERNAL, "no detail")

    def close(self) -> None:
        """Drains submitted runs, stops every child and reaps it, and unlinks
        every shared-memory segment this Worker created. Idempotent."""
        if self._closed or os.getpid() != self._pid:
            return
        if self._parent is not None and self._parent._initialized and not self._parent._closed:
            self._closed = True  # the parent owns the processes
            return
        self._closed = True
        try:
            if self._engine is not None:
                try:
                    with self._engine.lock:
                        self._engine.wait(self._engine.idle, 30.0)
                except Exception:
                    pass
        finally:
            self._shutdown(force=False)

    def _shutdown(self, force: bool) -> None:
        self._close_remotes()
        eps = self._all_eps
        for d in list(self._domains.values()):
            try:
                self._free_domain(d, quiet=True)
            except Exception:
                pass
        for ep in eps:
            if not force and not ep.dead and ep.pid:
                try:
                    ep.control(self._exit_waiter, "exit")
                except Exception:
                    pass
        for ep in eps:
            if ep.pid and not ep.reap(block=False):
                # Give a child that acknowledged "exit" a moment, then insist.
                if force or not wait_until(lambda: ep.reap(False), [], self._mailbox.buf, self._parent_efd, 2.0,
                                           lambda e: None):
                    ep.kill()
                    ep.reap(block=True)
            ep.close_fds()
        for w in [self] + self._added:
            for b in list(w._buffers):
                b._owner = None
                b.close()
            w._buffers.clear()
            w._closed = True
        if self._engine is not None:
            self._engine.close()
        if self._mailbox is not None:
            self._mailbox.close()
            try:
                self._mailbox.unlink()
            except FileNotFoundError:
                pass
            self._mailbox = None
        if self._parent_efd >= 0:
            os.close(self._parent_efd)
            self._parent_efd = -1

    def _exit_waiter(self, pred, endpoints, timeout=None):
        return wait_until(pred, endpoints, self._mailbox.buf, self._parent_efd, 5.0, lambda e: e.mark_dead())

    def __del__(self):
        if not getattr(self, "_closed", True) and getattr(self, "_initialized", False):
            try:
                self.close()
            except Exception:
                pass

    def _live(self):
        if self._closed:
            raise _errors.SimplerError(_errors.NOT_INITIALIZED, "the Worker is closed")
        if not self._initialized:
            raise _errors.SimplerError(_errors.NOT_INITIALIZED, "call init() first")
        return self._engine

    @property
    def info(self) -> dict:
        return {"level": self.level, "initialized": self._initialized, "closed": self._closed,
                "platform": self.platform, "runtime": self.runtime, "device_ids": list(self.device_ids),
                "num_sub_workers": self.num_sub_workers, "workers": len(self._added),
                "pids": [e.pid for e in self._all_eps if e.owner is self] if self._all_eps else []}

    def _chip_ep(self, worker: int):
        if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < len(self._chip_eps):
            raise ValueError(f"worker {worker!r} is not a chip of this Worker (0..{len(self._chip_eps) - 1})")
        return self._chip_eps[worker]

    # ---- callables ----------------------------------------------------------

    def register(self, target, *, workers=None) -> CallableHandle:
        """A ChipCallable (for the chips) or a Python callable (sub-task or
        orchestration function), before or after init(). `workers` limits a
        ChipCallable to those chip ids, a Python callable to those sub-worker
        ids. The same content gives the same handle."""
        if self._closed:
            raise _errors.SimplerError(_errors.NOT_INITIALIZED, "the Worker is closed")
        if workers is not None:
            workers = sorted({int(w) for w in workers})
        e, new = self._registry.add(target, workers)
        if new and self._initialized:
            try:
                self._ship(e)
            except BaseException:
                self._registry.remove(e.slot)
                raise
        return CallableHandle(e.slot)

    def _ship(self, e) -> None:
        if e.kind == "chip":
            payload = e.target.recipe()
            eps = [ep for ep in self._chip_eps if e.workers is None or ep.index in e.workers]
        else:
            payload = pickle_callable(e.target)
            if payload is None:
                e.payload = False  # usable as an orchestration function, not as a sub-task
                return
            e.payload = True
            eps = [ep for ep in self._sub_eps if e.workers is None or ep.index in e.workers]
        for ep in eps:
            if not ep.dead:
                ep.control(self._engine.waiter, "register", e.slot, e.kind, payload)

    def unregister(self, handle_or_slot) -> None:
        e = self._registry.remove(int(handle_or_slot))
        if self._initialized and not self._closed:
            eps = self._chip_eps if e.kind == "chip" else self._sub_eps
            for ep in eps:
                if not ep.dead:
                    ep.control(self._engine.waiter, "unregister", e.slot)

    def _signature(self, e):
        sig = getattr(e, "_sig", None)
        if sig is None:
            sig = e.target.signature
            e._sig = sig
        return sig

    def _config_index(self, ep, config) -> int:
        config = as_config(config)
        if config is None:
            return 0
        eng = self._engine
        key = repr(config)
        idx = eng.config_keys.get(key)
        if idx is None:
            idx = len(eng.config_keys) + 1
            eng.config_keys[key] = idx
            eng.config_fields[idx] = {"aicpu_thread_num": config.aicpu_thread_num, "block_dim": config.block_dim,
                                      "enable_chip_swimlane": config.enable_chip_swimlane,
                                      "enable_dump_args": config.enable_dump_args, "enable_pmu": config.enable_pmu,
                                      "enable_dep_gen": config.enable_dep_gen,
                                      "enable_scope_stats": config.enable_scope_stats,
                                      "output_prefix": config.output_prefix, "runtime_env": config.runtime_env}
        if idx not in ep.configs:
            ep.control(eng.waiter, "config", idx, eng.config_fields[idx])
            ep.configs[idx] = True
        return idx

    # ---- runs ---------------------------------------------------------------

    def submit(self, callable, args=None, config=None) -> RunHandle3:
        """Calls the orchestration function fn(orch, args, cfg) now, in this
        thread; the tasks it submits run in the children while it goes on.
        Returns a RunHandle (done, wait, result)."""
        eng = self._live()
        if isinstance(callable, ChipCallable):
            raise TypeError("submit: at level 3 the callable is a Python orchestration function fn(orch, args, cfg); "
                            "hand a ChipCallable to a chip with orch.submit_next_level(..., worker=i)")
        if isinstance(callable, int):
            fn = self._registry.get(callable, "py").target
        elif builtins_callable(callable):
            fn = callable
        else:
            raise TypeError(f"submit: expected an orchestration function or its handle, got {type(callable).__name__}")
        cfg = as_config(config) or CallConfig()
        with eng.lock:
            run = eng.new_run()
            orch = Orchestrator(self, run)
            outer = eng.defer
            eng.defer = True
            try:
                fn(orch, args, cfg)
            except BaseException:
                run.closed = True
                eng.defer = outer
                eng.flush_wakes()
                eng.wait(lambda: run.done, None)
                raise
            run.closed = True
            eng.defer = outer
            eng.flush_wakes()
        return RunHandle3(self, run)

    def run(self, callable, args=None, config=None) -> None:
        self.submit(callable, args, config).wait()

    # ---- domains ------------------------------------------------------------

    def live_domains(self) -> dict:
        return dict(self._domains)

    def _allocate_domain(self, name, workers, window_size, buffers):
        eng = self._live()
        workers, buffers = _domain.validate(name, workers, window_size, buffers, len(self._chip_eps), self._domains)
        d = _domain.CommDomain(self, name, workers, window_size, buffers)
        if self.platform == "cpu":
            for r, w in enumerate(workers):
                d.ranks.append(_domain.DomainRank(d, r, w, self.create_buffer(window_size)))
        else:
            from . import cuda_domain

            with eng.lock:
                cuda_domain.allocate(self, d)
        self._domains[name] = d
        return d

    def _free_domain(self, d, quiet: bool = False) -> None:
        self._domains.pop(d.name, None)
        d.freed = True
        if self.platform == "cpu":
            for r in d.ranks:
                r.window.close()
        elif d.backend is not None:
            from . import cuda_domain

            if self._engine is not None and not quiet:
                with self._engine.lock:  # tasks may still name the windows
                    self._engine.wait(self._engine.idle, None)

            cuda_domain.free(self, d)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("initialized" if self._initialized else "new")
        return (f"Worker(level={self.level}, platform={self.platform!r}, device_ids={self.device_ids}, "
                f"num_sub_workers={self.num_sub_workers}, {state})")


def builtins_callable(x) -> bool:
    return callable(x)
