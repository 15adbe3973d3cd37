"""LLaMA continuous batching: aggregate prefill and decode tok/s of several sequences at once, beside llama.cpp.

For each batch size B (--npl, default 1,8,32,64) on one model of B sequence
slots (Llama(max_sequences=...)): B prompts of --npp tokens (default 128),
as one eval_batch (prefill: forwards of up to 512 rows, each product on all
of them; beside it each prompt through its own eval(seq=s)), then --ntg (default 128) batch steps of
one token for each of the B sequences (decode_batch: the weights are read
once per step for all B rows; one untimed step before them records a GPU's
step graph), the logits brought back and the next tokens picked by
NumPy's argmax; then the same steps from the same prompts through
decode_batch_greedy (the ids picked where the step ran, only they come
back). Aggregate tok/s = B * tokens / seconds, as
llama.cpp's llama-batched-bench counts them (S_PP, S_TG).

Models: --model names a GGUF file; random-1.1b (the CPU default,
bench/llama_cpu.py's random Q4_0 1.1B) and random-7b (the CUDA default,
bench/llama_cuda.py's random Q4_0 7B) are written once to $TC_BENCH_DIR or
the system's temporary directory by those scripts' writer and reused.

--llama-batched-bench PATH runs llama.cpp's llama-batched-bench on the same
file right after ours (-npp, -ntg, -npl the same, -c large enough for every
sequence, the same threads; on CUDA -ngl 99; --fa off|on|auto|both, both
keeping the faster of each row) and prints the ratios per batch size. A
build whose repacked CPU kernels fail is run again with --no-repack.
--write appends a section to bench/results/llama-batched.md with the date,
the machine and its load.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402

RANDOM = {
    # name: (file name, writer arguments) as llama_cpu.py / llama_cuda.py write them
    "random-1.1b": ("tensorcore-random-1.1b-q4_0-v2.gguf", dict(name="random-1.1b-q4_0")),
    "random-7b": ("tensorcore-random-7b-q4_0.gguf",
                  dict(E=4096, L=32, H=32, HKV=32, F=11008, V=32000, name="random-7b-q4_0", seed=7000)),
}


def model_path(name):
    if name not in RANDOM:
        return name
    from llama_cpu import write_model
    fname, kw = RANDOM[name]
    path = os.path.join(os.environ.get("TC_BENCH_DIR", tempfile.gettempdir()), fname)
    if not os.path.exists(path):
        t0 = time.perf_counter()
        write_model(path, **kw)
        print("wrote %s (%.2f GB) in %.1f s" % (path, os.path.getsize(path) / 1e9, time.perf_counter() - t0))
    return path


def measure(args, path):
    """{B: (prefill tok/s, decode tok/s)} of our model, one model of max(npl) slots."""
    import tensorcore as tc
    from tensorcore.llama import Llama
    res = {}
    with tc.Context(args.device) as ctx, Llama(path, ctx=ctx, n_ctx=args.npp + args.ntg + 1,
                                               activations=args.activations, kv_type=args.kv_type,
                                               max_sequences=max(args.npl)) as m:
        rng = np.random.default_rng(0)
        # Warm-up: the mapping faulted in, thread pool, the GEMM plans of a
        # whole prompt (a shorter one takes other products), a recorded step.
        # cuDNN's attention plans: built at a shape's 64th call (one call a layer).
        B = max(args.npl)  # the batched prefill's shapes: pieces of up to 512 rows
        for _ in range(1 + 64 // m.config["n_layer"]):
            m.eval(rng.integers(3, m.n_vocab, args.npp), last_only=True)
            m.decode_batch([0], [5])
            m.decode_batch([0], [6])
            m.reset()
            m.eval_batch(np.repeat(np.arange(B), args.npp), rng.integers(3, m.n_vocab, B * args.npp))
            for s in range(B):
                m.reset(seq=s)
        for B in args.npl:
            prompts = rng.integers(3, m.n_vocab, (B, args.npp))
            seqs = list(range(B))
            # Each prompt alone (eval(seq=s)), then all of them as one batch (eval_batch).
            t0 = time.perf_counter()
            for s in seqs:
                m.eval(prompts[s], last_only=True, seq=s)
            t_each = time.perf_counter() - t0
            for s in seqs:
                m.reset(seq=s)
            t0 = time.perf_counter()
            last = m.eval_batch(np.repeat(seqs, args.npp), prompts.reshape(-1))
            t_pp = time.perf_counter() - t0
            # One step left out of the timing: on a GPU the first step of B
            # rows runs eagerly and records the step's graph.
            toks = np.argmax(m.decode_batch(seqs, np.argmax(last, axis=1)), axis=1)
            t0 = time.perf_counter()
            for _ in range(args.ntg):
                toks = np.argmax(m.decode_batch(seqs, toks), axis=1)
            t_tg = time.perf_counter() - t0
            # The same steps again from the same prompts, the next tokens
            # picked where the step ran (decode_batch_greedy: ids only).
            for s in seqs:
                m.reset(seq=s)
            last = m.eval_batch(np.repeat(seqs, args.npp), prompts.reshape(-1))
            toks = m.decode_batch_greedy(seqs, np.argmax(last, axis=1))
            t0 = time.perf_counter()
            for _ in range(args.ntg):
                toks = m.decode_batch_greedy(seqs, toks)
            t_greedy = time.perf_counter() - t0
            for s in seqs:
                m.reset(seq=s)
            res[B] = (B * args.npp / t_pp, B * args.ntg / t_tg, B * args.npp / t_each, B * args.ntg / t_greedy)
            print("  B %3d: prefill %8.1f tok/s (%.2f s; each prompt alone %8.1f), decode %8.1f tok/s (%.2f s), "
                  "greedy on the device %8.1f tok/s" % (B, res[B][0], t_pp, res[B][2], res[B][1], t_tg, res[B][3]))
        info = ctx.device_info()
    return res, info


def parse_batched_bench(text):
    """{B: (S_PP t/s, S_TG t/s)} from llama-batched-bench's output: its
    markdown table (columns found by their header names, whatever their
    order or widths) or its jsonl records."""
    rows = {}
    header = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("{"):
            try:
                r = json.loads(s)
                rows[int(r["pl"])] = (float(r["speed_pp"]), float(r["speed_tg"]))
            except (ValueError, KeyError):
                pass
            continue
        if not s.startswith("|"):
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if header is None:
            if "B" in cells and any(c.startswith("S_TG") for c in cells):
                header = cells
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        try:
            col = dict(zip(header, cells))
            pp = next(v for k, v in col.items() if k.startswith("S_PP"))
            tg = next(v for k, v in col.items() if k.startswith("S_TG"))
            rows[int(col["B"])] = (float(pp), float(tg))
        except (StopIteration, ValueError, KeyError):
            continue
    return rows


def run_batched_bench(args, path):
    """llama.cpp's figures on the same file: {B: (S_PP, S_TG, fa)} and a description."""
    base = [args.llama_batched_bench, "-m", path, "-c", str(max(args.npl) * (args.npp + args.ntg)),
            "-npp", str(args.npp), "-ntg", str(args.ntg), "-npl", ",".join(map(str, args.npl))]
    base += ["-ngl", "99"] if args.device.startswith("cuda") else ["-t", str(args.threads), "-ngl", "0"]
    base += ["-ctk", args.kv_type, "-ctv", args.kv_type]  # the same cache type as ours
    best, notes = {}, []
    fas = ["off", "on"] if args.fa == "both" else [args.fa]
    if args.kv_type == "q8_0":  # llama.cpp quantises V only with flash attention
        fas = [fa for fa in fas if fa != "off"] or ["on"]
    for fa in fas:
        cmd = base + ["-fa", fa]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 and not args.device.startswith("cuda"):
            # Some CPU builds crash in their repacked (AMX) kernels: plain ggml kernels then.
            print("llama-batched-bench -fa %s failed (exit %d); again with --no-repack" % (fa, proc.returncode))
            cmd.append("--no-repack")
            proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print("llama-batched-bench -fa %s failed (exit %d): %s" % (fa, proc.returncode, proc.stderr[-500:]))
            continue
        rows = parse_batched_bench(proc.stdout)
        if not rows:
            print("llama-batched-bench -fa %s: no table in its output:\n%s" % (fa, proc.stdout[-1000:]))
            continue
        notes.append(" ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd[:1] + cmd[3:])))
        for B, (pp, tg) in rows.items():
            old = best.get(B)
            best[B] = (max(pp, old[0]) if old else pp, max(tg, old[1]) if old else tg,
                       fa if not old or tg > old[1] else old[2])
    return best, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", help="GGUF file, or random-1.1b / random-7b (default: random-1.1b on the CPU, "
                    "random-7b on a GPU)")
    ap.add_argument("--npp", type=int, default=128, help="prompt tokens of each sequence")
    ap.add_argument("--ntg", type=int, default=128, help="batch steps (tokens generated per sequence)")
    ap.add_argument("--npl", default="1,8,32,64", help="batch sizes (sequences at once)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("TC_NUM_THREADS", "2")))
    ap.add_argument("--activations", choices=["f32", "f16"], default="f16")
    ap.add_argument("--kv-type", dest="kv_type", choices=["f16", "f32", "q8_0"], default="f16",
                    help="KV cache type, ours and llama.cpp's (-ctk / -ctv)")
    ap.add_argument("--llama-batched-bench", dest="llama_batched_bench", metavar="PATH",
                    help="llama.cpp's llama-batched-bench, run on the same file after ours")
    ap.add_argument("--fa", choices=["off", "on", "auto", "both"], default="both",
                    help="llama-batched-bench's flash attention (both: run each, keep the faster per row)")
    ap.add_argument("--write", action="store_true", help="write bench/results/llama-batched.md")
    args = ap.parse_args()
    args.npl = [int(x) for x in args.npl.split(",")]
    os.environ["TC_NUM_THREADS"] = str(args.threads)
    import tensorcore as tc
    from llama_cpu import describe

    name = args.model or ("random-1.1b" if args.device == "cpu" else "random-7b")
    path = model_path(name)
    desc = describe(tc, path)[0]
    print(desc)
    load_before = os.getloadavg()
    ours, info = measure(args, path)
    peer, notes = run_batched_bench(args, path) if args.llama_batched_bench else ({}, [])
    load_after = os.getloadavg()
    table = ["| B | prefill tok/s | each prompt alone | decode tok/s | decode, greedy ids only |" + (
        " llama.cpp prefill | llama.cpp decode | prefill / llama.cpp | decode / llama.cpp |" if peer else ""),
             "|---|---|---|---|---|" + ("---|---|---|---|" if peer else "")]
    for B in args.npl:
        pp, tg, each, greedy = ours[B]
        line = "| %d | %.1f | %.1f | %.1f | %.1f |" % (B, pp, each, tg, greedy)
        if B in peer:
            lp, lt, fa = peer[B]
            line += " %.1f | %.1f (fa %s) | %.2fx | %.2fx |" % (lp, lt, fa, pp / lp, tg / lt)
            print("B %3d: ours / llama.cpp: prefill %.2fx, decode %.2fx" % (B, pp / lp, tg / lt))
        table.append(line)
    print("\n".join(table))
    print("load average (1 min) before / after: %.2f / %.2f" % (load_before[0], load_after[0]))
    if args.write:
        loaded = max(load_before[0], load_after[0]) > args.threads * 0.75
        cmdline = "python bench/llama_batched.py --write" + "".join(
            " %s" % a for a in sys.argv[1:] if a != "--write")
        lines = [
            "## %s, %s (%s)" % (datetime.date.today().isoformat(), info.name, args.device),
            "",
            "`%s`." % cmdline.replace(str(Path.home()), "~"),
            "",
            "- Device: %s (%s), %s" % (info.name, platform.machine(), "%d threads (TC_NUM_THREADS), features %s" % (
                args.threads, info.features) if args.device == "cpu" else info.features),
            "- Load average (1 min) before / after: %.2f / %.2f%s" % (
                load_before[0], load_after[0],
                " -- **the machine is shared and was loaded; figures are pessimistic**" if loaded
                else " (the machine is shared with other builds)"),
            "- Model: %s." % desc,
            "- Per batch size B: B prompts of %d tokens as one `eval_batch` (prefill; beside it the same "
            "prompts each through its own `eval(seq=s)`), then %d `decode_batch` steps of one token for each of the B sequences (decode: the logits back, the next tokens by NumPy's argmax; then again from the same prompts with `decode_batch_greedy`: the ids found where the step ran); activations %s, %s KV "
            "cache. tok/s are aggregate: B * tokens / seconds." % (args.npp, args.ntg, args.activations,
                                                                  args.kv_type),
        ]
        if peer:
            lines.append("- llama.cpp: `%s` right after ours; S_PP and S_TG of its table (the same aggregate "
                         "counts), the faster flash-attention setting per row. Its prefill, like `eval_batch`, "
                         "runs the B prompts as batches of B * %d tokens." % ("`, `".join(notes), args.npp))
        lines += ["", *table, ""]
        out = REPO / "bench" / "results" / "llama-batched.md"
        # A dated section after the earlier ones: the file keeps its history.
        head = "" if out.exists() else "# LLaMA continuous batching: aggregate tok/s of several sequences\n"
        with open(out, "a") as f:
            f.write(head + "\n" + "\n".join(lines))
        print("appended to", out)


if __name__ == "__main__":
    main()
