"""Graphs of built-in kernels (tensorcore ops) with a built-in orchestration
(ChipCallable.from_tasks): no compiler involved."""

from __future__ import annotations

import numpy as np
import pytest

from simpler import SimplerArgumentError, SimplerError, Worker
from simpler.task_interface import ArgDirection as D, ChipCallable, ChipStorageTaskArgs, CoreCallable, DataType

RNG = np.random.default_rng(11)


def _mlp(dtype):
    """Y = (X @ W1) @ W2, the first product split into two row blocks that
    run in parallel, then Z += X @ W3 (beta = 1) on top of its old value."""
    gemm = CoreCallable.builtin("gemm")
    gemm_acc = CoreCallable.builtin("gemm", beta=1.0)
    M, K, H, N = 48, 32, 40, 24
    half = M // 2
    tasks = [
        "scope_begin",
        {"func_id": 0, "args": [("arg", 0, (0, 0), (half, K)), ("arg", 1), ("new", (half, H), dtype)]},
        {"func_id": 0, "args": [("arg", 0, (half, 0), (M - half, K)), ("arg", 1), ("new", (M - half, H), dtype)]},
        {"func_id": 0, "args": [("out", 0, 0), ("arg", 2), ("arg", 3, (0, 0), (half, N))]},
        {"func_id": 0, "args": [("out", 1, 0, (0, 0), (M - half, H)), ("arg", 2), ("arg", 3, (half, 0), (M - half, N))]},
        "scope_end",
        {"func_id": 1, "args": [("arg", 0), ("arg", 4), ("arg", 5)]},
    ]
    chip = ChipCallable.from_tasks([D.IN, D.IN, D.IN, D.OUT, D.IN, D.INOUT], tasks, [(0, gemm), (1, gemm_acc)])
    return chip, (M, K, H, N)


def _np(dtype):
    return DataType(dtype).to_numpy()


@pytest.mark.parametrize("runtime", ["tensormap_and_ringbuffer", "host_build_graph"])
@pytest.mark.parametrize("dtype, tol", [(DataType.FLOAT32, 1e-5), (DataType.BFLOAT16, 2e-2)])
def test_gemm_graph_without_a_compiler(runtime, dtype, tol):
    chip, (M, K, H, N) = _mlp(dtype)
    nd = _np(dtype)
    X = RNG.standard_normal((M, K)).astype(nd)
    W1 = (RNG.standard_normal((K, H)) / np.sqrt(K)).astype(nd)
    W2 = (RNG.standard_normal((H, N)) / np.sqrt(H)).astype(nd)
    W3 = RNG.standard_normal((K, N)).astype(nd)
    with Worker(2, platform="cpu", runtime=runtime) as w:
        w.init()
        h = w.register(chip)
        for round_ in range(2):  # host_build_graph replays its graph the second time
            Y = np.full((M, N), np.nan, nd)
            Z0 = RNG.standard_normal((M, N)).astype(nd)
            Z = Z0.copy()
            args = ChipStorageTaskArgs()
            for x in (X, W1, W2, Y, W3, Z):
                args.add_tensor(x)
            w.run(h, args)
            f64 = lambda a: a.astype(np.float64)  # noqa: E731
            # The intermediate is rounded to dtype, as the kernel stores it.
            Hm = (f64(X) @ f64(W1)).astype(nd)
            want_y = f64(Hm) @ f64(W2)
            want_z = f64(Z0) + f64(X) @ f64(W3)
            assert np.isfinite(f64(Y)).all()
            np.testing.assert_allclose(f64(Y), want_y, rtol=tol, atol=tol * np.abs(want_y).max())
            np.testing.assert_allclose(f64(Z), want_z, rtol=tol, atol=tol * np.abs(want_z).max())


def test_builtin_shape_errors_name_the_task():
    gemm = CoreCallable.builtin("gemm")
    chip = ChipCallable.from_tasks([D.IN, D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2)]}],
                                   [(0, gemm)])
    with Worker(2, platform="cpu") as w:
        w.init()
        args = ChipStorageTaskArgs()
        for shape in ((4, 5), (6, 3), (4, 3)):  # K mismatch: 5 vs 6
            args.add_tensor(np.zeros(shape, np.float32))
        with pytest.raises(SimplerError, match=r"task 0 \(func_id 0, built-in gemm\) failed: gemm: shapes do not chain"):
            w.run(w.register(chip), args)


