"""GGUF model files (include/tensorcore/gguf.h): reading, loading tensors
into buffers, and writing.

Raw functions mirror the C calls (gguf_open returns a GgufFile, the owned
wrapper, like init() returns a Context). Wrappers:
  GgufFile       an open file: metadata, tensor infos, tensor bytes, llama_config()
  LoadedModel    the supported tensors of a file in buffers of a context
  LoadedTensor   a dict describing one loaded tensor; .buffer raises once the
                 model is closed
  QuantizedMatrix  a tensor as an N x K weight matrix with gemv()/gemv_async()
  GgufWriter     builds metadata and tensors, then writes a file

Tensor dims are in the file's order: dims[0] is the row length, so a weight
matrix W[N, K] has dims [K, N] (NumPy shape (N, K)).
"""

import ctypes
from ctypes import POINTER, byref, c_char, c_char_p, c_double, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

import numpy as np

from .._args import host_memory, i64, size
from .._constants import CAPABILITY_ALIASES, TC_ERR_INVALID_ARG, TC_ERR_UNSUPPORTED_DTYPE, dtype_code
from .._errors import TensorcoreError, TensorcoreTypeError, TensorcoreValueError, check
from .._lib import declare, handle, tc_status, text
from .._objects import Buffer, _Owned, buffer_arg, context_arg, context_method, new_buffer, wrapper_of
from .._structs import _Struct, _str_fields
from . import quant as _quant

__all__ = [
    "TC_GGUF_TYPE_UINT8", "TC_GGUF_TYPE_INT8", "TC_GGUF_TYPE_UINT16", "TC_GGUF_TYPE_INT16", "TC_GGUF_TYPE_UINT32",
    "TC_GGUF_TYPE_INT32", "TC_GGUF_TYPE_FLOAT32", "TC_GGUF_TYPE_BOOL", "TC_GGUF_TYPE_STRING", "TC_GGUF_TYPE_ARRAY",
    "TC_GGUF_TYPE_UINT64", "TC_GGUF_TYPE_INT64", "TC_GGUF_TYPE_FLOAT64",
    "TC_GGML_TYPE_F32", "TC_GGML_TYPE_F16", "TC_GGML_TYPE_Q4_0", "TC_GGML_TYPE_Q4_1", "TC_GGML_TYPE_Q5_0",
    "TC_GGML_TYPE_Q5_1", "TC_GGML_TYPE_Q8_0",
    "TC_GGML_TYPE_Q4_K", "TC_GGML_TYPE_Q5_K", "TC_GGML_TYPE_Q6_K", "TC_GGML_TYPE_Q8_K", "TC_GGML_TYPE_BF16",
    "TC_GGUF_MAX_DIMS", "TC_GGUF_DEFAULT_ALIGNMENT", "TC_CAPABILITY_GGUF",
    "TCGgufTensorInfo", "TCQuantizedMatrixInfo", "TCGgufLlamaConfig", "TCGGufLlamaConfig", "TCGgufLoadedTensor",
    "GgufFile", "LoadedModel", "LoadedTensor", "QuantizedMatrix", "GgufWriter", "LlamaConfig",
    "gguf_type_name", "gguf_type_info", "gguf_type_to_quant", "quant_to_gguf_type",
    "gguf_open", "gguf_open_memory", "gguf_close", "gguf_version", "gguf_alignment", "gguf_data_offset",
    "gguf_tensor_count", "gguf_metadata_count", "gguf_meta_keys", "gguf_meta_type", "gguf_meta_get",
    "gguf_meta_get_str", "gguf_meta_get_i64", "gguf_meta_get_u64", "gguf_meta_get_f64",
    "gguf_meta_array_count", "gguf_meta_array_get_str", "gguf_meta_array_get_i64", "gguf_meta_array_get_u64",
    "gguf_meta_array_get_f64", "gguf_get_llama_config", "gguf_get_tensor", "gguf_tensor_at", "gguf_find_tensor",
    "gguf_tensor_bytes", "gguf_tensor_quantized_matrix_info", "gguf_tensor_to_buffer",
    "gguf_load_supported_tensors", "gguf_loaded_model_free", "gguf_loaded_tensor_count",
    "gguf_loaded_skipped_tensor_count", "gguf_loaded_tensor_at", "gguf_loaded_get_tensor",
    "gguf_loaded_tensor_quantized_matrix_info", "gguf_writer_create",
]

# ---- constants -----------------------------------------------------------------------

TC_GGUF_TYPE_UINT8 = 0
TC_GGUF_TYPE_INT8 = 1
TC_GGUF_TYPE_UINT16 = 2
TC_GGUF_TYPE_INT16 = 3
TC_GGUF_TYPE_UINT32 = 4
TC_GGUF_TYPE_INT32 = 5
TC_GGUF_TYPE_FLOAT32 = 6
TC_GGUF_TYPE_BOOL = 7
TC_GGUF_TYPE_STRING = 8
TC_GGUF_TYPE_ARRAY = 9
TC_GGUF_TYPE_UINT64 = 10
TC_GGUF_TYPE_INT64 = 11
TC_GGUF_TYPE_FLOAT64 = 12

TC_GGML_TYPE_F32 = 0
TC_GGML_TYPE_F16 = 1
TC_GGML_TYPE_Q4_0 = 2
TC_GGML_TYPE_Q4_1 = 3
TC_GGML_TYPE_Q5_0 = 6
TC_GGML_TYPE_Q5_1 = 7
TC_GGML_TYPE_Q8_0 = 8
TC_GGML_TYPE_Q4_K = 12
TC_GGML_TYPE_Q5_K = 13
TC_GGML_TYPE_Q6_K = 14
TC_GGML_TYPE_Q8_K = 15
TC_GGML_TYPE_BF16 = 30

TC_GGUF_MAX_DIMS = 8
TC_GGUF_DEFAULT_ALIGNMENT = 32
TC_CAPABILITY_GGUF = 1 << 12  # context.h
CAPABILITY_ALIASES["gguf"] = TC_CAPABILITY_GGUF

# NumPy dtypes of the fixed-size metadata types (little-endian, as in the file).
_VALUE_DTYPES = {
    TC_GGUF_TYPE_UINT8: np.dtype("<u1"), TC_GGUF_TYPE_INT8: np.dtype("<i1"), TC_GGUF_TYPE_UINT16: np.dtype("<u2"),
    TC_GGUF_TYPE_INT16: np.dtype("<i2"), TC_GGUF_TYPE_UINT32: np.dtype("<u4"), TC_GGUF_TYPE_INT32: np.dtype("<i4"),
    TC_GGUF_TYPE_FLOAT32: np.dtype("<f4"), TC_GGUF_TYPE_BOOL: np.dtype("bool"), TC_GGUF_TYPE_UINT64: np.dtype("<u8"),
    TC_GGUF_TYPE_INT64: np.dtype("<i8"), TC_GGUF_TYPE_FLOAT64: np.dtype("<f8"),
}
_INTEGER_TYPES = (TC_GGUF_TYPE_UINT8, TC_GGUF_TYPE_INT8, TC_GGUF_TYPE_UINT16, TC_GGUF_TYPE_INT16,
                  TC_GGUF_TYPE_UINT32, TC_GGUF_TYPE_INT32, TC_GGUF_TYPE_UINT64, TC_GGUF_TYPE_INT64)
