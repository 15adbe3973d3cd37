"""Level 3: a Worker over child processes (cpu chips and Python
sub-workers): dependencies across children, post-init registration, crashes,
timeouts, domains, and a clean shutdown (no zombies, no leaked /dev/shm)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from conftest_simpler import alive
from simpler import SimplerError, SimplerTimeoutError, Worker
from simpler.task_interface import ArgDirection as D, ChipCallable, ChipStorageTaskArgs, ChipTensor, CoreCallable, DataType


def shm_entries() -> set:
    """Segments this test process created (simpler names them
    simpler_<pid>_*; parallel tests' segments carry their own pid)."""
    mine = "simpler_%d_" % os.getpid()
    return {n for n in os.listdir("/dev/shm") if n.startswith(mine)}


def zombie_children() -> list:
    """Our children in state Z (a /proc scan; no psutil)."""
    out = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[1].split()
        if int(rest[1]) == me and rest[0] == "Z":
            out.append(int(pid))
    return out


@pytest.fixture
def clean():
    """Every test leaves no zombie and no shared-memory segment behind."""
    before = shm_entries()
    yield
    assert zombie_children() == []
    assert shm_entries() - before == set()


def gemm_chip() -> ChipCallable:
    """C = A @ B with the built-in gemm (no compiler needed)."""
    return ChipCallable.from_tasks([D.IN, D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)]}],
                                   [(0, CoreCallable.builtin("gemm"))])


# Sub-task bodies (module level, so they also pickle when registered after init).
def fill(args):
    args.array(0)[:] = float(args.scalar(0))


def add_into(args):
    args.array(2)[:] = args.array(0) + args.array(1)


def fill_nines(args):
    args.array(0)[:] = 9.0


def boom(args):
    raise RuntimeError("boom from a sub-task")


def die(args):
    os._exit(3)


def sigkill_self(args):
    os.kill(os.getpid(), signal.SIGKILL)


def nap(args):
    time.sleep(args.scalar(0) / 1000.0)


def slow_fill(args):
    time.sleep(args.scalar(1) / 1000.0)
    args.array(0)[:] = float(args.scalar(0))


def post_init_square(args):
    a = args.array(0)
    a[:] = a * a


def args_of(*items):
    a = ChipStorageTaskArgs()
    for it in items:
        if isinstance(it, tuple):
            a.add_tensor(*it)
        elif isinstance(it, ChipTensor):
            a.add_tensor(it)
        else:
            a.add_scalar(it)
    return a


def test_sub_tasks_follow_their_inputs(clean):
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=2) as w:
        hf, ha = w.register(fill), w.register(add_into)
        w.init()
        bufs = [w.create_buffer(4 * 64) for _ in range(3)]
        t = [b.tensor((64,), DataType.FLOAT32) for b in bufs]
        bufs[2].numpy(dtype="float32")[:] = np.nan

        def orch(o, args, cfg):
            o.submit_sub(hf, args_of((t[0], D.OUT), 3))
            o.submit_sub(hf, args_of((t[1], D.OUT), 4))
            o.submit_sub(ha, args_of((t[0], D.IN), (t[1], D.IN), (t[2], D.OUT)))

        w.run(orch)
        assert np.all(bufs[2].numpy(dtype="float32") == 7.0)


def test_chip_tasks_then_a_sub_task_that_reads_both(clean):
    rng = np.random.default_rng(0)
    m, k, n = 8, 16, 4
    with Worker(3, platform="cpu", device_ids=[0, 1], num_sub_workers=1) as w:
        hg = w.register(gemm_chip())
        ha = w.register(add_into)
        w.init()
        a = w.create_buffer(4 * m * k)
        b = [w.create_buffer(4 * k * n) for _ in range(2)]
        c = [w.create_buffer(4 * m * n) for _ in range(3)]
        A = a.numpy((m, k), "float32")
        A[:] = rng.standard_normal((m, k))
        Bs = []
        for bb in b:
            Bs.append(bb.numpy((k, n), "float32"))
            Bs[-1][:] = rng.standard_normal((k, n))
        for cc in c:
            cc.numpy(dtype="float32")[:] = np.nan

        def orch(o, args, cfg):
            for i in range(2):
                o.submit_next_level(hg, args_of(a.tensor((m, k), "float32"), b[i].tensor((k, n), "float32"),
                                                c[i].tensor((m, n), "float32")), worker=i)
            o.submit_sub(ha, args_of((c[0].tensor((m * n,), "float32"), D.IN), (c[1].tensor((m * n,), "float32"), D.IN),
                                     (c[2].tensor((m * n,), "float32"), D.OUT)))

        w.run(orch)
        ref = A.astype(np.float64) @ (Bs[0].astype(np.float64) + Bs[1])
        np.testing.assert_allclose(c[2].numpy((m, n), "float32"), ref, rtol=1e-5, atol=1e-5)


