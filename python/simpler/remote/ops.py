"""The level-4 half of HierWorker: remote sessions, remote tasks and
remote memory. Remote memory is host memory of the remote level-3 Worker
(its create_buffer), so every chip and sub-worker there can name it; its
addresses are the session's, and tasks keyed with the remote worker's tag
keep dependencies on one host's memory apart from another's."""

from __future__ import annotations

from .. import _errors
from ..task_interface import ArgDirection
from ..level3 import layout as L
from . import protocol as P

_INOUT = int(ArgDirection.INOUT)
_CONFIG_FIELDS = ("aicpu_thread_num", "block_dim", "enable_chip_swimlane", "enable_dump_args", "enable_pmu",
                  "enable_dep_gen", "enable_scope_stats", "output_prefix", "runtime_env")


def _nbytes_of(obj) -> int:
    return memoryview(obj).nbytes


class RemoteOps:
    # ---- sessions ---------------------------------------------------------------

    def _open_remotes(self, first_slot: int) -> None:
        from .client import RemoteEndpoint
        from .mpi_client import MpiRank

        specs = [(i, c) for i, c in enumerate(self._children) if not hasattr(c, "level")]
        if not specs:
            return
        if first_slot + len(specs) >= (1 << (64 - L.DEV_TAG_SHIFT)) - 1:
            raise ValueError("Worker init: too many workers for the dependency keys")
        try:
            for k, (wid, spec) in enumerate(specs):
                if isinstance(spec, MpiRank):  # one endpoint per rank, over the group's one session
                    ep = spec.endpoint(first_slot + k, wid, self.remote_session_timeout_s, self.remote_heap_ring_size)
                else:
                    ep = RemoteEndpoint(first_slot + k, wid, spec, self.remote_session_timeout_s,
                                        self.remote_heap_ring_size)
                self._remote_eps.append(ep)
                ep.open(self.startup_timeout_s, self._parent_efd)
                self._engine.remotes.append(ep)
        except BaseException:
            self._shutdown(force=True)
            raise

    def _close_remotes(self) -> None:
        for ep in self._remote_eps:
            try:
                ep.close()
            except Exception:  # noqa: BLE001 - closing must reach every session
                pass
        self._remote_eps = []

    def _remote_ep(self, worker_id: int):
        self._live()
        if self.level != 4:
            raise ValueError(f"remote calls need a level-4 Worker; this Worker is level {self.level}")
        for ep in self._remote_eps:
            if ep.index == worker_id:
                return ep
        raise ValueError(f"worker {worker_id!r} is not a remote worker of this Worker "
                         f"(remote ids: {[e.index for e in self._remote_eps]})")

    def _remote_call(self, ep, request: dict, data: bytes = b""):
        from .client import RemoteDied

        try:
            return ep.control(request, data)
        except RemoteDied as e:
            raise _errors.SimplerError(_errors.DISPATCH, str(e)) from None

    # ---- tasks ------------------------------------------------------------------

    def _submit_remote(self, run, worker: int, handle, args, config) -> int:
        from .client import RemoteCallable
        from ..level3.orchestrator import as_config

        ep = self._remote_ep(worker)
        if isinstance(handle, str):
            handle = RemoteCallable(handle)
        if not isinstance(handle, RemoteCallable):
            raise TypeError(f"submit_next_level: {ep.label} runs a RemoteCallable('module:qualname') (an "
                            f"orchestration function imported there), got {type(handle).__name__}")
        cfg = as_config(config)
        fields = {} if cfg is None else {k: getattr(cfg, k) for k in _CONFIG_FIELDS}
        access = None
        if args is not None and args._tensors:
            access = [_INOUT if d is None else int(d) for d in args._directions]
        label = f"remote callable {handle.name}"
        return self._engine.submit(run, ep, L.KIND_REMOTE, ep.callable_index(handle.name), label, args, access,
                                   ep.config_index(fields))

    # ---- memory -----------------------------------------------------------------

    def remote_malloc(self, size: int, worker_id: int) -> int:
        """Host memory of remote worker `worker_id`, on its host; returns its
        address there (name it with ChipTensor.make in remote tasks)."""
        ep = self._remote_ep(worker_id)
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"remote_malloc: size must be a positive int, got {size!r}")
        with self._engine.lock:
            ptr, _ = self._remote_call(ep, {"op": "malloc", "size": size})
            ep.add_alloc(int(ptr), size)
        return int(ptr)

    def remote_free(self, ptr: int, worker_id: int) -> None:
        ep = self._remote_ep(worker_id)
        eng = self._engine
        with eng.lock:
            ptr = int(ptr)
            if ep.allocs.get(ptr) is None:
                raise ValueError(f"remote_free: 0x{ptr:x} is not an allocation of {ep.label}")
            if any(t.ep is ep and ptr in t.dev for t in eng.live.values()):
                raise ValueError(f"remote_free: 0x{ptr:x} on {ep.label} is named by a task that has not finished")
            self._remote_call(ep, {"op": "free", "ptr": ptr})
            ep.drop_alloc(ptr)

    def _remote_range(self, ep, what: str, addr: int, n: int) -> None:
        hit = ep.find_alloc(addr)
        if hit is None or addr + n > hit[0] + hit[1]:
            raise ValueError(f"{what}: [0x{addr:x}, +{n}) is not inside one allocation of {ep.label}")

    def remote_copy_to(self, dst: int, src, worker_id: int) -> None:
        """Copies the bytes of `src` (any buffer-protocol object) to remote
        address `dst`. Not ordered with tasks in flight: wait for the run."""
        ep = self._remote_ep(worker_id)
        view = memoryview(src).cast("B")
        n = view.nbytes
        self._remote_range(ep, "remote_copy_to", int(dst), n)
        with self._engine.lock:
            for at in range(0, n, P.CHUNK_BYTES):
                self._remote_call(ep, {"op": "copy_to", "addr": int(dst) + at}, bytes(view[at:at + P.CHUNK_BYTES]))

    def remote_copy_from(self, dst, src: int, worker_id: int) -> None:
        """Copies len(dst) bytes from remote address `src` into `dst` (a
        writable buffer-protocol object)."""
        ep = self._remote_ep(worker_id)
        view = memoryview(dst).cast("B")
        if view.readonly:
            raise ValueError("remote_copy_from: dst is read-only")
        n = view.nbytes
        self._remote_range(ep, "remote_copy_from", int(src), n)
        with self._engine.lock:
            for at in range(0, n, P.CHUNK_BYTES):
                k = min(P.CHUNK_BYTES, n - at)
                _, data = self._remote_call(ep, {"op": "copy_from", "addr": int(src) + at, "nbytes": k})
                if len(data) != k:
                    raise _errors.SimplerError(_errors.INTERNAL, f"remote_copy_from: {ep.label} sent {len(data)} "
                                               f"bytes, not {k}")
                view[at:at + k] = data

    def _remote_unsupported(self, op: str, worker_id: int):
        ep = self._remote_ep(worker_id)
        with self._engine.lock:
            self._remote_call(ep, {"op": op})

    def remote_export(self, ptr: int, worker_id: int):
        """Not supported yet: raises SimplerUnsupportedError (the session says so)."""
        return self._remote_unsupported("export", worker_id)

    def remote_import(self, handle, worker_id: int):
        """Not supported yet: raises SimplerUnsupportedError."""
        return self._remote_unsupported("import", worker_id)

    def remote_release_import(self, ptr: int, worker_id: int):
        """Not supported yet: raises SimplerUnsupportedError."""
        return self._remote_unsupported("release_import", worker_id)