_FLOAT_TYPES = (TC_GGUF_TYPE_FLOAT32, TC_GGUF_TYPE_FLOAT64)

# ---- structs ---------------------------------------------------------------------------


class TCGgufTensorInfo(_Struct):
    """struct tc_gguf_tensor_info."""
    _c_name_ = "struct tc_gguf_tensor_info"
    _fields_ = [("name", c_char_p), ("type", c_int32), ("n_dims", c_int32), ("dims", c_int64 * TC_GGUF_MAX_DIMS),
                ("offset", c_uint64), ("n_bytes", c_uint64), ("file_offset", c_uint64), ("quant_type", c_int32)]


class TCQuantizedMatrixInfo(_Struct):
    """struct tc_quantized_matrix_info."""
    _c_name_ = "struct tc_quantized_matrix_info"
    _fields_ = [("quant_type", c_int32), ("gguf_type", c_int32), ("N", c_int64), ("K", c_int64),
                ("n_bytes", c_uint64), ("buffer", c_void_p)]


class TCGgufLlamaConfig(_Struct):
    """struct tc_gguf_llama_config."""
    _c_name_ = "struct tc_gguf_llama_config"
    _fields_ = [("architecture", c_char * 64), ("vocab_size", c_int64), ("context_length", c_int64),
                ("embedding_length", c_int64), ("block_count", c_int64), ("feed_forward_length", c_int64),
                ("attention_head_count", c_int64), ("attention_head_count_kv", c_int64),
                ("rope_dimension_count", c_int64), ("rms_norm_epsilon", c_double), ("rope_freq_base", c_double),
                ("rope_freq_scale", c_double)]


_str_fields(TCGgufLlamaConfig, "architecture")
TCGGufLlamaConfig = TCGgufLlamaConfig  # the reference's spelling


class TCGgufLoadedTensor(_Struct):
    """struct tc_gguf_loaded_tensor."""
    _c_name_ = "struct tc_gguf_loaded_tensor"
    _fields_ = [("name", c_char_p), ("type", c_int32), ("quant_type", c_int32), ("n_dims", c_int32),
                ("dims", c_int64 * TC_GGUF_MAX_DIMS), ("n_bytes", c_uint64), ("buffer", c_void_p)]


# ---- prototypes ------------------------------------------------------------------------

_p = POINTER
_tc_gguf_type_name = declare("tc_gguf_type_name", c_char_p, c_int32)
_tc_gguf_type_info = declare("tc_gguf_type_info", tc_status, c_int32, _p(c_int64), _p(c_int64), _p(c_int32))
_tc_gguf_type_to_quant = declare("tc_gguf_type_to_quant", c_int32, c_int32)
_tc_quant_to_gguf_type = declare("tc_quant_to_gguf_type", c_int32, c_int32)
_tc_gguf_open = declare("tc_gguf_open", tc_status, c_char_p, _p(handle))
_tc_gguf_open_memory = declare("tc_gguf_open_memory", tc_status, c_void_p, c_size_t, _p(handle))
_tc_gguf_close = declare("tc_gguf_close", tc_status, handle)
_tc_gguf_version = declare("tc_gguf_version", tc_status, handle, _p(c_uint32))
_tc_gguf_alignment = declare("tc_gguf_alignment", tc_status, handle, _p(c_uint64))
_tc_gguf_data_offset = declare("tc_gguf_data_offset", tc_status, handle, _p(c_uint64))
_tc_gguf_tensor_count = declare("tc_gguf_tensor_count", tc_status, handle, _p(c_int64))
_tc_gguf_metadata_count = declare("tc_gguf_metadata_count", tc_status, handle, _p(c_int64))
_tc_gguf_meta_key_at = declare("tc_gguf_meta_key_at", tc_status, handle, c_int64, _p(c_char_p))
_tc_gguf_meta_find = declare("tc_gguf_meta_find", tc_status, handle, c_char_p, _p(c_int64))
_tc_gguf_meta_type = declare("tc_gguf_meta_type", tc_status, handle, c_char_p, _p(c_int32), _p(c_int32), _p(c_int64))
# String getters return char* + length: declared as c_void_p so embedded NULs survive.
_tc_gguf_meta_get_str = declare("tc_gguf_meta_get_str", tc_status, handle, c_char_p, _p(c_void_p), _p(c_size_t))
_tc_gguf_meta_get_i64 = declare("tc_gguf_meta_get_i64", tc_status, handle, c_char_p, _p(c_int64))
_tc_gguf_meta_get_u64 = declare("tc_gguf_meta_get_u64", tc_status, handle, c_char_p, _p(c_uint64))
_tc_gguf_meta_get_f64 = declare("tc_gguf_meta_get_f64", tc_status, handle, c_char_p, _p(c_double))
_tc_gguf_meta_array_count = declare("tc_gguf_meta_array_count", tc_status, handle, c_char_p, _p(c_int64))
_tc_gguf_meta_array_get_str = declare("tc_gguf_meta_array_get_str", tc_status, handle, c_char_p, c_int64,
                                      _p(c_void_p), _p(c_size_t))
_tc_gguf_meta_array_get_i64 = declare("tc_gguf_meta_array_get_i64", tc_status, handle, c_char_p, c_int64, _p(c_int64))
_tc_gguf_meta_array_get_u64 = declare("tc_gguf_meta_array_get_u64", tc_status, handle, c_char_p, c_int64,
                                      _p(c_uint64))
_tc_gguf_meta_array_get_f64 = declare("tc_gguf_meta_array_get_f64", tc_status, handle, c_char_p, c_int64,
                                      _p(c_double))
_tc_gguf_meta_array_data = declare("tc_gguf_meta_array_data", tc_status, handle, c_char_p, _p(c_void_p), _p(c_int32),
                                   _p(c_int64))
_tc_gguf_meta_nested_type = declare("tc_gguf_meta_nested_type", tc_status, handle, c_char_p, _p(c_int64), c_int32,
                                    _p(c_int32), _p(c_int32), _p(c_int64))
_tc_gguf_meta_nested_get_str = declare("tc_gguf_meta_nested_get_str", tc_status, handle, c_char_p, _p(c_int64),
                                       c_int32, _p(c_void_p), _p(c_size_t))
