"""simpler Python API at level 2: Worker config and lifecycle, memory,
callables and registration."""

from __future__ import annotations

import numpy as np
import pytest

from conftest_simpler import cases, cpu_worker, device_f32, read_f32  # noqa: F401
from simpler import SimplerArgumentError, SimplerError, SimplerUnsupportedError, Worker
from simpler.task_interface import (ArgDirection as D, ChipCallable, ChipStorageTaskArgs, ChipTensor, CoreCallable,
                                    DataType)


# ---- Worker config -------------------------------------------------------------

def test_worker_rejects_unknown_and_other_level_keys():
    with pytest.raises(ValueError, match="unknown config key"):
        Worker(2, platform="cpu", heap_size=1)
    with pytest.raises(ValueError, match="'device_ids' applies to level 3"):
        Worker(2, platform="cpu", device_ids=[0, 1])
    with pytest.raises(ValueError, match="'num_sub_workers' applies to level 3"):
        Worker(2, num_sub_workers=2)
    with pytest.raises(ValueError, match="'remote_session_timeout_s' applies to level 4"):
        Worker(2, remote_session_timeout_s=3)
    with pytest.raises(ValueError, match="Ascend"):
        Worker(2, enable_sdma=True)
    with pytest.raises(ValueError, match="non-negative int"):
        Worker(2, device_id=-1)


def test_worker_levels():
    with pytest.raises(ValueError, match="not a level"):
        Worker(1, platform="cpu")
    w = Worker(3, platform="cpu", device_ids=[0])  # a hierarchy (simpler.level3); nothing forked before init()
    assert w.level == 3 and not w.info["initialized"]
    w.close()
    with pytest.raises(TypeError):
        Worker("2")


@pytest.mark.parametrize("platform", ["a2a3", "a5", "a2a3sim", "a5sim"])
def test_ascend_platforms_name_the_supported_ones(platform):
    with pytest.raises(SimplerArgumentError, match=f"'{platform}' is Ascend .* supported platforms: cpu, cuda"):
        Worker(2, platform=platform)


def test_unknown_platform_and_runtime():
    with pytest.raises(SimplerArgumentError, match="unknown platform 'tpu'; supported platforms: cpu, cuda"):
        Worker(2, platform="tpu")
    with pytest.raises(SimplerArgumentError, match="unknown runtime 'aicpu_build_graph'"):
        Worker(2, platform="cpu", runtime="aicpu_build_graph")
    with pytest.raises(SimplerArgumentError, match="one device"):
        Worker(2, platform="cpu", device_id=1)


def test_cuda_platform_without_cuda_is_explicit():
    from simpler import version

    if "cuda" in version():
        pytest.skip("this build has CUDA; the GPU tests cover it")
    w = Worker(2, platform="cuda")
    with pytest.raises(SimplerUnsupportedError, match="built without CUDA"):
        w.init()
    w.close()


# ---- lifecycle -------------------------------------------------------------------

def test_lifecycle_init_close_context_manager():
    w = Worker(2, platform="cpu", num_cores=2, heap_ring_size=1 << 20)
    with pytest.raises(SimplerError, match="init"):
        w.malloc(16)
    w.init()
    info = w.info
    assert info["initialized"] and info["num_cores"] == 2 and info["platform"] == "cpu"
    with pytest.raises(SimplerError, match="already"):
        w.init()
    w.close()
    w.close()  # idempotent
    with pytest.raises(SimplerError, match="closed"):
        w.malloc(16)
    with Worker(2, platform="cpu") as w2:
        w2.init()
        assert w2.malloc(8)
    with pytest.raises(SimplerError, match="closed"):
        w2.malloc(8)


def test_close_waits_for_submitted_runs(cases):
    w = Worker(2, platform="cpu")
    w.init()
    p, t = device_f32(w, [0.0])
    h = w.register(cases.chip("orch_sleep"))
    args = ChipStorageTaskArgs()
    args.add_tensor(t)
    args.add_scalar(150)
    runs = [w.submit(h, args) for _ in range(2)]
    assert not runs[0].done()
    w.close()  # drains both runs first
    assert all(r.done() for r in runs)
    for r in runs:
        r.wait()


