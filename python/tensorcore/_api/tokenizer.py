"""Tokenizers of llama-family models (include/tensorcore/tokenizer.h):
SentencePiece BPE ("llama" vocabularies) and byte-level BPE ("gpt2", with
the GPT-2 or LLaMA-3 pre-tokenizer)."""

import ctypes
from ctypes import POINTER, byref, c_char_p, c_float, c_int32, c_int64, c_size_t

from .._errors import TensorcoreValueError, check
from .._lib import declare, handle, tc_status
from .._structs import _Struct

__all__ = ["TC_TOKENIZER_SPM", "TC_TOKENIZER_BPE", "TC_PRE_TOKENIZER_GPT2", "TC_PRE_TOKENIZER_LLAMA3",
           "TCTokenizerDesc", "Tokenizer"]

TC_TOKENIZER_SPM = 0
TC_TOKENIZER_BPE = 1
TC_PRE_TOKENIZER_GPT2 = 0
TC_PRE_TOKENIZER_LLAMA3 = 1
_KINDS = {"spm": 0, "llama": 0, "bpe": 1, "gpt2": 1}
_PRE = {"gpt2": 0, "default": 0, "gpt-2": 0, "llama3": 1, "llama-bpe": 1}
TC_ERR_INVALID_ARG = -7


class TCTokenizerDesc(_Struct):
    """tc_tokenizer_desc."""
    _c_name_ = "struct tc_tokenizer_desc"
    _fields_ = [
        ("kind", c_int32),
        ("pre_tokenizer", c_int32),
        ("n_tokens", c_int64),
        ("tokens", POINTER(c_char_p)),
        ("scores", POINTER(c_float)),
        ("token_types", POINTER(c_int32)),
        ("n_merges", c_int64),
        ("merges", POINTER(c_char_p)),
        ("bos_id", c_int32),
        ("eos_id", c_int32),
        ("unk_id", c_int32),
        ("add_space_prefix", c_int32),
    ]


_tc_tokenizer_create = declare("tc_tokenizer_create", tc_status, POINTER(TCTokenizerDesc), POINTER(handle))
_tc_tokenizer_free = declare("tc_tokenizer_free", tc_status, handle)
_tc_tokenizer_vocab_size = declare("tc_tokenizer_vocab_size", tc_status, handle, POINTER(c_int64))
_tc_tokenizer_encode = declare("tc_tokenizer_encode", tc_status, handle, c_char_p, c_size_t, c_int32,
                               POINTER(c_int32), c_int64, POINTER(c_int64))
_tc_tokenizer_decode = declare("tc_tokenizer_decode", tc_status, handle, POINTER(c_int32), c_int64,
                               ctypes.c_char_p, c_size_t, POINTER(c_size_t))


def _code(table, value, what):
    if isinstance(value, int):
        return value
    try:
        return table[str(value).lower()]
    except KeyError:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "unknown %s %r (expected one of %s)"
                                   % (what, value, ", ".join(sorted(table)))) from None


def _utf8(s):
    return s if isinstance(s, bytes) else str(s).encode("utf-8")


class Tokenizer:
    """A tokenizer over a vocabulary (tokens as str or bytes, in id order).

    kind: "spm" (SentencePiece, scores give merge priority) or "bpe"
    (byte-level, merges "left right" in rank order). Owns a C handle;
    close() or a with-block releases it."""

    def __init__(self, kind, tokens, scores=None, token_types=None, merges=None, bos_id=-1, eos_id=-1,
                 unk_id=-1, add_space_prefix=True, pre_tokenizer="gpt2"):
        toks = [_utf8(t) for t in tokens]
        n = len(toks)
        merges = [_utf8(m) for m in (merges or [])]
        d = TCTokenizerDesc(kind=_code(_KINDS, kind, "tokenizer kind"),
                            pre_tokenizer=_code(_PRE, pre_tokenizer, "pre-tokenizer"),
                            n_tokens=n, tokens=(c_char_p * n)(*toks), n_merges=len(merges),
                            bos_id=bos_id, eos_id=eos_id, unk_id=unk_id, add_space_prefix=int(bool(add_space_prefix)))
        if merges:
            d.merges = (c_char_p * len(merges))(*merges)
        if scores is not None:
            if len(scores) != n:
                raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%d scores for %d tokens" % (len(scores), n))
            d.scores = (c_float * n)(*scores)
        if token_types is not None:
            if len(token_types) != n:
                raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%d token types for %d tokens" % (len(token_types), n))
            d.token_types = (c_int32 * n)(*token_types)
        h = handle()
        check(_tc_tokenizer_create(byref(d), byref(h)))
        self._handle = h
        self.bos_id, self.eos_id, self.unk_id = bos_id, eos_id, unk_id

    def _h(self):
        if self._handle is None:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "the tokenizer is closed")
        return self._handle

    @property
    def vocab_size(self):
        n = c_int64()
        check(_tc_tokenizer_vocab_size(self._h(), byref(n)))
        return n.value

    def encode(self, text, add_bos=False):
        """Token ids of `text` (str or UTF-8 bytes)."""
        data = _utf8(text)
        cap = len(data) + 2
        ids, n = (c_int32 * cap)(), c_int64()
        check(_tc_tokenizer_encode(self._h(), data, len(data), int(bool(add_bos)), ids, cap, byref(n)))
        return list(ids[:n.value])

    def decode_bytes(self, ids):
        """The bytes `ids` stand for (a single token may be part of a character)."""
        ids = list(ids)
        arr = (c_int32 * max(len(ids), 1))(*ids)
        n = c_size_t()
        cap = 16 * len(ids) + 16
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = _tc_tokenizer_decode(self._h(), arr, len(ids), buf, cap, byref(n))
            if st == 0:
                return buf.raw[:n.value]
            if n.value <= cap:
                check(st)
            cap = n.value

    def decode(self, ids):
        """Text of `ids`; bytes that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", "replace")

    def close(self):
        if self._handle is not None:
            _tc_tokenizer_free(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