_tc_gguf_meta_nested_get_i64 = declare("tc_gguf_meta_nested_get_i64", tc_status, handle, c_char_p, _p(c_int64),
                                       c_int32, _p(c_int64))
_tc_gguf_meta_nested_get_u64 = declare("tc_gguf_meta_nested_get_u64", tc_status, handle, c_char_p, _p(c_int64),
                                       c_int32, _p(c_uint64))
_tc_gguf_meta_nested_get_f64 = declare("tc_gguf_meta_nested_get_f64", tc_status, handle, c_char_p, _p(c_int64),
                                       c_int32, _p(c_double))
_tc_gguf_get_llama_config = declare("tc_gguf_get_llama_config", tc_status, handle, _p(TCGgufLlamaConfig))
_tc_gguf_tensor_at = declare("tc_gguf_tensor_at", tc_status, handle, c_int64, _p(TCGgufTensorInfo))
_tc_gguf_get_tensor = declare("tc_gguf_get_tensor", tc_status, handle, c_char_p, _p(TCGgufTensorInfo))
_tc_gguf_find_tensor = declare("tc_gguf_find_tensor", tc_status, handle, c_char_p, _p(c_int64))
_tc_gguf_tensor_data = declare("tc_gguf_tensor_data", tc_status, handle, c_char_p, _p(c_void_p), _p(c_uint64))
_tc_gguf_tensor_quantized_matrix_info = declare("tc_gguf_tensor_quantized_matrix_info", tc_status, handle, c_char_p,
                                                _p(TCQuantizedMatrixInfo))
_tc_gguf_tensor_to_buffer = declare("tc_gguf_tensor_to_buffer", tc_status, handle, handle, c_char_p, _p(handle))
_tc_gguf_load_supported_tensors = declare("tc_gguf_load_supported_tensors", tc_status, handle, handle, _p(handle))
_tc_gguf_loaded_model_free = declare("tc_gguf_loaded_model_free", tc_status, handle)
_tc_gguf_loaded_tensor_count = declare("tc_gguf_loaded_tensor_count", tc_status, handle, _p(c_int64))
_tc_gguf_loaded_skipped_tensor_count = declare("tc_gguf_loaded_skipped_tensor_count", tc_status, handle, _p(c_int64))
_tc_gguf_loaded_tensor_at = declare("tc_gguf_loaded_tensor_at", tc_status, handle, c_int64, _p(TCGgufLoadedTensor))
_tc_gguf_loaded_get_tensor = declare("tc_gguf_loaded_get_tensor", tc_status, handle, c_char_p,
                                     _p(TCGgufLoadedTensor))
_tc_gguf_loaded_tensor_quantized_matrix_info = declare("tc_gguf_loaded_tensor_quantized_matrix_info", tc_status,
                                                       handle, c_char_p, _p(TCQuantizedMatrixInfo))
_tc_gguf_writer_create = declare("tc_gguf_writer_create", tc_status, _p(handle))
_tc_gguf_writer_free = declare("tc_gguf_writer_free", tc_status, handle)
_tc_gguf_writer_set_version = declare("tc_gguf_writer_set_version", tc_status, handle, c_uint32)
_tc_gguf_writer_set_alignment = declare("tc_gguf_writer_set_alignment", tc_status, handle, c_uint32)
_SETTERS = {}
for _t, _suffix, _ctype in ((TC_GGUF_TYPE_UINT8, "u8", ctypes.c_uint8), (TC_GGUF_TYPE_INT8, "i8", ctypes.c_int8),
                            (TC_GGUF_TYPE_UINT16, "u16", ctypes.c_uint16), (TC_GGUF_TYPE_INT16, "i16", ctypes.c_int16),
                            (TC_GGUF_TYPE_UINT32, "u32", c_uint32), (TC_GGUF_TYPE_INT32, "i32", c_int32),
                            (TC_GGUF_TYPE_FLOAT32, "f32", ctypes.c_float), (TC_GGUF_TYPE_BOOL, "bool", c_int32),
                            (TC_GGUF_TYPE_UINT64, "u64", c_uint64), (TC_GGUF_TYPE_INT64, "i64", c_int64),
                            (TC_GGUF_TYPE_FLOAT64, "f64", c_double)):
    _SETTERS[_t] = declare("tc_gguf_writer_set_" + _suffix, tc_status, handle, c_char_p, _ctype)
_tc_gguf_writer_set_str = declare("tc_gguf_writer_set_str", tc_status, handle, c_char_p, c_char_p, c_size_t)
_tc_gguf_writer_set_array = declare("tc_gguf_writer_set_array", tc_status, handle, c_char_p, c_int32, c_void_p,
                                    c_uint64)
_tc_gguf_writer_set_str_array = declare("tc_gguf_writer_set_str_array", tc_status, handle, c_char_p, _p(c_char_p),
                                        _p(c_size_t), c_uint64)
_tc_gguf_writer_begin_array = declare("tc_gguf_writer_begin_array", tc_status, handle, c_char_p, c_int32)
_tc_gguf_writer_push_values = declare("tc_gguf_writer_push_values", tc_status, handle, c_int32, c_void_p, c_uint64)
_tc_gguf_writer_push_str = declare("tc_gguf_writer_push_str", tc_status, handle, c_char_p, c_size_t)
_tc_gguf_writer_end_array = declare("tc_gguf_writer_end_array", tc_status, handle)
_tc_gguf_writer_add_tensor = declare("tc_gguf_writer_add_tensor", tc_status, handle, c_char_p, c_int32, _p(c_int64),
                                     c_int32, c_void_p, c_uint64, c_int32)
_tc_gguf_writer_add_tensor_buffer = declare("tc_gguf_writer_add_tensor_buffer", tc_status, handle, c_char_p, c_int32,
                                            _p(c_int64), c_int32, handle, c_uint64)
_tc_gguf_writer_write_file = declare("tc_gguf_writer_write_file", tc_status, handle, c_char_p)


# ---- helpers ---------------------------------------------------------------------------

def _key(key, fn, name="key"):
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: %s must be a str, got %s" % (fn, name, type(key).__name__))


def _gguf_arg(g, fn):
    if isinstance(g, GgufFile):
        return g._checked(fn, "gguf")
    if isinstance(g, _Owned):  # another kind of wrapper: let C refuse its handle
        return g._checked(fn, "gguf")
    if g is None or isinstance(g, (int, c_void_p)):
        return g.value if isinstance(g, c_void_p) else g
    raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: gguf must be a GgufFile or a raw handle, got %s" % (
        fn, type(g).__name__))


def _model_arg(m, fn):
    if isinstance(m, _Owned):
        return m._checked(fn, "model")
    if m is None or isinstance(m, (int, c_void_p)):
        return m.value if isinstance(m, c_void_p) else m
    raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: model must be a LoadedModel or a raw handle, got %s" % (
        fn, type(m).__name__))


