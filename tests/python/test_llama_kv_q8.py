"""The Q8_0 KV cache (tc_llama_set_kv_cache_type(TC_DTYPE_Q8_0), Llama(kv_type=
"q8_0"), as llama.cpp's -ctk q8_0 -ctv q8_0): keys after RoPE and values
stored as GGUF Q8_0 blocks of 32 along the head dim. Against the float64
reference (tests/python/llama_reference.py) with K and V quantised and
dequantised the way the cache does, and against the same model with an f32
cache; prefill, chunks and one-token steps, the way a GPU runs on the CPU,
batch steps of several sequences with sequences leaving and joining,
greedy generation, the cache's size, and every refusal (a head size that
is not whole blocks, unknown types, a model that is not empty) with the
model left usable. On every device present."""

import zlib

import numpy as np
import pytest

import tensorcore as tc
import test_llama_archs as archs
from conftest import DEVICES, expect_status
from test_llama_batch import Runner, where  # noqa: F401 (fixture)
from tensorcore.llama import Llama

V = archs.V
# Families whose head size is whole Q8_0 blocks: llama with a head of 64
# (attention.key_length; two blocks a row), qwen3 and gemma3 with 32 (NEOX
# pairs, Q/K norms, gemma3's sliding-window layers).
Q8_ARCHS = ["llama", "qwen3", "gemma3"]


def _use(monkeypatch, arch):
    if arch == "llama":
        monkeypatch.setitem(archs.ARCHS, "llama", dict(layers=2, D=64))


@pytest.fixture(scope="module", params=DEVICES)
def dev(request):
    c = tc.Context(request.param)
    yield c
    c.close()


@pytest.fixture
def cpu():
    c = tc.Context("cpu")
    yield c
    c.close()



def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def _model(tmp_path, monkeypatch, arch, seed, fmt="f32"):
    _use(monkeypatch, arch)
    rng = np.random.default_rng(zlib.crc32(("q8 %s %d" % (arch, seed)).encode()))
    path = tmp_path / ("%s.gguf" % arch)
    return rng, path, archs.write_model(path, arch, archs.make_weights(rng, arch), fmt)


@pytest.mark.parametrize("arch", Q8_ARCHS)
def test_q8_cache_matches_reference_and_stays_close_to_f32(tmp_path, dev, monkeypatch, arch):
    """A prefill of 40, a chunk of 30 (the cache rows dequantised for the
    chunk's attention) and one-token steps past the first decode-attention
    piece, against the reference with K and V through Q8_0: within a
    fraction of the quantisation's own effect (test_llama_archs.kv_tolerance:
    what remains are codes whose f32 and f64 values straddle a half step).
    The same tokens through an f32 cache differ from the Q8_0 model by that
    effect and that allowance at most. The effect itself is asserted
    visible (a cache that did not quantise fails the first check) and small:
    8 bits a value keep the logits within 5% of their range on these
    models. Then a reset, and f16 activations (the GPU's 8-bit products and
    the f16 prefill attention over the widened rows) within the 5e-2 of the
    f16 products."""
    rng, path, w = _model(tmp_path, monkeypatch, arch, 1)
    tokens = rng.integers(0, V, 80)
    ref8, ref32 = archs.reference(arch, w, tokens, "q8_0"), archs.reference(arch, w, tokens)
    effect = _rel(ref8, ref32)
    assert 1e-4 < effect < 5e-2, effect
    tol = max(5e-5, 0.4 * effect)
    run = lambda m: np.concatenate([m.eval(tokens[:40]), m.eval(tokens[40:70])] +
                                   [m.eval(tokens[i:i + 1]) for i in range(70, 80)])
    with Llama(path, ctx=dev, n_ctx=96, activations="f32", kv_type="q8_0") as m:
        assert tc.llama_get_kv_cache_type(m.handle) == "q8_0"
        out8 = run(m)
        archs.check_logits(out8, ref8, "%s q8_0 cache" % arch, tol=tol)
        m.reset()
        archs.check_logits(m.eval(tokens[:5]), ref8[:5], "%s after reset" % arch, tol=tol)
        m.reset()
        tc.llama_set_activations(m.handle, "f16")
        out = np.concatenate([m.eval(tokens[:40])] + [m.eval(tokens[i:i + 1]) for i in range(40, 44)])
        assert np.isfinite(out).all() and _rel(out, ref8[:44]) < 5e-2, _rel(out, ref8[:44])
    with Llama(path, ctx=dev, n_ctx=96, activations="f32", kv_type="f32") as m:
        out32 = run(m)
    archs.check_logits(out32, ref32, "%s f32 cache" % arch)
    assert _rel(out8, out32) <= effect + tol + 5e-5, (_rel(out8, out32), effect)