def test_device_memory_of_a_chip_is_reused_and_checked(clean):
    m = k = n = 8
    with Worker(3, platform="cpu", device_ids=[0, 1]) as w:
        w.init()
        hg = w.register(gemm_chip())  # after init: shipped to the chips
        wb = w.malloc(4 * k * n, worker_id=1)
        B = np.arange(k * n, dtype=np.float32).reshape(k, n) / 10
        w.copy_to(wb, B, worker_id=1)
        a, c = w.create_buffer(4 * m * k), w.create_buffer(4 * m * n)
        for it in range(3):
            a.numpy((m, k), "float32")[:] = it + 1

            def orch(o, args, cfg):
                o.submit_next_level(hg, args_of(a.tensor((m, k), "float32"), ChipTensor.make(wb, (k, n), "float32"),
                                                c.tensor((m, n), "float32")), worker=1)

            w.run(orch)
            np.testing.assert_allclose(c.numpy((m, n), "float32"), np.full((m, k), it + 1.0) @ B, rtol=1e-5)

        def wrong_chip(o, args, cfg):
            o.submit_next_level(hg, args_of(a.tensor((m, k), "float32"), ChipTensor.make(wb, (k, n), "float32"),
                                            c.tensor((m, n), "float32")), worker=0)

        with pytest.raises(ValueError, match="not create_buffer memory or device memory of chip worker 0"):
            w.run(wrong_chip)
        back = np.empty((k, n), np.float32)
        w.copy_from(back, wb, worker_id=1)
        np.testing.assert_array_equal(back, B)

        def orch_malloc(o, args, cfg):
            p = o.malloc(0, 256)  # (worker_id, size): the reverse of Worker.malloc
            assert isinstance(p, int) and p

        w.run(orch_malloc)


def test_free_is_refused_while_a_task_names_the_memory(clean):
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1) as w:
        hg, hn = w.register(gemm_chip()), w.register(nap)
        w.init()
        wb = w.malloc(64)
        a, c = w.create_buffer(64), w.create_buffer(64)

        def orch(o, args, cfg):
            o.submit_sub(hn, args_of((a.tensor((16,), "float32"), D.OUT), 500))  # the chip task waits for it
            o.submit_next_level(hg, args_of(a.tensor((4, 4), "float32"), ChipTensor.make(wb, (4, 4), "float32"),
                                            c.tensor((4, 4), "float32")), worker=0)

        h = w.submit(orch)
        with pytest.raises(ValueError, match="named by a task that has not finished"):
            w.free(wb)
        h.wait()
        w.free(wb)


def test_post_init_registration_and_digest_identity(clean):
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1) as w:
        w.init()
        h = w.register(post_init_square)
        assert w.register(post_init_square) == h  # same content, same handle
        buf = w.create_buffer(4 * 8)
        buf.numpy(dtype="float32")[:] = 3
        w.run(lambda o, a, c: o.submit_sub(h, args_of((buf.tensor((8,), "float32"), D.INOUT))))
        assert np.all(buf.numpy(dtype="float32") == 9)
        h2 = w.register(lambda args: None)
        try:
            import cloudpickle  # noqa: F401  (ships the lambda by value)

            w.run(lambda o, a, c: o.submit_sub(h2))
        except ImportError:  # no pickle for a lambda: parent-only, refused as a sub-task
            with pytest.raises(ValueError, match="registered after init"):
                w.run(lambda o, a, c: o.submit_sub(h2))
        # A handle that names no Python callable is refused, whatever it names.
        hc = w.register(ChipCallable.from_tasks([], [], []))
        with pytest.raises(TypeError, match="is not a Python callable"):
            w.run(lambda o, a, c: o.submit_sub(hc))
        with pytest.raises(ValueError, match="is not registered"):
            w.run(lambda o, a, c: o.submit_sub(63))
        w.unregister(h)
        with pytest.raises(ValueError, match="is not registered"):
            w.run(lambda o, a, c: o.submit_sub(h))


def test_failed_sub_task_poisons_dependents_and_names_the_worker(clean):
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1) as w:
        hb, hf = w.register(boom), w.register(fill)
        w.init()
        buf = w.create_buffer(16)
        buf.numpy(dtype="float32")[:] = -1

        def orch(o, args, cfg):
            t = buf.tensor((4,), "float32")
            o.submit_sub(hb, args_of((t, D.OUT)))
            o.submit_sub(hf, args_of((t, D.INOUT), 5))  # depends on the failed one: never runs

        with pytest.raises(SimplerError, match="sub-worker 0: task .* failed: RuntimeError: boom"):
            w.run(orch)
        assert np.all(buf.numpy(dtype="float32") == -1)
        w.run(lambda o, a, c: o.submit_sub(hf, args_of((buf.tensor((4,), "float32"), D.OUT), 2)))  # still usable
        assert np.all(buf.numpy(dtype="float32") == 2)


def test_sub_worker_crash_fails_the_run_and_close_reaps(clean):
    w = Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1)
    try:
        hd = w.register(die)
        w.init()
        pids = w.info["pids"]
        with pytest.raises(SimplerError, match=r"sub-worker 0 \(pid \d+\) exited with status 3 while running task"):
            w.run(lambda o, a, c: o.submit_sub(hd))
        with pytest.raises(SimplerError, match="sub-worker 0"):
            w.run(lambda o, a, c: o.submit_sub(hd))  # the dead child keeps failing its tasks
    finally:
        w.close()
    assert not any(alive(p) for p in pids)


