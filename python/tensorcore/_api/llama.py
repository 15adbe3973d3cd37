"""The LLaMA decoder's raw functions (include/tensorcore/llama.h). The
high-level model is tensorcore.llama.Llama."""

from ctypes import POINTER, byref, c_char_p, c_double, c_float, c_int32, c_int64, c_uint8

import numpy as np

from .._args import i64
from .._constants import DTYPE_NAMES, dtype_code
from .._errors import TensorcoreValueError, check
from .._lib import declare, handle, tc_status
from .._objects import context_arg
from .._structs import _Struct

__all__ = ["TCLlamaConfig", "llama_load", "llama_free", "llama_get_config", "llama_eval", "llama_reset",
           "llama_n_past", "llama_tokenizer", "llama_set_activations",
           "llama_set_kv_cache_type", "llama_get_kv_cache_type", "llama_set_max_sequences",
           "llama_get_max_sequences", "llama_seq_eval", "llama_seq_reset", "llama_seq_n_past",
           "llama_decode_batch", "llama_decode_batch_greedy", "llama_eval_batch"]

TC_ERR_INVALID_ARG = -7


class TCLlamaConfig(_Struct):
    """struct tc_llama_config."""
    _c_name_ = "struct tc_llama_config"
    _fields_ = [("n_vocab", c_int64), ("n_ctx", c_int64), ("n_ctx_train", c_int64), ("n_embd", c_int64),
                ("n_layer", c_int64), ("n_head", c_int64), ("n_head_kv", c_int64), ("head_dim", c_int64),
                ("n_ff", c_int64), ("rms_norm_eps", c_double), ("rope_freq_base", c_double),
                ("rope_freq_scale", c_double), ("tied_embeddings", c_int32), ("weight_type", c_int32),
                ("bos_id", c_int32), ("eos_id", c_int32)]


_tc_llama_load = declare("tc_llama_load", tc_status, handle, c_char_p, c_int64, POINTER(handle))
_tc_llama_free = declare("tc_llama_free", tc_status, handle)
_tc_llama_get_config = declare("tc_llama_get_config", tc_status, handle, POINTER(TCLlamaConfig))
_tc_llama_eval = declare("tc_llama_eval", tc_status, handle, POINTER(c_int32), c_int64, POINTER(c_float), c_int64)
_tc_llama_set_activations = declare("tc_llama_set_activations", tc_status, handle, c_int32)
_tc_llama_set_kv_cache_type = declare("tc_llama_set_kv_cache_type", tc_status, handle, c_int32)
_tc_llama_get_kv_cache_type = declare("tc_llama_get_kv_cache_type", tc_status, handle, POINTER(c_int32))
_tc_llama_reset = declare("tc_llama_reset", tc_status, handle)
_tc_llama_n_past = declare("tc_llama_n_past", tc_status, handle, POINTER(c_int64))
_tc_llama_tokenizer = declare("tc_llama_tokenizer", tc_status, handle, POINTER(handle))
_tc_llama_set_max_sequences = declare("tc_llama_set_max_sequences", tc_status, handle, c_int64)
_tc_llama_get_max_sequences = declare("tc_llama_get_max_sequences", tc_status, handle, POINTER(c_int64))
_tc_llama_seq_eval = declare("tc_llama_seq_eval", tc_status, handle, c_int32, POINTER(c_int32), c_int64,
                             POINTER(c_float), c_int64)
_tc_llama_seq_reset = declare("tc_llama_seq_reset", tc_status, handle, c_int32)
_tc_llama_seq_n_past = declare("tc_llama_seq_n_past", tc_status, handle, c_int32, POINTER(c_int64))
_tc_llama_decode_batch = declare("tc_llama_decode_batch", tc_status, handle, POINTER(c_int32), POINTER(c_int32),
                                 c_int64, POINTER(c_float), c_int64)
_tc_llama_decode_batch_greedy = declare("tc_llama_decode_batch_greedy", tc_status, handle, POINTER(c_int32),
                                        POINTER(c_int32), c_int64, POINTER(c_int32))
_tc_llama_eval_batch = declare("tc_llama_eval_batch", tc_status, handle, POINTER(c_int32), POINTER(c_int32), c_int64,
                               POINTER(c_uint8), POINTER(c_float), c_int64)


def _model(m):
    h = getattr(m, "handle", m)
    if h is None:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "the model is closed")
    return h


def llama_load(ctx, path, n_ctx=0):
    """Loads a GGUF model; returns the raw tc_llama handle (an int)."""
    h = handle()
    p = path if isinstance(path, bytes) else str(path).encode()
    check(_tc_llama_load(context_arg(ctx, "tc_llama_load"), p, i64(n_ctx, "tc_llama_load", "n_ctx"), byref(h)))
    return h.value


def llama_free(model):
    check(_tc_llama_free(_model(model)))


def llama_get_config(model):
    """The model's configuration as a dict."""
    c = TCLlamaConfig()
    check(_tc_llama_get_config(_model(model), byref(c)))
    return {name: getattr(c, name) for name, _ in TCLlamaConfig._fields_}


def _int32s(values, fn, what):
    v = np.ascontiguousarray(np.asarray(values, dtype=np.int64).reshape(-1))
    if v.size and (v.min() < -2**31 or v.max() >= 2**31):
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: a %s does not fit int32" % (fn, what))
    return v.astype(np.int32)


def _batch_rows(seqs, tokens, fn):
    """A batch step's sequences and tokens as int32 arrays of one length."""
    s, t = _int32s(seqs, fn, "sequence"), _int32s(tokens, fn, "token id")
    if s.size != t.size:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %d sequences and %d tokens" % (fn, s.size, t.size))
    return s, t


