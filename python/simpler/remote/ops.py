"""The level-4 half of HierWorker: remote sessions, remote tasks and
remote memory. Remote memory is host memory of the remote level-3 Worker
(its create_buffer), so every chip and sub-worker there can name it; its
addresses are the session's, and tasks keyed with the remote worker's tag
keep dependencies on one host's memory apart from another's."""

from __future__ import annotations

from .. import _errors
from ..level3 import layout as L
from ..level3.orchestrator import as_config, directions
from . import protocol as P
from .client import RemoteCallable, RemoteDied, RemoteEndpoint

_CONFIG_FIELDS = ("aicpu_thread_num", "block_dim", "enable_chip_swimlane", "enable_dump_args", "enable_pmu",
                  "enable_dep_gen", "enable_scope_stats", "output_prefix", "runtime_env")


def _nbytes_of(obj) -> int:
    return memoryview(obj).nbytes


class RemoteOps:
    # ---- sessions ---------------------------------------------------------------

    def _open_remotes(self, first_slot: int) -> None:
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
                self._engine.add_remote(ep)
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
        try:
            return ep.control(request, data)
        except RemoteDied as e:
            raise _errors.SimplerError(_errors.DISPATCH, str(e)) from None

    # ---- tasks ------------------------------------------------------------------

    def _submit_remote(self, run, worker: int, handle, args, config) -> int:
        ep = self._remote_ep(worker)
        if isinstance(handle, str):
            handle = RemoteCallable(handle)
        if not isinstance(handle, RemoteCallable):
            raise TypeError(f"submit_next_level: {ep.label} runs a RemoteCallable('module:qualname') (an "
                            f"orchestration function imported there), got {type(handle).__name__}")
        cfg_index = 0
        if config is not None:
            cfg = as_config(config)
            cfg_index = ep.config_index({k: getattr(cfg, k) for k in _CONFIG_FIELDS})
        access = None
        if args is not None and args._tensors:
            access = directions(args)
        return self._engine.submit(run, ep, L.KIND_REMOTE, ep.callable_index(handle.name), handle.label, args,
                                   access, cfg_index)

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
            if eng.uses_dev(ep, ptr):
                raise ValueError(f"remote_free: 0x{ptr:x} on {ep.label} is named by a task that has not finished")
            if (worker_id, ptr) in self._shared()[1]:
                raise ValueError(f"remote_free: 0x{ptr:x} on {ep.label} is an import; remote_release_import it")
            self._check_not_imported(ptr, worker_id)
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
        self._remote_range(ep, "remote_copy_to", int(dst), view.nbytes)
        with self._engine.lock:
            try:
                ep.copy_to(int(dst), view)
            except RemoteDied as e:
                raise _errors.SimplerError(_errors.DISPATCH, str(e)) from None

    def remote_copy_from(self, dst, src: int, worker_id: int) -> None:
        """Copies len(dst) bytes from remote address `src` into `dst` (a
        writable buffer-protocol object)."""
        ep = self._remote_ep(worker_id)
        view = memoryview(dst).cast("B")
        if view.readonly:
            raise ValueError("remote_copy_from: dst is read-only")
        self._remote_range(ep, "remote_copy_from", int(src), view.nbytes)
        with self._engine.lock:
            try:
                ep.copy_from(view, int(src))
            except RemoteDied as e:
                raise _errors.SimplerError(_errors.DISPATCH, str(e)) from None

    # ---- sharing remote memory ----------------------------------------------------

    def _shared(self):
        """(exports by id, imports by (importer, address)) of this Worker."""
        if not hasattr(self, "_l4_exports"):
            self._l4_exports, self._l4_imports = {}, {}
        return self._l4_exports, self._l4_imports

    def _importer(self, worker_id):
        """None for this process (the Worker itself and its local level-3
        Workers share its address space), else the remote worker's id."""
        if worker_id is None:
            return None
        if not isinstance(worker_id, bool) and isinstance(worker_id, int) and 0 <= worker_id < len(self._children) \
                and hasattr(self._children[worker_id], "level"):
            return None
        return worker_id

    def remote_export(self, ptr: int, worker_id: int) -> "RemoteExport":
        """Makes the allocation `ptr` (an address remote_malloc returned) of
        remote worker `worker_id` importable by another remote worker or by
        this Worker (remote_import). The export lives until the allocation
        is freed; the allocation cannot be freed while an import of it lives."""
        ep = self._remote_ep(worker_id)
        ptr = int(ptr)
        exports, imports = self._shared()
        if (worker_id, ptr) in imports:
            raise ValueError(f"remote_export: 0x{ptr:x} on {ep.label} is an import; export the owner's allocation")
        if ep.allocs.get(ptr) is None:
            raise ValueError(f"remote_export: 0x{ptr:x} is not an allocation of {ep.label} (an export covers a "
                             f"whole allocation: pass the address remote_malloc returned)")
        with self._engine.lock:
            value, _ = self._remote_call(ep, {"op": "export", "ptr": ptr})
        self._l4_export_seq = getattr(self, "_l4_export_seq", 0) + 1
        exp = RemoteExport(worker_id, ptr, int(value["nbytes"]), str(value["name"]), str(value["host"]),
                           self._l4_export_seq)
        exports[exp.id] = exp
        return exp

    def remote_import(self, export: "RemoteExport", worker_id=None) -> int:
        """Maps the exported allocation into remote worker `worker_id`, or,
        with worker_id None (or a local level-3 worker's id), into this
        process for the local workers' tasks. Returns its address there;
        tasks there name it like their own memory, and they are ordered with
        the owner's tasks on the same bytes. Shared memory carries it, so
        the importer must run on the exporter's host. Lives until
        remote_release_import (or close())."""
        from ..level3.memory import ImportedBuffer

        if not isinstance(export, RemoteExport):
            raise TypeError(f"remote_import: expected what remote_export returned, got {type(export).__name__}")
        exports, imports = self._shared()
        if exports.get(export.id) is not export:
            raise ValueError(f"remote_import: {export!r} is not a live export of this Worker (its allocation was "
                             f"freed, or another Worker made it)")
        owner = self._remote_ep(export.worker)
        importer = self._importer(worker_id)
        if importer == export.worker:
            raise ValueError(f"remote_import: {owner.label} owns this memory; its tasks name 0x{export.ptr:x} "
                             f"directly")
        # The owner's TensorMap key of the allocation: tasks naming an import
        # are keyed with it, so they are ordered with the owner's tasks.
        dep_key = export.ptr | ((owner.slot + 1) << L.DEV_TAG_SHIFT)
        if importer is None:
            self._live()
            if export.host != P.host_id():
                raise _errors.SimplerUnsupportedError(
                    _errors.UNSUPPORTED, f"remote_import: {export!r} lives on another host ({export.host}); shared "
                    f"memory carries imports, so the importer must run on the exporter's host")
            with self._engine.lock:
                b = ImportedBuffer(export.name, export.nbytes, self, dep_key)
                self._buffers.append(b)
                self._engine.add_buffer(b)
            imports[(None, b.ptr)] = (export, b)
            return b.ptr
        ep = self._remote_ep(importer)
        with self._engine.lock:
            value, _ = self._remote_call(ep, {"op": "import", "name": export.name, "nbytes": export.nbytes,
                                              "host": export.host})
            addr = int(value)
            ep.add_alloc(addr, export.nbytes, alias=(owner.slot, export.ptr))
        imports[(importer, addr)] = (export, None)
        return addr

    def remote_release_import(self, ptr: int, worker_id=None) -> None:
        """Unmaps an import (refused while an unfinished task names it)."""
        exports, imports = self._shared()
        importer = self._importer(worker_id)
        ptr = int(ptr)
        rec = imports.get((importer, ptr))
        where = "this Worker" if importer is None else f"remote worker {importer}"
        if rec is None:
            raise ValueError(f"remote_release_import: 0x{ptr:x} is not an import of {where} (released already?)")
        eng = self._engine
        if importer is None:
            b = rec[1]
            with eng.lock:
                if eng.uses_buffer(b._l3_idx):
                    raise ValueError(f"remote_release_import: 0x{ptr:x} is named by a task that has not finished")
                del imports[(importer, ptr)]
                b.close()
            return
        ep = self._remote_ep(importer)
        with eng.lock:
            if eng.uses_dev(ep, ptr):
                raise ValueError(f"remote_release_import: 0x{ptr:x} on {ep.label} is named by a task that has not "
                                 f"finished")
            del imports[(importer, ptr)]
            ep.drop_alloc(ptr)
            self._remote_call(ep, {"op": "release_import", "ptr": ptr})

    def _check_not_imported(self, ptr: int, worker_id: int) -> None:
        """remote_free's guard: an import maps the allocation elsewhere."""
        exports, imports = self._shared()
        users = sorted({"this Worker" if k[0] is None else f"remote worker {k[0]}"
                        for k, (e, _) in imports.items() if e.worker == worker_id and e.ptr == ptr})
        if users:
            raise ValueError(f"remote_free: 0x{ptr:x} is imported by {', '.join(users)}; release those imports "
                             f"first (remote_release_import)")
        for k in [k for k, e in exports.items() if e.worker == worker_id and e.ptr == ptr]:
            del exports[k]  # its exports die with it


class RemoteExport:
    """What remote_export returns: one whole allocation of a remote worker,
    named for remote_import (the segment's name on its host, and the host)."""

    __slots__ = ("worker", "ptr", "nbytes", "name", "host", "id")

    def __init__(self, worker: int, ptr: int, nbytes: int, name: str, host: str, eid: int):
        self.worker, self.ptr, self.nbytes, self.name, self.host, self.id = worker, ptr, nbytes, name, host, eid

    def __repr__(self) -> str:
        return f"RemoteExport(worker={self.worker}, ptr=0x{self.ptr:x}, nbytes={self.nbytes}, id={self.id})"
