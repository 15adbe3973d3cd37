"""The body of a child process (level 3): a chip child drives one device
with a level-2 Worker, a sub-worker child runs registered Python callables.

Both serve their mailbox block: task frames in seq order, control requests
between tasks. A child never returns: it leaves with os._exit, so nothing
the parent registered (atexit, finalizers) runs twice.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import time
import traceback

from .. import _errors
from .._lib import CCallConfig, CChipTensor, CTaskArgs, bare, lib
from . import layout as L
from .args import SubTaskArgs
from . import endpoint as _endpoint
from .shm import Mapping

_PR_SET_PDEATHSIG = 1
_NO_ARGS = CTaskArgs(None, 0, None, 0)  # the arguments of a chip task without any (never written)
_NO_ARGS_REF = ctypes.byref(_NO_ARGS)


class Child:
    def __init__(self, ep, mv, parent_efd: int, spec: dict, callables: dict):
        self.ep = ep
        self.mv = mv
        self.base = ep.base
        self.parent_efd = parent_efd
        self.spec = spec
        self.role = ep.role
        self.callables = callables  # slot -> ChipCallable (chip) or Python callable (sub)
        self.l2_slots: dict = {}  # slot -> level-2 slot (chip)
        self.maps: dict = {}  # buffer idx -> (Mapping, parent base)
        self.configs = {0: _c_config(None)}
        self.worker = None
        self.domains: dict = {}

    # ---- startup --------------------------------------------------------------

    def start(self) -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # never outlive the parent
        except Exception:
            pass
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; close() stops us
        delay = float(os.environ.get("SIMPLER_L3_CHILD_START_DELAY_S", "0") or 0)
        if delay > 0:  # lets the tests exercise the startup deadline
            time.sleep(delay)
        if self.role == "chip":
            from ..worker import Worker

            # Never NVLink multicast (NVLS) for the NCCL communicators of
            # communication domains; set before anything here loads NCCL.
            os.environ["NCCL_NVLS_ENABLE"] = "0"
            s = self.spec
            # cpu "devices" are processes of one host: each drives the one cpu device.
            dev = 0 if s["platform"] == "cpu" else s["device_id"]
            self.worker = Worker(2, platform=s["platform"], runtime=s["runtime"], device_id=dev,
                                 heap_ring_size=s["heap_ring_size"], num_cores=s["num_cores"])
            self.worker.init()
            # Called once per task: unprototyped, with arguments that need no conversion.
            self._run_sync = bare("simpler_run_sync")
            for slot, chip in self.callables.items():
                self.l2_slots[slot] = int(self.worker.register(chip))

    def run(self) -> None:
        try:
            self.start()
        except BaseException as e:  # report why, then leave
            self._reply_startup_error(e)
            os._exit(3)
        L.U32.pack_into(self.mv, self.base + L.C_STATE, L.READY)
        self._wake_parent()
        code = 0
        try:
            self.loop()
        except SystemExit as e:
            code = int(e.code or 0)
        except BaseException:
            traceback.print_exc()
            code = 4
        os._exit(code)

    def _reply_startup_error(self, e: BaseException) -> None:
        msg = _describe(e)
        self._write_ctrl(("err", (getattr(e, "status", _errors.INTERNAL), msg)))
        L.U32.pack_into(self.mv, self.base + L.C_STATE, L.FAILED)
        self._wake_parent()

    def _wake_parent(self) -> None:
        os.eventfd_write(self.parent_efd, 1)

    # ---- the loop -------------------------------------------------------------

    def loop(self) -> None:
        mv, frames = self.mv, self.ep.frames
        unpack = L.U32.unpack_from
        expected = 1
        poller = select.poll()
        poller.register(self.ep.efd, select.POLLIN)
        ctrl_at = self.base + L.C_CTRL_STATE
        sleeping_at = self.base + L.C_SLEEPING
        ppid = os.getppid()
        spin = _endpoint.SPIN_S
        naps = 0  # sleeps since the last piece of work
        nframes = len(frames)
        while True:
            t0 = time.perf_counter()
            while True:
                # The task of seq `expected` is in its ring frame once posted.
                off = frames[(expected - 1) % nframes]
                if mv[off] == L.POSTED and unpack(mv, off + 4)[0] == expected:
                    self.run_frame(off)
                    expected = (expected + 1) & 0xFFFFFFFF
                    t0 = time.perf_counter()
                    naps = 0
                elif unpack(mv, ctrl_at)[0] == L.CTRL_REQUEST:
                    self.control()
                    t0 = time.perf_counter()
                elif time.perf_counter() - t0 >= spin:
                    break
            # Nothing to do: block until the parent posts (it writes our
            # eventfd when it sees the sleeping flag).
            L.U32.pack_into(mv, sleeping_at, 1)
            off = frames[(expected - 1) % nframes]
            busy = unpack(mv, off)[0] == L.POSTED or unpack(mv, ctrl_at)[0] == L.CTRL_REQUEST
            if not busy:
                # The flag store and the parent's post may pass each other
                # (x86 lets a load overtake an earlier store, and Python
                # has no fence), so each side can miss the other: the
                # first sleep after work is short, bounding that miss.
                poller.poll(_endpoint.FIRST_NAP_MS if naps == 0 else 100)
                naps += 1
                try:
                    os.eventfd_read(self.ep.efd)
                except BlockingIOError:
                    pass
            L.U32.pack_into(mv, sleeping_at, 0)
            if os.getppid() != ppid:
                os._exit(0)

    # ---- tasks ----------------------------------------------------------------

    def run_frame(self, off: int) -> None:
        mv = self.mv
        _seq, task_id, kind, slot, cfg, nt, ns, nmaps = L.HDR.unpack_from(mv, off + L.F_HDR)
        status, msg = 0, ""
        try:
            for i in range(nmaps):
                idx, _, size, pbase, name = L.MAP.unpack_from(mv, off + L.F_MAPS + i * L.MAP_ENTRY)
                self.map(idx, name.rstrip(b"\0").decode(), size, pbase)
            if kind == L.KIND_CHIP:
                raw = None
                if nt:
                    # The tensors, rebased onto this process: a shared buffer's
                    # parent address becomes ours, a device pointer loses its tag.
                    raw = bytearray(mv[off + L.F_TENSORS:off + L.F_TENSORS + 96 * nt])
                    tags = L.u32s(nt).unpack_from(mv, off + L.F_TAGS)
                    head = L.TENSOR_HEAD
                    for i, tag in enumerate(tags):
                        addr, size, start = head.unpack_from(raw, 96 * i)
                        if tag:
                            m, pbase = self.maps[tag - 1]
                            addr = addr - pbase + m.addr
                        else:
                            addr &= L.DEV_MASK
                        head.pack_into(raw, 96 * i, addr, size, start)
                tensors = (CChipTensor * nt).from_buffer(raw) if nt else None
                scalars = (ctypes.c_uint64 * ns).from_buffer_copy(mv, off + L.F_SCALARS) if ns else None
                status, msg = self.run_chip(slot, cfg, tensors, nt, scalars, ns)
            else:
                fn = self.callables.get(slot)
                if fn is None:
                    raise _errors.SimplerArgumentError(_errors.INVALID_ARG, f"callable {slot} is not registered here")
                scalars = L.u64s(ns).unpack_from(mv, off + L.F_SCALARS) if ns else ()
                if nt:
                    # A sub-task's tensors all lie in shared buffers; they stay
                    # as the parent wrote them (SubTaskArgs rebases the one asked
                    # for), but every buffer they name must be mapped here.
                    raw = bytes(mv[off + L.F_TENSORS:off + L.F_TENSORS + 96 * nt])
                    tags = L.u32s(nt).unpack_from(mv, off + L.F_TAGS)
                    maps = self.maps
                    for tag in tags:
                        if tag - 1 not in maps:
                            raise KeyError(tag - 1)
                    dirs = bytes(mv[off + L.F_DIRS:off + L.F_DIRS + nt])
                else:
                    raw, tags, dirs = b"", (), b""
                fn(SubTaskArgs(raw, nt, scalars, dirs, tags, self.maps))
        except BaseException as e:  # noqa: BLE001 - a task's failure is reported, never fatal
            if isinstance(e, SystemExit):
                raise
            status = getattr(e, "status", _errors.INTERNAL) or _errors.INTERNAL
            tb = traceback.extract_tb(e.__traceback__)
            where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
            msg = f"{_describe(e)}{where}"
        if status:
            data = msg.encode("utf-8", "replace")[:L.MSG_BYTES]
            mv[off + L.F_MSG:off + L.F_MSG + len(data)] = data
            L.STATUS.pack_into(mv, off + L.F_STATUS, status, len(data))
        else:
            L.STATUS.pack_into(mv, off + L.F_STATUS, 0, 0)
        mv[off] = L.DONE  # the state's low byte (the others stay 0), after the completion
        if mv[0]:  # the parent sleeps (or is about to)
            os.eventfd_write(self.parent_efd, 1)

    def run_chip(self, slot, cfg, tensors, nt, scalars, ns):
        l2 = self.l2_slots.get(slot)
        if l2 is None:
            return _errors.INVALID_ARG, f"chip callable {slot} is not registered on this chip"
        c = self.configs.get(cfg)
        if c is None:
            return _errors.INVALID_ARG, f"call config {cfg} is not known on this chip"
        if nt or ns:
            args = ctypes.byref(CTaskArgs(ctypes.cast(tensors, ctypes.POINTER(CChipTensor)) if nt else None, nt,
                                          ctypes.cast(scalars, ctypes.POINTER(ctypes.c_uint64)) if ns else None, ns))
        else:
            args = _NO_ARGS_REF
        # One call: the idle level-2 Worker runs it on this thread.
        st = self._run_sync(self.worker._h, l2, args, c._ref)
        return st, (lib().simpler_last_error_detail().decode("utf-8", "replace") if st else "")

    def map(self, idx: int, name: str, size: int, pbase: int) -> None:
        if idx not in self.maps:
            self.maps[idx] = (Mapping(name, size), pbase)

    # ---- control --------------------------------------------------------------

    def _write_ctrl(self, reply) -> None:
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > L.CTRL_BYTES:
            data = pickle.dumps(("err", (_errors.INTERNAL, f"reply of {len(data)} bytes exceeds the control frame")))
        off = self.base + L.CHILD_HEADER
        self.mv[off:off + len(data)] = data
        L.U32.pack_into(self.mv, self.base + L.C_CTRL_LEN, len(data))
        L.U32.pack_into(self.mv, self.base + L.C_CTRL_STATE, L.CTRL_REPLY)

    def control(self) -> None:
        off = self.base + L.CHILD_HEADER
        n = L.U32.unpack_from(self.mv, self.base + L.C_CTRL_LEN)[0]
        req = pickle.loads(bytes(self.mv[off:off + n]))
        if req[0] == "blob":
            m = Mapping(req[1], req[2])
            req = pickle.loads(bytes(m.mm[:req[2]]))
            m.close()
        op = req[0]
        exiting = op == "exit"
        try:
            value = getattr(self, "op_" + op)(*req[1:])
            reply = ("ok", value)
        except BaseException as e:  # noqa: BLE001
            reply = ("err", (getattr(e, "status", _errors.INTERNAL) or _errors.INTERNAL, _describe(e)))
        self._write_ctrl(reply)
        self._wake_parent()
        if exiting:
            raise SystemExit(0)

    def op_exit(self):
        if self.worker is not None:
            self.worker.close()
        return None

    def op_register(self, slot: int, kind: str, payload):
        if kind == "chip":
            from ..task_interface import ChipCallable

            chip = ChipCallable.from_recipe(payload)
            self.callables[slot] = chip
            self.l2_slots[slot] = int(self.worker.register(chip))
        else:
            self.callables[slot] = pickle.loads(payload)

    def op_unregister(self, slot: int):
        self.callables.pop(slot, None)
        l2 = self.l2_slots.pop(slot, None)
        if l2 is not None:
            self.worker.unregister(l2)

    def op_config(self, idx: int, fields: dict):
        from ..task_interface import CallConfig

        self.configs[idx] = _c_config(CallConfig.from_dict(fields))

    def op_malloc(self, size: int) -> int:
        return self.worker.malloc(size)

    def op_free(self, ptr: int):
        self.worker.free(ptr)

    def op_copy_to(self, ptr: int, name: str, size: int, nbytes: int):
        m = Mapping(name, size)
        try:
            self.worker.copy_to(ptr, m.addr, nbytes)
        finally:
            m.close()

    def op_copy_from(self, ptr: int, name: str, size: int, nbytes: int):
        m = Mapping(name, size)
        try:
            self.worker.copy_from(m.addr, ptr, nbytes)
        finally:
            m.close()

    def op_map(self, entries):
        for idx, name, size, pbase in entries:
            self.map(idx, name, size, pbase)

    def op_unmap(self, idxs):
        from .args import forget

        for idx in idxs:
            forget(idx)
            m = self.maps.pop(idx, None)
            if m is not None:
                m[0].close()

    def op_ping(self):
        return os.getpid()

    def op_domain(self, action: str, *args):
        from . import cuda_domain

        return cuda_domain.child_op(self, action, *args)


def _c_config(cfg) -> CCallConfig:
    from ..task_interface import CallConfig

    c = (cfg or CallConfig())._to_c()
    c._prefix = c.output_prefix  # keep the bytes alive
    c._ref = ctypes.byref(c)
    return c


def _describe(e: BaseException) -> str:
    """The message of an exception; a SimplerError's without its status
    suffix (the parent adds it again)."""
    if isinstance(e, _errors.SimplerError):
        return str(e).rsplit(" [", 1)[0]
    return f"{type(e).__name__}: {e}"