def _string(ptr, length):
    return ctypes.string_at(ptr, length).decode("utf-8", "replace") if length else ""


def _dims(raw, n):
    return [int(raw[i]) for i in range(n)]


def _tensor_dict(t):
    n = t.n_dims
    return {"name": text(t.name), "type": t.type, "type_name": gguf_type_name(t.type), "dims": _dims(t.dims, n),
            "n_dims": n, "offset": t.offset, "n_bytes": t.n_bytes, "file_offset": t.file_offset,
            "quant_type": t.quant_type}


class LlamaConfig(dict):
    """gguf_get_llama_config's result: a dict whose keys also read as attributes
    (cfg["embedding_length"] or cfg.embedding_length)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# ---- type tables -------------------------------------------------------------------------

def gguf_type_name(ggml_type):
    """ggml's name of a tensor type id ("Q4_0", "F16", ...; "unknown")."""
    return text(_tc_gguf_type_name(int(ggml_type)))


def gguf_type_info(ggml_type):
    """(weights per block, bytes per block, TC_QUANT_* or -1) of any ggml type id."""
    e, b, q = c_int64(), c_int64(), c_int32()
    check(_tc_gguf_type_info(int(ggml_type), byref(e), byref(b), byref(q)))
    return e.value, b.value, q.value


def gguf_type_to_quant(ggml_type):
    return _tc_gguf_type_to_quant(int(ggml_type))


def quant_to_gguf_type(fmt):
    return _tc_quant_to_gguf_type(_quant.quant_code(fmt))


# ---- reading ---------------------------------------------------------------------------

def gguf_open(path):
    """Opens and validates a GGUF file; returns a GgufFile."""
    return GgufFile(path)


def gguf_open_memory(data):
    """A GgufFile parsed from a copy of `data` (bytes or a host array)."""
    return GgufFile.from_bytes(data)


def gguf_close(g):
    owner = g if isinstance(g, GgufFile) else wrapper_of("gguf", g)
    if owner is not None:
        owner.close()
    else:
        check(_tc_gguf_close(_gguf_arg(g, "tc_gguf_close")))


def _get(fn_c, g, fn, ctype, *args):
    out = ctype()
    check(fn_c(_gguf_arg(g, fn), *args, byref(out)))
    return out.value


def gguf_version(g):
    return _get(_tc_gguf_version, g, "tc_gguf_version", c_uint32)


def gguf_alignment(g):
    return _get(_tc_gguf_alignment, g, "tc_gguf_alignment", c_uint64)


def gguf_data_offset(g):
    return _get(_tc_gguf_data_offset, g, "tc_gguf_data_offset", c_uint64)


def gguf_tensor_count(g):
    return _get(_tc_gguf_tensor_count, g, "tc_gguf_tensor_count", c_int64)


def gguf_metadata_count(g):
    return _get(_tc_gguf_metadata_count, g, "tc_gguf_metadata_count", c_int64)


def gguf_meta_keys(g):
    """Every metadata key, in file order."""
    fn = "tc_gguf_meta_key_at"
    h = _gguf_arg(g, fn)
    out = c_char_p()
    keys = []
    for i in range(gguf_metadata_count(h)):
        check(_tc_gguf_meta_key_at(h, i, byref(out)))
        keys.append(out.value.decode("utf-8", "replace"))
    return keys


def _has_key(h, k):
    idx = c_int64()
    check(_tc_gguf_meta_find(h, k, byref(idx)))
    return idx.value >= 0


def gguf_meta_type(g, key):
    """(TC_GGUF_TYPE_* of the value, element type or -1, element count or 0)."""
    fn = "tc_gguf_meta_type"
    t, et, n = c_int32(), c_int32(), c_int64()
    check(_tc_gguf_meta_type(_gguf_arg(g, fn), _key(key, fn), byref(t), byref(et), byref(n)))
    return t.value, et.value, n.value


def _scalar(fn_c, fn, g, key, ctype, default):
    h, k = _gguf_arg(g, fn), _key(key, fn)
    if default is not None and not _has_key(h, k):
        return default
    out = ctype()
    check(fn_c(h, k, byref(out)))
    return out.value


def gguf_meta_get_str(g, key, default=None):
    """A string value (default returned when the key is absent and default is not None)."""
    fn = "tc_gguf_meta_get_str"
    h, k = _gguf_arg(g, fn), _key(key, fn)
    if default is not None and not _has_key(h, k):
        return default
    p, n = c_void_p(), c_size_t()
    check(_tc_gguf_meta_get_str(h, k, byref(p), byref(n)))
    return _string(p.value, n.value)


def gguf_meta_get_i64(g, key, default=None):
    """An integer or bool value as int (default when absent and not None)."""
    return _scalar(_tc_gguf_meta_get_i64, "tc_gguf_meta_get_i64", g, key, c_int64, default)


def gguf_meta_get_u64(g, key, default=None):
    return _scalar(_tc_gguf_meta_get_u64, "tc_gguf_meta_get_u64", g, key, c_uint64, default)


def gguf_meta_get_f64(g, key, default=None):
    """A float or integer value as float (default when absent and not None)."""
    return _scalar(_tc_gguf_meta_get_f64, "tc_gguf_meta_get_f64", g, key, c_double, default)


def gguf_meta_array_count(g, key):
    fn = "tc_gguf_meta_array_count"
    out = c_int64()
    check(_tc_gguf_meta_array_count(_gguf_arg(g, fn), _key(key, fn), byref(out)))
    return out.value


def gguf_meta_array_get_str(g, key, i):
    fn = "tc_gguf_meta_array_get_str"
    p, n = c_void_p(), c_size_t()
    check(_tc_gguf_meta_array_get_str(_gguf_arg(g, fn), _key(key, fn), i64(i, fn, "i", TC_ERR_INVALID_ARG),
                                      byref(p), byref(n)))
    return _string(p.value, n.value)


def _array_elem(fn_c, fn, g, key, i, ctype):
    out = ctype()
    check(fn_c(_gguf_arg(g, fn), _key(key, fn), i64(i, fn, "i", TC_ERR_INVALID_ARG), byref(out)))
    return out.value


def gguf_meta_array_get_i64(g, key, i):
    return _array_elem(_tc_gguf_meta_array_get_i64, "tc_gguf_meta_array_get_i64", g, key, i, c_int64)


def gguf_meta_array_get_u64(g, key, i):
    return _array_elem(_tc_gguf_meta_array_get_u64, "tc_gguf_meta_array_get_u64", g, key, i, c_uint64)


def gguf_meta_array_get_f64(g, key, i):
    return _array_elem(_tc_gguf_meta_array_get_f64, "tc_gguf_meta_array_get_f64", g, key, i, c_double)