# ---- memory ---------------------------------------------------------------------

def test_malloc_copy_interior_and_free(cpu_worker):
    w = cpu_worker
    p = w.malloc(64 * 4)
    src = np.arange(64, dtype=np.float32)
    w.copy_to(p, src)
    w.copy_to(p + 8 * 4, bytes(np.full(4, -1, np.float32).tobytes()))   # bytes source, interior
    w.copy_to(p + 20 * 4, bytearray(np.full(2, -2, np.float32).tobytes()))
    out = np.empty(64, np.float32)
    w.copy_from(out, p)
    want = src.copy()
    want[8:12] = -1
    want[20:22] = -2
    np.testing.assert_array_equal(out, want)
    part = np.empty(5, np.float32)
    w.copy_from(part, p + 60 * 4 - 4)  # interior read up to the end minus one element
    np.testing.assert_array_equal(part, want[59:64])
    # int host address with nbytes
    dst = np.zeros(3, np.float32)
    w.copy_from(dst.ctypes.data, p, 12)
    np.testing.assert_array_equal(dst, want[:3])
    with pytest.raises(ValueError, match="nbytes is required"):
        w.copy_to(p, dst.ctypes.data)
    # out of range: refused, memory unchanged
    with pytest.raises(SimplerArgumentError, match="runs past the end"):
        w.copy_to(p + 62 * 4, np.zeros(4, np.float32))
    with pytest.raises(SimplerArgumentError, match="not inside a live allocation"):
        w.copy_from(out, 12345)
    with pytest.raises(ValueError, match="read-only"):
        w.copy_from(b"xxxx", p)
    w.copy_from(out, p)
    np.testing.assert_array_equal(out, want)
    with pytest.raises(SimplerArgumentError, match="not its start"):
        w.free(p + 4)
    w.free(p)
    with pytest.raises(SimplerArgumentError, match="not a live allocation"):
        w.free(p)
    with pytest.raises(ValueError):
        w.malloc(0)
    with pytest.raises(ValueError, match="worker_id"):
        w.malloc(16, worker_id=1)


def test_free_refuses_memory_of_a_pending_run(cases):
    with Worker(2, platform="cpu") as w:
        w.init()
        p, t = device_f32(w, [0.0])
        args = ChipStorageTaskArgs()
        args.add_tensor(t)
        args.add_scalar(200)
        run = w.submit(w.register(cases.chip("orch_sleep")), args)
        with pytest.raises(SimplerArgumentError, match="has not completed"):
            w.free(p)
        run.wait()
        w.free(p)


def test_create_buffer_is_host_memory_a_run_can_name(cpu_worker, cases):
    w = cpu_worker
    buf = w.create_buffer(16)
    x = buf.numpy((4,), np.float32)
    x[:] = [1, 2, 3, 4]
    args = ChipStorageTaskArgs()
    args.add_tensor(buf.tensor((4,), DataType.FLOAT32))
    args.add_scalar(3)
    w.run(w.register(cases.chip("orch_chain", config_name="orch_chain_config")), args)
    np.testing.assert_array_equal(x, [4, 5, 6, 7])
    with pytest.raises(ValueError):
        buf.tensor((5,), DataType.FLOAT32)
    del x
    buf.close()


def test_host_numpy_tensors_are_passed_directly(cpu_worker, cases):
    x = np.zeros(8, np.float32)
    args = ChipStorageTaskArgs()
    args.add_tensor(x[::2])  # a strided host view
    args.add_scalar(5)
    cpu_worker.run(cpu_worker.register(cases.chip("orch_chain")), args)
    np.testing.assert_array_equal(x, [5, 0, 5, 0, 5, 0, 5, 0])


# ---- callables ---------------------------------------------------------------------

