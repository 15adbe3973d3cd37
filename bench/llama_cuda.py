"""LLaMA prefill and decode on the GPU: a 7B LLaMA-shaped model with random Q4_0 weights.

Shape (LLaMA-7B's): n_embd 4096, 32 layers, 32 heads, 32 kv heads, n_ff
11008, vocabulary 32000 (--shape 8b: Llama-3-8B's, 8 kv heads, n_ff 14336,
vocabulary 128256; qwen2-7b and gemma3-4b: those families' 7B and 4B
shapes, bench/llama_cpu.py's write_model), every matrix Q4_0 (token_embd and output too; --mix
q4_k_m / q5_k_m: llama-quantize's mix of Q4_K / Q5_K and Q6_K instead), norms
F32. The file (~3.8 GB) is written once through tensorcore's own GGUF writer
(bench/llama_cpu.py's writer: random nibbles, f16 scales of an initialised
model) to $TC_BENCH_DIR or the system's temporary directory and reused.

Measures on CUDA device 0 (--device), for each activation type of the weight
products (f16: the fast path, llama.cpp's arithmetic; f32: exact):
  prefill: one eval of 512 tokens from position 0 (the products of M = 512
           rows run as dequantise-to-f16 + cuBLASLt GEMM), median of 3 after a
           warm-up; tok/s = 512 / seconds
  decode:  one-token evals after it (each a replay of the recorded step
           graph), median over 128 steps; the time includes the host's call,
           the parameter copy, the logits' copy back and the synchronisation
Decode streams every weight once per token: bytes/token = all matrices but
token_embd (one row), plus the KV cache read (f16 by default, --kv-type);
GB/s = bytes/token * tok/s. --prefill 4096 measures decode after 4096
tokens of context.
--llama-bench PATH runs llama.cpp's llama-bench on the same file right after
ours (all layers on the GPU, f16 cache, flash attention off and on, the
faster of the two; decode at the same depth with -d) and prints the ratios.
Targets: decode >= 720 tok/s, prefill >= 11400 tok/s; printed as ratios, and
the last line gives each phase's faster mode.
--write appends a dated section to bench/results/llama-cuda.md (the date, the GPU, the mix).
--profile prints instead where each phase's device time goes, kernel by
kernel (CUPTI through torch.profiler).
"""

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402

import tensorcore as tc  # noqa: E402
from llama_cpu import MIXES, describe, time_prefill_decode, write_model  # noqa: E402

# n_embd, layers, heads, kv heads, n_ff, vocabulary, architecture, head size of each --shape.
SHAPES = {"7b": (4096, 32, 32, 32, 11008, 32000, "llama", 128), "8b": (4096, 32, 32, 8, 14336, 128256, "llama", 128),
          "qwen2-7b": (3584, 28, 28, 4, 18944, 152064, "qwen2", 128),
          "gemma3-4b": (2560, 34, 8, 4, 10240, 262144, "gemma3", 256)}
TARGET_DECODE, TARGET_PREFILL = 720.0, 11400.0


KV_BYTES = {"f16": 2, "f32": 4, "q8_0": 34 / 32}  # bytes per cached value (Q8_0: 34 per block of 32)


def bytes_per_token(path, n_past, kv_type="f16"):
    """Every matrix but token_embd (one row of it), plus the KV cache read,
    from the file's own tensors (llama_cpu.describe)."""
    _, weights, kv_read = describe(tc, path, KV_BYTES[kv_type])
    return weights + kv_read(n_past)


