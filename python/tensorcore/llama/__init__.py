"""LLaMA decode harness: `Llama(path)` runs a llama-family GGUF model on a
context's device (the C model of include/tensorcore/llama.h).

    m = Llama(path)                      # or Llama() for the default model
    logits = m.eval(m.tokenize("Hello")) # float32 [n, n_vocab], appends to the KV cache
    logits = m.eval([tok])               # continues the sequence
    m.reset()
    ids = m.generate(prompt_ids, 16)     # greedy; temperature/top_k/top_p/seed
    text = m.detokenize(ids)

tokenize() reads the text as llama.cpp's command line does: BOS/EOS as the
file says (tokenizer.ggml.add_bos_token / add_eos_token) and special tokens
written in the text ("<|im_start|>") as their ids. m.eog_ids are the ids that
end a generation (eos, eot, "<|im_end|>", "<end_of_turn>", ...);
generate(..., stop_at_eos=True) stops at any of them.
"""

import numpy as np

from .._api.llama import (llama_eval, llama_free, llama_get_config, llama_load, llama_n_past, llama_reset,
                          llama_set_activations, llama_tokenizer)
from .._api.tokenizer import Tokenizer
from .._constants import TC_ERR_INVALID_ARG, TC_ERR_UNSUPPORTED
from .._errors import TensorcoreError, TensorcoreValueError
from .._objects import Context
from ._default import default_model_path, write_default_model

__all__ = ["Llama", "default_model_path", "write_default_model", "sample"]


class _BorrowedTokenizer(Tokenizer):
    """The model's tokenizer: the handle belongs to the model."""

    def __init__(self, handle):
        self._handle = handle

    def close(self):
        self._handle = None


def sample(logits, temperature=0.0, top_k=0, top_p=1.0, rng=None):
    """A token id from one row of logits: argmax when temperature <= 0, else
    a draw from softmax(logits / temperature) restricted to the top_k most
    likely tokens (0: all) and to the smallest set whose probability reaches
    top_p."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits / temperature
    order = np.argsort(-z, kind="stable")
    if top_k and top_k > 0:
        order = order[:top_k]
    p = np.exp(z[order] - z[order[0]])
    p /= p.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), top_p) + 1)
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    rng = rng if rng is not None else np.random.default_rng()
    return int(order[rng.choice(len(order), p=p)])


class Llama:
    """A llama-family model loaded from a GGUF file (None: the default model).

    ctx: a Context: the model runs on its device (default: a new context
    on `device`, closed with the model; without one, $TC_DEVICE, else the
    GPU when one is usable, else the CPU, as tc_init picks). On a GPU the
    weights are copied to device memory at load and each one-token step
    after the first replays a recorded CUDA graph.
    n_ctx: KV cache positions (default min(context_length, 2048)).
    activations: "f16" (the default, as llama.cpp computes: f16 activations
    into the products, int8 dot products on VNNI processors and GPUs; logits
    within a few 1e-2 of exact) or "f32" (exact products). On a GPU, "f16" with
    Q4_0 / Q8_0 weights keeps a second device copy of the matrices laid out
    for the one-token products (about the model's size; TC_LLAMA_SPLIT=0
    does without it)."""

    def __init__(self, path=None, ctx=None, n_ctx=None, activations="f16", device=None):
        self.path = str(path) if path is not None else default_model_path()
        self._own_ctx = ctx is None
        self.ctx = Context(device) if ctx is None else ctx
        self._handle = None
        try:
            self._handle = llama_load(self.ctx, self.path, n_ctx or 0)
            llama_set_activations(self._handle, activations)
        except Exception:
            if self._handle is not None:
                llama_free(self._handle)
                self._handle = None
            if self._own_ctx:
                self.ctx.close()
            raise
        self.config = llama_get_config(self._handle)
        self.n_vocab = self.config["n_vocab"]
        self.n_ctx = self.config["n_ctx"]
        self.bos_id, self.eos_id = self.config["bos_id"], self.config["eos_id"]
        self._tok = None
        self._eog = None

    @property
    def handle(self):
        if self._handle is None:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "the Llama model is closed")
        return self._handle

    @property
    def n_past(self):
        return llama_n_past(self.handle)

    @property
    def tokenizer(self):
        if self._tok is None:
            self._tok = _BorrowedTokenizer(llama_tokenizer(self.handle))
        return self._tok

    @property
    def eog_ids(self):
        """The ids that end a generation, ascending: the tokenizer's (eos,
        eot, eom and tokens such as "<|im_end|>", found as llama.cpp finds
        them), or the file's eos when it has no vocabulary."""
        if self._eog is None:
            try:
                self._eog = self.tokenizer.eog_ids
            except TensorcoreError as e:
                if e.status != TC_ERR_UNSUPPORTED:
                    raise
                self._eog = [self.eos_id] if self.eos_id >= 0 else []  # no vocabulary: the model runs on ids
        return list(self._eog)

    def is_eog(self, token):
        """Whether `token` ends a generation."""
        return int(token) in self.eog_ids

    def eval(self, tokens, last_only=False):
        """Runs `tokens` after the cached ones; float32 logits [len(tokens),
        n_vocab] (or [n_vocab] of the last token with last_only)."""
        t = np.asarray(tokens, dtype=np.int64).reshape(-1)
        out = np.empty(self.n_vocab if last_only else (t.size, self.n_vocab), np.float32)
        llama_eval(self.handle, t, out)
        return out

    def reset(self):
        """Empties the KV cache: the next eval starts at position 0."""
        llama_reset(self.handle)

    def tokenize(self, text, add_bos=None, add_eos=None, special=True):
        """Token ids of `text`. add_bos / add_eos: None as the file says,
        True/False force; special: special tokens written in the text
        ("<|im_start|>", "<start_of_turn>") become their ids, as llama.cpp's
        command line reads a prompt."""
        return self.tokenizer.encode(text, add_bos=add_bos, add_eos=add_eos, special=special)

    def detokenize(self, ids):
        return self.tokenizer.decode([int(i) for i in ids])

    def generate_iter(self, prompt_tokens, n, temperature=0.0, top_k=0, top_p=1.0, seed=None, stop_at_eos=False):
        """Yields up to n new token ids after `prompt_tokens` (the cache is
        reset first); with stop_at_eos, the first end-of-generation id
        (eog_ids) is the last one yielded."""
        prompt = [int(t) for t in prompt_tokens]
        if not prompt:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "generate: the prompt has no tokens")
        rng = np.random.default_rng(seed)
        eog = set(self.eog_ids) if stop_at_eos else set()
        self.reset()
        logits = self.eval(prompt, last_only=True)
        for i in range(int(n)):
            tok = sample(logits, temperature, top_k, top_p, rng)
            yield tok
            if tok in eog or i + 1 == n:
                return
            logits = self.eval([tok], last_only=True)

    def generate(self, prompt_tokens, n, temperature=0.0, top_k=0, top_p=1.0, seed=None, stop_at_eos=False):
        """The n new token ids after `prompt_tokens` (greedy unless temperature > 0)."""
        return list(self.generate_iter(prompt_tokens, n, temperature, top_k, top_p, seed, stop_at_eos))

    def close(self):
        if self._tok is not None:
            self._tok.close()
        if self._handle is not None:
            h, self._handle = self._handle, None
            llama_free(h)
        if self._own_ctx and not self.ctx.closed:
            self.ctx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