def test_callable_digest_is_sha256_of_its_content(rng):
    """A core callable's digest is SHA-256 (libcrypto's, src/core/crypto.h) of
    its framed content; hashlib computes the same on random binaries."""
    import hashlib
    import struct

    def framed(data):
        return struct.pack("<Q", len(data)) + data

    for n in (1, 55, 56, 63, 64, 65, 1000, int(rng.integers(1, 200000))):
        binary = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        sig = [int(d) for d in rng.choice([D.IN, D.OUT, D.INOUT], size=int(rng.integers(1, 5)))]
        want = hashlib.sha256(framed(b"core") + struct.pack("<I%di" % len(sig), len(sig), *sig) + framed(binary))
        assert CoreCallable.build(sig, binary).digest == want.hexdigest(), n


def test_callables_digest_and_validation(cases):
    inc = cases.children[0][1]
    assert inc.signature == [D.INOUT] and len(inc.digest) == 64 and inc.binary_size > 1000
    again = CoreCallable.build([D.INOUT], cases.kc.compile_incore(
        cases_path("inc.cpp"), extra_include_dirs=cases.kc.get_orchestration_include_dirs()))
    assert again.digest == inc.digest
    assert CoreCallable.build([D.IN], b"\x7fELF....").digest != CoreCallable.build([D.OUT], b"\x7fELF....").digest
    with pytest.raises(SimplerArgumentError, match="binary is empty"):
        CoreCallable.build([D.IN], b"")
    with pytest.raises(ValueError):
        CoreCallable.build([7], b"x")
    with pytest.raises(SimplerArgumentError, match="appears twice"):
        ChipCallable.build([D.IN], "f", cases.orch, children=[(0, inc), (0, inc)])
    with pytest.raises(SimplerArgumentError, match="func_name is empty"):
        ChipCallable.build([D.IN], "", cases.orch)
    with pytest.raises(SimplerArgumentError, match="exceed the limit"):
        CoreCallable.build([D.IN] * 33, b"x")
    chip = cases.chip("orch_chain")
    assert chip.binary_size == len(cases.orch)
    assert chip.digest != cases.chip("orch_segv").digest


def cases_path(name):
    from conftest_simpler import SOURCES

    return SOURCES / name


def test_builtin_callables():
    g = CoreCallable.builtin("gemm", transpose_b=True, alpha=0.5)
    assert g.is_builtin and g.signature == [D.IN, D.IN, D.OUT]
    assert CoreCallable.builtin("gemm", beta=1.0).signature == [D.IN, D.IN, D.INOUT]
    assert g.digest != CoreCallable.builtin("gemm").digest
    with pytest.raises(SimplerError, match="no built-in op 'conv9d'.*gemm"):
        CoreCallable.builtin("conv9d")
    with pytest.raises(SimplerArgumentError, match="unknown built-in parameter 'transpose_c'"):
        CoreCallable.builtin("gemm", transpose_c=1)
    with pytest.raises(SimplerArgumentError, match="bad value"):
        CoreCallable.builtin("gemm", alpha="many")


def test_register_before_and_after_init_and_unregister(cases):
    w = Worker(2, platform="cpu")
    h_before = w.register(cases.chip("orch_chain"))
    w.init()
    h_after = w.register(cases.chip("orch_segv"))
    assert h_before != h_after
    assert w.register(cases.chip("orch_chain")) == h_before  # same content, same slot
    p, t = device_f32(w, [0.0])
    args = ChipStorageTaskArgs()
    args.add_tensor(t)
    args.add_scalar(4)
    w.run(h_before, args)
    assert read_f32(w, p, 1)[0] == 4
    w.unregister(h_before)  # registered twice: still there
    w.run(h_before, args)
    w.unregister(h_before)
    with pytest.raises(SimplerArgumentError, match="holds no registered callable"):
        w.run(h_before, args)
    with pytest.raises(SimplerArgumentError, match="holds no callable"):
        w.unregister(h_before)
    # a ChipCallable can be run directly (registered on the fly)
    w.run(cases.chip("orch_chain"), args)
    assert read_f32(w, p, 1)[0] == 12
    with pytest.raises(TypeError):
        w.register(cases.children[0][1])
    w.close()