def test_sub_worker_sigkill_inside_a_task_spares_the_other_sub_worker(clean):
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=2) as w:
        hk, hf = w.register(sigkill_self), w.register(fill)
        w.init()
        with pytest.raises(SimplerError, match=r"sub-worker \d \(pid \d+\) was killed by signal 9"):
            w.run(lambda o, a, c: o.submit_sub(hk))
        buf = w.create_buffer(16)
        w.run(lambda o, a, c: o.submit_sub(hf, args_of((buf.tensor((4,), "float32"), D.OUT), 6)))  # the live one
        assert np.all(buf.numpy(dtype="float32") == 6)


def test_a_dropped_worker_is_reaped(clean):
    import gc

    w = Worker(3, platform="cpu", device_ids=[0, 1], num_sub_workers=1)
    w.init()
    pids = w.info["pids"]
    del w
    gc.collect()
    assert not any(alive(p) for p in pids)


def test_chip_crash_fails_the_run_with_the_worker_named(clean):
    w = Worker(3, platform="cpu", device_ids=[0, 1], num_sub_workers=1)
    try:
        hg = w.register(gemm_chip())
        hn = w.register(nap)
        w.init()
        pids = w.info["pids"]
        a, b, c = (w.create_buffer(4 * 4 * 4) for _ in range(3))

        def orch(o, args, cfg):
            o.submit_sub(hn, args_of((c.tensor((16,), "float32"), D.OUT), 300))
            # waits for the nap (it reads c), by which time chip 1 is gone
            o.submit_next_level(hg, args_of(a.tensor((4, 4), "float32"), b.tensor((4, 4), "float32"),
                                            c.tensor((4, 4), "float32")), worker=1)

        h = w.submit(orch)
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(SimplerError, match=r"chip worker 1 \(device 1\) \(pid \d+\) was killed by signal 9"):
            h.wait(30)
    finally:
        w.close()
    assert not any(alive(p) for p in pids)


def test_run_timeout_then_completion(clean):
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1) as w:
        hn = w.register(nap)
        w.init()
        h = w.submit(lambda o, a, c: o.submit_sub(hn, args_of(400)))
        from simpler import RunHandle

        assert isinstance(h, RunHandle)
        with pytest.raises(SimplerTimeoutError):
            h.wait(0.05)
        assert not h.done()
        h.wait(30)
        assert h.done()


def test_startup_deadline(clean, monkeypatch):
    monkeypatch.setenv("SIMPLER_L3_CHILD_START_DELAY_S", "5")
    w = Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1, startup_timeout_s=0.3)
    with pytest.raises(SimplerTimeoutError, match="did not start within startup_timeout_s=0.3"):
        w.init()
    w.close()


def test_startup_failure_names_the_worker(clean):
    w = Worker(3, platform="cuda", device_ids=[0])
    try:
        from simpler_setup import available_platforms

        if "cuda" in available_platforms():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    with pytest.raises(SimplerError, match=r"chip worker 0 \(device 0\) failed to start"):
        w.init()
    w.close()


def test_domain_validation_and_cpu_windows(clean):
    with Worker(3, platform="cpu", device_ids=[0, 1], num_sub_workers=1) as w:
        hf = w.register(fill)
        w.init()

        def bad(o, args, cfg):
            o.allocate_domain("d", [0, 1], 64, buffers=[32, 48])

        with pytest.raises(ValueError, match=r"buffers \[32, 48\] need 80 bytes; the window holds 64"):
            w.run(bad)
        assert w.live_domains() == {}
        for kw, msg in (({"workers": [0, 2]}, "not a chip"), ({"workers": [0, 0]}, "repeat"),
                        ({"window_size": 0}, "positive")):
            args = {"workers": [0, 1], "window_size": 64, **kw}
            with pytest.raises(ValueError, match=msg):
                w.run(lambda o, a, c: o.allocate_domain("d", args["workers"], args["window_size"], buffers=[16]))
        seen = {}

        def orch(o, args, cfg):
            with o.allocate_domain("ar", [0, 1], 64, buffers=[32, 32]) as dom:
                seen["live"] = list(w.live_domains())
                for r in range(len(dom)):
                    o.submit_sub(hf, args_of((dom[r].buffer(0).tensor((8,), "float32"), D.OUT), r + 1))
                seen["dom"] = dom

        w.run(orch)
        assert seen["live"] == ["ar"] and w.live_domains() == {}


def test_cpu_domain_allreduce(clean):
    with Worker(3, platform="cpu", device_ids=[0, 1, 2], num_sub_workers=1) as w:
        hf = w.register(fill)
        w.init()
        box = {}

        def orch(o, args, cfg):
            box["d"] = d = o.allocate_domain("sum", [0, 1, 2], 128, buffers=[64])
            for r in range(3):
                o.submit_sub(hf, args_of((d[r].buffer(0).tensor((16,), "float32"), D.OUT), r + 1))

        w.run(orch)
        d = box["d"]
        d.allreduce(0, 16, "float32")
        for r in range(3):
            assert np.all(d[r].buffer(0).numpy(dtype="float32")[:16] == 6.0)
        d.free()
        assert w.live_domains() == {}