def _nested(h, k, path):
    """The Python value at `path` below key k: scalars as int/float/bool/str,
    arrays of numbers as NumPy arrays, of strings and of arrays as lists."""
    depth = len(path)
    cpath = (c_int64 * max(depth, 1))(*path)
    t, et, n = c_int32(), c_int32(), c_int64()
    check(_tc_gguf_meta_nested_type(h, k, cpath, depth, byref(t), byref(et), byref(n)))
    t, et, n = t.value, et.value, n.value
    if t == TC_GGUF_TYPE_ARRAY:
        if et in _VALUE_DTYPES:
            if depth == 0:  # read in place, then copy
                p, cnt = c_void_p(), c_int64()
                check(_tc_gguf_meta_array_data(h, k, byref(p), None, byref(cnt)))
                dt = _VALUE_DTYPES[et]
                raw = ctypes.string_at(p.value, cnt.value * dt.itemsize) if cnt.value else b""
                return np.frombuffer(raw, dtype=np.uint8 if et == TC_GGUF_TYPE_BOOL else dt).astype(dt)
            return np.array([_nested(h, k, path + [j]) for j in range(n)], dtype=_VALUE_DTYPES[et])
        return [_nested(h, k, path + [j]) for j in range(n)]
    if t == TC_GGUF_TYPE_STRING:
        p, ln = c_void_p(), c_size_t()
        check(_tc_gguf_meta_nested_get_str(h, k, cpath, depth, byref(p), byref(ln)))
        return _string(p.value, ln.value)
    if t in _FLOAT_TYPES:
        out = c_double()
        check(_tc_gguf_meta_nested_get_f64(h, k, cpath, depth, byref(out)))
        return out.value
    if t == TC_GGUF_TYPE_UINT64:
        out = c_uint64()
        check(_tc_gguf_meta_nested_get_u64(h, k, cpath, depth, byref(out)))
        return out.value
    out = c_int64()
    check(_tc_gguf_meta_nested_get_i64(h, k, cpath, depth, byref(out)))
    return bool(out.value) if t == TC_GGUF_TYPE_BOOL else out.value


def gguf_meta_get(g, key, default=None):
    """Any metadata value as a Python value: int, float, bool, str; arrays of
    numbers as NumPy arrays; arrays of strings or of arrays as lists (nested
    as deep as the file). `default` when the key is absent and not None."""
    fn = "tc_gguf_meta_get"
    h, k = _gguf_arg(g, fn), _key(key, fn)
    if default is not None and not _has_key(h, k):
        return default
    return _nested(h, k, [])


def gguf_get_llama_config(g):
    """The LLaMA-family hyper-parameters as a LlamaConfig (dict with attribute access)."""
    c = TCGgufLlamaConfig()
    check(_tc_gguf_get_llama_config(_gguf_arg(g, "tc_gguf_get_llama_config"), byref(c)))
    return LlamaConfig(c.as_dict())


def gguf_get_tensor(g, name):
    """Tensor info dict: name, type, type_name, dims, n_dims, offset, n_bytes, file_offset, quant_type."""
    fn = "tc_gguf_get_tensor"
    t = TCGgufTensorInfo()
    check(_tc_gguf_get_tensor(_gguf_arg(g, fn), _key(name, fn, "name"), byref(t)))
    return _tensor_dict(t)


def gguf_tensor_at(g, i):
    fn = "tc_gguf_tensor_at"
    t = TCGgufTensorInfo()
    check(_tc_gguf_tensor_at(_gguf_arg(g, fn), i64(i, fn, "i", TC_ERR_INVALID_ARG), byref(t)))
    return _tensor_dict(t)


def gguf_find_tensor(g, name):
    """Index of a tensor, -1 when absent."""
    fn = "tc_gguf_find_tensor"
    out = c_int64()
    check(_tc_gguf_find_tensor(_gguf_arg(g, fn), _key(name, fn, "name"), byref(out)))
    return out.value


def gguf_tensor_bytes(g, name):
    """A copy of a tensor's bytes (uint8 NumPy array)."""
    fn = "tc_gguf_tensor_data"
    p, n = c_void_p(), c_uint64()
    check(_tc_gguf_tensor_data(_gguf_arg(g, fn), _key(name, fn, "name"), byref(p), byref(n)))
    return np.frombuffer(ctypes.string_at(p.value, n.value), dtype=np.uint8).copy() if n.value else \
        np.zeros(0, np.uint8)


def _matrix_dict(info):
    return {"quant_type": info.quant_type, "gguf_type": info.gguf_type, "N": info.N, "K": info.K,
            "n_bytes": info.n_bytes}


def gguf_tensor_quantized_matrix_info(g, name):
    """{quant_type, gguf_type, N, K, n_bytes} of a tensor as a weight matrix (K = dims[0])."""
    fn = "tc_gguf_tensor_quantized_matrix_info"
    info = TCQuantizedMatrixInfo()
    check(_tc_gguf_tensor_quantized_matrix_info(_gguf_arg(g, fn), _key(name, fn, "name"), byref(info)))
    return _matrix_dict(info)


@context_method
def gguf_tensor_to_buffer(ctx, g, name):
    """A new Buffer holding the tensor's bytes (CPU: a private copy-on-write mapping)."""
    fn = "tc_gguf_tensor_to_buffer"
    out = c_void_p()
    check(_tc_gguf_tensor_to_buffer(context_arg(ctx, fn), _gguf_arg(g, fn), _key(name, fn, "name"), byref(out)))
    return new_buffer(ctx, out.value)


@context_method("load_supported_tensors")
def gguf_load_supported_tensors(ctx, g):
    """Every tensor of a supported type into buffers of `ctx`; returns a LoadedModel."""
    fn = "tc_gguf_load_supported_tensors"
    out = c_void_p()
    check(_tc_gguf_load_supported_tensors(context_arg(ctx, fn), _gguf_arg(g, fn), byref(out)))
    return LoadedModel(out.value, wrapper_of("context", ctx))


def _open_gguf(path):
    """Opens a GGUF file (a GgufFile, not tied to this context)."""
    return GgufFile(path)


context_method("open_gguf", pass_self=False)(_open_gguf)


def gguf_loaded_model_free(m):
    owner = m if isinstance(m, LoadedModel) else wrapper_of("gguf_model", m)
    if owner is not None:
        owner.close()
    else:
        check(_tc_gguf_loaded_model_free(_model_arg(m, "tc_gguf_loaded_model_free")))


def gguf_loaded_tensor_count(m):
    out = c_int64()
    check(_tc_gguf_loaded_tensor_count(_model_arg(m, "tc_gguf_loaded_tensor_count"), byref(out)))
    return out.value


def gguf_loaded_skipped_tensor_count(m):
    out = c_int64()
    check(_tc_gguf_loaded_skipped_tensor_count(_model_arg(m, "tc_gguf_loaded_skipped_tensor_count"), byref(out)))
    return out.value