def test_missing_symbols_are_named(cases):
    w = Worker(2, platform="cpu")
    w.init()
    with pytest.raises(SimplerError, match="does not export 'no_such_orchestration'"):
        w.register(cases.chip("no_such_orchestration"))
    bad_kernel = ChipCallable.build([D.INOUT, D.SCALAR], "orch_chain", cases.orch,
                                    children=[(0, CoreCallable.build([D.INOUT], cases.no_entry))])
    with pytest.raises(SimplerError, match="func_id 0 does not export kernel_entry"):
        w.register(bad_kernel)
    not_elf = ChipCallable.build([D.INOUT], "orch_chain", b"this is no shared object")
    with pytest.raises(SimplerArgumentError, match="not a shared object"):
        w.register(not_elf)
    w.close()
    # Registered before init: init reports it and leaves the worker uninitialised.
    w = Worker(2, platform="cpu")
    w.register(cases.chip("no_such_orchestration"))
    with pytest.raises(SimplerError, match="does not export"):
        w.init()
    w.close()


def test_chip_tensor_make_and_from_array():
    t = ChipTensor.make(0x1000, (4, 8), DataType.FLOAT16)
    assert t.shape == (4, 8) and t.strides == (8, 1) and t.nbytes == 64 and t.dtype == DataType.FLOAT16
    a = np.zeros((6, 10), np.int32)
    v = ChipTensor.from_array(a[1:5, 2:8:2])
    assert v.shape == (4, 3) and v.strides == (10, 2) and v.dtype == DataType.INT32
    assert v.data_ptr == a.ctypes.data + (1 * 10 + 2) * 4
    with pytest.raises(ValueError):
        ChipTensor.make(0, (), DataType.FLOAT32)
    assert DataType.from_numpy(np.float32) == DataType.FLOAT32 and DataType.INT8.itemsize == 1


def test_chip_tensor_make_reuses_contiguous_layouts_exactly():
    """make() keeps the packed layout of a contiguous (shape, dtype): a later
    tensor of that layout differs in its address alone, and every other
    spelling or layout still goes the long way (and is checked)."""
    from simpler.task_interface import _TENSOR_LAYOUT

    def fields(t):
        return _TENSOR_LAYOUT.unpack(bytes(t._c))

    first = ChipTensor.make(0x1000, (3, 5), DataType.FLOAT32)
    again = ChipTensor.make(0x2000, (3, 5), DataType.FLOAT32)
    assert fields(again) == (0x2000,) + fields(first)[1:]
    assert fields(ChipTensor.make(0x2000, [3, 5], "float32")) == fields(again)
    assert fields(ChipTensor.make(0x2000, (np.int64(3), np.int64(5)), DataType.FLOAT32)) == fields(again)
    assert fields(ChipTensor.make(0x2000, iter((3, 5)), DataType.FLOAT32)) == fields(again)
    assert ChipTensor.make(0x2000, (3, 5), DataType.FLOAT16).nbytes == 30
    off = ChipTensor.make(0x2000, (3, 5), DataType.FLOAT32, start_offset=2)
    assert off.data_ptr == 0x2008 and off._c.buffer.size == 68
    strided = ChipTensor.make(0x2000, (3, 5), DataType.FLOAT32, strides=(10, 2))
    assert strided.strides == (10, 2) and strided._c.buffer.size == (2 * 10 + 4 * 2 + 1) * 4
    assert ChipTensor.make(0x2000, (3, 5), DataType.FLOAT32, nbytes=4096)._c.buffer.size == 4096
    for bad in ((-1, 5), (1 << 32,), (), (1, 2, 3, 4, 5, 6)):
        with pytest.raises(ValueError):
            ChipTensor.make(0x1000, bad, DataType.FLOAT32)
    with pytest.raises(TypeError):
        ChipTensor.make(0x1000, ([3], 5), DataType.FLOAT32)
