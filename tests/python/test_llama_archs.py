"""Every architecture the LLaMA harness loads (llama, mistral, qwen2, qwen3,
gemma2, gemma3) against a float64 NumPy forward written for it, on small
random-weight files written by tensorcore's own GGUF writer: NEOX RoPE,
Q/K/V biases, per-head Q/K norms, GEGLU, the post-branch norms, scaled
embeddings, soft-capped scores and logits, sliding-window layers with their
own RoPE base, and a head size that is not n_embd / n_head. Prefill then
one-token steps on every device, and on the CPU also the way a GPU runs (the
device path: weights copied, chunks through GEMM, the decode attention).
Files whose metadata contradicts their tensors are refused naming the key."""

import sys
import zlib

import numpy as np
import pytest

import tensorcore as tc
import llama_reference
from conftest import DEVICES, HAVE_CUDA, run_python
from tensorcore.llama import Llama
from tensorcore.llama._quant import dequantize, quantize_q8_0

E, H, HKV, F, V, EPS = 64, 4, 2, 96, 300, 1e-6


def _vocab():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    toks += ["<extra%d>" % i for i in range(V - len(toks))]
    return toks, [0.0] * V, [2, 3, 3] + [6] * 256 + [5] * (V - 259)


# What each architecture does (the reference reads the same flags the model
# reads from the file; the file carries only what llama.cpp's files carry).
ARCHS = {
    "llama": dict(layers=2, D=E // H),
    "mistral": dict(layers=2, D=E // H),
    "qwen2": dict(layers=2, D=E // H, neox=True, bias=True),
    "qwen3": dict(layers=2, D=32, neox=True, qk_norm=True),
    "gemma2": dict(layers=2, D=E // H, neox=True, gemma=True, attn_cap=4.0, final_cap=6.0, window=5, period=2),
    "gemma3": dict(layers=6, D=32, neox=True, gemma=True, qk_norm=True, window=5, period=6, base_swa=10000.0),
}
BASE = 50000.0


def make_weights(rng, arch):
    a = ARCHS[arch]
    D, L = a["D"], a["layers"]
    s = lambda *shape: rng.standard_normal(shape) / np.sqrt(shape[-1])
    norm = lambda n: 1 + 0.2 * rng.standard_normal(n)
    w = {"token_embd.weight": rng.standard_normal((V, E)) * (0.1 if a.get("gemma") else 0.5),
         "output_norm.weight": norm(E)}
    if not a.get("gemma"):
        w["output.weight"] = s(V, E)
    for i in range(L):
        p = "blk.%d." % i
        w[p + "attn_norm.weight"] = norm(E)
        w[p + "ffn_norm.weight"] = norm(E)
        w[p + "attn_q.weight"] = s(H * D, E)
        w[p + "attn_k.weight"] = s(HKV * D, E)
        w[p + "attn_v.weight"] = s(HKV * D, E)
        w[p + "attn_output.weight"] = s(E, H * D)
        w[p + "ffn_gate.weight"] = s(F, E)
        w[p + "ffn_up.weight"] = s(F, E)
        w[p + "ffn_down.weight"] = s(E, F)
        if a.get("bias"):
            for t, n in (("q", H * D), ("k", HKV * D), ("v", HKV * D)):
                w[p + "attn_%s.bias" % t] = 0.5 * rng.standard_normal(n)
        if a.get("qk_norm"):
            w[p + "attn_q_norm.weight"] = norm(D)
            w[p + "attn_k_norm.weight"] = norm(D)
        if a.get("gemma"):
            w[p + "post_attention_norm.weight"] = norm(E)
            w[p + "post_ffw_norm.weight"] = norm(E)
    return w


def write_model(path, arch, weights, fmt="f32", skip=(), meta=None, raw=None):
    """Writes with tc.GgufWriter; returns the float64 weights the file holds.
    raw: name -> (bytes, ggml type, shape) written in place of that weight."""
    a = ARCHS[arch]
    w = tc.GgufWriter()
    held = {}
    try:
        k = arch + "."
        kv = {k + "context_length": 256, k + "embedding_length": E, k + "block_count": a["layers"],
              k + "feed_forward_length": F, k + "attention.head_count": H, k + "attention.head_count_kv": HKV,
              k + "rope.freq_base": BASE, k + "attention.layer_norm_rms_epsilon": EPS}
        if a["D"] != E // H:
            kv[k + "attention.key_length"] = kv[k + "attention.value_length"] = a["D"]
        for key, name in (("window", "attention.sliding_window"), ("attn_cap", "attn_logit_softcapping"),
                          ("final_cap", "final_logit_softcapping")):
            if key in a:
                kv[k + name] = a[key]
        kv.update(meta or {})
        w.add_string("general.architecture", arch)
        for key, v in kv.items():
            w.add_value(key, v)
        toks, scores, types = _vocab()
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", toks)
        w.add_array("tokenizer.ggml.scores", np.asarray(scores, np.float32))
        w.add_array("tokenizer.ggml.token_type", np.asarray(types, np.int32))
        for name, x in weights.items():
            if name in skip:
                continue
            if raw and name in raw:
                data, ggml_type, shape = raw[name]
                w.add_tensor(name, data, ggml_type=ggml_type, shape=shape, copy=True)
            elif x.ndim == 2 and fmt == "q8_0":
                q = quantize_q8_0(x.astype(np.float32))
                w.add_tensor(name, q, ggml_type="q8_0", shape=x.shape, copy=True)
                held[name] = dequantize(q.tobytes(), "q8_0", x.shape)
            else:
                f = x.astype(np.float32)
                w.add_tensor(name, f, copy=True)
                held[name] = f.astype(np.float64)
        w.write(str(path))
    finally:
        w.close()
    return held


# ---- the float64 reference (llama_reference.py) ----------------------------------------------

def swa_layers(arch):
    a = ARCHS[arch]
    if "window" not in a:
        return [False] * a["layers"]
    n = a["period"]
    return [i % n < n - 1 for i in range(a["layers"])]


def reference(arch, w, tokens, kv_type="f32"):
    """float64 logits [S, V] of the whole sequence (with K and V rounded to
    f16, or quantised to Q8_0 and back, where the model's cache is)."""
    cfg = dict(ARCHS[arch], E=E, H=H, HKV=HKV, eps=EPS, base=BASE, swa=swa_layers(arch), kv_f16=kv_type == "f16",
               kv_q8=kv_type == "q8_0")
    return llama_reference.forward(cfg, w, tokens)


def check_logits(out, ref, what, tol=5e-5):
    assert out.shape == ref.shape and np.isfinite(out).all(), what
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err < tol, "%s: relative error %.3g" % (what, err)


@pytest.fixture(scope="module", params=DEVICES)
def dev(request):
    c = tc.Context(request.param)
    yield c
    c.close()


def test_the_reference_sees_what_it_tests():
    """The reference's choices change its logits (a check of the test itself:
    a flag the reference ignored would let a model that ignores it pass)."""
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, V, 12)
    w = make_weights(rng, "gemma3")
    base = reference("gemma3", w, tokens)
    saved = dict(ARCHS["gemma3"])
    try:
        for change in (dict(neox=False), dict(qk_norm=False), dict(window=100), dict(base_swa=BASE), dict(gemma=False)):
            ARCHS["gemma3"] = dict(saved, **change)
            assert np.abs(reference("gemma3", w, tokens) - base).max() > 1e-3 * np.abs(base).max(), change
    finally:
        ARCHS["gemma3"] = saved


def kv_tolerance(arch, w, tokens, kv_type):
    """An f16 (or Q8_0) cache is checked against the reference with K and V
    rounded (quantised) as the cache does; what remains are the rare keys
    whose f32 and f64 values fall on either side of a rounding point (a Q8_0
    code's half step). The bound is a fraction of the rounding's own effect
    on the logits (which amplifying families such as gemma3 make larger), so
    a cache that did not round, or rounded elsewhere, fails."""
    if kv_type == "f32":
        return 5e-5
    rkv, r32 = reference(arch, w, tokens, kv_type), reference(arch, w, tokens, "f32")
    return max(5e-5, 0.4 * np.abs(rkv - r32).max() / np.abs(r32).max())


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_prefill_then_steps_match_reference(tmp_path, dev, arch, kv_type):
    rng = np.random.default_rng(zlib.crc32(arch.encode()))  # not hash(): that changes from run to run
    path = tmp_path / "m.gguf"
    w = write_model(path, arch, make_weights(rng, arch))
    tokens = rng.integers(0, V, 14)
    ref = reference(arch, w, tokens, kv_type)
    tol = kv_tolerance(arch, w, tokens, kv_type)
    with Llama(path, ctx=dev, n_ctx=64, activations="f32", kv_type=kv_type) as m:
        assert m.config["head_dim"] == ARCHS[arch]["D"]
        check_logits(m.eval(tokens[:8]), ref[:8], "%s prefill" % arch, tol=tol)
        for i in range(8, 14):
            check_logits(m.eval(tokens[i:i + 1]), ref[i:i + 1], "%s step %d" % (arch, i), tol=tol)
        m.reset()
        check_logits(m.eval(tokens[:3]), ref[:3], "%s after reset" % arch, tol=tol)


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "gemma2", "gemma3"])
def test_device_path_on_cpu(tmp_path, cpu_device_path, arch, kv_type):
    """The way a GPU runs, on the CPU: a prefill of 36 (dequantise + GEMM), a
    chunk of 4, then one-token steps (fused [q;k;v] products and the decode
    attention with its window and soft-capping); f16 activations close."""
    rng = np.random.default_rng(7 + len(arch))
    path = tmp_path / "m.gguf"
    w = write_model(path, arch, make_weights(rng, arch), fmt="q8_0")
    tokens = rng.integers(0, V, 44)
    ref = reference(arch, w, tokens, kv_type)
    tol = kv_tolerance(arch, w, tokens, kv_type)
    with Llama(path, ctx=cpu_device_path, n_ctx=64, activations="f32", kv_type=kv_type) as m:
        check_logits(m.eval(tokens[:36]), ref[:36], "%s prefill 36" % arch, tol=tol)
        check_logits(m.eval(tokens[36:40]), ref[36:40], "%s chunk of 4" % arch, tol=tol)
        for i in range(40, 44):
            check_logits(m.eval(tokens[i:i + 1]), ref[i:i + 1], "%s step %d" % (arch, i), tol=tol)
        tc.llama_set_activations(m.handle, "f16")
        m.reset()
        out = np.concatenate([m.eval(tokens[:36]), m.eval(tokens[36:37])])
        err = np.abs(out - ref[:37]).max() / np.abs(ref[:37]).max()
        assert np.isfinite(out).all() and err < 5e-2, err


STEPS_8BIT = r"""
import numpy as np, tensorcore as tc
from tensorcore.llama import Llama
prompts, steps = %(prompts)r, %(steps)r
with tc.Context(%(device)r) as ctx:
    with Llama(%(path)r, ctx=ctx, n_ctx=32, activations="f16", kv_type="f32", max_sequences=3) as m:
        for s, p in enumerate(prompts):
            m.eval(p, seq=s)
        batch = np.stack([m.decode_batch([1, 2, 0], [st[1], st[2], st[0]]) for st in steps])  # [step][row][V]
    alone = []
    with Llama(%(path)r, ctx=ctx, n_ctx=32, activations="f16", kv_type="f32") as one:
        for s, p in enumerate(prompts):
            one.reset()
            one.eval(p)
            alone.append(np.concatenate([one.eval([st[s]]) for st in steps]))
np.save(%(out)r, np.stack([batch[:, [2, 0, 1]].transpose(1, 0, 2), np.stack(alone)]))  # [batch|alone][seq][step][V]
"""


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("where", ["cpu-device-path",
                                   pytest.param("cuda", marks=pytest.mark.skipif(not HAVE_CUDA,
                                                                                 reason="no usable CUDA device"))])
def test_8bit_steps_of_every_family(tmp_path, arch, where):
    """f16 activations on a device: every family's one-token steps and batch
    steps take the 8-bit products (gemv_q8), with its biases, Q/K norms,
    post-branch norms and GEGLU between them. Within the 8-bit contract's
    few 1e-2 of the reference; not the numbers of the same steps with the
    8-bit products off (TC_LLAMA_Q8=0, read once a process), so they ran;
    and a batch step's row is its sequence's own one-token step up to f32
    rounding (a batch step runs the parts of the fused [q; k; v] and
    [gate; up] matrices as products of their own where the family has
    per-part work or GEGLU)."""
    rng = np.random.default_rng(zlib.crc32(("8bit" + arch).encode()))
    path = tmp_path / "m.gguf"
    w = write_model(path, arch, make_weights(rng, arch), fmt="q8_0")
    prompts = [[int(t) for t in rng.integers(0, V, n)] for n in (7, 2, 4)]
    steps = [[int(t) for t in rng.integers(0, V, 3)] for _ in range(3)]
    env = {"TC_LLAMA_DEVICE_PATH": "1"} if where == "cpu-device-path" else {}
    runs = {}
    for q8 in ("1", "0"):
        out = str(tmp_path / ("logits%s.npy" % q8))
        r = run_python(STEPS_8BIT % {"prompts": prompts, "steps": steps, "device": "cuda" if where == "cuda" else "cpu",
                                     "path": str(path), "out": out}, env=dict(env, TC_LLAMA_Q8=q8))
        assert r.returncode == 0, r.stderr[-3000:]
        runs[q8] = np.load(out)
    ref = np.stack([reference(arch, w, np.asarray(p + [st[s] for st in steps]))[-3:] for s, p in enumerate(prompts)])
    scale = np.abs(ref).max()
    # On a GPU a batch step's products are other kernels than a one-token
    # step's (other summation orders), which the gemma families' scales amplify.
    alone_tol = 1e-5 if where == "cpu-device-path" else 1e-4
    for q8, (batch, alone) in runs.items():
        assert np.isfinite(batch).all() and np.isfinite(alone).all()
        assert np.abs(alone - ref).max() < 5e-2 * scale, "TC_LLAMA_Q8=%s alone against the reference" % q8
        err = np.abs(batch - alone).max() / np.abs(alone).max()
        assert err <= alone_tol, "TC_LLAMA_Q8=%s: batch rows vs alone %.3g" % (q8, err)
    assert np.abs(runs["1"][1] - runs["0"][1]).max() > 1e-4 * scale, "the 8-bit products did not run"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
@pytest.mark.parametrize("where", ["cpu-device-path",
                                   pytest.param("cuda", marks=pytest.mark.skipif(not HAVE_CUDA,
                                                                                 reason="no usable CUDA device"))])
def test_8bit_steps_at_streaming_sizes(tmp_path, arch, where, monkeypatch):
    """The test above at n_embd 256 and n_ff 512 (K a multiple of 256), the
    sizes at which a GPU runs the fused products on its one-row streaming
    kernel with their epilogues (SwiGLU / GEGLU, RoPE rows, X quantised
    inside); the models above are too small to reach it."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "E", 256)
    monkeypatch.setattr(module, "F", 512)
    test_8bit_steps_of_every_family(tmp_path, arch, where)


@pytest.fixture
def cpu_device_path(monkeypatch):
    monkeypatch.setenv("TC_LLAMA_DEVICE_PATH", "1")
    c = tc.Context("cpu")
    yield c
    c.close()


def test_window_pattern_and_rope_base_from_the_file(tmp_path, cpu):
    """gemma3 with attention.sliding_window_pattern = 3 and its own
    rope.freq_base_swa: the file's values, not the defaults."""
    rng = np.random.default_rng(11)
    path = tmp_path / "m.gguf"
    w = write_model(path, "gemma3", make_weights(rng, "gemma3"),
                    meta={"gemma3.attention.sliding_window_pattern": 3, "gemma3.rope.freq_base_swa": 500.0})
    tokens = rng.integers(0, V, 12)
    saved = dict(ARCHS["gemma3"])
    ARCHS["gemma3"] = dict(saved, period=3, base_swa=500.0)
    try:
        ref = reference("gemma3", w, tokens)
    finally:
        ARCHS["gemma3"] = saved
    with Llama(path, ctx=cpu, n_ctx=32, activations="f32", kv_type="f32") as m:
        check_logits(m.eval(tokens), ref, "gemma3 pattern 3")


@pytest.fixture(scope="module")
def cpu():
    c = tc.Context("cpu")
    yield c
    c.close()


@pytest.mark.parametrize("arch,skip,meta,text", [
    ("qwen2", ("blk.1.attn_k.bias",), None, "blk.1.attn_k.bias"),
    ("qwen3", ("blk.0.attn_q_norm.weight",), None, "blk.0.attn_q_norm.weight"),
    ("gemma3", ("blk.2.post_ffw_norm.weight",), None, "blk.2.post_ffw_norm.weight"),
    ("gemma3", (), {"gemma3.attention.value_length": 16}, "value_length"),
    ("qwen3", (), {"qwen3.rope.dimension_count": 16}, "rope.dimension_count"),
    ("gemma2", (), {"gemma2.attention.sliding_window_pattern": [True]}, "sliding_window_pattern"),
    ("gemma2", (), {"gemma2.attn_logit_softcapping": "fifty"}, "attn_logit_softcapping"),
])
def test_contradicting_metadata_is_refused_by_name(tmp_path, cpu, arch, skip, meta, text):
    rng = np.random.default_rng(5)
    path = tmp_path / "m.gguf"
    write_model(path, arch, make_weights(rng, arch), skip=skip, meta=meta)
    with pytest.raises(tc.TensorcoreError) as e:
        Llama(path, ctx=cpu, n_ctx=32)
    assert text in str(e.value)
    assert e.value.status in (tc.TC_ERR_UNSUPPORTED, tc.TC_ERR_CORRUPT)


def test_head_counts_that_contradict_the_tensors(tmp_path, cpu):
    """attention.head_count 8 with tensors made for 4 heads: the first
    tensor whose shape disagrees is named."""
    rng = np.random.default_rng(6)
    path = tmp_path / "m.gguf"
    write_model(path, "qwen3", make_weights(rng, "qwen3"), meta={"qwen3.attention.head_count": 8})
    with pytest.raises(tc.TensorcoreError, match="attn_q.weight"):
        Llama(path, ctx=cpu, n_ctx=32)


def test_unknown_architecture_is_refused_by_name(tmp_path, cpu):
    rng = np.random.default_rng(8)
    path = tmp_path / "m.gguf"
    weights = make_weights(rng, "llama")
    saved = ARCHS.get("phi3")
    ARCHS["phi3"] = ARCHS["llama"]
    try:
        write_model(path, "phi3", weights)
    finally:
        del ARCHS["phi3"]
    with pytest.raises(tc.TensorcoreError, match="'phi3'") as e:
        Llama(path, ctx=cpu, n_ctx=32)
    assert e.value.status == tc.TC_ERR_UNSUPPORTED
    assert saved is None


def test_a_tensor_type_without_kernels_is_refused_naming_tensor_and_type(tmp_path, cpu):
    """An IQ4_NL matrix (a type llama.cpp files carry that tensorcore does not
    compute with): refused naming the tensor and the type."""
    rng = np.random.default_rng(9)
    path = tmp_path / "m.gguf"
    iq = rng.integers(0, 256, F * E // 32 * 18, dtype=np.uint8)  # 18 bytes per 32 weights
    write_model(path, "llama", make_weights(rng, "llama"), raw={"blk.1.ffn_up.weight": (iq, "IQ4_NL", (F, E))})
    with pytest.raises(tc.TensorcoreError, match=r"'blk\.1\.ffn_up\.weight' has type IQ4_NL") as e:
        Llama(path, ctx=cpu, n_ctx=32)
    assert e.value.status == tc.TC_ERR_UNSUPPORTED


def test_block_count_beyond_the_tensors_is_refused_before_sizing(tmp_path, cpu):
    """block_count 2^31 - 1: refused naming the key, not a multi-gigabyte
    allocation of layers."""
    rng = np.random.default_rng(10)
    path = tmp_path / "m.gguf"
    write_model(path, "gemma3", make_weights(rng, "gemma3"), meta={"gemma3.block_count": 2 ** 31 - 1})
    with pytest.raises(tc.TensorcoreError, match="block_count") as e:
        Llama(path, ctx=cpu, n_ctx=32)
    assert e.value.status == tc.TC_ERR_CORRUPT