@pytest.mark.parametrize("arch", Q8_ARCHS)
def test_q8_cache_the_way_a_gpu_runs_on_the_cpu(tmp_path, cpu, monkeypatch, arch):
    """TC_LLAMA_DEVICE_PATH: Q8_0 weights copied, a prefill of 36 (dequantise
    + GEMM products, the cache rows widened to f32 by `convert`), a chunk of
    4, one-token steps through the decode attention; then f16 activations
    (the rows widened to f16)."""
    monkeypatch.setenv("TC_LLAMA_DEVICE_PATH", "1")
    rng, path, w = _model(tmp_path, monkeypatch, arch, 2, fmt="q8_0")
    tokens = rng.integers(0, V, 44)
    ref = archs.reference(arch, w, tokens, "q8_0")
    tol = archs.kv_tolerance(arch, w, tokens, "q8_0")
    with Llama(path, ctx=cpu, n_ctx=64, activations="f32", kv_type="q8_0") as m:
        archs.check_logits(m.eval(tokens[:36]), ref[:36], "%s prefill 36" % arch, tol=tol)
        archs.check_logits(m.eval(tokens[36:40]), ref[36:40], "%s chunk of 4" % arch, tol=tol)
        for i in range(40, 44):
            archs.check_logits(m.eval(tokens[i:i + 1]), ref[i:i + 1], "%s step %d" % (arch, i), tol=tol)
        tc.llama_set_activations(m.handle, "f16")
        m.reset()
        out = np.concatenate([m.eval(tokens[:36]), m.eval(tokens[36:37])])
        assert np.isfinite(out).all() and _rel(out, ref[:37]) < 5e-2, _rel(out, ref[:37])


@pytest.mark.parametrize("arch", Q8_ARCHS)
def test_q8_cache_in_batch_steps(tmp_path, where, monkeypatch, arch):  # noqa: F811
    """Three sequences of different lengths in batch steps (each row its own
    slot and position in the Q8_0 cache), every row against the reference of
    its own history; then sequence 1 leaves, is reset and joins again with a
    new prompt while the others go on."""
    rng, path, w = _model(tmp_path, monkeypatch, arch, 3)
    prompts = [[int(t) for t in rng.integers(0, V, n)] for n in (9, 2, 5)]
    steps = [[int(t) for t in rng.integers(0, V, 3)] for _ in range(5)]
    fresh = [int(t) for t in rng.integers(0, V, 4)]
    reference = lambda w, h: archs.reference(arch, w, np.asarray(h), "q8_0")
    histories = [p + [s[i] for s in steps] for i, p in enumerate(prompts)] + [fresh + [s[1] for s in steps[3:]]]
    tol = max(archs.kv_tolerance(arch, w, np.asarray(h), "q8_0") for h in histories)
    with Llama(path, ctx=where, n_ctx=32, activations="f32", kv_type="q8_0", max_sequences=3) as m:
        r = Runner(m, w, reference, tol)
        for s in range(3):
            r.prompt(s, prompts[s])
        for k in range(3):
            r.step([1, 2, 0], [steps[k][1], steps[k][2], steps[k][0]])
        r.step([2, 0], [steps[3][2], steps[3][0]])  # sequence 1 has left
        r.prompt(1, fresh)                          # and joins again
        r.step([0, 1, 2], [steps[4][0], steps[3][1], steps[4][2]])
        r.step([1], [steps[4][1]])
        assert [m.seq_n_past(s) for s in range(3)] == [9 + 5, 4 + 2, 5 + 5]


def test_q8_cache_greedy_generation(tmp_path, dev, monkeypatch):
    """generate() over a Q8_0 cache follows the reference's greedy choices
    (each chosen id within the check's tolerance of the reference's best)
    and repeats itself after the reset it starts with."""
    rng, path, w = _model(tmp_path, monkeypatch, "llama", 4)
    prompt = [int(t) for t in rng.integers(0, V, 6)]
    with Llama(path, ctx=dev, n_ctx=32, activations="f32", kv_type="q8_0") as m:
        ids = m.generate(prompt, 8)
        assert len(ids) == 8 and all(0 <= t < V for t in ids)
        assert m.generate(prompt, 8) == ids
    ref = archs.reference("llama", w, np.asarray(prompt + ids[:-1]), "q8_0")
    tol = archs.kv_tolerance("llama", w, np.asarray(prompt + ids[:-1]), "q8_0")
    for i, t in enumerate(ids):
        row = ref[len(prompt) - 1 + i]
        assert row[t] >= row.max() - 2 * tol * np.abs(ref).max(), (i, t, int(row.argmax()))


