"""Worker and RunHandle (level 2: one device, cpu or cuda)."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from . import _errors
from ._lib import CTaskArgs, CWorkerConfig, CWorkerInfo, check, lib
from .level3.shm import create as _create_segment
from .task_interface import CallConfig, ChipCallable, ChipStorageTaskArgs, ChipTensor, DataType

__all__ = ["Worker", "RunHandle", "CallableHandle", "Buffer"]

# Keys Worker(level, **config) knows, and the levels they apply to.
_LEVEL2_KEYS = {"platform", "runtime", "device_id", "heap_ring_size", "num_cores", "enable_sdma"}
_LEVEL3_KEYS = {"device_ids", "num_sub_workers"}
_LEVEL4_KEYS = {"remote_heap_ring_size", "remote_session_timeout_s"}


def _unsupported(message: str) -> _errors.SimplerUnsupportedError:
    return _errors.SimplerUnsupportedError(_errors.UNSUPPORTED, message)


class CallableHandle(int):
    """The slot a ChipCallable was registered in (an int)."""

    def __repr__(self) -> str:
        return f"CallableHandle({int(self)})"


_NO_ARGS = CTaskArgs(None, 0, None, 0)  # a run without arguments (never written)
_DEFAULT_C_CONFIG = None


def _default_c_config():
    """The C form of CallConfig(), built once (valid by construction; never written)."""
    global _DEFAULT_C_CONFIG
    if _DEFAULT_C_CONFIG is None:
        c = CallConfig()
        c.validate()
        _DEFAULT_C_CONFIG = c._to_c()
    return _DEFAULT_C_CONFIG


class RunHandle:
    """A submitted run. wait()/result() raise the run's error, or
    TimeoutError when it is still going after `timeout` seconds."""

    def __init__(self, handle: int, keep: Any):
        self._h = ctypes.c_void_p(handle)
        self._keep = keep  # argument arrays and host objects, alive until done
        self._lock = threading.Lock()

    def done(self) -> bool:
        return lib().simpler_run_done(self._h) == 1

    def wait(self, timeout: float | None = None) -> None:
        # Wait in slices so Ctrl-C reaches Python between them.
        remaining = timeout
        while True:
            step = 0.2 if remaining is None else min(0.2, max(0.0, remaining))
            st = lib().simpler_run_wait(self._h, step)
            if st != _errors.TIMEOUT:
                break
            if remaining is not None:
                remaining -= step
                if remaining <= 0:
                    raise _errors.SimplerTimeoutError(_errors.TIMEOUT,
                                                      f"the run did not complete within {timeout} s")
        self._keep = None
        check(st)

    def result(self, timeout: float | None = None) -> None:
        """Waits and returns the run's result (runs produce their outputs in
        device memory, so the result is None) or raises its error."""
        self.wait(timeout)
        return None

    def __del__(self):
        h = getattr(self, "_h", None)
        if h and h.value:
            try:
                if self._keep is not None:  # still running: its arguments must outlive it
                    lib().simpler_run_wait(h, -1.0)
                lib().simpler_run_release(h)
            except Exception:
                pass
            self._h = None


class Buffer:
    """Host memory this Worker owns (shared memory, so a later level can hand
    it to child processes without copying). View it through `shm.buf` or
    numpy(); name it in a call with tensor(shapes, dtype)."""

    def __init__(self, nbytes: int):
        if nbytes <= 0:
            raise ValueError(f"create_buffer: nbytes must be > 0, got {nbytes}")
        self.shm = _create_segment(nbytes)
        self.nbytes = nbytes
        self._closed = False
        self._ptr = None
        # Tensors made so far, (shapes, dtype, offset) -> ChipTensor: a level-3
        # orchestration names the same views of a buffer task after task, run
        # after run, and the one object keeps the engine's resolution of it
        # (ChipTensor._l3). A ChipTensor is immutable, so sharing it is safe.
        self._made: dict = {}

    @property
    def ptr(self) -> int:
        p = self._ptr
        if p is None:  # the mapping never moves: take its address once
            p = self._ptr = ctypes.addressof(ctypes.c_char.from_buffer(self.shm.buf))
        return p

    def numpy(self, shape=None, dtype="uint8"):
        import numpy as np

        a = np.ndarray((self.nbytes // np.dtype(dtype).itemsize,), dtype=dtype, buffer=self.shm.buf)
        return a.reshape(shape) if shape is not None else a

    def tensor(self, shapes, dtype, offset: int = 0) -> ChipTensor:
        try:
            key = (shapes if type(shapes) is tuple else tuple(shapes), dtype, offset)
            t = self._made.get(key)
        except TypeError:  # unhashable arguments: the long way checks them
            key = t = None
        if t is not None:
            return t
        dt = dtype if isinstance(dtype, DataType) else DataType.from_numpy(dtype)
        n = 1
        for s in shapes:
            n *= int(s)
        if offset < 0 or offset + n * dt.itemsize > self.nbytes:
            raise ValueError(f"Buffer.tensor: {n} x {dt.name} at byte {offset} exceed the buffer's {self.nbytes} bytes")
        t = ChipTensor.make(self.ptr + offset, shapes, dt)
        t._keep = self
        if key is not None and len(self._made) < 4096:
            self._made[key] = t
        return t

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.shm.close()
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass


def _host_view(obj, writable: bool):
    """(address, nbytes, keepalive) of a host object: an int address is taken
    as is; anything else must export the buffer protocol."""
    if isinstance(obj, int):
        return obj, None, None
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch.Tensor
        if not obj.is_contiguous():
            raise ValueError("host tensor must be contiguous")
        return int(obj.data_ptr()), int(obj.numel()) * int(obj.element_size()), obj
    mv = memoryview(obj)
    if writable and mv.readonly:
        raise ValueError("copy_from: the destination is read-only")
    if not mv.contiguous:
        raise ValueError("host buffer must be contiguous")
    mv = mv.cast("B")
    if mv.nbytes == 0:
        return 0, 0, mv
    if mv.readonly:  # bytes and friends: address them without copying
        import numpy as np

        arr = np.frombuffer(mv, dtype=np.uint8)
        return arr.__array_interface__["data"][0], mv.nbytes, (mv, arr)
    c = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(c), mv.nbytes, (mv, c)


class Worker:
    """Drives one device (level 2).

    Worker(2, platform="cpu" | "cuda", runtime="tensormap_and_ringbuffer" |
    "host_build_graph", device_id=0, heap_ring_size=None, num_cores=None)

    register() works before or after init(); close() is idempotent and the
    Worker is a context manager.
    """

    def __new__(cls, level=2, **config):
        # Level 3 and up is a hierarchy of processes (simpler.level3).
        if cls is Worker and isinstance(level, int) and not isinstance(level, bool) and level >= 3:
            from .level3.worker import HierWorker

            return super().__new__(HierWorker)
        return super().__new__(cls)

    def __init__(self, level: int, **config):
        if not isinstance(level, int) or isinstance(level, bool):
            raise TypeError(f"Worker: level must be an int, got {level!r}")
        self.level = level
        known = _LEVEL2_KEYS | _LEVEL3_KEYS | _LEVEL4_KEYS
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"Worker: unknown config key(s) {unknown}; level-2 keys are {sorted(_LEVEL2_KEYS)}")
        if level < 2:
            raise ValueError(f"Worker: level {level} is not a level (2 drives one device, 3 and up a hierarchy)")
        for k in sorted(set(config) & (_LEVEL3_KEYS | _LEVEL4_KEYS)):
            lvl = 3 if k in _LEVEL3_KEYS else 4
            raise ValueError(f"Worker: config key '{k}' applies to level {lvl} and up; this Worker is level {level}")
        if config.get("enable_sdma"):
            raise ValueError("Worker: enable_sdma provisions an Ascend a2a3 workspace; the platforms here are cpu, cuda")
        platform = config.get("platform", os.environ.get("SIMPLER_PLATFORM", "cpu"))
        runtime = config.get("runtime", "tensormap_and_ringbuffer")
        device_id = config.get("device_id", 0)
        heap = config.get("heap_ring_size") or 0
        cores = config.get("num_cores") or 0
        for name, v in (("device_id", device_id), ("heap_ring_size", heap), ("num_cores", cores)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"Worker: {name} must be a non-negative int, got {v!r}")
        if not isinstance(platform, str) or not isinstance(runtime, str):
            raise ValueError("Worker: platform and runtime are strings")
        self.platform = platform
        self.runtime = runtime
        self.device_id = device_id
        self._heap, self._cores = heap, cores  # a level-3 Worker taking this one as a chip reads them
        c = CWorkerConfig(ctypes.sizeof(CWorkerConfig), level, platform.encode(), runtime.encode(), device_id, cores,
                          heap)
        h = ctypes.c_void_p()
        check(lib().simpler_worker_create(ctypes.byref(c), ctypes.byref(h)))
        self._h = h
        self._callables: dict[int, ChipCallable] = {}
        self._closed = False

    # ---- lifecycle ----------------------------------------------------------

    def init(self, prewarm_config=None) -> None:
        """Opens the device, starts the core threads and loads what is
        registered. With prewarm_config (a CallConfig or its dict), also
        runs one empty orchestration under that config's execution settings
        (block_dim, aicpu_thread_num, runtime_env), so what a first run
        sets up (the rings at the config's sizes, the cores' or streams'
        first dispatch, on cuda the context's lazy state) is done before the
        first real run."""
        if getattr(self, "_parent", None) is not None:
            raise ValueError("init: this Worker is attached to a level-3 Worker as one of its chips; init() that "
                             "Worker")
        cfg = None
        if prewarm_config is not None:
            cfg = CallConfig.from_dict(prewarm_config) if isinstance(prewarm_config, dict) else prewarm_config
            if not isinstance(cfg, CallConfig):
                raise TypeError(f"init: prewarm_config is a CallConfig or a dict, got {type(cfg).__name__}")
            cfg.validate()
        check(lib().simpler_worker_init(self._h))
        if cfg is not None:
            self._prewarm(cfg)

    def _prewarm(self, cfg: CallConfig) -> None:
        # The execution settings only: diagnostics would write files for a run nobody asked for.
        warm = CallConfig(aicpu_thread_num=cfg.aicpu_thread_num, block_dim=cfg.block_dim,
                          runtime_env=cfg.runtime_env)
        h = self.register(ChipCallable.from_tasks([], [], []))
        try:
            self.run(h, None, warm)
        finally:
            self.unregister(h)
            self._callables.pop(int(h), None)

    def close(self) -> None:
        """Waits for submitted runs, then releases the device. Idempotent."""
        if self._closed:
            return
        self._closed = True
        check(lib().simpler_worker_destroy(self._h))
        self._h = None
        self._callables.clear()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if not getattr(self, "_closed", True) and getattr(self, "_h", None):
            try:
                self.close()
            except Exception:
                pass

    def _handle(self):
        if self._closed:
            raise _errors.SimplerError(_errors.NOT_INITIALIZED, "the Worker is closed")
        return self._h

    @property
    def info(self) -> dict:
        i = CWorkerInfo()
        check(lib().simpler_worker_get_info(self._handle(), ctypes.byref(i)))
        return {"level": i.level, "initialized": bool(i.initialized), "closed": bool(i.closed),
                "num_cores": i.num_cores, "platform": i.platform.decode(), "runtime": i.runtime.decode(),
                "device": i.device.decode(), "runs": i.runs, "graph_builds": i.graph_builds,
                "graph_replays": i.graph_replays}

    # ---- callables ----------------------------------------------------------

    def register(self, target, *, workers=None) -> CallableHandle:
        if workers is not None:
            raise ValueError("register: workers= selects children of a level-3 Worker; this Worker is level 2")
        if not isinstance(target, ChipCallable):
            raise TypeError("register: at level 2 the target is a ChipCallable")
        slot = ctypes.c_int32()
        check(lib().simpler_register(self._handle(), target._h, ctypes.byref(slot)))
        self._callables[slot.value] = target
        return CallableHandle(slot.value)

    def unregister(self, handle_or_slot) -> None:
        slot = int(handle_or_slot)
        check(lib().simpler_unregister(self._handle(), slot))

    def add_worker(self, worker) -> int:
        raise ValueError("add_worker attaches children to a level-3 Worker; this Worker is level 2")

    def add_remote_worker(self, spec) -> int:
        raise ValueError("add_remote_worker needs a level-4 Worker; this Worker is level 2")

    # ---- memory -------------------------------------------------------------

    @staticmethod
    def _check_worker_id(worker_id: int) -> None:
        if worker_id != 0:
            raise ValueError(f"worker_id {worker_id}: a level-2 Worker has one device (worker_id 0)")

    def malloc(self, size: int, worker_id: int = 0) -> int:
        self._check_worker_id(worker_id)
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"malloc: size must be a positive int, got {size!r}")
        out = ctypes.c_uint64()
        check(lib().simpler_malloc(self._handle(), size, ctypes.byref(out)))
        return out.value

    def free(self, ptr: int, worker_id: int = 0) -> None:
        self._check_worker_id(worker_id)
        check(lib().simpler_free(self._handle(), int(ptr)))

    def copy_to(self, dst: int, src, nbytes: int | None = None) -> None:
        """Host -> device. dst is a device pointer (an interior one too); src a
        Buffer, an object with the buffer protocol (NumPy array, bytes...),
        a torch tensor, or an int host address (then nbytes is required)."""
        if isinstance(src, Buffer):
            src = src.shm.buf
        addr, size, keep = _host_view(src, writable=False)
        n = size if nbytes is None else int(nbytes)
        if n is None:
            raise ValueError("copy_to: nbytes is required with an integer source address")
        if size is not None and n > size:
            raise ValueError(f"copy_to: {n} bytes asked for, the source has {size}")
        check(lib().simpler_copy_to(self._handle(), int(dst), addr, n))
        del keep

    def copy_from(self, dst, src: int, nbytes: int | None = None) -> None:
        """Device -> host; dst is writable host memory (as for copy_to)."""
        if isinstance(dst, Buffer):
            dst = dst.shm.buf
        addr, size, keep = _host_view(dst, writable=True)
        n = size if nbytes is None else int(nbytes)
        if n is None:
            raise ValueError("copy_from: nbytes is required with an integer destination address")
        if size is not None and n > size:
            raise ValueError(f"copy_from: {n} bytes asked for, the destination has {size}")
        check(lib().simpler_copy_from(self._handle(), addr, int(src), n))
        del keep

    def create_buffer(self, nbytes: int) -> Buffer:
        return Buffer(nbytes)

    # ---- runs ---------------------------------------------------------------

    def _call(self, callable, args, config):
        """(slot, C arguments, C config, what must stay alive while the run uses them)."""
        if isinstance(callable, ChipCallable):
            callable = self.register(callable)
        if not isinstance(callable, int):
            raise TypeError("submit: pass the handle register() returned (or a ChipCallable)")
        if config is None:
            cfg = _default_c_config()
        else:
            if isinstance(config, dict):
                config = CallConfig.from_dict(config)
            config.validate()
            cfg = config._to_c()
        if args is None or not (args._tensors or args._scalars):
            return int(callable), _NO_ARGS, cfg, (args, cfg)
        c_args, keep = args._to_c()
        return int(callable), c_args, cfg, (keep, args, cfg)

    def submit(self, callable, args: ChipStorageTaskArgs | None = None, config=None) -> RunHandle:
        slot, c_args, cfg, keep = self._call(callable, args, config)
        out = ctypes.c_void_p()
        check(lib().simpler_submit(self._handle(), slot, ctypes.byref(c_args), ctypes.byref(cfg), ctypes.byref(out)))
        return RunHandle(out.value, keep)

    def run(self, callable, args: ChipStorageTaskArgs | None = None, config=None) -> None:
        """submit(...).wait() in one call: blocks until the run completes;
        raises its error. An idle Worker executes the run on this thread (no
        hand-over to its orchestrating thread), so Ctrl-C is seen once the
        run returns."""
        slot, c_args, cfg, _keep = self._call(callable, args, config)
        check(lib().simpler_run_sync(self._handle(), slot, ctypes.byref(c_args), ctypes.byref(cfg)))

    def live_domains(self) -> dict:
        """Communication domains (level 3 and up); none at level 2."""
        return {}

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Worker(level={self.level}, platform={self.platform!r}, runtime={self.runtime!r}, {state})"