def test_level4_composition_shares_the_engine(clean):
    w3 = Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1)
    w4 = Worker(4, platform="cpu")
    assert w4.add_worker(w3) == 0
    hf = w3.register(fill)
    ha = w3.register(add_into)
    try:
        w4.init()
        bufs = [w4.create_buffer(16) for _ in range(3)]
        t = [b.tensor((4,), "float32") for b in bufs]

        def l3(o, args, cfg):
            o.submit_sub(hf, args_of((t[args], D.OUT), args + 1))

        def l4(o, args, cfg):
            o.submit_next_level(l3, 0, worker=0)
            o.submit_next_level(l3, 1, worker=0)
            o.submit_next_level(lambda o3, a, c: o3.submit_sub(ha, args_of((t[0], D.IN), (t[1], D.IN),
                                                                            (t[2], D.OUT))), None, worker=0)

        w4.run(l4)
        assert np.all(bufs[2].numpy(dtype="float32") == 3.0)
    finally:
        w4.close()
        w3.close()


def test_an_orchestration_that_raises_lets_its_tasks_finish(clean):
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1) as w:
        hf = w.register(fill)
        w.init()
        buf = w.create_buffer(16)

        def orch(o, args, cfg):
            o.submit_sub(hf, args_of((buf.tensor((4,), "float32"), D.OUT), 8))
            raise KeyError("from the orchestration")

        with pytest.raises(KeyError):
            w.run(orch)
        assert np.all(buf.numpy(dtype="float32") == 8)  # the submitted task ran to completion
        with pytest.raises(ValueError, match="scope_end without"):
            w.run(lambda o, a, c: o.scope_end())
        with pytest.raises(TypeError, match="not a ChipCallable"):
            w.run(lambda o, a, c: o.submit_next_level(hf, None, worker=0))
        with pytest.raises(TypeError):  # worker is keyword-only
            w.run(lambda o, a, c: o.submit_next_level(hf, None, None, 0))


def test_bad_calls():
    with pytest.raises(ValueError, match="device_ids"):
        Worker(3, device_ids=[0, 0])
    with pytest.raises(ValueError, match="device_id applies to level 2"):
        Worker(3, device_id=1)
    w = Worker(3, platform="cpu", device_ids=[0])
    with pytest.raises(SimplerError, match="init"):
        w.malloc(16)
    with pytest.raises(TypeError, match="Python orchestration function"):
        w.init()
        try:
            w.run(gemm_chip())
        finally:
            w.close()


def test_cuda_domains_say_what_is_missing():
    """The cuda domain path loads the driver and NCCL at run time; where one is
    absent the error names it (the path itself needs GPUs)."""
    import ctypes.util

    from simpler import SimplerUnsupportedError
    from simpler.level3 import cuda_domain

    if ctypes.util.find_library("nccl") is None:
        with pytest.raises(SimplerUnsupportedError, match="NCCL"):
            cuda_domain._Nccl()
    if ctypes.util.find_library("cuda") is None:
        with pytest.raises(SimplerUnsupportedError, match="libcuda"):
            cuda_domain._Cuda(0)
    assert ctypes.sizeof(cuda_domain._IpcHandle) == 64 and ctypes.sizeof(cuda_domain._UniqueId) == 128


def add_const(args):
    """out = a + b + scalar (float bits)."""
    import struct

    k = struct.unpack("<f", struct.pack("<I", args.scalar(0) & 0xFFFFFFFF))[0]
    args.array(2)[...] = args.array(0) + args.array(1) + k


def fill_row(args):
    args.array(0)[...] = float(args.scalar(0))


@pytest.mark.parametrize("seed", [0, 1])
def test_random_graph_across_chips_and_sub_workers(clean, seed):
    """A random graph of sub-tasks and chip tasks (each writes a fresh buffer
    from earlier ones, so only read-after-write matters) gives what running it
    in order gives; plus rows of one buffer written by separate tasks and read
    whole by a chip task, which must wait for every row."""
    rng = np.random.default_rng(seed)
    nbuf, ntask = 36, 30
    with Worker(3, platform="cpu", device_ids=[0, 1], num_sub_workers=2) as w:
        h_add, h_row, h_gemm = w.register(add_const), w.register(fill_row), w.register(gemm_chip())
        w.init()
        bufs = [w.create_buffer(64) for _ in range(nbuf)]
        two = w.create_buffer(64)
        two.numpy((4, 4), "float32")[:] = 2 * np.eye(4)
        ref = {}
        for i in range(4):
            ref[i] = rng.standard_normal((4, 4)).astype(np.float32)
            bufs[i].numpy((4, 4), "float32")[:] = ref[i]
        for b in bufs[4:]:
            b.numpy(dtype="float32")[:] = np.nan
        plan = []
        for t in range(ntask):
            out = 4 + t
            srcs = rng.integers(0, out, size=2)
            if rng.random() < 0.4:
                plan.append(("chip", int(srcs[0]), out, int(rng.integers(0, 2))))
                ref[out] = (ref[srcs[0]].astype(np.float64) @ (2 * np.eye(4))).astype(np.float32)
            else:
                k = float(rng.integers(-3, 4))
                plan.append(("sub", (int(srcs[0]), int(srcs[1])), out, k))
                ref[out] = ref[srcs[0]] + ref[srcs[1]] + np.float32(k)
        rows, final = bufs[34], bufs[35]

        def tens(i, shape=(4, 4)):
            return bufs[i].tensor(shape, "float32")

        def orch(o, args, cfg):
            for kind, src, out, extra in plan:
                if kind == "chip":
                    o.submit_next_level(h_gemm, args_of(tens(src), two.tensor((4, 4), "float32"), tens(out)),
                                        worker=extra)
                else:
                    o.submit_sub(h_add, args_of((tens(src[0]), D.IN), (tens(src[1]), D.IN), (tens(out), D.OUT), extra))
            for r in range(4):
                o.submit_sub(h_row, args_of((rows.tensor((4,), "float32", 16 * r), D.OUT), r + 1))
            o.submit_next_level(h_gemm, args_of(rows.tensor((4, 4), "float32"), two.tensor((4, 4), "float32"),
                                                final.tensor((4, 4), "float32")), worker=1)

        w.run(orch)
        for t in range(ntask):
            np.testing.assert_allclose(bufs[4 + t].numpy((4, 4), "float32"), ref[4 + t], rtol=1e-5, atol=1e-5)
        expect = np.repeat(np.arange(1, 5, dtype=np.float32)[:, None], 4, axis=1) * 2
        np.testing.assert_array_equal(final.numpy((4, 4), "float32"), expect)