def _loaded(m, raw):
    model = m if isinstance(m, LoadedModel) else wrapper_of("gguf_model", m)
    info = {"name": text(raw.name), "type": raw.type, "type_name": gguf_type_name(raw.type),
            "quant_type": raw.quant_type, "dims": _dims(raw.dims, raw.n_dims), "n_dims": raw.n_dims,
            "n_bytes": raw.n_bytes}
    return LoadedTensor(info, model, raw.buffer)


def gguf_loaded_tensor_at(m, i):
    fn = "tc_gguf_loaded_tensor_at"
    raw = TCGgufLoadedTensor()
    check(_tc_gguf_loaded_tensor_at(_model_arg(m, fn), i64(i, fn, "i", TC_ERR_INVALID_ARG), byref(raw)))
    return _loaded(m, raw)


def gguf_loaded_get_tensor(m, name):
    fn = "tc_gguf_loaded_get_tensor"
    raw = TCGgufLoadedTensor()
    check(_tc_gguf_loaded_get_tensor(_model_arg(m, fn), _key(name, fn, "name"), byref(raw)))
    return _loaded(m, raw)


def gguf_loaded_tensor_quantized_matrix_info(m, name):
    """The loaded tensor as a QuantizedMatrix (its buffer belongs to the model)."""
    fn = "tc_gguf_loaded_tensor_quantized_matrix_info"
    info = TCQuantizedMatrixInfo()
    check(_tc_gguf_loaded_tensor_quantized_matrix_info(_model_arg(m, fn), _key(name, fn, "name"), byref(info)))
    model = m if isinstance(m, LoadedModel) else wrapper_of("gguf_model", m)
    return QuantizedMatrix(info.N, info.K, info.quant_type, info.gguf_type, info.n_bytes, model=model,
                           buffer_handle=info.buffer, name=name)


def gguf_writer_create():
    return GgufWriter()


# ---- wrappers ----------------------------------------------------------------------------

class GgufFile(_Owned):
    """An open GGUF file (mapped read-only, validated when opened).

    with tc.GgufFile("model.gguf") as g:
        cfg = g.llama_config(); arch = g.meta_get_str("general.architecture")
    """

    _kind = "gguf"

    def __init__(self, path=None, _handle=None):
        if _handle is None:
            if path is None:
                raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "GgufFile: path is required")
            out = c_void_p()
            check(_tc_gguf_open(_key(str(path), "tc_gguf_open", "path"), byref(out)))
            _handle = out.value
        self._path = path
        self._adopt(_handle)

    @classmethod
    def from_bytes(cls, data):
        """A GgufFile parsed from a copy of `data` (bytes or a host array)."""
        mem = host_memory(data, "tc_gguf_open_memory", "data")
        out = c_void_p()
        check(_tc_gguf_open_memory(mem.address, mem.nbytes, byref(out)))
        return cls(None, _handle=out.value)

    @property
    def path(self):
        return self._path

    def close(self):
        """Closes the file; buffers and models made from it stay valid. Idempotent."""
        if self._handle is None:
            return
        address = self._handle
        self._forget()
        check(_tc_gguf_close(address))

    version = property(gguf_version)
    alignment = property(gguf_alignment)
    data_offset = property(gguf_data_offset)
    tensor_count = gguf_tensor_count
    metadata_count = gguf_metadata_count
    keys = gguf_meta_keys
    meta_type = gguf_meta_type
    meta_get = gguf_meta_get
    meta_get_str = gguf_meta_get_str
    meta_get_i64 = gguf_meta_get_i64
    meta_get_u64 = gguf_meta_get_u64
    meta_get_f64 = gguf_meta_get_f64
    meta_array_count = gguf_meta_array_count
    meta_array_get_str = gguf_meta_array_get_str
    meta_array_get_i64 = gguf_meta_array_get_i64
    meta_array_get_u64 = gguf_meta_array_get_u64
    meta_array_get_f64 = gguf_meta_array_get_f64
    llama_config = gguf_get_llama_config
    get_tensor = gguf_get_tensor
    tensor_at = gguf_tensor_at
    find_tensor = gguf_find_tensor
    tensor_bytes = gguf_tensor_bytes
    quantized_matrix_info = gguf_tensor_quantized_matrix_info

    def tensors(self):
        """Every tensor info dict, in file order."""
        return [gguf_tensor_at(self, i) for i in range(gguf_tensor_count(self))]

    def metadata(self):
        """Every key's value (gguf_meta_get) in file order."""
        return {k: gguf_meta_get(self, k) for k in gguf_meta_keys(self)}

    def tensor_to_buffer(self, ctx, name):
        return gguf_tensor_to_buffer(ctx, self, name)

    def load_supported_tensors(self, ctx):
        return gguf_load_supported_tensors(ctx, self)

    def _repr_extra(self):
        return " path=%r" % (self._path,) if self._path is not None else ""


class _ModelBuffer(Buffer):
    """A loaded model's buffer: usable like any Buffer while the model is
    open; closing it only drops the handle (the model frees the memory)."""

    def close(self):
        self._forget()


class LoadedModel(_Owned):
    """The supported tensors of a GGUF file in buffers of a context. The
    context closes it before shutting down."""

    _kind = "gguf_model"

    def __init__(self, address, context=None):
        self._context = context
        self._buffers = {}  # handle -> _ModelBuffer, so each tensor has one wrapper
        self._adopt(address)
        if context is not None:
            context._add_child(self)

    @property
    def context(self):
        return self._context

    def _buffer(self, address):
        self._checked("LoadedModel", "model")
        b = self._buffers.get(address)
        if b is None or b.closed:  # first use, or the caller closed the wrapper
            b = self._buffers[address] = _ModelBuffer(address)
        return b

    def close(self):
        """Frees every buffer of the model; their wrappers become closed. Idempotent."""
        if self._handle is None:
            return
        address = self._handle
        self._forget()
        for b in self._buffers.values():
            b.close()
        self._buffers = {}
        context, self._context = self._context, None
        try:
            check(_tc_gguf_loaded_model_free(address))
        finally:
            if context is not None:
                context._child_closed()

    tensor_count = gguf_loaded_tensor_count
    skipped_tensor_count = gguf_loaded_skipped_tensor_count
    tensor_at = gguf_loaded_tensor_at
    get_tensor = gguf_loaded_get_tensor
    quantized_matrix = gguf_loaded_tensor_quantized_matrix_info

    def tensors(self):
        return [gguf_loaded_tensor_at(self, i) for i in range(gguf_loaded_tensor_count(self))]

    def names(self):
        return [t["name"] for t in self.tensors()]

    def __len__(self):
        return gguf_loaded_tensor_count(self)

    def __contains__(self, name):
        try:
            gguf_loaded_get_tensor(self, name)
            return True
        except TensorcoreError:
            return False

    def __getitem__(self, name):
        return gguf_loaded_get_tensor(self, name)


