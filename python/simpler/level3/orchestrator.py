"""The Orchestrator a level-3 orchestration function receives:
fn(orch, args, cfg). Its calls queue tasks on the Worker's engine; tasks
start as soon as their inputs are ready, while fn is still running."""

from __future__ import annotations

from contextlib import contextmanager

from ..task_interface import ArgDirection, CallConfig, ChipCallable
from . import layout as L

_INOUT = int(ArgDirection.INOUT)


class Orchestrator:
    def __init__(self, worker, run):
        self._w = worker
        self._run = run
        self._depth = 0

    @property
    def chip_count(self) -> int:
        return len(self._w._chip_eps)

    @property
    def sub_worker_count(self) -> int:
        return len(self._w._sub_eps)

    def submit_next_level(self, callable_handle, args=None, config=None, *, worker: int) -> int:
        """Runs a ChipCallable on chip child `worker`; tensors must be
        create_buffer memory or that chip's device memory. Returns the task id."""
        w = self._w
        if w.level >= 4:
            return self._submit_child_level(callable_handle, args, config, worker)
        if isinstance(callable_handle, ChipCallable):
            callable_handle = w.register(callable_handle)
        e = w._registry.get(callable_handle, "chip")
        ep = w._chip_ep(worker)
        if e.workers is not None and worker not in e.workers:
            raise ValueError(f"submit_next_level: callable {e.slot} was registered for workers {e.workers}, "
                             f"not worker {worker}")
        access = e.access
        if access is None:
            access = e.access = bytes(d for d in w._signature(e) if d != ArgDirection.SCALAR)
        given = len(args._tensors) if args is not None else 0
        if given != len(access):
            raise ValueError(f"submit_next_level: callable {e.slot} ({e.target.func_name}) takes {len(access)} "
                             f"tensor(s); {given} given")
        cfg = w._config_index(ep, config) if config is not None else 0
        label = e.label
        if label is None:
            label = e.label = f"chip callable {e.slot} ({e.target.func_name})"
        return w._engine.submit(self._run, ep, L.KIND_CHIP, e.slot, label, args, access, cfg)

    def _submit_child_level(self, handle, args, config, worker):
        """Level 4 and up: runs the child Worker's orchestration function
        fn(orch, args, cfg) here, its tasks joining this run (the engine is
        shared, so dependencies cross child Workers through shared buffers)."""
        w = self._w
        if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < len(w._children):
            raise ValueError(f"submit_next_level: worker {worker!r} is not a child Worker "
                             f"(0..{len(w._children) - 1})")
        child = w._children[worker]
        if not hasattr(child, "level"):
            return w._submit_remote(self._run, worker, handle, args, config)
        fn = w._registry.get(handle, "py").target if isinstance(handle, int) else handle
        if not callable(fn):
            raise TypeError("submit_next_level: at this level the callable is an orchestration function of the "
                            "child Worker")
        cfg = as_config(config) or CallConfig()
        fn(Orchestrator(child, self._run), args, cfg)
        return None

    def submit_sub(self, callable_handle, args=None) -> int:
        """Runs a registered Python callable as fn(args) on a sub-worker.
        Tensors must be create_buffer memory; their tags (add_tensor(t,
        ArgDirection.X)) give the dependencies, untagged ones count as INOUT."""
        w = self._w
        if not w._sub_eps:
            raise ValueError("submit_sub: this Worker has no sub-workers (num_sub_workers=0)")
        e = w._registry.get(callable_handle, "py")
        if e.payload is False:
            raise ValueError(f"submit_sub: callable {e.slot} ({getattr(e.target, '__qualname__', e.target)}) was "
                             f"registered after init() and cannot be pickled; register it before init() "
                             f"(the sub-workers then inherit it) or install cloudpickle")
        access = None
        if args is not None and args._tensors:
            access = directions(args)
        label = e.label
        if label is None:
            label = e.label = f"sub-task {getattr(e.target, '__qualname__', 'callable')}"
        return w._engine.submit(self._run, None, L.KIND_SUB, e.slot, label, args, access)

    # ---- scopes -----------------------------------------------------------------

    def scope_begin(self) -> None:
        self._depth += 1

    def scope_end(self) -> None:
        if self._depth == 0:
            raise ValueError("scope_end without a matching scope_begin")
        self._depth -= 1

    @contextmanager
    def scope(self):
        self.scope_begin()
        try:
            yield self
        finally:
            self.scope_end()

    # ---- memory and domains -------------------------------------------------------

    def malloc(self, worker_id: int, size: int) -> int:
        """Device memory on chip child `worker_id` (note the order: worker
        first, the reverse of Worker.malloc). Lives until Worker.free or close."""
        return self._w.malloc(size, worker_id=worker_id)

    def allocate_domain(self, name: str, workers, window_size: int, buffers=()):
        return self._w._allocate_domain(name, workers, window_size, buffers)


def directions(args) -> bytes:
    """The ArgDirection of each tensor of args, as bytes; untagged ones INOUT."""
    dirs = args._directions
    return bytes(dirs) if None not in dirs else bytes(_INOUT if d is None else d for d in dirs)


def as_config(config):
    if config is None:
        return None
    if isinstance(config, dict):
        config = CallConfig.from_dict(config)
    if not isinstance(config, CallConfig):
        raise TypeError(f"config must be a CallConfig or a dict, got {type(config).__name__}")
    config.validate()
    return config