def test_q8_cache_bytes(tmp_path, cpu, monkeypatch):
    """34 bytes per 32 values: switching an empty model's cache from f32 to
    q8_0 frees 2 * layers * kv heads * n_ctx * D * (4 - 34/32) bytes of the
    context's memory (up to the buffer's alignment), and back again."""
    _, path, _ = _model(tmp_path, monkeypatch, "llama", 5)
    n_ctx, L, D = 64, archs.ARCHS["llama"]["layers"], archs.ARCHS["llama"]["D"]
    values = 2 * L * archs.HKV * n_ctx * D
    with Llama(path, ctx=cpu, n_ctx=n_ctx, activations="f32", kv_type="f32") as m:
        used32 = cpu.memory_tier_usage()[0]
        tc.llama_set_kv_cache_type(m.handle, "q8_0")
        used8 = cpu.memory_tier_usage()[0]
        assert abs((used32 - used8) - (values * 4 - values // 32 * 34)) <= 1024, (used32, used8)
        tc.llama_set_kv_cache_type(m.handle, "f16")
        assert abs((cpu.memory_tier_usage()[0] - used8) - (values * 2 - values // 32 * 34)) <= 1024


def test_q8_cache_refusals_leave_the_model_usable(tmp_path, cpu, monkeypatch):
    """A head size that is not whole blocks (16) is TC_ERR_UNSUPPORTED naming
    it, at load (Llama(kv_type=...)) and on a loaded model, whose cache stays
    f16 and still matches the reference; unknown type names are
    TensorcoreValueErrors naming the accepted ones, other dtypes
    TC_ERR_UNSUPPORTED_DTYPE naming f16, f32 and q8_0, a model that is not
    empty TC_ERR_INVALID_ARG; after each the model evaluates as before."""
    rng = np.random.default_rng(17)
    small = tmp_path / "d16.gguf"
    w16 = archs.write_model(small, "mistral", archs.make_weights(rng, "mistral"))
    assert archs.ARCHS["mistral"]["D"] == 16
    expect_status(tc.TC_ERR_UNSUPPORTED, Llama, small, cpu, 32, "f32", None, False, None, "q8_0", text="multiple of 32")
    tokens = rng.integers(0, V, 6)
    with Llama(small, ctx=cpu, n_ctx=32, activations="f32") as m:
        expect_status(tc.TC_ERR_UNSUPPORTED, tc.llama_set_kv_cache_type, m.handle, "q8_0", text="this model's is 16")
        assert tc.llama_get_kv_cache_type(m.handle) == "f16"
        archs.check_logits(m.eval(tokens), archs.reference("mistral", w16, tokens, "f16"), "after the refusal",
                           tol=archs.kv_tolerance("mistral", w16, tokens, "f16"))

    rng, path, w = _model(tmp_path, monkeypatch, "llama", 6)
    tokens = rng.integers(0, V, 6)
    ref = archs.reference("llama", w, tokens, "q8_0")
    tol = archs.kv_tolerance("llama", w, tokens, "q8_0")
    with pytest.raises(tc.TensorcoreValueError) as e:
        Llama(path, ctx=cpu, kv_type="q8")
    assert "q8_0" in str(e.value), str(e.value)
    with Llama(path, ctx=cpu, n_ctx=32, activations="f32", kv_type="q8_0") as m:
        for bad in ("q8", "q4_0", "int4"):
            with pytest.raises(tc.TensorcoreValueError) as e:
                tc.llama_set_kv_cache_type(m.handle, bad)
            assert "q8_0" in str(e.value), str(e.value)
        expect_status(tc.TC_ERR_UNSUPPORTED_DTYPE, tc.llama_set_kv_cache_type, m.handle, "bf16", text="f16, f32 or q8_0")
        expect_status(tc.TC_ERR_UNSUPPORTED_DTYPE, tc.llama_set_kv_cache_type, m.handle, 99, text="dtype 99")
        assert tc.llama_get_kv_cache_type(m.handle) == "q8_0"
        archs.check_logits(m.eval(tokens), ref, "after bad types", tol=tol)
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_set_kv_cache_type, m.handle, "f32")  # not empty
        assert tc.llama_get_kv_cache_type(m.handle) == "q8_0" and m.n_past == 6
        m.reset()
        archs.check_logits(m.eval(tokens), ref, "after the refused switch", tol=tol)