def test_ipc_handle_and_nccl_id_travel_whole():
    """The opaque CUDA IPC handle (64 bytes) and NCCL id (128 bytes) hold
    zero bytes; they must cross the control channel whole (a c_char field
    read back as a C string cut them at the first zero)."""
    import ctypes
    import pickle

    from simpler.level3 import cuda_domain as cd

    for cls in (cd._IpcHandle, cd._UniqueId):
        h = cls()
        raw = bytes([7, 0, 0, 0]) + bytes(range(1, ctypes.sizeof(cls) - 3))
        ctypes.memmove(ctypes.addressof(h), raw, len(raw))
        sent = pickle.loads(pickle.dumps(bytes(h)))
        assert sent == raw
        assert bytes(cd._from_bytes(cls, sent, "x")) == raw
        with pytest.raises(SimplerError, match=f"expected {ctypes.sizeof(cls)} bytes, got 4"):
            cd._from_bytes(cls, raw[:4], "x")


class _FakeCuda:
    """The driver calls of a cuda domain, faked so that the protocol (alloc,
    open, NCCL id and init, allreduce, two-step teardown) runs across real
    child processes without a GPU. Each call is logged to $FAKE_CUDA_LOG."""

    def __init__(self, device):
        self.device = device

    @staticmethod
    def check(r, what):
        if r:
            raise SimplerError(-11, f"{what}: {r}")

    def log(self, *what):
        with open(os.environ["FAKE_CUDA_LOG"], "a") as f:
            f.write(" ".join(str(w) for w in (self.device,) + what) + "\n")

    def current(self):
        pass

    def cuMemAlloc(self, ref, size):
        ref._obj.value = (self.device + 1) << 32
        self.log("alloc", size)
        return 0

    def cuMemsetD8(self, ptr, v, n):
        return 0

    def cuCtxSynchronize(self):
        return 0

    def cuIpcGetMemHandle(self, ref, ptr):
        import struct

        import ctypes

        raw = struct.pack("<IIQ", 7, 0, ptr) + bytes(48)  # zero bytes early on, as real handles have
        ctypes.memmove(ctypes.addressof(ref._obj), raw, 64)
        return 0

    def cuIpcOpenMemHandle(self, ref, handle, flags):
        import struct

        magic, _, ptr = struct.unpack_from("<IIQ", bytes(handle))
        if magic != 7 or flags != 1:
            return 1
        ref._obj.value = ptr + 0x100 * (self.device + 1)
        self.log("open", hex(ptr))
        return 0

    def cuIpcCloseMemHandle(self, p):
        self.log("close", hex(p))
        return 0

    def cuMemFree(self, p):
        self.log("free", hex(p))
        return 0


class _FakeNccl:
    ID = bytes([1, 0, 2, 0]) + bytes(range(124))

    check = staticmethod(_FakeCuda.check)

    def ncclGetUniqueId(self, ref):
        import ctypes

        ctypes.memmove(ctypes.addressof(ref._obj), self.ID, 128)
        return 0

    def ncclCommInitRank(self, ref, n, uid, rank):
        if bytes(uid) != self.ID:
            return 4  # ncclInvalidArgument
        ref._obj.value = 0xC0 + rank
        return 0

    def ncclAllReduce(self, send, recv, count, dtype, op, comm, stream):
        _FakeCuda(comm.value - 0xC0).log("allreduce", hex(send), count, dtype, op)
        return 0

    def ncclCommDestroy(self, comm):
        _FakeCuda(comm.value - 0xC0).log("destroy")
        return 0


