"""LLaMA prefill and decode on the CPU, beside llama.cpp on the same files.

Models: `--model` (repeatable) names GGUF files; `random-1.1b` (the default)
is a 1.1B LLaMA-shaped model with random Q4_0 weights. Its shape
(TinyLlama-1.1B's): n_embd 2048, 22 layers, 32 heads, 4 kv heads,
n_ff 5632, vocabulary 32000, every matrix Q4_0 (token_embd and output too),
norms F32. The file (~0.6 GB) is written once (random Q4_0 blocks: random
nibbles, f16 scales of an initialised model) to $TC_BENCH_DIR or the system's
temporary directory and reused.

Measures, on TC_NUM_THREADS threads (default 2): prefill of 64 tokens
(median of a few runs, one eval of 64 tokens from position 0) and decode
(one-token evals after it, median tok/s over 32 steps; with --depth N after
a context of N tokens instead, and llama.cpp's decode with `-d N`). Decode
streams every weight once per token: bytes/token = all matrices except
token_embd (one row is read; all of it when it is also the output matrix)
plus the f16 KV cache read (a sliding-window layer's window of it); GB/s = bytes/token * tok/s, compared with NumPy's read
bandwidth in the same run (1 and 2 threads over 1 GiB). --write appends a
dated section to bench/results/llama-cpu.md (the date, the processor, the
models, the load), after the earlier ones.

The random file carries a SentencePiece vocabulary (the default model's,
padded to 32000 pieces), so llama.cpp loads it too: --llama-bench PATH runs
llama.cpp's `llama-bench` on each file with the same threads and token
counts right after ours and prints both side by side with the ratios.
"""

import argparse
import datetime
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

import numpy as np  # noqa: E402

E, L, H, HKV, F, V = 2048, 22, 32, 4, 5632, 32000
D = E // H


def q4_0_random(rng, n, k):
    """n x k random Q4_0 weights: f16 scale ~ 1/(8 sqrt(k)) per block of 32, random nibbles."""
    blocks = n * k // 32
    raw = np.empty((blocks, 18), np.uint8)
    d = (rng.uniform(0.5, 1.5, blocks) / (8 * np.sqrt(k) / 2)).astype(np.float16)
    raw[:, :2] = d.view(np.uint8).reshape(-1, 2)
    raw[:, 2:] = rng.integers(0, 256, (blocks, 16), dtype=np.uint8)
    return raw.reshape(-1)