def run(path, device, mode, n_prefill, n_decode, kv_type="f16"):
    from tensorcore.llama import Llama

    with tc.Context(device) as ctx, Llama(path, ctx=ctx, n_ctx=n_prefill + n_decode + 8, activations=mode,
                                          kv_type=kv_type) as m:
        rng = np.random.default_rng(0)
        prompt = rng.integers(3, m.n_vocab, n_prefill)
        # Warm-up: GEMM plans, the dequantisation scratch, cuDNN's attention plans (built at a
        # shape's 64th call, TC_CUDNN_PLAN_AFTER: one call a layer, so a few prompts).
        for _ in range(2 + 64 // m.config["n_layer"]):
            m.reset()
            m.eval(prompt, last_only=True)
        prefill, steps = time_prefill_decode(m, prompt, n_decode)
        info = ctx.device_info()
    # The first step runs eagerly and records the graph: leave it out.
    steady = steps[1:] if len(steps) > 1 else steps
    return n_prefill / np.median(prefill), 1.0 / np.median(steady), 1.0 / np.min(steady), info


def profile(path, device, mode, n_prefill, n_decode, top=12):
    """Device time per kernel of one prefill and of n_decode decode steps,
    from CUPTI through torch.profiler (it records every kernel of the
    process, ours included): where each phase's time goes."""
    import torch
    from tensorcore.llama import Llama
    from torch.profiler import ProfilerActivity, profile as torch_profile

    torch.cuda.init()
    with tc.Context(device) as ctx, Llama(path, ctx=ctx, n_ctx=n_prefill + n_decode + 8, activations=mode) as m:
        prompt = np.random.default_rng(0).integers(3, m.n_vocab, n_prefill)
        m.eval(prompt, last_only=True)
        tok = 1
        for _ in range(3):  # records the step graph
            tok = int(np.argmax(m.eval([tok], last_only=True)))
        m.reset()
        for phase in ("prefill", "decode"):
            with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
                t0 = time.perf_counter()
                if phase == "prefill":
                    m.eval(prompt, last_only=True)
                    steps = 1
                else:
                    for _ in range(n_decode):
                        tok = int(np.argmax(m.eval([tok], last_only=True)))
                    steps = n_decode
                wall = time.perf_counter() - t0
            per = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    t = per.setdefault(e.name, [0.0, 0])
                    t[0] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
                    t[1] += 1
            total = sum(v[0] for v in per.values())
            print("%s (%s activations): wall %.2f ms per step, kernels %.2f ms per step" % (
                phase, mode, wall * 1e3 / steps, total / 1e3 / steps))
            for name, (us, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[:top]:
                print("  %7.3f ms  %5.1f%%  %6d x  %s" % (us / 1e3 / steps, 100 * us / max(total, 1e-9), n // steps,
                                                        name[:110]))


def run_llama_bench(binary, path, n_prefill, n_decode, kv_type="f16"):
    """llama.cpp's prefill and decode tok/s on the same file: every layer on
    the GPU (-ngl 99), the same cache type as ours (-ctk / -ctv), flash
    attention off and on (the faster of each; a q8_0 cache only with flash
    attention, which llama.cpp needs for a quantised V); decode after
    n_prefill tokens of context (-d) when that is not the 512-token prefill."""
    import json
    import subprocess
    depth = n_prefill if n_prefill > 512 else 0
    res = {}
    for fa in ("0", "1") if kv_type != "q8_0" else ("1",):
        base = [binary, "-m", path, "-ngl", "99", "-fa", fa, "-ctk", kv_type, "-ctv", kv_type, "-r", "3", "-o", "json"]
        proc = subprocess.run(base + ["-p", str(n_prefill), "-n", str(n_decode)], capture_output=True, text=True)
        if proc.returncode != 0:
            print("llama-bench -fa %s failed (exit %d): %s" % (fa, proc.returncode, proc.stderr[-500:]))
            continue
        for r in json.loads(proc.stdout):
            key = "pp" if r["n_prompt"] else "tg"
            if float(r["avg_ts"]) > res.get(key, (0,))[0]:
                res[key] = (float(r["avg_ts"]), "fa " + fa)
            res["build"] = r.get("build_commit", "?")
        if depth:
            proc = subprocess.run(base + ["-p", "0", "-n", str(n_decode), "-d", str(depth)], capture_output=True,
                                  text=True)
            if proc.returncode == 0:
                for r in json.loads(proc.stdout):
                    if float(r["avg_ts"]) > res.get("tg_depth", (0,))[0]:
                        res["tg_depth"] = (float(r["avg_ts"]), "fa " + fa)
    if "tg_depth" in res:
        res["tg"] = res["tg_depth"]
    if "pp" in res and "tg" in res:
        print("llama.cpp (%s): prefill %d tokens %.1f tok/s (%s); decode%s %.2f tok/s (%s)" % (
            res["build"], n_prefill, res["pp"][0], res["pp"][1], " at depth %d" % depth if depth else "",
            res["tg"][0], res["tg"][1]))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--model", help="GGUF file to use instead of the random model")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="7b",
                    help="the random model's shape: LLaMA-7B's, Llama-3-8B's (GQA: 8 kv heads), Qwen2.5-7B's "
                         "(q / k / v biases) or Gemma 3 4B's (Q/K and post-branch norms, GEGLU, 256-dim heads, "
                         "sliding windows)")
    ap.add_argument("--activations", choices=["f32", "f16", "both"], default="both")
    ap.add_argument("--kv-type", dest="kv_type", choices=["f16", "f32", "q8_0"], default="f16",
                    help="KV cache type, ours and llama.cpp's (-ctk / -ctv)")
    ap.add_argument("--mix", choices=MIXES, default="q4_0",
                    help="the random model's types: every matrix Q4_0, or llama-quantize's Q4_K_M / Q5_K_M mix")
    ap.add_argument("--llama-bench", dest="llama_bench", metavar="PATH",
                    help="llama.cpp's llama-bench (a CUDA build), run on the same file after ours")
    ap.add_argument("--write", action="store_true", help="append a dated section to bench/results/llama-cuda.md")
    ap.add_argument("--profile", action="store_true",
                    help="print the device time per kernel of a prefill and of --decode steps (needs PyTorch)")
    args = ap.parse_args()

    suffix = "" if args.mix == "q4_0" else "-" + args.mix
    path = args.model or os.path.join(os.environ.get("TC_BENCH_DIR", tempfile.gettempdir()),
                                      "tensorcore-random-%s-q4_0%s.gguf" % (args.shape, suffix))
    if not os.path.exists(path):
        t0 = time.perf_counter()
        E, L, H, HKV, F, V, arch, D = SHAPES[args.shape]
        write_model(path, E, L, H, HKV, F, V, name="random-%s-%s" % (args.shape, args.mix), seed=7000, mix=args.mix,
                    arch=arch, D=D)
        print("wrote %s (%.2f GB) in %.1f s" % (path, os.path.getsize(path) / 1e9, time.perf_counter() - t0))
    modes = ["f16", "f32"] if args.activations == "both" else [args.activations]
    if args.profile:
        for mode in modes:
            profile(path, args.device, mode, args.prefill, args.decode)
        return
    bpt = bytes_per_token(path, args.prefill + args.decode // 2, args.kv_type)
    rows = []
    for mode in modes:
        p_tok_s, d_tok_s, best, info = run(path, args.device, mode, args.prefill, args.decode, args.kv_type)
        gbs = bpt * d_tok_s / 1e9
        rows.append((mode, p_tok_s, d_tok_s, best, gbs))
        print("activations %s: prefill %d tokens %.0f tok/s (x%.2f of %.0f); decode %.1f tok/s median "
              "(x%.2f of %.0f), %.1f best, %.1f MB/token -> %.0f GB/s"
              % (mode, args.prefill, p_tok_s, p_tok_s / TARGET_PREFILL, TARGET_PREFILL, d_tok_s,
                 d_tok_s / TARGET_DECODE, TARGET_DECODE, best, bpt / 1e6, gbs))
    # The summary: each phase's faster mode (prefill: f16's tensor-core GEMM;
    # decode: usually f32, whose products need no conversions around them).
    best_p = max(rows, key=lambda r: r[1])
    best_d = max(rows, key=lambda r: r[2])
    print("best: prefill %.0f tok/s (%s, x%.2f of target), decode %.1f tok/s (%s, x%.2f of target)"
          % (best_p[1], best_p[0], best_p[1] / TARGET_PREFILL, best_d[2], best_d[0], best_d[2] / TARGET_DECODE))
    print("prefill_tok_s=%.2f decode_tok_s=%.2f" % (best_p[1], best_d[2]))
    peer = run_llama_bench(args.llama_bench, path, args.prefill, args.decode, args.kv_type) if args.llama_bench else {}
    if "pp" in peer and "tg" in peer:
        print("ours / llama.cpp: prefill x%.2f, decode x%.2f" % (best_p[1] / peer["pp"][0], best_d[2] / peer["tg"][0]))
    if args.write:
        cmdline = "python bench/llama_cuda.py --write" + "".join(" %s" % a for a in sys.argv[1:] if a != "--write")
        lines = [
            "## %s, %s, %s mix" % (datetime.date.today().isoformat(), info.name, args.mix),
            "",
            "`%s`." % cmdline,
            "",
            "- Device: %s (%s, %d SMs)" % (info.name, info.features, info.compute_units),
            "- Model: %s." % describe(tc, path)[0],
            "- Prefill: one eval of %d tokens from position 0, median of 3. Decode: median (and best) of %d "
            "one-token evals after it (graph replays), each including the logits' copy back." % (
                args.prefill, args.decode),
            "- Bytes per decoded token: every matrix but token_embd, one embedding row, the %s KV cache read: "
            "%.1f MB. GB/s = that times decode tok/s." % (args.kv_type, bpt / 1e6),
            "- Targets: prefill >= %.0f tok/s, decode >= %.0f tok/s." % (TARGET_PREFILL, TARGET_DECODE),
            "",
            "| activations | prefill tok/s | / target | decode tok/s | / target | best decode tok/s | decode GB/s |",
            "|---|---|---|---|---|---|---|",
        ]
        for mode, p_tok_s, d_tok_s, best, gbs in rows:
            lines.append("| %s | %.0f | %.2f | %.1f | %.2f | %.1f | %.0f |" % (
                mode, p_tok_s, p_tok_s / TARGET_PREFILL, d_tok_s, d_tok_s / TARGET_DECODE, best, gbs))
        if "pp" in peer and "tg" in peer:
            lines += ["", "llama.cpp (`llama-bench`, build %s, -ngl 99, %s cache) on the same file, right after ours:"
                      % (peer["build"], args.kv_type), "",
                      "| | prefill tok/s | decode tok/s |", "|---|---|---|",
                      "| llama.cpp | %.1f (%s) | %.1f (%s) |" % (peer["pp"] + peer["tg"]),
                      "| tensorcore / llama.cpp | %.2fx | %.2fx |" % (best_p[1] / peer["pp"][0],
                                                                   best_d[2] / peer["tg"][0])]
        lines.append("")
        out = REPO / "bench" / "results" / "llama-cuda.md"
        # A dated section after the earlier ones: the file keeps its history.
        head = "" if out.exists() else "# LLaMA prefill and decode on the GPU\n"
        with open(out, "a") as f:
            f.write(head + "\n" + "\n".join(lines))
        print("appended to", out)


if __name__ == "__main__":
    main()