def test_cuda_domain_protocol_across_children(clean, monkeypatch, tmp_path):
    from simpler.level3 import cuda_domain as cd
    from simpler.level3.domain import CommDomain

    log = tmp_path / "calls"
    monkeypatch.setenv("FAKE_CUDA_LOG", str(log))
    monkeypatch.setattr(cd, "_Cuda", _FakeCuda)  # the children inherit the fakes at fork
    monkeypatch.setattr(cd, "_Nccl", _FakeNccl)
    with Worker(3, platform="cpu", device_ids=[0, 1]) as w:
        w.init()
        d = CommDomain(w, "g", [0, 1], 256, [128, 64])
        cd.allocate(w, d)
        assert d.ranks[0].window.ptr == 1 << 32 and d.ranks[1].window.ptr == 2 << 32
        assert d.ranks[0].peer(1).ptr == (2 << 32) + 0x100 and d.ranks[1].peer(0).ptr == (1 << 32) + 0x200
        assert d.ranks[0].peer(0).ptr == 1 << 32
        cd.allreduce(w, d, 1, 16, "float32", "sum")
        cd.free(w, d)
        assert d.backend is None
    calls = [line.split() for line in log.read_text().splitlines()]
    assert sorted(c[:2] for c in calls if c[1] in ("alloc", "open")) == [["0", "alloc"], ["0", "open"],
                                                                          ["1", "alloc"], ["1", "open"]]
    assert sorted((c[0], c[2]) for c in calls if c[1] == "allreduce") == [("0", hex((1 << 32) + 128)),
                                                                          ("1", hex((2 << 32) + 128))]
    # Every communicator and peer mapping goes before any window is freed.
    first_free = min(i for i, c in enumerate(calls) if c[1] == "free")
    assert all(i < first_free for i, c in enumerate(calls) if c[1] in ("destroy", "close"))
    assert sorted(c[0] for c in calls if c[1] == "destroy") == ["0", "1"]
    assert sorted(c[2] for c in calls if c[1] == "free") == [hex(1 << 32), hex(2 << 32)]


def test_cuda_domain_failed_open_frees_every_window(clean, monkeypatch, tmp_path):
    from simpler.level3 import cuda_domain as cd
    from simpler.level3.domain import CommDomain

    class BadOpen(_FakeCuda):
        def cuIpcOpenMemHandle(self, ref, handle, flags):
            return 201 if self.device == 1 else super().cuIpcOpenMemHandle(ref, handle, flags)

    log = tmp_path / "calls"
    monkeypatch.setenv("FAKE_CUDA_LOG", str(log))
    monkeypatch.setattr(cd, "_Cuda", BadOpen)
    monkeypatch.setattr(cd, "_Nccl", _FakeNccl)
    with Worker(3, platform="cpu", device_ids=[0, 1]) as w:
        w.init()
        d = CommDomain(w, "g", [0, 1], 256, [128])
        with pytest.raises(SimplerError, match=r"chip worker 1 \(device 1\): cuIpcOpenMemHandle \(rank 0's window\)"):
            cd.allocate(w, d)
        calls = [line.split() for line in log.read_text().splitlines()]
        assert sorted(c[2] for c in calls if c[1] == "free") == [hex(1 << 32), hex(2 << 32)]
        assert [c[0] for c in calls if c[1] == "close"] == ["0"]  # rank 0 had opened rank 1's window
        cd.allocate(w, CommDomain(w, "g", [0], 64, []))  # the channels still answer


def slow_sub(args):
    time.sleep(float(args.scalar(0)))


def test_unanswered_control_request_kills_the_child_and_names_it(clean):
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1, control_timeout_s=0.5) as w:
        hs = w.register(slow_sub)
        w.init()
        pid = w._sub_eps[0].pid
        h = w.submit(lambda o, a, c: o.submit_sub(hs, args_of(30)))
        time.sleep(0.2)  # the sub-worker is inside the task: it takes control requests between tasks
        t0 = time.perf_counter()
        with pytest.raises(SimplerTimeoutError, match=r"sub-worker 0 \(pid \d+\) did not answer control request "
                                                      r"'register' within 0.5 s"):
            w.register(nap)
        assert time.perf_counter() - t0 < 10
        with pytest.raises(SimplerError, match=r"sub-worker 0 \(pid \d+\) was killed: no reply to control request"):
            h.wait(10)
        assert not alive(pid)


def test_thread_pool_survives_fork(clean):
    """A level-3 Worker forks its children after this process may have run
    level-2 work, which starts tensorcore's thread pool; a forked child's
    first parallel kernel (a cuda chip's staged copy_to, a cpu op) must not
    wait for pool threads that only exist in the parent."""
    import tensorcore as tc

    with Worker(2, platform="cpu", num_cores=1) as w2:
        w2.init()
        h = w2.register(ChipCallable.from_tasks([], [], []))
        w2.run(h)

    def softmax():
        with tc.Context("cpu") as ctx:
            x = ctx.buffer_from_array(np.random.default_rng(0).random((2048, 1024), dtype=np.float32))
            y = ctx.buffer_from_array(np.zeros((2048, 1024), np.float32))
            tc.softmax_forward(ctx, x, y, 2048, 1024, dtype="f32")

    softmax()  # the pool has run a job here
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            softmax()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung in its first parallel kernel")


