"""python -m tensorcore.llama [MODEL.gguf] --prompt TEXT -n N [--device cpu|cuda] [--activations f16|f32] [--bench]

Runs a llama-family GGUF model (the embedded default model when no file is
named): prints the prompt and the generated text as it arrives, then the
prompt (prefill) and decode speeds in tokens per second. --bench ends with
the line `prefill_tok_s=X decode_tok_s=Y`."""

import argparse
import os
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tensorcore.llama", description=__doc__.split("\n\n")[1])
    ap.add_argument("model", nargs="?", help="GGUF file (default: the embedded default model)")
    ap.add_argument("--prompt", "-p", default="Hello, the model says", help="prompt text")
    ap.add_argument("-n", "--n-predict", type=int, default=32, help="tokens to generate")
    ap.add_argument("--n-ctx", type=int, default=0, help="KV cache positions (default min(context_length, 2048))")
    ap.add_argument("--device", "-d", default=None,
                    help="device of the model: cpu, cuda or cuda:N (default: $TC_DEVICE, else the GPU when one "
                         "is usable, else the CPU)")
    ap.add_argument("--threads", "-t", type=int, default=0,
                    help="CPU threads (default: $TC_NUM_THREADS, else the physical cores)")
    ap.add_argument("--activations", choices=["f32", "f16"], default="f16",
                    help="f16 (default, as llama.cpp): f16 activations into the weight products, int8 dot "
                         "products where the processor has them; f32: exact products, slower")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--bench", action="store_true", help="end with prefill_tok_s=X decode_tok_s=Y")
    args = ap.parse_args(argv)
    if args.threads > 0:
        os.environ["TC_NUM_THREADS"] = str(args.threads)  # read when the thread pool starts

    from .._objects import Context
    from . import Llama

    if args.n_predict < 1:
        ap.error("-n must be >= 1")
    out = sys.stdout
    ctx = Context(args.device)
    with ctx, Llama(args.model, ctx=ctx, n_ctx=args.n_ctx or None, activations=args.activations) as m:
        prompt = m.tokenize(args.prompt)  # BOS as the file says, special tokens parsed
        info = ctx.device_info()
        sys.stderr.write("[%s on %s (%s), %s activations]\n" % (
            os.path.basename(m.path), info.backend_name, _text(info.name), args.activations))
        out.write(args.prompt)
        out.flush()
        m.reset()
        t0 = time.perf_counter()
        logits = m.eval(prompt, last_only=True)
        prefill_s = time.perf_counter() - t0
        from . import sample
        import numpy as np
        rng = np.random.default_rng(args.seed)
        ids, shown, decode_s = [], "", 0.0
        for i in range(args.n_predict):
            tok = sample(logits, args.temperature, args.top_k, args.top_p, rng)
            ids.append(tok)
            text = m.detokenize(ids)
            if not text.endswith("\ufffd"):  # hold back a character still being spelled out in bytes
                out.write(text[len(shown):])
                out.flush()
                shown = text
            if i + 1 < args.n_predict:
                t0 = time.perf_counter()  # decode speed: the model's steps, not the printing
                logits = m.eval([tok], last_only=True)
                decode_s += time.perf_counter() - t0
        out.write(m.detokenize(ids)[len(shown):] + "\n")
        n_dec = args.n_predict - 1  # the first new token comes from the prefill's logits
        prefill = len(prompt) / prefill_s
        decode = n_dec / decode_s if n_dec > 0 else float("nan")
        out.write("prompt: %d tokens, %.1f tok/s | decode: %d tokens, %.1f tok/s\n"
                  % (len(prompt), prefill, n_dec, decode))
        if args.bench:
            out.write("prefill_tok_s=%.2f decode_tok_s=%.2f\n" % (prefill, decode))
    return 0


def _text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _run():
    from .._errors import TensorcoreError
    try:
        return main()
    except TensorcoreError as e:
        sys.stderr.write("error: %s\n" % e)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(_run())
