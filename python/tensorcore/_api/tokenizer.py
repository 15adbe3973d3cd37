"""Tokenizers of llama-family models (include/tensorcore/tokenizer.h):
SentencePiece BPE ("llama" vocabularies) and byte-level BPE ("gpt2", with the
pre-tokenizer tokenizer.ggml.pre names), run as llama.cpp runs them.

    tok = Tokenizer.from_gguf("model.gguf")      # the file's vocabulary
    ids = tok.encode("<|im_start|>user\\nHi", special=True)
    tok.decode(ids); tok.eog_ids; tok.is_eog(ids[-1])
"""

import ctypes
from ctypes import POINTER, byref, c_char, c_char_p, c_float, c_int32, c_int64, c_size_t, c_uint32, c_void_p

from .._closing import Closing
from .._errors import TensorcoreValueError, check
from .._lib import declare, handle, tc_status
from .._structs import _Struct, _str_fields

__all__ = ["TC_TOKENIZER_SPM", "TC_TOKENIZER_BPE", "TC_PRE_TOKENIZER_GPT2", "TC_PRE_TOKENIZER_LLAMA3",
           "TC_ENCODE_ADD_SPECIAL", "TC_ENCODE_PARSE_SPECIAL", "TC_ENCODE_FORCE_BOS", "TC_ENCODE_NO_BOS",
           "TC_ENCODE_FORCE_EOS", "TC_ENCODE_NO_EOS", "TC_TOKEN_NORMAL", "TC_TOKEN_UNKNOWN", "TC_TOKEN_CONTROL",
           "TC_TOKEN_USER_DEFINED", "TC_TOKEN_UNUSED", "TC_TOKEN_BYTE", "TC_TOKEN_ATTR_UNKNOWN", "TC_TOKEN_ATTR_UNUSED",
           "TC_TOKEN_ATTR_NORMAL", "TC_TOKEN_ATTR_CONTROL", "TC_TOKEN_ATTR_USER_DEFINED", "TC_TOKEN_ATTR_BYTE", "TCTokenizerDesc", "TCTokenizerDesc2", "TCTokenizerInfo",
           "Tokenizer"]

TC_TOKENIZER_SPM = 0
TC_TOKENIZER_BPE = 1
TC_PRE_TOKENIZER_GPT2 = 0
TC_PRE_TOKENIZER_LLAMA3 = 1
TC_ENCODE_ADD_SPECIAL = 1
TC_ENCODE_PARSE_SPECIAL = 2
TC_ENCODE_FORCE_BOS = 4
TC_ENCODE_NO_BOS = 8
TC_ENCODE_FORCE_EOS = 16
TC_ENCODE_NO_EOS = 32
TC_TOKEN_NORMAL = 1
TC_TOKEN_UNKNOWN = 2
TC_TOKEN_CONTROL = 3
TC_TOKEN_USER_DEFINED = 4
TC_TOKEN_UNUSED = 5
TC_TOKEN_BYTE = 6
TC_TOKEN_ATTR_UNKNOWN = 1
TC_TOKEN_ATTR_UNUSED = 2
TC_TOKEN_ATTR_NORMAL = 4
TC_TOKEN_ATTR_CONTROL = 8
TC_TOKEN_ATTR_USER_DEFINED = 16
TC_TOKEN_ATTR_BYTE = 32
_KINDS = {"spm": 0, "llama": 0, "bpe": 1, "gpt2": 1}
# The library names pre-tokenizers as GGUF files do ("gpt-2", "llama-bpe",
# "smollm", ...); "gpt2" stays the binding's name for GPT-2's.
_PRE_ALIASES = {"gpt2": "gpt-2"}
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


class TCTokenizerDesc2(_Struct):
    """tc_tokenizer_desc2."""
    _c_name_ = "struct tc_tokenizer_desc2"
    _fields_ = [
        ("struct_size", c_uint32),
        ("kind", c_int32),
        ("pre_tokenizer", c_char_p),
        ("n_tokens", c_int64),
        ("tokens", POINTER(c_char_p)),
        ("scores", POINTER(c_float)),
        ("token_types", POINTER(c_int32)),
        ("n_merges", c_int64),
        ("merges", POINTER(c_char_p)),
        ("bos_id", c_int32),
        ("eos_id", c_int32),
        ("unk_id", c_int32),
        ("eot_id", c_int32),
        ("eom_id", c_int32),
        ("add_bos", c_int32),
        ("add_eos", c_int32),
        ("add_space_prefix", c_int32),
    ]


