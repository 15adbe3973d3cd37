"""A prompt's latency on the GPU: new lengths, a chat's turns, and a length that repeats.

    TENSORCORE_LIB=build/libtensorcore.so python bench/llama_first_token.py \\
        [--model FILE | --shape smollm2|7b] [--device cuda] [--repeats 80] [--write]

What a user waits for before the first token, wall time of one `eval` of
the whole prompt (last logits only) with the host's synchronisation:
  new lengths   prompts of lengths never seen before, each from position 0
                (each one a new attention shape: no cuDNN plan exists)
  chat turns    one conversation, each turn a new chunk after the cache
  repeated      one length evaluated --repeats times from position 0: the
                shape's attention reaches TC_CUDNN_PLAN_AFTER (64) calls
                within a few prompts (one call a layer), when its cuDNN plan
                is built (cuDNN compiles its engines: 0.1-2 s)
The repeated series runs twice in the same process on two new lengths:
with the plan built on a helper thread (TC_CUDNN_PLAN_BACKGROUND=1, the
default) and built by the call that reaches the count (=0, the library
before the helper thread): the longest prompt of each series is the stall a
user sees, and the median the steady state. The model: --model FILE, or a
random Q4_0 model of SmolLM2-135M's shape (576 wide, 30 layers, 9 heads of
64, 3 KV heads) or LLaMA-7B's, written once by bench/llama_cpu.py's writer.
--write appends a dated section to bench/results/llama-cuda.md.
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
from llama_cpu import describe, write_model  # noqa: E402

# n_embd, layers, heads, kv heads, n_ff, vocabulary.
SHAPES = {"smollm2": (576, 30, 9, 3, 1536, 49152), "7b": (4096, 32, 32, 32, 11008, 32000)}


def timed_eval(m, tokens):
    t0 = time.perf_counter()
    m.eval(tokens, last_only=True)
    return (time.perf_counter() - t0) * 1e3


def series(m, rng, length, repeats):
    prompt = rng.integers(3, m.n_vocab, length)
    out = []
    for _ in range(repeats):
        m.reset()
        out.append(timed_eval(m, prompt))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", help="GGUF file to use instead of the random model")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    ap.add_argument("--repeats", type=int, default=80, help="prompts in each repeated-length series")
    ap.add_argument("--write", action="store_true", help="append a dated section to bench/results/llama-cuda.md")
    args = ap.parse_args()
    from tensorcore.llama import Llama

    path = args.model or os.path.join(os.environ.get("TC_BENCH_DIR", tempfile.gettempdir()),
                                      "tensorcore-random-%s-q4_0.gguf" % args.shape)
    if not os.path.exists(path):
        E, L, H, HKV, F, V = SHAPES[args.shape]
        write_model(path, E, L, H, HKV, F, V, name="random-%s-q4_0" % args.shape, seed=7100)
    rng = np.random.default_rng(1)
    lines = []

    def say(s):
        print(s, flush=True)
        lines.append(s)

    with tc.Context(args.device) as ctx, Llama(path, ctx=ctx, n_ctx=1024) as m:
        info = ctx.device_info()
        say("- Device: %s (%d SMs). Model: %s." % (info.name, info.compute_units, describe(tc, path)[0]))
        # Warm-up on a length used nowhere below: the GEMMs' first calls, scratch, the step's buffers.
        series(m, rng, 200, 3)
        new = []
        for n in (37, 61, 100, 157, 257):
            m.reset()
            new.append((n, timed_eval(m, rng.integers(3, m.n_vocab, n))))
        say("- New lengths from position 0: " + ", ".join("%d tokens %.1f ms" % nt for nt in new) + ".")
        m.reset()
        turns = [timed_eval(m, rng.integers(3, m.n_vocab, n)) for n in (41, 23, 67, 12, 88)]
        say("- A chat's turns (41, 23, 67, 12, 88 new tokens after the cache): "
            + ", ".join("%.1f" % t for t in turns) + " ms.")
        say("")
        say("| plan build (`TC_CUDNN_PLAN_BACKGROUND`) | prompt | prompts | median ms | longest ms (its index) "
            "| sum ms |")
        say("|---|---|---|---|---|---|")
        for background, length in (("1", 64), ("0", 72), ("1", 96), ("0", 104)):
            os.environ["TC_CUDNN_PLAN_BACKGROUND"] = background
            t = series(m, rng, length, args.repeats)
            worst = int(np.argmax(t))
            say("| %s | %d | %d | %.2f | %.1f (%d) | %.0f |" % (
                "helper thread" if background == "1" else "the calling thread", length, len(t), np.median(t),
                t[worst], worst, sum(t)))
        os.environ.pop("TC_CUDNN_PLAN_BACKGROUND", None)
    if args.write:
        cmdline = "python bench/llama_first_token.py" + "".join(" %s" % a for a in sys.argv[1:] if a != "--write")
        head = ["", "## %s, %s: a prompt's latency, and the cuDNN plan's build" % (
            datetime.date.today().isoformat(), info.name), "", "`%s`." % cmdline, ""]
        with open(REPO / "bench" / "results" / "llama-cuda.md", "a") as f:
            f.write("\n".join(head + lines) + "\n")


if __name__ == "__main__":
    main()
