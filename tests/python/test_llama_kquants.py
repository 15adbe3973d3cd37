"""LLaMA models in the K-quant mixes llama-quantize writes (Q4_K_M: Q4_K
matrices with Q6_K for the output, attn_v and ffn_down; Q5_K_M the same
with Q5_K), from random blocks, against the float64 forward on the blocks
as the gguf package dequantises them. With f16 activations a device's
one-token steps run every product on 8-bit activations (gemv_q8: Q4_K and
Q5_K read in place, Q6_K from its split copy, separate q / k / v products
where their formats differ); the tests check the logits against the
reference and that the 8-bit path was the one taken; the mixes and files of
Q4_0 or Q8_0 alone at the same width check the streaming products (K a
multiple of 256) against the same steps without them."""

import sys

import numpy as np
import pytest

import llama_reference
import tensorcore as tc
from tensorcore.llama import Llama
from conftest import HAVE_CUDA, NEEDS_ROWS8, run_python

try:
    import gguf
except ImportError:
    gguf = None

# Rows of K-quants are whole superblocks of 256 weights.
E, L, H, HKV, F, V = 256, 2, 4, 2, 512, 300
D = E // H


def random_blocks(rng, fmt, n, k):
    """n x k random blocks of fmt, scaled so that a product with unit
    activations stays near unit size."""
    if fmt in ("q4_0", "q8_0"):  # blocks of 32: random weights as the gguf package quantises them
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        return gguf.quants.quantize(w, getattr(gguf.GGMLQuantizationType, fmt.upper()))
    blocks = n * k // 256
    if fmt == "q6_k":  # ql, qh, int8 scales, f16 d: w = d sc (q - 32)
        raw = np.empty((blocks, 210), np.uint8)
        raw[:, :192] = rng.integers(0, 256, (blocks, 192), dtype=np.uint8)
        raw[:, 192:208] = rng.integers(-32, 32, (blocks, 16), dtype=np.int8).view(np.uint8)
        d = rng.uniform(0.5, 1.5, blocks) / (18 * 18 * np.sqrt(k))
        raw[:, 208:210] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
        return raw
    size, qmid = (144, 7.5) if fmt == "q4_k" else (176, 15.5)  # d, dmin, 12 scale bytes, [qh,] qs
    raw = np.empty((blocks, size), np.uint8)
    d = rng.uniform(0.5, 1.5, blocks) / (32 * qmid * np.sqrt(k))
    raw[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    raw[:, 2:4] = (qmid * d).astype(np.float16).view(np.uint8).reshape(-1, 2)
    raw[:, 4:] = rng.integers(0, 256, (blocks, size - 4), dtype=np.uint8)
    return raw


def mix_type(mix, name, layer):
    """llama-quantize's _M mix on two layers: both keep attn_v and
    ffn_down at Q6_K (its use_more_bits rule), the output too; "q4_0" /
    "q8_0" / "q5_k": every matrix in that type."""
    if mix in ("q4_0", "q8_0", "q5_k"):
        return mix
    if name == "output.weight" or name.endswith(("attn_v.weight", "ffn_down.weight")):
        return "q6_k"
    return "q4_k" if mix == "q4_k_m" else "q5_k"


def module_shape():
    """The model's dimensions: the module's (some tests set them), unless given."""
    return dict(E=E, L=L, H=H, HKV=HKV, F=F, V=V)


def write_mix(path, mix, seed, shape=None):
    """Writes the model; returns the float64 weights the file holds."""
    E, L, H, HKV, F, V = ((shape or module_shape())[k] for k in ("E", "L", "H", "HKV", "F", "V"))
    D = E // H
    if gguf is None:
        pytest.skip("the gguf package is not installed")
    rng = np.random.default_rng(seed)
    Q = gguf.GGMLQuantizationType
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_context_length(256)
    wr.add_embedding_length(E)
    wr.add_block_count(L)
    wr.add_feed_forward_length(F)
    wr.add_head_count(H)
    wr.add_head_count_kv(HKV)
    wr.add_rope_dimension_count(D)
    wr.add_rope_freq_base(10000.0)
    wr.add_layer_norm_rms_eps(1e-5)
    held = {}

    def mat(name, n, k, layer=-1):
        t = mix_type(mix, name, layer)
        raw = random_blocks(rng, t, n, k).reshape(n, -1)  # a row of blocks per matrix row
        qt = getattr(Q, t.upper())
        wr.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qt)
        held[name] = gguf.quants.dequantize(raw, qt).astype(np.float64).reshape(n, k)

    def norm(name):
        a = (1 + 0.1 * rng.standard_normal(E)).astype(np.float32)
        wr.add_tensor(name, a)
        held[name] = a.astype(np.float64)

    mat("token_embd.weight", V, E)
    norm("output_norm.weight")
    mat("output.weight", V, E)
    for i in range(L):
        p = "blk.%d." % i
        norm(p + "attn_norm.weight")
        norm(p + "ffn_norm.weight")
        mat(p + "attn_q.weight", H * D, E, i)
        mat(p + "attn_k.weight", HKV * D, E, i)
        mat(p + "attn_v.weight", HKV * D, E, i)
        mat(p + "attn_output.weight", E, H * D, i)
        mat(p + "ffn_gate.weight", F, E, i)
        mat(p + "ffn_up.weight", F, E, i)
        mat(p + "ffn_down.weight", E, F, i)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return held