def test_a_peer_window_is_keyed_by_its_owner_and_addressed_by_its_viewer():
    """A domain peer's window as chip 0 maps it and the same window on its
    owner, chip 1, are one tensor for the dependencies (the owner's key), while
    chip 0's task is handed its own mapping's address."""
    from simpler.level3 import engine as E
    from simpler.level3 import layout as L
    from simpler.level3.endpoint import Endpoint

    class FakeChip:
        role = "chip"
        add_alloc, drop_alloc, find_alloc = Endpoint.add_alloc, Endpoint.drop_alloc, Endpoint.find_alloc

        def __init__(self, slot):
            self.slot, self.label = slot, "chip %d" % slot
            self.allocs, self.alloc_bases, self.aliases = {}, [], {}

    eng = E.Engine.__new__(E.Engine)
    eng.buffers, eng._find_buffer = [], lambda addr: None
    c0, c1 = FakeChip(0), FakeChip(1)
    own0, own1, peer1_in_0 = 0x10000, 0x20000, 0x30000
    c0.add_alloc(own0, 4096, alias=(0, own0))
    c0.add_alloc(peer1_in_0, 4096, alias=(1, own1))
    c1.add_alloc(own1, 4096, alias=(1, own1))
    a = ChipStorageTaskArgs()
    a.add_tensor(ChipTensor.make(peer1_in_0 + 64, (4,), DataType.FLOAT32))
    a.add_tensor(ChipTensor.make(own0, (8,), DataType.FLOAT32))
    b = ChipStorageTaskArgs()
    b.add_tensor(ChipTensor.make(own1 + 64, (4,), DataType.FLOAT32))
    raw0, *_, child0 = eng.resolve(c0, a, 1, "viewer")
    raw1, *_, child1 = eng.resolve(c1, b, 2, "owner")
    head = L.TENSOR_HEAD
    assert head.unpack_from(raw0, 0) == head.unpack_from(raw1, 0)  # one key
    addr, size, start = head.unpack_from(child0, 0)
    assert (addr & L.DEV_MASK, size, start) == (peer1_in_0, 4096, 16)  # the viewer's mapping
    assert child0[24:96] == raw0[24:96] and child0[96:] == raw0[96:]  # the rest as it is
    assert child1 is None  # nothing aliased: the keys are the addresses
    # The same argument list again: its resolution is reused, until it changes or memory comes or goes.
    again = eng.resolve(c0, a, 3, "viewer")
    assert again is eng.resolve(c0, a, 4, "viewer") and again[0] == raw0
    with pytest.raises(ValueError, match="device memory of chip 1"):
        eng.resolve(c1, a, 5, "other chip")  # kept per endpoint: chip 1 does not map that window
    a.add_tensor(ChipTensor.make(own0 + 4, (1,), DataType.FLOAT32))
    grown = eng.resolve(c0, a, 6, "viewer")
    assert len(grown[0]) == 3 * 96 and grown[0][:192] == raw0
    c0.drop_alloc(peer1_in_0)
    assert peer1_in_0 not in c0.aliases
    with pytest.raises(ValueError, match="not create_buffer memory or device memory of chip 0"):
        eng.resolve(c0, a, 7, "viewer")  # the kept resolution went with the allocation


def test_a_tensor_reused_across_tasks_keeps_its_dependencies(clean):
    """One ChipTensor named by many tasks (its resolution cached after the
    first): each task still waits for the live writers before it."""
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=2) as w:
        hs, hq, ha = w.register(slow_fill), w.register(post_init_square), w.register(add_into)
        w.init()
        buf, out = w.create_buffer(4 * 32), w.create_buffer(4 * 32)
        t, o = buf.tensor((32,), DataType.FLOAT32), out.tensor((32,), DataType.FLOAT32)

        def orch(o_, args, cfg):
            o_.submit_sub(hs, args_of((t, D.OUT), args, 30))  # slow: a task that did not wait would see stale data
            o_.submit_sub(hq, args_of((t, D.INOUT)))
            o_.submit_sub(ha, args_of((t, D.IN), (t, D.IN), (o, D.OUT)))

        for k in (3, 5):
            out.numpy(dtype="float32")[:] = np.nan
            w.run(orch, k)
            assert np.all(out.numpy(dtype="float32") == 2.0 * k * k)
        assert t._l3 is not None and t._l3[1] is buf  # the resolution was kept


def test_a_cached_tensor_of_a_closed_buffer_is_resolved_again(clean):
    """A closed buffer's index is never reused, so a tensor's cached
    resolution dies with its buffer: a new buffer at the same address is
    found by address (as an uncached tensor would be), never the old one."""
    with Worker(3, platform="cpu", device_ids=[0], num_sub_workers=1) as w:
        hf, h9 = w.register(fill), w.register(fill_nines)
        w.init()
        old = w.create_buffer(4 * 16)
        t = old.tensor((16,), DataType.FLOAT32)
        w.run(lambda o, a, c: o.submit_sub(hf, args_of((t, D.OUT), 5)))
        assert np.all(old.numpy(dtype="float32") == 5.0)
        cached, addr = t._l3, old.ptr
        assert cached is not None and cached[1] is old
        old.close()
        new = w.create_buffer(4 * 16)
        # The same situation whatever address the new buffer got: a tensor at
        # its address that still carries the closed buffer's resolution.
        stale = ChipTensor(new.tensor((16,), DataType.FLOAT32)._c, old)
        stale._l3 = cached
        w.run(lambda o, a, c: o.submit_sub(hf, args_of((stale, D.OUT), 6)))
        assert np.all(new.numpy(dtype="float32") == 6.0)
        # The same with the tensor alone (no scalar: the engine's shortest path).
        stale._l3 = cached
        w.run(lambda o, a, c: o.submit_sub(h9, args_of((stale, D.OUT))))
        assert np.all(new.numpy(dtype="float32") == 9.0)
        if new.ptr == addr:  # the natural case, when the mapping landed where the old one was
            w.run(lambda o, a, c: o.submit_sub(hf, args_of((t, D.OUT), 7)))
            assert np.all(new.numpy(dtype="float32") == 7.0)
        else:
            with pytest.raises(ValueError, match="is not create_buffer memory"):
                w.run(lambda o, a, c: o.submit_sub(hf, args_of((t, D.OUT), 7)))
        new.close()