def q4_k_random(rng, n, k, size=144, qmid=7.5):
    """n x k random Q4_K weights (144-byte blocks of 256: d, dmin, twelve
    bytes of 6-bit scales and mins, 128 bytes of nibbles): w = d sc q - dmin m
    with dmin ~ 7.5 d, so the weights centre on 0 at ~1/sqrt(k). Q5_K:
    size=176 (32 bytes of fifth bits before the nibbles), qmid=15.5."""
    blocks = n * k // 256
    raw = np.empty((blocks, size), np.uint8)
    d = rng.uniform(0.5, 1.5, blocks) / (32 * qmid * np.sqrt(k))
    raw[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    raw[:, 2:4] = (qmid * d).astype(np.float16).view(np.uint8).reshape(-1, 2)
    raw[:, 4:] = rng.integers(0, 256, (blocks, size - 4), dtype=np.uint8)
    return raw.reshape(-1)


def q5_k_random(rng, n, k):
    """n x k random Q5_K weights (176-byte blocks of 256), as q4_k_random's
    with codes 0..31."""
    return q4_k_random(rng, n, k, size=176, qmid=15.5)


def q6_k_random(rng, n, k):
    """n x k random Q6_K weights (210-byte blocks of 256: 128 bytes of low
    nibbles, 64 of high bits, 16 int8 scales, f16 d): w = d sc (q - 32)."""
    blocks = n * k // 256
    raw = np.empty((blocks, 210), np.uint8)
    raw[:, :192] = rng.integers(0, 256, (blocks, 192), dtype=np.uint8)
    raw[:, 192:208] = rng.integers(-32, 32, (blocks, 16), dtype=np.int8).view(np.uint8)
    d = rng.uniform(0.5, 1.5, blocks) / (18 * 18 * np.sqrt(k))
    raw[:, 208:210] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(-1)


RANDOM_BLOCKS = {"q4_0": q4_0_random, "q4_k": q4_k_random, "q5_k": q5_k_random, "q6_k": q6_k_random}
# The random models: the default Q4_0 one and llama-quantize's K-quant mixes (mix_type).
MIXES = ["q4_0", "q4_k_m", "q5_k_m"]


def use_more_bits(i, n):
    """llama-quantize's rule for the layers whose attn_v / ffn_down a _M mix
    keeps at more bits: the first and last eighth, and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def mix_type(mix, name, layer, n_layer):
    """The ggml type of a matrix in a file quantised as `mix`: q4_0 (every
    matrix), or q4_k_m / q5_k_m as llama-quantize writes them (Q4_K / Q5_K,
    token_embd too, with Q6_K for the output matrix and, on use_more_bits
    layers, attn_v and ffn_down)."""
    if mix == "q4_0":
        return "q4_0"
    if name == "output.weight":
        return "q6_k"
    if name.endswith(("attn_v.weight", "ffn_down.weight")) and use_more_bits(layer, n_layer):
        return "q6_k"
    return {"q4_k_m": "q4_k", "q5_k_m": "q5_k"}[mix]


def write_model(path, E=E, L=L, H=H, HKV=HKV, F=F, V=V, name="random-1.1b-q4_0", seed=1100, mix="q4_0",
                arch="llama", D=None):
    """Writes a random LLaMA-shaped model of the given shape (default: this
    bench's 1.1B) through tensorcore's own GGUF writer, every matrix Q4_0
    or (mix="q4_k_m", "q5_k_m") the Q4_K_M / Q5_K_M mix (mix_type).
    arch "qwen2" adds Qwen2's q / k / v biases; "gemma3" Gemma 3's head size
    D, Q/K norms, post-branch norms, GEGLU, tied output and sliding windows
    (every sixth layer global); both take NEOX RoPE from the architecture."""
    import tensorcore as tc
    from tensorcore.llama._default import vocabulary
    D = D or E // H
    rng = np.random.default_rng(seed)
    w = tc.GgufWriter()
    w.add_string("general.architecture", arch)
    w.add_string("general.name", name)
    toks, scores, types = vocabulary()
    for i in range(V - len(toks)):  # filler pieces, never preferred by the tokenizer
        toks.append("\u2581filler%d" % i)
        scores.append(-1e4 - i)
        types.append(1)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", toks)
    w.add_array("tokenizer.ggml.scores", np.asarray(scores, np.float32))
    w.add_array("tokenizer.ggml.token_type", np.asarray(types, np.int32))
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    keys = [("context_length", 8192 if arch != "llama" else 2048), ("embedding_length", E), ("block_count", L),
            ("feed_forward_length", F), ("attention.head_count", H), ("attention.head_count_kv", HKV),
            ("rope.dimension_count", D), ("vocab_size", V)]
    if D != E // H:
        keys += [("attention.key_length", D), ("attention.value_length", D)]
    if arch == "gemma3":
        keys += [("attention.sliding_window", 1024)]
    for key, v in keys:
        w.add_uint32(arch + "." + key, v)
    w.add_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-6 if arch == "gemma3" else 1e-5)
    w.add_float32(arch + ".rope.freq_base", {"llama": 10000.0, "qwen2": 1e6, "gemma3": 1e6}[arch])

    def mat(name, n, k, layer=-1):
        t = mix_type(mix, name, layer, L)
        w.add_tensor(name, RANDOM_BLOCKS[t](rng, n, k), ggml_type=t, shape=(n, k))

    def norm(name, n=E):
        w.add_tensor(name, np.ones(n, np.float32))

    def bias(name, n):
        w.add_tensor(name, (0.02 * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", V, E)
    for i in range(L):
        p = "blk.%d." % i
        norm(p + "attn_norm.weight")
        mat(p + "attn_q.weight", H * D, E, i)
        mat(p + "attn_k.weight", HKV * D, E, i)
        mat(p + "attn_v.weight", HKV * D, E, i)
        if arch == "qwen2":
            bias(p + "attn_q.bias", H * D), bias(p + "attn_k.bias", HKV * D), bias(p + "attn_v.bias", HKV * D)
        if arch == "gemma3":
            norm(p + "attn_q_norm.weight", D), norm(p + "attn_k_norm.weight", D)
            norm(p + "post_attention_norm.weight"), norm(p + "post_ffw_norm.weight")
        mat(p + "attn_output.weight", E, H * D, i)
        norm(p + "ffn_norm.weight")
        mat(p + "ffn_gate.weight", F, E, i)
        mat(p + "ffn_up.weight", F, E, i)
        mat(p + "ffn_down.weight", E, F, i)
    norm("output_norm.weight")
    if arch != "gemma3":  # Gemma ties its output to token_embd
        mat("output.weight", V, E)
    tmp = str(path) + ".tmp"
    w.write(tmp)
    w.close()
    os.replace(tmp, path)


def describe(tc, path, kv_bytes=2):
    """(short description, bytes read per decoded token at n_past = 0, a
    function of the positions in the cache giving the KV bytes a decoded
    token reads with a cache of kv_bytes per element: 2 for the default f16
    cache) of a GGUF file. Sliding-window layers (Gemma 2 and 3, as the
    loader reads them) read only their window's positions."""
    f = tc.GgufFile(path)
    try:
        meta = f.metadata()
        tensors = f.tensors()
    finally:
        f.close()
    arch = meta["general.architecture"]
    g = lambda k: int(meta["%s.%s" % (arch, k)])  # noqa: E731
    n_layer, n_embd, n_head = g("block_count"), g("embedding_length"), g("attention.head_count")
    n_kv = int(meta.get("%s.attention.head_count_kv" % arch, n_head))
    head_dim = int(meta.get("%s.attention.key_length" % arch, n_embd // n_head))
    names = {t["name"]: t for t in tensors}
    types = sorted({t["type_name"] for t in tensors if len(t["dims"]) > 1 and t["name"] != "token_embd.weight"})
    weights = sum(t["n_bytes"] for t in tensors if len(t["dims"]) > 1 and t["name"] != "token_embd.weight")
    emb = names["token_embd.weight"]
    tied = "output.weight" not in names
    weights += emb["n_bytes"] if tied else emb["n_bytes"] // emb["dims"][-1]
    vocab = emb["dims"][-1]
    desc = "%s: %s, %d layers, n_embd %d, %d heads, %d kv heads, vocab %d, matrices %s%s, %.0f MB file" % (
        os.path.basename(path), meta.get("general.name", arch), n_layer, n_embd, n_head, n_kv, vocab,
        "/".join(types), ", token_embd %s%s" % (emb["type_name"], " (tied output)" if tied else ""),
        os.path.getsize(path) / 1e6)
    window = int(meta.get("%s.attention.sliding_window" % arch, 4096 if arch == "gemma2" else 0)) \
        if arch in ("gemma2", "gemma3") else 0
    pattern = meta.get("%s.attention.sliding_window_pattern" % arch, 2 if arch == "gemma2" else 6)
    if isinstance(pattern, (list, tuple)):
        windowed = [bool(x) for x in pattern]
    else:
        windowed = [pattern == 0 or i % pattern < pattern - 1 for i in range(n_layer)]
    per_layer = 2 * n_kv * head_dim * kv_bytes

    def kv_read(positions):
        return sum(per_layer * (min(positions, window) if window and w else positions) for w in windowed)
    return desc, weights, kv_read


def read_bandwidth(nbytes=1 << 30, reps=5):
    """(1-thread, 2-thread) read GB/s over nbytes: the maximum of a uint64
    array, each thread half of it (NumPy drops the GIL in the reduction).
    The decode reads its weights once a token, so this, not a copy (which
    also writes), is its ceiling: on an AMD Zen 5 VM it measures 67 GB/s on
    two threads against 27 for a copy's read side, near a C loop of 512-bit
    loads (72-75)."""
    src = np.ones(nbytes // 8, np.uint64)
    half = src.size // 2

    def one():
        src.max()

    def two():
        t = threading.Thread(target=src[:half].max)
        t.start()
        src[half:].max()
        t.join()
    out = []
    for fn in (one, two):
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        out.append(nbytes / np.median(ts) / 1e9)
    return out


def run_llama_bench(args, path):
    """llama.cpp's prefill and decode tok/s on the same file (llama-bench -o json, its default settings;
    with --depth, its decode again after that many tokens of context, `-d`)."""
    import json
    import subprocess
    # With --depth the decode is measured only at that depth (below).
    cmd = [args.llama_bench, "-m", path, "-t", str(args.threads), "-p", str(args.prefill),
           "-n", str(0 if args.depth else args.decode), "-r", "3", "-o", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:  # some builds crash in their repacked (AMX) Q4_0 path; plain ggml kernels then
        print("llama-bench failed (exit %d); again with --repack 0" % proc.returncode)
        cmd += ["--repack", "0"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    res = {"binary": os.path.basename(args.llama_bench) + (" --repack 0" if "--repack" in cmd else ""), "build": "?"}
    for r in json.loads(proc.stdout):
        res["build"] = r.get("build_commit", "?")
        res["pp" if r["n_prompt"] else "tg"] = float(r["avg_ts"])
    if args.depth:
        cmd[cmd.index("-p") + 1], cmd[cmd.index("-n") + 1] = "0", str(args.decode)
        proc = subprocess.run(cmd + ["-d", str(args.depth)], capture_output=True, text=True, check=True)
        res["tg"] = float(json.loads(proc.stdout)[0]["avg_ts"])
    print("llama.cpp (%s): prefill %d tokens %.1f tok/s; decode%s %.2f tok/s" % (
        res["build"], args.prefill, res["pp"], " after %d tokens" % args.depth if args.depth else "", res["tg"]))
    return res


def time_prefill_decode(m, prompt, n_decode, context=None):
    """(seconds of each of 3 prefills of `prompt` from position 0, seconds
    of each of n_decode greedy one-token steps after the last, or after
    `context` evaluated from position 0 when given) on a warmed-up model."""
    prefill = []
    for _ in range(3):
        m.reset()
        t0 = time.perf_counter()
        logits = m.eval(prompt, last_only=True)
        prefill.append(time.perf_counter() - t0)
    if context is not None:
        m.reset()
        logits = m.eval(context, last_only=True)
    steps = []
    tok = int(np.argmax(logits))
    for _ in range(n_decode):
        t0 = time.perf_counter()
        logits = m.eval([tok], last_only=True)
        steps.append(time.perf_counter() - t0)
        tok = int(np.argmax(logits))
    return prefill, steps


def measure(args, path, mode):
    """(prefill tok/s, decode tok/s median, decode tok/s best) of our model on `path`."""
    from tensorcore.llama import Llama
    with Llama(path, n_ctx=max(args.prefill, args.depth) + args.decode + 8, activations=mode) as m:
        rng = np.random.default_rng(0)
        prompt = rng.integers(3, m.n_vocab, args.prefill)
        context = rng.integers(3, m.n_vocab, args.depth) if args.depth else None
        # Warm-up: fault the mapping in and start the thread pool.
        m.eval(prompt[:8], last_only=True)
        prefill, steps = time_prefill_decode(m, prompt, args.decode, context)
        info = m.ctx.device_info()
    return args.prefill / np.median(prefill), 1.0 / np.median(steps), 1.0 / np.min(steps), info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=int(os.environ.get("TC_NUM_THREADS", "2")))
    ap.add_argument("--prefill", type=int, default=64)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--depth", type=int, default=0,
                    help="decode after a context of this many tokens (llama.cpp: llama-bench -d); 0: after the prefill")
    ap.add_argument("--model", action="append",
                    help="GGUF file to measure (repeatable); random-1.1b (the default) is the random 1.1B Q4_0 "
                    "model, random-1.1b-q4_k_m / random-1.1b-q5_k_m the same shape as llama-quantize's Q4_K_M / "
                    "Q5_K_M mix")
    ap.add_argument("--activations", choices=["f32", "f16", "both"], default="both",
                    help="activations of the weight products (both: measure each)")
    ap.add_argument("--write", action="store_true", help="append a dated section to bench/results/llama-cpu.md")
    ap.add_argument("--llama-bench", metavar="PATH", help="llama.cpp's llama-bench, run on each file after ours")
    args = ap.parse_args()
    os.environ["TC_NUM_THREADS"] = str(args.threads)
    import tensorcore as tc

    paths = []
    for name in args.model or ["random-1.1b"]:
        if name not in ["random-1.1b"] + ["random-1.1b-" + m for m in MIXES[1:]]:
            paths.append(name)
            continue
        mix = name[len("random-1.1b-"):] if name != "random-1.1b" else "q4_0"
        path = os.path.join(os.environ.get("TC_BENCH_DIR", tempfile.gettempdir()),
                            "tensorcore-random-1.1b-%s-v2.gguf" % mix)
        if not os.path.exists(path):
            t0 = time.perf_counter()
            write_model(path, name="random-1.1b-" + mix, mix=mix)
            print("wrote %s (%.2f GB) in %.1f s" % (path, os.path.getsize(path) / 1e9, time.perf_counter() - t0))
        paths.append(path)
    load_before = os.getloadavg()
    c1, c2 = read_bandwidth()
    modes = ["f32", "f16"] if args.activations == "both" else [args.activations]
    sections = []
    info = None
    for path in paths:
        desc, weights, kv_read = describe(tc, path)
        bpt = weights + kv_read((args.depth or args.prefill) + args.decode // 2)
        print(desc)
        rows = []
        for mode in modes:
            p_tok_s, d_tok_s, best, info = measure(args, path, mode)
            gbs = bpt * d_tok_s / 1e9
            rows.append((mode, p_tok_s, d_tok_s, best, gbs))
            print("  activations %s: prefill %d tokens %.1f tok/s (median of 3); decode %.2f tok/s median, %.2f best, "
                  "%.1f MB/token -> %.1f GB/s" % (mode, args.prefill, p_tok_s, d_tok_s, best, bpt / 1e6, gbs))
        peer = run_llama_bench(args, path) if args.llama_bench else None
        if peer:
            for mode, p_tok_s, d_tok_s, _, _ in rows:
                print("  tensorcore (%s) / llama.cpp: prefill %.2fx, decode %.2fx" % (
                    mode, p_tok_s / peer["pp"], d_tok_s / peer["tg"]))
        sections.append((desc, bpt, rows, peer))
    load_after = os.getloadavg()
    print("NumPy read bandwidth: 1 thread %.1f GB/s, 2 threads %.1f GB/s" % (c1, c2))
    print("load average (1 min) before / after: %.2f / %.2f" % (load_before[0], load_after[0]))
    if args.write:
        loaded = max(load_before[0], load_after[0]) > args.threads * 0.75
        lines = [
            "## %s, %s, %d threads, %s" % (datetime.date.today().isoformat(), info.name, args.threads,
                                          ", ".join(desc.split(":")[0] for desc, _, _, _ in sections)),
            "",
            "`python bench/llama_cpu.py --write%s%s%s%s`." % (
                "".join(" --model %s" % os.path.basename(name) for name in args.model or []),
                " --threads %d" % args.threads if args.threads != 2 else "",
                " --depth %d" % args.depth if args.depth else "",
                " --activations %s" % args.activations if args.activations != "both" else ""),
            "",
            "- Processor: %s (%s), %d threads (TC_NUM_THREADS), features %s" % (
                info.name, platform.machine(), args.threads, info.features),
            "- Load average (1 min) before / after: %.2f / %.2f%s" % (
                load_before[0], load_after[0],
                " -- **the machine is shared and was loaded; figures are pessimistic**" if loaded
                else " (the machine is shared with other builds)"),
            "- Prefill: one eval of %d tokens from position 0, median of 3. Decode: median (and best) of %d "
            "one-token evals after %s." % (args.prefill, args.decode,
                                          "a context of %d tokens (llama.cpp: `-d %d`)" % (args.depth, args.depth)
                                          if args.depth else "it"),
            "- Bytes per decoded token: every matrix but token_embd, one embedding row (all of token_embd when it "
            "is also the output matrix), the f16 KV cache read (a sliding-window layer's window of it). GB/s = that "
            "times decode tok/s.",
            "- Read: NumPy read bandwidth over 1 GiB (a maximum over it) in the same run: 1 thread %.1f GB/s, 2 threads %.1f GB/s."
            % (c1, c2),
            "- Activations: f32 = exact products; f16 = `activations=\"f16\"` (the default of `Llama`), "
            "the products take f16 activations and, on this VNNI processor, int8 dot products as llama.cpp does.",
        ]
        if any(peer for _, _, _, peer in sections):
            peer = next(p for _, _, _, p in sections if p)
            lines.append("- llama.cpp: `%s` (build %s) on the same file, %d threads, %d / %d tokens, %s, right "
                         "after ours." % (peer["binary"], peer["build"], args.threads, args.prefill, args.decode,
                                          "its default settings but --repack 0 (the default run crashed)"
                                          if "--repack" in peer["binary"] else "its default settings"))
        for desc, bpt, rows, peer in sections:
            lines += ["", "### " + desc, "", "Bytes per decoded token: %.1f MB." % (bpt / 1e6), "",
                      "| | prefill tok/s | decode tok/s | best decode tok/s | decode GB/s | / 2T read |"
                      + (" prefill / llama.cpp | decode / llama.cpp |" if peer else ""),
                      "|---|---|---|---|---|---|" + ("---|---|" if peer else "")]
            for mode, p_tok_s, d_tok_s, best, gbs in rows:
                line = "| tensorcore %s | %.1f | %.2f | %.2f | %.1f | %.2f |" % (
                    mode, p_tok_s, d_tok_s, best, gbs, gbs / c2)
                if peer:
                    line += " %.2fx | %.2fx |" % (p_tok_s / peer["pp"], d_tok_s / peer["tg"])
                lines.append(line)
            if peer:
                lines.append("| llama.cpp | %.1f | %.2f | | %.1f | %.2f |%s" % (
                    peer["pp"], peer["tg"], bpt * peer["tg"] / 1e9, bpt * peer["tg"] / 1e9 / c2, " | |"))
        lines.append("")
        out = REPO / "bench" / "results" / "llama-cpu.md"
        # A dated section after the earlier ones: the file keeps its history.
        head = "" if out.exists() else "# LLaMA prefill and decode on the CPU\n"
        with open(out, "a") as f:
            f.write(head + "\n" + "\n".join(lines))
        print("appended to", out)


if __name__ == "__main__":
    main()