def reference(w, tokens, kv_f16, shape=None):
    shape = shape or module_shape()
    E, H = shape["E"], shape["H"]
    cfg = dict(E=E, H=H, HKV=shape["HKV"], D=E // H, layers=shape["L"], eps=1e-5, base=10000.0, rope_scale=1.0,
               kv_f16=kv_f16)
    return llama_reference.forward(cfg, w, tokens)


STEPS_SCRIPT = r"""
import numpy as np, tensorcore as tc
from tensorcore.llama import Llama
tokens = %(tokens)r
with tc.Context(%(device)r) as ctx, Llama(%(path)r, ctx=ctx, n_ctx=64, activations=%(act)r,
                                       kv_type=%(kv)r) as m:
    out = [m.eval(tokens[:6])] + [m.eval(tokens[i:i + 1]) for i in range(6, len(tokens))]
np.save(%(out)r, np.concatenate(out))
print(tc.cpu_last_kernel_name())
"""

WHERE = ["cpu-device-path",
         pytest.param("cuda", marks=pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device"))]


def run_steps(tmp_path, where, path, tokens, act, env, tag, kv="f16", kernel=False):
    """where: "cpu" (the host path), "cpu-device-path" or "cuda". kernel:
    return the CPU kernel of the last product (the output matrix's) too."""
    out = str(tmp_path / ("logits-%s.npy" % tag))
    device = "cuda" if where == "cuda" else "cpu"
    env = dict(env, **({"TC_LLAMA_DEVICE_PATH": "1"} if where == "cpu-device-path" else {}))
    r = run_python(STEPS_SCRIPT % {"tokens": tokens, "device": device, "path": str(path), "act": act, "kv": kv,
                                   "out": out},
                   env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return (np.load(out), r.stdout.split()[-1]) if kernel else np.load(out)


def rel_err(out, ref):
    assert out.shape == ref.shape and np.isfinite(out).all()
    return np.abs(out - ref).max() / np.abs(ref).max()


@pytest.mark.parametrize("mix", ["q4_k_m", "q5_k_m"])
@pytest.mark.parametrize("where", WHERE)
def test_k_quant_mix(tmp_path, mix, where):
    """f32 activations and cache: the file's blocks read exactly (f32
    rounding only).
    f16 activations: the steps on 8-bit activations within the contract's
    few 1e-2 of the reference, and different from the same run with the
    8-bit products off (TC_LLAMA_Q8=0), which equals the run without the
    Q6_K split copy (TC_LLAMA_SPLIT=0: Q6_K, and so the whole step, then
    has no 8-bit product)."""
    path = tmp_path / "m.gguf"
    w = write_mix(path, mix, seed={"q4_k_m": 71, "q5_k_m": 72}[mix])
    rng = np.random.default_rng(7)
    tokens = [int(t) for t in rng.integers(0, V, 14)]
    exact = run_steps(tmp_path, where, path, tokens, "f32", {}, "f32", kv="f32")
    assert rel_err(exact, reference(w, tokens, kv_f16=False)) < 2e-5
    q8 = run_steps(tmp_path, where, path, tokens, "f16", {}, "q8")
    no_q8 = run_steps(tmp_path, where, path, tokens, "f16", {"TC_LLAMA_Q8": "0"}, "no-q8")
    no_split = run_steps(tmp_path, where, path, tokens, "f16", {"TC_LLAMA_SPLIT": "0"}, "no-split")
    ref = reference(w, tokens, kv_f16=True)
    assert rel_err(q8, ref) < 5e-2
    assert rel_err(no_q8, ref) < 5e-2
    # The prefill (6 tokens) takes the same products in every run; the steps differ.
    np.testing.assert_array_equal(q8[:6], no_q8[:6])
    assert np.abs(q8[6:] - no_q8[6:]).max() > 1e-4 * np.abs(ref).max(), "the 8-bit products did not run"
    np.testing.assert_array_equal(no_split, no_q8)


@NEEDS_ROWS8
@pytest.mark.parametrize("mix", ["q4_k_m", "q5_k_m", "q5_k"])
def test_k_quant_mix_on_the_host_rows_interleaved_or_not(tmp_path, monkeypatch, mix):
    """The host path with f16 activations: Q4_K, Q5_K and Q6_K products read
    the model's copy with rows interleaved by eight (TC_LLAMA_ROWS8, on);
    off, the file's rows (Q5_K's on X in f32: it has no 8-bit row kernel).
    Both within the contract's few 1e-2 of the reference, and not the same
    numbers (the interleaved products ran). The _M mixes' Q6_K output (300
    rows: not whole groups of eight) takes the file's rows either way; a
    model of Q5_K alone with a vocabulary of 296 ends each step on its
    interleaved Q5_K output, the kernel that ran last."""
    if mix == "q5_k":
        monkeypatch.setattr(sys.modules[__name__], "V", 296)
    path = tmp_path / "m.gguf"
    w = write_mix(path, mix, seed={"q4_k_m": 73, "q5_k_m": 74, "q5_k": 75}[mix])
    rng = np.random.default_rng(8)
    tokens = [int(t) for t in rng.integers(0, V, 14)]
    ref = reference(w, tokens, kv_f16=True)
    rows8, k8 = run_steps(tmp_path, "cpu", path, tokens, "f16", {"TC_LLAMA_ROWS8": "1"}, "rows8", kernel=True)
    plain, k0 = run_steps(tmp_path, "cpu", path, tokens, "f16", {"TC_LLAMA_ROWS8": "0"}, "plain", kernel=True)
    assert rel_err(rows8, ref) < 5e-2
    assert rel_err(plain, ref) < 5e-2
    assert np.abs(rows8 - plain).max() > 0, "the interleaved products did not run"
    assert (k8 == "gemv_quantized/avx512_vnni_rows8") == (V % 8 == 0), k8
    assert k0 != "gemv_quantized/avx512_vnni_rows8", k0


@pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device")
@pytest.mark.parametrize("mix", ["q4_0", "q8_0", "q4_k_m", "q5_k_m"])
def test_streamed_products_quantising_their_own_x(tmp_path, mix):
    """Rows of 256 and 512 weights in Q4_0 / Q8_0 and the K-quant mixes: a
    GPU's one-token steps take the streaming products (gemv_q8_stream: W
    through shared memory, the fused products and down quantising their f32
    X themselves, right after the kernel that wrote it; Q4_K / Q5_K in
    place, Q6_K split, but for the output matrix, whose 300 rows of scales
    end mid-chunk). The logits are the same steps' with the streaming kernel
    off (TC_CUDA_Q8_STREAM=0: quantize_q8 and the warp-per-row products), up
    to the RMS sum's order (a last-bit rstd may move an 8-bit rounding), and
    within the 8-bit contract of the reference. (At these widths both
    kernels sum a row's units in the same order; the C++ suite checks which
    kernel a product took.)"""
    path = tmp_path / "m.gguf"
    w = write_mix(path, mix, seed={"q4_0": 74, "q8_0": 75, "q4_k_m": 77, "q5_k_m": 78}[mix])
    rng = np.random.default_rng(9)
    tokens = [int(t) for t in rng.integers(0, V, 14)]
    on = run_steps(tmp_path, "cuda", path, tokens, "f16", {"TC_CUDA_Q8_STREAM": "1"}, "on")
    off = run_steps(tmp_path, "cuda", path, tokens, "f16", {"TC_CUDA_Q8_STREAM": "0"}, "off")
    ref = reference(w, tokens, kv_f16=True)
    assert rel_err(on, ref) < 5e-2
    assert rel_err(off, ref) < 5e-2
    assert np.abs(on - off).max() <= 1e-3 * np.abs(ref).max()


@pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device")
def test_products_holding_x_in_registers(tmp_path):
    """A Q4_0 model 2304 wide with n_ff 4352: a GPU's one-token steps take
    gemv_q8_xreg for down (K 4352 > 4096, 8-bit X from quantize_q8; two
    slices a row) and the streaming kernel for the rest. The logits against
    the same steps with TC_CUDA_Q8_STREAM=0 (quantize_q8 and the
    warp-per-row products), up to the RMS sum's order, and the reference's
    8-bit bound."""
    shape = dict(E=2304, L=1, H=18, HKV=6, F=4352, V=V)
    path = tmp_path / "m.gguf"
    w = write_mix(path, "q4_0", seed=76, shape=shape)
    rng = np.random.default_rng(10)
    tokens = [int(t) for t in rng.integers(0, V, 10)]
    on = run_steps(tmp_path, "cuda", path, tokens, "f16", {"TC_CUDA_Q8_STREAM": "1"}, "on")
    off = run_steps(tmp_path, "cuda", path, tokens, "f16", {"TC_CUDA_Q8_STREAM": "0"}, "off")
    ref = reference(w, tokens, kv_f16=True, shape=shape)
    assert rel_err(on, ref) < 5e-2
    assert rel_err(off, ref) < 5e-2
    assert np.abs(on - off).max() <= 1e-3 * np.abs(ref).max()
    assert np.abs(on - off).max() > 0, "the products holding X in registers did not run"


@pytest.mark.parametrize("where", WHERE)
def test_batch_steps_of_16_rows_keep_x_in_f16(tmp_path, where, monkeypatch):
    """f16 activations, a batch step of 16 or more rows: the 8-bit step's
    products keep X in f16 (W dequantised, no 8-bit X), so every row is
    its sequence's f16 forward, within f16 rounding of the reference (the
    products' own kernels are checked in the C++ suite); the
    same steps taken 8 rows at a time (8-bit X) land elsewhere."""
    if where == "cpu-device-path":
        monkeypatch.setenv("TC_LLAMA_DEVICE_PATH", "1")
    path = tmp_path / "m.gguf"
    w = write_mix(path, "q4_k_m", seed=73)
    rng = np.random.default_rng(8)
    S = 16
    prompts = [[int(t) for t in rng.integers(0, V, 2 + s % 3)] for s in range(S)]
    steps = [[int(t) for t in rng.integers(0, V, S)] for _ in range(2)]
    with tc.Context("cpu" if where == "cpu-device-path" else "cuda") as ctx:
        def run(split):
            with Llama(path, ctx=ctx, n_ctx=32, activations="f16", kv_type="f16", max_sequences=S) as m:
                for s in range(S):
                    m.eval(prompts[s], seq=s)
                out = []
                for k in range(2):
                    parts = [m.decode_batch(list(range(a, a + split)), steps[k][a:a + split])
                             for a in range(0, S, split)]
                    out.append(np.concatenate(parts))
                return np.stack(out, axis=1)  # [S, 2, V]
        f16x, q8 = run(16), run(8)
    worst = 0.0
    for s in range(S):
        ref = reference(w, np.asarray(prompts[s] + [steps[k][s] for k in range(2)]), kv_f16=True)[-2:]
        worst = max(worst, rel_err(f16x[s], ref))
        assert rel_err(q8[s], ref) < 5e-2
    # f16 activations (the prompts' products round X and Y to f16 too): about
    # 1e-2 here, against about 3e-2 for the 8-bit steps.
    assert worst < 2e-2, "16-row steps against the reference: %.3g" % worst
    assert np.abs(f16x - q8).max() > 1e-4 * np.abs(f16x).max(), "the 16-row steps took the 8-bit products"
