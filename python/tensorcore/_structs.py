"""ctypes mirrors of the C structs of the foundation areas (context.h, gemm.h).

Field names, types and order are exactly the C ones, so sizes and offsets
match the compiler's layout; `_c_name_` names the C type, and
tests/python/test_abi.py compares every exported struct with a C compiler's
sizeof/offsetof. `char[]` fields read back as str.
"""

import ctypes
from ctypes import c_char, c_double, c_int32, c_int64, c_uint32, c_uint64

from ._constants import BACKEND_NAMES


def _str_fields(cls, *names):
    """Makes char-array fields read and write as str instead of bytes."""
    for name in names:
        raw = getattr(cls, name)  # the ctypes field descriptor

        def get(self, _raw=raw):
            return _raw.__get__(self, type(self)).decode("utf-8", "replace")

        def set_(self, value, _raw=raw):
            _raw.__set__(self, value.encode() if isinstance(value, str) else value)

        setattr(cls, name, property(get, set_))
    return cls


class _Struct(ctypes.Structure):
    def as_dict(self):
        return {name: getattr(self, name) for name, *_ in self._fields_}

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self.as_dict().items()))


class TCDeviceInfo(_Struct):
    """struct tc_device_info (no typedef in C)."""
    _c_name_ = "struct tc_device_info"
    _fields_ = [
        ("name", c_char * 256),
        ("family", c_char * 64),
        ("features", c_char * 256),
        ("backend", c_int32),
        ("device_index", c_int32),
        ("compute_units", c_int32),
        ("compute_capability", c_int32),
        ("memory_bytes", c_uint64),
    ]

    @property
    def backend_name(self):
        return BACKEND_NAMES.get(self.backend, "unknown")

    @property
    def feature_list(self):
        return [f for f in self.features.split(",") if f]


_str_fields(TCDeviceInfo, "name", "family", "features")


class TCRuntimeCapabilities(_Struct):
    """struct tc_runtime_capabilities: a versioned record of capability bits."""
    _c_name_ = "struct tc_runtime_capabilities"
    _fields_ = [
        ("struct_size", c_uint32),
        ("version", c_uint32),
        ("known", c_uint64),
        ("available", c_uint64),
    ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.struct_size:
            self.struct_size = ctypes.sizeof(TCRuntimeCapabilities)


class TCGemmDesc(_Struct):
    """tc_gemm_desc."""
    _c_name_ = "struct tc_gemm_desc"
    _fields_ = [
        ("M", c_int64),
        ("N", c_int64),
        ("K", c_int64),
        ("dtype", c_int32),
        ("accum", c_int32),
        ("alpha", c_double),
        ("beta", c_double),
        ("transpose_a", c_int32),
        ("transpose_b", c_int32),
        ("lda", c_int64),
        ("ldb", c_int64),
        ("ldc", c_int64),
        ("batch", c_int64),
        ("stride_a", c_int64),
        ("stride_b", c_int64),
        ("stride_c", c_int64),
        ("allow_tf32", c_int32),
    ]


__all__ = ["TCDeviceInfo", "TCRuntimeCapabilities", "TCGemmDesc"]