# ---- a Worker(2) as a chip, and prewarming ------------------------------------------

def test_add_worker_takes_level2_workers_as_chips():
    from simpler.task_interface import ArgDirection as D, ChipCallable, ChipStorageTaskArgs, CoreCallable

    chip = ChipCallable.from_tasks([D.IN, D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)]}],
                                   [(0, CoreCallable.builtin("gemm"))])
    rng = np.random.default_rng(3)
    a = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2)]
    b = [rng.standard_normal((8, 2)).astype(np.float32) for _ in range(2)]
    w2a = Worker(2, platform="cpu", device_id=0, num_cores=1)
    w2b = Worker(2, platform="cpu", runtime="host_build_graph")
    w3 = Worker(3, platform="cpu", device_ids=[])
    try:
        assert w3.add_worker(w2a) == 0
        assert w3.add_worker(w2b) == 1
        with pytest.raises(ValueError, match="already attached"):
            w3.add_worker(w2a)
        with pytest.raises(ValueError, match="attached to a level-3 Worker"):
            w2a.init()
        h = w3.register(chip)
        w3.init()
        assert w3.device_ids == [0, 1] and len(w3.info["pids"]) == 2
        bufs = [[w3.create_buffer(x.nbytes) for x in (a[i], b[i], np.empty((4, 2), np.float32))] for i in range(2)]
        for i in range(2):
            bufs[i][0].numpy((4, 8), "float32")[:] = a[i]
            bufs[i][1].numpy((8, 2), "float32")[:] = b[i]
            bufs[i][2].numpy((4, 2), "float32")[:] = np.nan

        def orch(o, args, cfg):
            for i in range(2):
                t = ChipStorageTaskArgs()
                for buf, shape in zip(bufs[i], ((4, 8), (8, 2), (4, 2))):
                    t.add_tensor(buf.tensor(shape, "float32"))
                o.submit_next_level(h, t, worker=i)

        w3.run(orch)
        for i in range(2):
            np.testing.assert_allclose(bufs[i][2].numpy((4, 2), "float32"), a[i].astype(np.float64) @ b[i],
                                       rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match="before init"):
            w3.add_worker(Worker(2, platform="cpu"))
    finally:
        w3.close()
        w2a.close()
        w2b.close()
    with pytest.raises(TypeError, match="level-4 Worker takes level-3"):
        Worker(4, platform="cpu").add_worker(Worker(2, platform="cpu"))


def test_init_prewarms_a_level2_worker_with_the_config():
    from simpler.task_interface import CallConfig

    with Worker(2, platform="cpu") as w:
        w.init(prewarm_config={"block_dim": 1, "runtime_env": {"ring_task_window": 64, "ring_heap": 1 << 16}})
        assert w.info["runs"] == 1  # the warm-up run happened, under the config's ring sizes
        assert w._callables == {}  # and left no registration behind
    with Worker(2, platform="cpu") as w:
        with pytest.raises(ValueError):
            w.init(prewarm_config=CallConfig(runtime_env={"ring_task_window": 3}))  # not a power of two
    with Worker(2, platform="cpu") as w:
        w.init()
        assert w.info["runs"] == 0


def test_the_scheduler_refuses_a_task_whose_tensor_arrays_are_missing(clean):
    """The per-task entry points of the level-3 scheduler, called with the
    arrays of a tensor missing, refuse the task (no read through a null)."""
    import ctypes

    from simpler._lib import lib

    with Worker(3, platform="cpu", device_ids=[], num_sub_workers=1) as w:
        h = w.register(lambda args: None)
        w.init()
        from simpler.level3 import layout as L

        s = w._engine.sched
        tpl = w._engine._template(L.KIND_SUB, w._registry.get(h, "py").slot, "a sub-task")
        key = (ctypes.c_uint8 * 96)()
        tag, shm = (ctypes.c_uint32 * 1)(), (ctypes.c_uint32 * 1)()
        for args in ((None, tag, b"\x02", shm), (key, None, b"\x02", shm), (key, tag, None, shm),
                     (key, tag, b"\x02", None)):
            assert lib().simpler_l3_submit_one(s, 1, -1, tpl, 1 << 40, 0, *args) == -7  # INVALID_ARG
            assert "null argument array" in lib().simpler_last_error_detail().decode()
        assert lib().simpler_l3_submit_args(s, 1, -1, tpl, 1 << 40, 0, 1, None, None, tag, b"\x02", 0, None, 1, shm,
                                            0, None) == -7
        assert "null argument array" in lib().simpler_last_error_detail().decode()