class TCTokenizerInfo(_Struct):
    """tc_tokenizer_info."""
    _c_name_ = "struct tc_tokenizer_info"
    _fields_ = [
        ("struct_size", c_uint32),
        ("kind", c_int32),
        ("n_tokens", c_int64),
        ("bos_id", c_int32),
        ("eos_id", c_int32),
        ("unk_id", c_int32),
        ("eot_id", c_int32),
        ("eom_id", c_int32),
        ("add_bos", c_int32),
        ("add_eos", c_int32),
        ("add_space_prefix", c_int32),
        ("n_eog", c_int64),
        ("pre_tokenizer", c_char * 32),
    ]


_str_fields(TCTokenizerInfo, "pre_tokenizer")

_tc_tokenizer_create = declare("tc_tokenizer_create", tc_status, POINTER(TCTokenizerDesc), POINTER(handle))
_tc_tokenizer_create2 = declare("tc_tokenizer_create2", tc_status, POINTER(TCTokenizerDesc2), POINTER(handle))
_tc_tokenizer_create_from_gguf = declare("tc_tokenizer_create_from_gguf", tc_status, handle, POINTER(handle))
_tc_tokenizer_free = declare("tc_tokenizer_free", tc_status, handle)
_tc_tokenizer_vocab_size = declare("tc_tokenizer_vocab_size", tc_status, handle, POINTER(c_int64))
_tc_tokenizer_get_info = declare("tc_tokenizer_get_info", tc_status, handle, POINTER(TCTokenizerInfo))
_tc_tokenizer_eog_ids = declare("tc_tokenizer_eog_ids", tc_status, handle, POINTER(c_int32), c_int64,
                                POINTER(c_int64))
_tc_tokenizer_is_eog = declare("tc_tokenizer_is_eog", tc_status, handle, c_int32, POINTER(c_int32))
_tc_tokenizer_token_attr = declare("tc_tokenizer_token_attr", tc_status, handle, c_int32, POINTER(c_uint32))
_tc_tokenizer_encode = declare("tc_tokenizer_encode", tc_status, handle, c_char_p, c_size_t, c_int32,
                               POINTER(c_int32), c_int64, POINTER(c_int64))