class LoadedTensor(dict):
    """One loaded tensor: a dict (name, type, type_name, quant_type, dims,
    n_dims, n_bytes) holding its LoadedModel alive; .buffer (also
    t["buffer"]) is the model's Buffer and raises once the model is closed."""

    def __init__(self, info, model, buffer_handle):
        super().__init__(info)
        self.model = model
        self._buffer_handle = buffer_handle

    @property
    def buffer(self):
        if self.model is None:  # a raw model handle without a wrapper
            return _ModelBuffer(self._buffer_handle)
        if self.model.closed:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "LoadedTensor %r: its model is closed" % self.get("name"))
        return self.model._buffer(self._buffer_handle)

    def __missing__(self, key):
        if key == "buffer":
            return self.buffer
        raise KeyError(key)

    def quantized_matrix(self):
        return self.model.quantized_matrix(self["name"])


class QuantizedMatrix:
    """A weight matrix W[N, K] in a quantized format, in a buffer.

    From a model: model.quantized_matrix(name); or over any buffer:
    QuantizedMatrix(N, K, fmt, buffer=buf). gemv(x, y, M) computes
    y[M, N] = x[M, K] @ W^T (f16 by default)."""

    def __init__(self, N, K, quant_type, gguf_type=None, n_bytes=None, buffer=None, model=None, buffer_handle=None,
                 name=None):
        self.N, self.K = int(N), int(K)
        self.quant_type = _quant.quant_code(quant_type)
        self.gguf_type = quant_to_gguf_type(self.quant_type) if gguf_type is None else int(gguf_type)
        self.n_bytes = _quant.quantized_size(self.quant_type, self.N, self.K) if n_bytes is None else int(n_bytes)
        self.model = model
        self.name = name
        self._buffer = buffer
        self._buffer_handle = buffer_handle

    @property
    def buffer(self):
        if self._buffer is not None:
            return self._buffer
        if self.model is not None:
            if self.model.closed:
                raise TensorcoreValueError(TC_ERR_INVALID_ARG, "QuantizedMatrix %r: its model is closed" % self.name)
            return self.model._buffer(self._buffer_handle)
        return _ModelBuffer(self._buffer_handle)

    @property
    def context(self):
        if self.model is not None:
            return self.model.context
        return getattr(self._buffer, "context", None)

    def _ctx(self, ctx):
        c = ctx if ctx is not None else self.context
        if c is None:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "QuantizedMatrix: no context known; pass ctx=")
        return c

    def output(self, M=1, dtype="f16", ctx=None):
        """A new Buffer for y[M, N] of `dtype`."""
        c = self._ctx(ctx)
        esize = {0: 2, 1: 2, 2: 4}.get(dtype_code(dtype))
        if esize is None:
            raise TensorcoreValueError(TC_ERR_UNSUPPORTED_DTYPE, "QuantizedMatrix.output: dtype f16, bf16 or f32")
        return c.buffer(int(M) * self.N * esize)

    def gemv(self, x, y, M=1, dtype="f16", ctx=None):
        """y[M, N] = x[M, K] @ W^T, synchronously."""
        _quant.gemv_quantized(self._ctx(ctx), x, self.buffer, y, self.quant_type, M, self.N, self.K, dtype=dtype)

    def gemv_async(self, x, y, stream, M=1, dtype="f16", ctx=None):
        """gemv enqueued on `stream`."""
        _quant.gemv_quantized_async(self._ctx(ctx), x, self.buffer, y, self.quant_type, M, self.N, self.K, stream,
                                    dtype=dtype)

    def fused_rmsnorm_gemv(self, x, gamma, y, M=1, eps=1e-5, dtype="f16", ctx=None):
        """y = rmsnorm(x; gamma) @ W^T."""
        _quant.fused_rmsnorm_gemv_quantized(self._ctx(ctx), x, gamma, self.buffer, y, self.quant_type, M, self.N,
                                            self.K, eps=eps, dtype=dtype)

    def dequantize(self, rows=None, ctx=None):
        """The weights as a float32 NumPy array [N, K] (or rows `range`/slice of them)."""
        c = self._ctx(ctx)
        start, stop = 0, self.N
        if rows is not None:
            r = range(self.N)[rows] if isinstance(rows, slice) else rows
            start, stop = r.start, r.stop
        n = stop - start
        out = c.buffer(max(n, 1) * self.K * 4)
        try:
            _quant.dequantize_weights(c, self.buffer, out, self.quant_type, n, self.K, dtype="f32", row_offset=start)
            return out.to_numpy((n, self.K), np.float32)
        finally:
            out.close()

    def __repr__(self):
        return "<tensorcore.QuantizedMatrix %s%s N=%d K=%d n_bytes=%d>" % (
            _quant.QUANT_NAMES.get(self.quant_type, self.quant_type), " %r" % self.name if self.name else "",
            self.N, self.K, self.n_bytes)


# Element types a NumPy array maps to in metadata, and tensor types of float arrays.
_NUMPY_TO_VALUE = {(v.kind, v.itemsize): t for t, v in _VALUE_DTYPES.items()}
_TENSOR_TYPES = {"float32": TC_GGML_TYPE_F32, "float16": TC_GGML_TYPE_F16, "bfloat16": TC_GGML_TYPE_BF16}


def _infer_value_type(v):
    if isinstance(v, bool) or isinstance(v, np.bool_):
        return TC_GGUF_TYPE_BOOL
    if isinstance(v, (int, np.integer)):
        return TC_GGUF_TYPE_INT32 if -(1 << 31) <= int(v) < (1 << 31) else TC_GGUF_TYPE_INT64
    if isinstance(v, (float, np.floating)):
        return TC_GGUF_TYPE_FLOAT32
    if isinstance(v, (str, bytes)):
        return TC_GGUF_TYPE_STRING
    if isinstance(v, (list, tuple, np.ndarray)):
        return TC_GGUF_TYPE_ARRAY
    raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "GgufWriter: cannot store a %s in GGUF metadata" % type(v).__name__)


