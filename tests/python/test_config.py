"""The environment switches: docs/configuration.md lists exactly the
library's registry, a value a switch does not accept warns and gives the
default, a TC_* variable that is no switch warns once, TC_TRACE=off is off,
and TC_CPU_ISA=portable caps every CPU kernel family (each still correct
against NumPy)."""

import re

import numpy as np
import pytest

import tensorcore as tc
from conftest import REPO, TOLERANCE, assert_close, np_dtype, poison, random_array, run_python, to_f64

DOC = REPO / "docs" / "configuration.md"
RETIRED = ["TC_ATTENTION_ISA", "TC_QUANT_ISA", "TC_CUDA_GEMV_LEGACY", "TC_CUDA_GEMV_INT8", "TC_CUDA_GEMV_STREAM"]


def table_row(s):
    allowed = s["allowed"].replace("|", ", ")
    return "| `%s` | %s | %s | %s | %s | %s |" % (
        s["name"], s["type"], "`%s`" % s["default"] if s["default"] else "", allowed,
        "per call" if s["per_call"] else "once", s["description"])


def test_docs_table_is_the_registry():
    text = DOC.read_text()
    m = re.search(r"<!-- switches -->\n(.*?)<!-- /switches -->", text, flags=re.S)
    assert m, "docs/configuration.md has no <!-- switches --> table"
    rows = [line for line in m.group(1).splitlines() if line.startswith("| `")]
    want = [table_row(s) for s in tc.config_switches()]
    assert rows == want, "docs/configuration.md's table differs from the registry; it should read:\n" + "\n".join(want)


def test_docs_do_not_name_removed_switches():
    files = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
    for path in files:
        text = path.read_text()
        for name in RETIRED:
            if path == DOC:
                continue  # the page lists them as removed
            assert name not in text, "%s still names %s" % (path.name, name)


def test_every_name_is_unique_and_readable():
    names = [s["name"] for s in tc.config_switches()]
    assert len(names) == len(set(names))
    for name in names:
        tc.config_value(name)
    with pytest.raises(tc.TensorcoreError):
        tc.config_value("TC_NOT_A_SWITCH")