_tc_tokenizer_encode2 = declare("tc_tokenizer_encode2", tc_status, handle, c_char_p, c_size_t, c_uint32,
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


def _tri(value):
    return -1 if value is None else int(bool(value))


def _pre_name(pre):
    if pre is None:
        return None
    if isinstance(pre, int):  # TC_PRE_TOKENIZER_*
        return {TC_PRE_TOKENIZER_GPT2: "gpt-2", TC_PRE_TOKENIZER_LLAMA3: "llama-bpe"}.get(pre, str(pre))
    return _PRE_ALIASES.get(str(pre), str(pre))


def encode_flags(add_bos=None, add_eos=None, special=False):
    """TC_ENCODE_* flags: None follows the vocabulary (add_bos_token /
    add_eos_token), True/False force; special parses control tokens' text."""
    flags = TC_ENCODE_ADD_SPECIAL
    if add_bos is not None:
        flags |= TC_ENCODE_FORCE_BOS if add_bos else TC_ENCODE_NO_BOS
    if add_eos is not None:
        flags |= TC_ENCODE_FORCE_EOS if add_eos else TC_ENCODE_NO_EOS
    if special:
        flags |= TC_ENCODE_PARSE_SPECIAL
    return flags


class Tokenizer(Closing):
    """A tokenizer over a vocabulary (tokens as str or bytes, in id order).

    kind: "spm" (SentencePiece, scores give merge priority) or "bpe"
    (byte-level, merges "left right" in rank order, pre_tokenizer a
    tokenizer.ggml.pre name: "gpt2"/"gpt-2", "llama-bpe", "qwen2", "smollm",
    "starcoder", "deepseek-llm", "gpt-4o", "tekken", ...). add_bos / add_eos:
    what encode adds by default (None: llama.cpp's default for the kind and
    pre-tokenizer). eot_id / eom_id: None looks for them by their text.
    Tokenizer.from_gguf(path) reads a GGUF file's vocabulary. Owns a C
    handle; close() or a with-block releases it."""

    def __init__(self, kind, tokens, scores=None, token_types=None, merges=None, bos_id=-1, eos_id=-1,
                 unk_id=-1, add_space_prefix=True, pre_tokenizer="gpt2", add_bos=None, add_eos=None,
                 eot_id=None, eom_id=None):
        toks = [_utf8(t) for t in tokens]
        n = len(toks)
        merges = [_utf8(m) for m in (merges or [])]
        pre = _pre_name(pre_tokenizer)
        self._keep = pre.encode() if pre is not None else None
        d = TCTokenizerDesc2(struct_size=ctypes.sizeof(TCTokenizerDesc2), kind=_code(_KINDS, kind, "tokenizer kind"),
                             pre_tokenizer=self._keep, n_tokens=n, tokens=(c_char_p * n)(*toks),
                             n_merges=len(merges), bos_id=bos_id, eos_id=eos_id, unk_id=unk_id,
                             eot_id=-1 if eot_id is None else eot_id, eom_id=-1 if eom_id is None else eom_id,
                             add_bos=_tri(add_bos), add_eos=_tri(add_eos),
                             add_space_prefix=int(bool(add_space_prefix)))
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
        check(_tc_tokenizer_create2(byref(d), byref(h)))
        self._handle = h

    @classmethod
    def from_gguf(cls, path):
        """The tokenizer of a GGUF file's tokenizer.ggml.* metadata (a path or
        an open GgufFile), as llama.cpp reads it."""
        from .gguf import GgufFile
        own = not isinstance(path, GgufFile)
        g = GgufFile(path) if own else path
        try:
            h = handle()
            check(_tc_tokenizer_create_from_gguf(c_void_p(g._handle), byref(h)))
        finally:
            if own:
                g.close()
        self = cls.__new__(cls)
        self._handle = h
        return self

    def _h(self):
        if self._handle is None:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "the tokenizer is closed")
        return self._handle

    @property
    def vocab_size(self):
        n = c_int64()
        check(_tc_tokenizer_vocab_size(self._h(), byref(n)))
        return n.value

    def info(self):
        """tc_tokenizer_info as a dict."""
        i = TCTokenizerInfo(struct_size=ctypes.sizeof(TCTokenizerInfo))
        check(_tc_tokenizer_get_info(self._h(), byref(i)))
        return i.as_dict()

    bos_id = property(lambda self: self.info()["bos_id"])
    eos_id = property(lambda self: self.info()["eos_id"])
    unk_id = property(lambda self: self.info()["unk_id"])
    eot_id = property(lambda self: self.info()["eot_id"])
    eom_id = property(lambda self: self.info()["eom_id"])
    add_bos = property(lambda self: bool(self.info()["add_bos"]))
    add_eos = property(lambda self: bool(self.info()["add_eos"]))

    @property
    def eog_ids(self):
        """End-of-generation ids (eos, eot, eom, "<|im_end|>"-like tokens), ascending."""
        n = c_int64()
        st = _tc_tokenizer_eog_ids(self._h(), None, 0, byref(n))
        ids = (c_int32 * max(n.value, 1))()
        if n.value:
            check(_tc_tokenizer_eog_ids(self._h(), ids, n.value, byref(n)))
        elif st:
            check(st)
        return list(ids[:n.value])

    def is_eog(self, token):
        out = c_int32()
        check(_tc_tokenizer_is_eog(self._h(), int(token), byref(out)))
        return bool(out.value)

    def token_attr(self, token):
        """llama.cpp's attributes of a token: TC_TOKEN_ATTR_* bits (unknown 1,
        unused 2, normal 4, control 8, user-defined 16, byte 32)."""
        out = c_uint32()
        check(_tc_tokenizer_token_attr(self._h(), int(token), byref(out)))
        return out.value

    def encode(self, text, add_bos=None, add_eos=None, special=False):
        """Token ids of `text` (str or UTF-8 bytes). add_bos / add_eos: None
        follows the vocabulary (a GGUF file's add_bos_token / add_eos_token),
        True/False force. special: the text of control tokens
        ("<|im_start|>") becomes their ids (user-defined tokens always do)."""
        data = _utf8(text)
        flags = encode_flags(add_bos, add_eos, special)
        n = c_int64()
        cap = len(data) + 2  # most texts; the library says when it needs more
        while True:
            ids = (c_int32 * cap)()
            st = _tc_tokenizer_encode2(self._h(), data, len(data), flags, ids, cap, byref(n))
            if st == 0:
                return list(ids[:n.value])
            if n.value <= cap:
                check(st)
            cap = n.value

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