class GgufWriter(_Owned):
    """Builds a GGUF file: metadata in the order it is added, tensors, then
    write(path). Setter names follow gguf-py's GGUFWriter (add_uint32, ...,
    add_string, add_array, add_tensor).

    with tc.GgufWriter() as w:
        w.add_string("general.architecture", "llama")
        w.add_tensor("blk.0.attn_q.weight", q_bytes, ggml_type="q4_0", shape=(N, K))
        w.write("out.gguf")
    """

    _kind = "gguf_writer"

    def __init__(self):
        out = c_void_p()
        check(_tc_gguf_writer_create(byref(out)))
        self._keep = []  # arrays and buffers whose bytes are read at write time
        self._adopt(out.value)

    def close(self):
        if self._handle is None:
            return
        address = self._handle
        self._forget()
        self._keep = []
        check(_tc_gguf_writer_free(address))

    def _h(self, fn):
        return self._checked(fn, "writer")

    def set_version(self, version):
        check(_tc_gguf_writer_set_version(self._h("tc_gguf_writer_set_version"), int(version)))

    def set_alignment(self, alignment):
        check(_tc_gguf_writer_set_alignment(self._h("tc_gguf_writer_set_alignment"), int(alignment)))

    def add_value(self, key, value, value_type=None, elem_type=None):
        """A metadata value of TC_GGUF_TYPE_* `value_type` (inferred when None:
        bool, int32/int64, float32, string, array)."""
        t = _infer_value_type(value) if value_type is None else int(value_type)
        k = _key(key, "GgufWriter.add_value")
        if t == TC_GGUF_TYPE_STRING:
            b = value if isinstance(value, bytes) else str(value).encode("utf-8")
            check(_tc_gguf_writer_set_str(self._h("tc_gguf_writer_set_str"), k, b, len(b)))
        elif t == TC_GGUF_TYPE_ARRAY:
            self.add_array(key, value, elem_type)
        elif t in _SETTERS:
            v = bool(value) if t == TC_GGUF_TYPE_BOOL else float(value) if t in _FLOAT_TYPES else int(value)
            check(_SETTERS[t](self._h("tc_gguf_writer_set"), k, v))
        else:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "GgufWriter: unknown value type %r" % value_type)

    def add_uint8(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_UINT8)
    def add_int8(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_INT8)
    def add_uint16(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_UINT16)
    def add_int16(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_INT16)
    def add_uint32(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_UINT32)
    def add_int32(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_INT32)
    def add_float32(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_FLOAT32)
    def add_bool(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_BOOL)
    def add_uint64(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_UINT64)
    def add_int64(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_INT64)
    def add_float64(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_FLOAT64)
    def add_string(self, key, v): self.add_value(key, v, TC_GGUF_TYPE_STRING)

    def add_array(self, key, values, elem_type=None):
        """An array: a NumPy array (element type from its dtype), a list of str,
        a list of lists (nested), or a list of numbers (elem_type, else int32 /
        float32 / bool from the first element)."""
        h = self._h("tc_gguf_writer_begin_array")
        check(_tc_gguf_writer_begin_array(h, _key(key, "GgufWriter.add_array"), self._elem_type(values, elem_type)))
        self._push(values, elem_type)
        check(_tc_gguf_writer_end_array(h))

    def _elem_type(self, values, elem_type):
        if elem_type is not None:
            return int(elem_type)
        if isinstance(values, np.ndarray):
            t = _NUMPY_TO_VALUE.get((values.dtype.kind, values.dtype.itemsize))
            if t is not None:
                return t
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "GgufWriter: no GGUF type for dtype %s" % values.dtype)
        if len(values) == 0:
            return TC_GGUF_TYPE_INT32
        first = values[0]
        t = _infer_value_type(first)
        if t == TC_GGUF_TYPE_INT64:
            return t
        if t == TC_GGUF_TYPE_INT32 and any(not -(1 << 31) <= int(v) < (1 << 31) for v in values):
            return TC_GGUF_TYPE_INT64
        return t

    def _push(self, values, elem_type):
        h = self._h("tc_gguf_writer_push")
        et = self._elem_type(values, elem_type)
        if et == TC_GGUF_TYPE_STRING:
            for v in values:
                b = v if isinstance(v, bytes) else str(v).encode("utf-8")
                check(_tc_gguf_writer_push_str(h, b, len(b)))
        elif et == TC_GGUF_TYPE_ARRAY:
            for v in values:
                check(_tc_gguf_writer_begin_array(h, None, self._elem_type(v, None)))
                self._push(v, None)
                check(_tc_gguf_writer_end_array(h))
        else:
            dt = _VALUE_DTYPES.get(et)
            if dt is None:
                raise TensorcoreValueError(TC_ERR_INVALID_ARG, "GgufWriter: unknown element type %r" % et)
            arr = np.ascontiguousarray(np.asarray(values).astype(dt if et != TC_GGUF_TYPE_BOOL else np.uint8))
            check(_tc_gguf_writer_push_values(h, et, arr.ctypes.data if arr.size else None, arr.size))

    def add_tensor(self, name, data, ggml_type=None, shape=None, copy=False):
        """A tensor. `data`: a NumPy array (float32/float16/bfloat16 give
        F32/F16/BF16 with the array's shape), raw bytes of any ggml type with
        `ggml_type` ("q4_0", TC_GGML_TYPE_*, ...) and the logical `shape`
        (NumPy order, e.g. (N, K)), or a Buffer. Arrays are read when the file
        is written (copy=True copies now); Buffers are copied now."""
        fn = "tc_gguf_writer_add_tensor"
        h = self._h(fn)
        if isinstance(data, Buffer) or (isinstance(data, _Owned) and data._kind == "buffer"):
            if ggml_type is None or shape is None:
                raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: a Buffer needs ggml_type and shape" % fn)
            t = _ggml_type(ggml_type)
            dims = (c_int64 * max(len(shape), 1))(*reversed([int(s) for s in shape]))
            check(_tc_gguf_writer_add_tensor_buffer(h, _key(name, fn, "name"), t, dims, len(shape),
                                                    buffer_arg(data, fn, "data"), 0))
            return
        arr = data if isinstance(data, np.ndarray) else np.frombuffer(memoryview(data), dtype=np.uint8)
        if ggml_type is None:
            t = _TENSOR_TYPES.get(arr.dtype.name)
            if t is None:
                raise TensorcoreValueError(TC_ERR_UNSUPPORTED_DTYPE, "%s: give ggml_type for a %s array" % (
                    fn, arr.dtype))
        else:
            t = _ggml_type(ggml_type)
        if shape is None:
            shape = arr.shape
        arr = np.ascontiguousarray(arr)
        dims = (c_int64 * max(len(shape), 1))(*reversed([int(s) for s in shape]))
        check(_tc_gguf_writer_add_tensor(h, _key(name, fn, "name"), t, dims, len(shape),
                                         arr.ctypes.data if arr.nbytes else None, arr.nbytes, 1 if copy else 0))
        if not copy:
            self._keep.append(arr)

    def write(self, path):
        """Writes the file (through a temporary file renamed into place)."""
        check(_tc_gguf_writer_write_file(self._h("tc_gguf_writer_write_file"), _key(str(path), "write", "path")))

    write_file = write


def _ggml_type(t):
    if isinstance(t, str):
        name = t.strip().upper()
        if name.startswith("TC_GGML_TYPE_"):
            name = name[len("TC_GGML_TYPE_"):]
        for i in range(64):
            if gguf_type_name(i) == name:
                return i
        raise TensorcoreValueError(TC_ERR_UNSUPPORTED_DTYPE, "unknown ggml type %r" % t)
    return int(t)
