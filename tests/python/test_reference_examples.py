"""The examples of the reference document (spec/tensorcore-python.md), run
unchanged: each test body between the `# --- verbatim` markers is the
document's code block as written. Setup the document leaves implicit (the
buffers A, B, C, D of the Stream and Errors examples) comes first, built as
the NumPy interop example builds them."""

import threading

import numpy as np
import pytest

import tensorcore as tc


def _interop_buffers(ctx):
    host_a = np.random.randn(256, 256).astype(np.float16)
    host_b = np.random.randn(256, 256).astype(np.float16)
    A = ctx.buffer_from_array(host_a)
    B = ctx.buffer_from_array(host_b)
    C = ctx.buffer(256 * 256 * 2)
    D = ctx.buffer(256 * 256 * 2)
    ref = host_a.astype(np.float64) @ host_b.astype(np.float64)
    return A, B, C, D, ref


def test_smoke_test(capsys):
    # --- verbatim
    import tensorcore as tc
    print(tc.version())          # "tensorcore 0.1.22 (metallib_path)"

    ctx = tc.init()
    info = tc.device_info(ctx)
    caps = tc.runtime_capabilities(ctx)
    print(info.name, info.family)
    print(tc.capability_available(caps, tc.TC_CAPABILITY_GEMM_F32))
    tc.shutdown(ctx)
    # --- end
    out = capsys.readouterr().out.splitlines()
    assert out[0] == tc.version() and out[0].startswith("tensorcore ")
    assert out[1] == "%s %s" % (info.name, info.family) and info.name
    assert out[2] == "True"
    assert ctx.closed


def test_numpy_interop(capsys):
    # --- verbatim
    import numpy as np
    import tensorcore as tc

    with tc.Context() as ctx:
        host_a = np.random.randn(256, 256).astype(np.float16)
        host_b = np.random.randn(256, 256).astype(np.float16)

        A = ctx.buffer_from_array(host_a)      # convenience: alloc + write
        B = ctx.buffer_from_array(host_b)
        C = ctx.buffer(256 * 256 * 2)          # alloc only

        ctx.gemm(A, B, C, M=256, N=256, K=256, dtype="f16", accum="f32")

        out = C.to_numpy((256, 256), np.float16)
        print(out[:4, :4])
    # --- end
    ref = host_a.astype(np.float64) @ host_b.astype(np.float64)
    scale = np.abs(host_a.astype(np.float64)) @ np.abs(host_b.astype(np.float64))
    assert out.dtype == np.float16 and out.shape == (256, 256)
    assert (np.abs(out - ref) <= 1e-2 * scale).all()
    assert str(out[:4, :4]) in capsys.readouterr().out
    assert ctx.closed and A.closed and C.closed


def test_context(capsys):
    def example():
        # --- verbatim
        with tc.Context() as ctx:
            info = ctx.device_info()
            print(info.name, info.family)
            print(ctx.last_backend_name())     # "none" before any kernel runs
        # --- end
        return info

    # last_backend is per thread: a fresh thread has run no kernel yet
    result = []
    t = threading.Thread(target=lambda: result.append(example()))
    t.start()
    t.join()
    info = result[0]
    assert capsys.readouterr().out.splitlines() == ["%s %s" % (info.name, info.family), "none"]


def test_buffer(capsys):
    with tc.Context() as ctx:
        # --- verbatim
        A = ctx.buffer_from_array(np.array([1.0, 2.0], dtype=np.float32))
        print(A.nbytes(), A.size())     # 8, 8
        arr = A.to_numpy((2,), np.float32)
        A.write(np.array([3.0, 4.0], dtype=np.float32))
        A.read(arr)                     # in-place read into existing array
        # --- end
        assert capsys.readouterr().out == "8 8\n"
        assert arr.tolist() == [3.0, 4.0]
        assert A.nbytes == 8


def test_stream():
    with tc.Context() as ctx:
        A, B, C, D, ref = _interop_buffers(ctx)
        # --- verbatim
        with ctx.stream() as s:
            ctx.gemm_async(A, B, C, M=256, N=256, K=256, stream=s)
            ctx.gemm_async(A, B, D, M=256, N=256, K=256, stream=s)
            s.sync()
        # --- end
        assert s.closed
        for out in (C.to_numpy((256, 256), np.float16), D.to_numpy((256, 256), np.float16)):
            np.testing.assert_allclose(out, ref, rtol=0, atol=2e-2 * np.abs(ref).max())


def test_errors(capsys):
    ctx = tc.init()
    A, B, C, _, _ = _interop_buffers(ctx)
    # --- verbatim
    try:
        tc.gemm(ctx, A, B, C, M=0, N=256, K=256, dtype="f16", accum="f32")
    except tc.TensorcoreError as e:
        print(e)   # "tensorcore error -6: invalid_shape"
        print(e.status)   # -6
    # --- end
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tensorcore error -6: invalid_shape")
    assert "M=0" in out[0]  # the library's detail follows the status string
    assert out[1] == "-6"
    ctx.close()


@pytest.mark.parametrize("path", ["plain", "device-path"])
def test_diloco_context_on_every_device(device, path, capsys, monkeypatch):
    """The DiLoCoContext example on each device; its parameter buffer is 2^20
    f32 values in the context's memory (device memory on a GPU, where the
    outer step keeps its state and runs; TC_DIST_DEVICE_PATH=1 handles a CPU
    context's buffer the same way)."""
    if path == "device-path":
        monkeypatch.setenv("TC_DIST_DEVICE_PATH", "1")
    weight_count = 1 << 20
    x0 = np.random.default_rng(5).standard_normal(weight_count).astype(np.float32)
    with tc.Context(device) as ctx:
        weight_buffer = ctx.buffer_from_array(x0)
        # --- verbatim
        with ctx.dist("single", 1, 0, "single://diloco") as dist:
            with dist.diloco(inner_steps=100, outer_lr=1.0,
                             outer_optimizer="nesterov", compress="none") as d:
                d.add_parameter("tok_embeddings.weight", weight_buffer,
                                num_elements=weight_count, dtype="f32")
                if d.step():
                    d.apply_outer()
                state, worker_status, round_id = d.async_poll()
                if state == tc.TC_DILOCO_ASYNC_RUNNING:
                    d.async_wait()
                    state, worker_status, round_id = d.async_poll()
                if state in (tc.TC_DILOCO_ASYNC_READY, tc.TC_DILOCO_ASYNC_FAILED):
                    d.async_commit()
                print(d.outer_steps_completed, d.last_outer_bytes_sent)
        # --- end
        assert capsys.readouterr().out.split() == ["0", "0.0"]  # one inner step of 100: no outer step yet
        np.testing.assert_array_equal(weight_buffer.to_numpy((weight_count,), np.float32), x0)