def test_bad_value_warns_once_and_gives_the_default():
    code = ("import tensorcore as tc\n"
            "print(tc.config_value('TC_CPU_ISA'))\n"
            "print(tc.config_value('TC_CPU_ISA'))\n"
            "print(tc.config_value('TC_CUDA_PDL'))\n")
    r = run_python(code, env={"TC_CPU_ISA": "avx9", "TC_CUDA_PDL": "maybe"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "(6, 'amx', False)"
    assert r.stdout.splitlines()[2] == "(1, 'on', False)"
    assert r.stderr.count("TC_CPU_ISA=avx9") == 1, r.stderr
    assert "portable|avx2|avx_vnni|avx512|avx512_vnni|avx512_bf16|amx" in r.stderr
    assert "TC_CUDA_PDL=maybe" in r.stderr


def test_unknown_tc_variable_warns_with_the_closest_name():
    r = run_python("import tensorcore as tc; tc.config_value('TC_TRACE')",
                   env={"TC_NUM_THREAD": "2", "TC_QUANT_ISA": "avx2", "TC_TEST_SOMETHING": "1"})
    assert r.returncode == 0, r.stderr
    assert "TC_NUM_THREAD is not a tensorcore switch (did you mean TC_NUM_THREADS?)" in r.stderr
    assert "TC_QUANT_ISA is no longer read: use TC_CPU_ISA" in r.stderr
    assert "TC_TEST_SOMETHING" not in r.stderr  # the test scripts' own variables


TRACE_CODE = ("import numpy as np, tensorcore as tc\n"
              "ctx = tc.Context('cpu')\n"
              "a = ctx.buffer_from_array(np.ones(4, np.float32))\n"
              "ctx.gemm(a, a, ctx.buffer_from_array(np.zeros(4, np.float32)), 2, 2, 2, dtype='f32')\n")


@pytest.mark.parametrize("value", ["off", "0", "no", ""])
def test_trace_off_is_off(value):
    r = run_python(TRACE_CODE, env={"TC_TRACE": value})
    assert r.returncode == 0, r.stderr
    assert "op=gemm" not in r.stderr and "settings" not in r.stderr, r.stderr


def test_trace_on_lists_the_settings_first():
    r = run_python(TRACE_CODE, env={"TC_TRACE": "1", "TC_CPU_ISA": "avx2"})
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert "[tensorcore] settings:" in lines, r.stderr
    assert "TC_TRACE=1 (environment)" in lines
    assert "TC_CPU_ISA=avx2 (environment)" in lines
    assert "TC_NUM_THREADS=auto (default)" in lines
    op = [i for i, line in enumerate(lines) if "op=gemm" in line]
    assert op and op[0] > lines.index("TC_CPU_ISA=avx2 (environment)")
    assert r.stderr.count("settings:") == 1


# ---- TC_CPU_ISA caps every CPU kernel family -----------------------------------------

def up(ctx, arr):
    return ctx.buffer_from_array(np.ascontiguousarray(arr))


def out(ctx, n, dtype):
    return ctx.buffer_from_array(poison(n * np.dtype(np_dtype(dtype)).itemsize))


def run_gemm(ctx, rng, dtype):
    M, N, K = 37, 29, 41
    a, b = random_array(rng, (M, K), dtype), random_array(rng, (K, N), dtype)
    C = out(ctx, M * N, "i32" if dtype == "i8" else dtype)
    ctx.gemm(up(ctx, a), up(ctx, b), C, M, N, K, dtype=dtype, accum="i32" if dtype == "i8" else "f32")
    kernel = tc.cpu_last_kernel_name()
    a64, b64 = to_f64(a), to_f64(b)
    got = to_f64(C.to_numpy((M, N), np_dtype("i32" if dtype == "i8" else dtype)), dtype)
    if dtype == "i8":
        assert np.array_equal(got, a64 @ b64)
    else:
        assert_close(got, a64 @ b64, np.abs(a64) @ np.abs(b64), TOLERANCE[dtype], "gemm " + dtype)
    return kernel


def run_attention(ctx, rng):
    B, H, S, D = 1, 2, 19, 16
    q, k, v = (random_array(rng, (B, H, S, D), "f32") for _ in range(3))
    O = out(ctx, q.size, "f32")
    ctx.attention_forward(up(ctx, q), up(ctx, k), up(ctx, v), O, B, H, S, S, D, dtype="f32", causal=False)
    kernel = tc.cpu_last_kernel_name()
    s = np.einsum("bhqd,bhkd->bhqk", to_f64(q), to_f64(k)) / np.sqrt(D)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    ref = p @ to_f64(v)
    assert_close(O.to_numpy(q.shape, np.float32), ref, np.abs(p) @ np.abs(to_f64(v)), 2e-5, "attention")
    return kernel


def run_gemv_quantized(ctx, rng):
    M, N, K = 2, 24, 256
    w = random_array(rng, (N, K), "f32")
    Wq = ctx.buffer_from_array(np.zeros(tc.quantized_size("q8_0", N, K), np.uint8))
    ctx.quantize_weights(up(ctx, w), Wq, "q8_0", N, K, dtype="f32")
    Wd = out(ctx, N * K, "f32")
    ctx.dequantize_weights(Wq, Wd, "q8_0", N, K)
    wd = to_f64(Wd.to_numpy((N, K), np.float32))
    x = random_array(rng, (M, K), "f32")
    Y = out(ctx, M * N, "f32")
    ctx.gemv_quantized(up(ctx, x), Wq, Y, "q8_0", M, N, K, dtype="f32")
    kernel = tc.cpu_last_kernel_name()
    assert_close(Y.to_numpy((M, N), np.float32), to_f64(x) @ wd.T, np.abs(to_f64(x)) @ np.abs(wd).T, 1e-5, "gemv")
    return kernel


def run_rmsnorm(ctx, rng):
    N, D = 5, 67
    x, g = random_array(rng, (N, D), "f32"), random_array(rng, (D,), "f32")
    Y = out(ctx, N * D, "f32")
    ctx.rmsnorm_forward(up(ctx, x), up(ctx, g), Y, None, N, D, eps=1e-5, dtype="f32")
    kernel = tc.cpu_last_kernel_name()
    x64 = to_f64(x)
    ref = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-5) * to_f64(g)
    assert_close(Y.to_numpy((N, D), np.float32), ref, np.abs(ref), 1e-5, "rmsnorm")
    return kernel


FAMILIES = {
    "gemm f32": lambda ctx, rng: run_gemm(ctx, rng, "f32"),
    "gemm f16": lambda ctx, rng: run_gemm(ctx, rng, "f16"),
    "gemm bf16": lambda ctx, rng: run_gemm(ctx, rng, "bf16"),
    "gemm i8": lambda ctx, rng: run_gemm(ctx, rng, "i8"),
    "attention": run_attention,
    "gemv_quantized": run_gemv_quantized,
    "rmsnorm": run_rmsnorm,
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_portable_caps_every_cpu_path(cpu_ctx, rng, monkeypatch, family):
    monkeypatch.setenv("TC_CPU_ISA", "portable")
    kernel = FAMILIES[family](cpu_ctx, rng)
    assert kernel.endswith("/portable"), "%s ran %s under TC_CPU_ISA=portable" % (family, kernel)


@pytest.mark.parametrize("cap", ["avx2", "avx512", "amx"])
def test_no_path_above_the_cap(cpu_ctx, rng, monkeypatch, cap):
    levels = ["portable", "avx2", "avx_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx"]
    monkeypatch.delenv("TC_CPU_ISA", raising=False)
    everything = cpu_ctx.device_info().features
    monkeypatch.setenv("TC_CPU_ISA", cap)
    lowered = cpu_ctx.device_info().features != everything
    for family, run in sorted(FAMILIES.items()):
        level = run(cpu_ctx, rng).split("/")[1]
        if level == "blas":  # a BLAS cannot be capped: it runs only where the cap lowers nothing
            assert not lowered, "the BLAS ran under TC_CPU_ISA=%s (%s)" % (cap, family)
        else:
            assert levels.index(level) <= levels.index(cap), "%s ran %s level under %s" % (family, level, cap)