def _logits_arg(logits, fn):
    if logits is None:
        return None, 0
    if (not isinstance(logits, np.ndarray) or logits.dtype != np.float32 or not logits.flags.c_contiguous
            or not logits.flags.writeable):
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: logits must be a writable C-contiguous float32 array" % fn)
    return logits.ctypes.data_as(POINTER(c_float)), logits.size


def _seq(seq, fn):
    s = i64(seq, fn, "seq", TC_ERR_INVALID_ARG)
    if not -2**31 <= s < 2**31:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: sequence %d does not fit int32" % (fn, s))
    return s


def llama_eval(model, tokens, logits=None):
    """Runs `tokens` after the cached ones. logits: None, or a C-contiguous
    float32 array of n * n_vocab (all tokens) or n_vocab (the last one)."""
    t = _int32s(tokens, "tc_llama_eval", "token id")
    out, cap = _logits_arg(logits, "tc_llama_eval")
    check(_tc_llama_eval(_model(model), t.ctypes.data_as(POINTER(c_int32)), t.size, out, cap))
    return logits


def llama_seq_eval(model, seq, tokens, logits=None):
    """llama_eval on sequence `seq`."""
    t = _int32s(tokens, "tc_llama_seq_eval", "token id")
    out, cap = _logits_arg(logits, "tc_llama_seq_eval")
    check(_tc_llama_seq_eval(_model(model), _seq(seq, "tc_llama_seq_eval"), t.ctypes.data_as(POINTER(c_int32)),
                             t.size, out, cap))
    return logits


def llama_decode_batch(model, seqs, tokens, logits=None):
    """One token for each of the distinct sequences `seqs` (tokens[i] to
    seqs[i]); logits: None, or a C-contiguous float32 array of at least
    len(seqs) * n_vocab (row i: sequence seqs[i])."""
    fn = "tc_llama_decode_batch"
    s, t = _batch_rows(seqs, tokens, fn)
    out, cap = _logits_arg(logits, fn)
    check(_tc_llama_decode_batch(_model(model), s.ctypes.data_as(POINTER(c_int32)),
                                 t.ctypes.data_as(POINTER(c_int32)), s.size, out, cap))
    return logits


def llama_decode_batch_greedy(model, seqs, tokens):
    """llama_decode_batch's step; an int32 array of each sequence's greedy
    next token (the id of its largest logit), found where the step ran."""
    s, t = _batch_rows(seqs, tokens, "tc_llama_decode_batch_greedy")
    nxt = np.empty(s.size, np.int32)
    check(_tc_llama_decode_batch_greedy(_model(model), s.ctypes.data_as(POINTER(c_int32)),
                                        t.ctypes.data_as(POINTER(c_int32)), s.size,
                                        nxt.ctypes.data_as(POINTER(c_int32))))
    return nxt


def llama_eval_batch(model, seqs, tokens, want=None, logits=None):
    """Rows of any sequences as one batch (tokens[i] appended to seqs[i], a
    sequence's rows at its next positions in row order); want: None (every
    row) or n booleans; logits: None, or a C-contiguous float32 array of at
    least (wanted rows) * n_vocab, the wanted rows' logits in row order."""
    fn = "tc_llama_eval_batch"
    s, t = _batch_rows(seqs, tokens, fn)
    w = None
    if want is not None:
        w = np.ascontiguousarray(np.asarray(want, dtype=bool).reshape(-1)).astype(np.uint8)
        if w.size != s.size:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %d want flags for %d rows" % (fn, w.size, s.size))
    out, cap = _logits_arg(logits, fn)
    check(_tc_llama_eval_batch(_model(model), s.ctypes.data_as(POINTER(c_int32)), t.ctypes.data_as(POINTER(c_int32)),
                               s.size, None if w is None else w.ctypes.data_as(POINTER(c_uint8)), out, cap))
    return logits


def llama_set_max_sequences(model, n_seq):
    """Sequence slots (1 after load); every sequence must be empty."""
    check(_tc_llama_set_max_sequences(_model(model), i64(n_seq, "tc_llama_set_max_sequences", "n_seq",
                                                         TC_ERR_INVALID_ARG)))


def llama_get_max_sequences(model):
    n = c_int64()
    check(_tc_llama_get_max_sequences(_model(model), byref(n)))
    return n.value


def llama_seq_reset(model, seq):
    check(_tc_llama_seq_reset(_model(model), _seq(seq, "tc_llama_seq_reset")))


def llama_seq_n_past(model, seq):
    n = c_int64()
    check(_tc_llama_seq_n_past(_model(model), _seq(seq, "tc_llama_seq_n_past"), byref(n)))
    return n.value


def llama_reset(model):
    check(_tc_llama_reset(_model(model)))


def llama_n_past(model):
    n = c_int64()
    check(_tc_llama_n_past(_model(model), byref(n)))
    return n.value


def llama_tokenizer(model):
    """The raw tc_tokenizer handle owned by the model (do not free it)."""
    h = handle()
    check(_tc_llama_tokenizer(_model(model), byref(h)))
    return h.value


def llama_set_activations(model, dtype):
    """"f32" (exact products, the default) or "f16" (faster: f16 activations,
    int8 dot products on VNNI processors)."""
    check(_tc_llama_set_activations(_model(model), dtype_code(dtype)))


def llama_set_kv_cache_type(model, dtype):
    """"f16" (the default after load), "f32" or "q8_0" (head size a multiple
    of 32); the model must be empty (n_past 0)."""
    check(_tc_llama_set_kv_cache_type(_model(model), dtype_code(dtype)))


def llama_get_kv_cache_type(model):
    """The KV cache's element type: "f16", "f32" or "q8_0"."""
    t = c_int32()
    check(_tc_llama_get_kv_cache_type(_model(model), byref(t)))
    return DTYPE_NAMES[t.value]