def test_from_tasks_validation():
    gemm = CoreCallable.builtin("gemm")
    with pytest.raises(ValueError, match="passes 2 tensor"):
        ChipCallable.from_tasks([D.IN], [{"func_id": 0, "args": [("arg", 0), ("arg", 0)]}], [(0, gemm)])
    with pytest.raises(ValueError, match="no child"):
        ChipCallable.from_tasks([D.IN], [{"func_id": 3, "args": []}], [(0, gemm)])
    with pytest.raises(SimplerArgumentError, match="arg index out of range"):
        ChipCallable.from_tasks([D.IN], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 0)]}], [(0, gemm)])
    with pytest.raises(SimplerArgumentError, match="out needs an earlier task"):
        ChipCallable.from_tasks([D.IN, D.IN], [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("out", 0, 0)]}],
                                [(0, gemm)])
    with pytest.raises(SimplerArgumentError, match="scope_begin without scope_end"):
        ChipCallable.from_tasks([D.IN], ["scope_begin"], [(0, gemm)])


# ---- the op table's built-ins: every op whose operands its signature shapes ----

def test_every_table_op_without_a_descriptor_is_a_builtin():
    import tensorcore as tc
    names = {e.c_name[3:] for e in tc.op_entries().values()
             if all(p.kind != "desc" and p.kind != "quant" for p in e.params)
             and "[*]" not in e.signature}
    assert {"rmsnorm_forward", "geglu_forward", "softmax_backward", "fused_layernorm_gemv"} <= names
    for name in sorted(names - {"gemm", "gemm_batched"}):
        CoreCallable.builtin(name, **({"eps": 1e-5} if "eps" in tc.op_entries()["tc_" + name].signature else {}))


@pytest.mark.parametrize("runtime", ["tensormap_and_ringbuffer", "host_build_graph"])
def test_table_builtins_run_a_gated_norm_block(runtime):
    """Y = rmsnorm(X) (and its rstd), then Z = geglu(Y, U): two table built-ins,
    the second depending on the first through Y, against float64."""
    norm = CoreCallable.builtin("rmsnorm_forward", eps=1e-5)
    geglu = CoreCallable.builtin("geglu_forward")
    M, Dm = 6, 40
    tasks = [{"func_id": 0, "args": [("arg", 0), ("arg", 1), ("arg", 2), ("arg", 3)]},
             {"func_id": 1, "args": [("arg", 2), ("arg", 4), ("arg", 5)]}]
    chip = ChipCallable.from_tasks([D.IN, D.IN, D.OUT, D.OUT, D.IN, D.OUT], tasks, [(0, norm), (1, geglu)])
    X = RNG.standard_normal((M, Dm)).astype(np.float32)
    G = (RNG.standard_normal(Dm) + 1).astype(np.float32)
    U = RNG.standard_normal((M, Dm)).astype(np.float32)
    Y, R, Z = (np.full(s, np.nan, np.float32) for s in ((M, Dm), (M,), (M, Dm)))
    with Worker(2, platform="cpu", runtime=runtime) as w:
        w.init()
        args = ChipStorageTaskArgs()
        for a in (X, G, Y, R, U, Z):
            args.add_tensor(a)
        w.run(w.register(chip), args)
    x = X.astype(np.float64)
    rstd = 1 / np.sqrt((x * x).mean(axis=1) + 1e-5)
    y = x * rstd[:, None] * G
    g = Y.astype(np.float64)
    z = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3))) * U
    np.testing.assert_allclose(R, rstd, rtol=1e-5)
    np.testing.assert_allclose(Y, y, rtol=1e-5, atol=1e-5 * np.abs(y).max())
    np.testing.assert_allclose(Z, z, rtol=1e-5, atol=1e-5 * np.abs(z).max())


def test_table_builtin_errors():
    with pytest.raises(SimplerArgumentError, match="parameter eps is required"):
        CoreCallable.builtin("rmsnorm_forward")
    with pytest.raises(SimplerArgumentError, match="unknown built-in parameter"):
        CoreCallable.builtin("softmax_forward", eps=1.0)
    softmax = CoreCallable.builtin("softmax_forward")
    chip = ChipCallable.from_tasks([D.IN, D.OUT], [{"func_id": 0, "args": [("arg", 0), ("arg", 1)]}], [(0, softmax)])
    with Worker(2, platform="cpu") as w:
        w.init()
        args = ChipStorageTaskArgs()
        args.add_tensor(np.zeros((4, 5), np.float32))
        args.add_tensor(np.zeros((4, 6), np.float32))
        with pytest.raises(SimplerError, match="D = 6 from Y disagrees with 5"):
            w.run(w.register(chip), args)
