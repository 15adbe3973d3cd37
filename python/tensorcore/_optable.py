"""The op entry points, declared from the library's own table.

The library describes every op entry point (src/capi/entries.def) through
tc_op_entry(i): "c_name|backend op|capability bits|signature". The ctypes
prototypes of tc_<op> and tc_<op>_async are built from those signatures, so
the binding cannot disagree with the library about an op's arguments;
tests/python/test_op_table.py checks the signatures against the headers.
"""

import ctypes
from ctypes import POINTER, c_char_p, c_double, c_float, c_int32, c_int64, c_void_p

from ._constants import dtype_code
from ._errors import check
from ._lib import declare, handle, lib, tc_status
from ._objects import buffer_arg, context_arg, hold, stream_arg
from ._structs import _Struct

_SCALARS = {"i64": c_int64, "i32": c_int32, "f32": c_float, "f64": c_double, "dtype": c_int32, "quant": c_int32}


class Param:
    """One parameter of a signature: kind (ctx, in, out, inout, a scalar type
    or desc), name, whether a buffer may be None, and a desc's C type."""

    def __init__(self, text):
        words = text.split()
        self.kind, self.optional, self.ctype = words[0].rstrip("?"), words[0].endswith("?"), None
        if self.kind == "ctx":
            self.name = "ctx"
        elif self.kind in ("in", "out", "inout"):
            self.name = words[1].split("[")[0]
        elif self.kind == "desc":
            self.ctype, self.name = words[1], words[2]
        else:
            self.name = words[1]

    @property
    def is_buffer(self):
        return self.kind in ("in", "out", "inout")


class Entry:
    """One row of the table."""

    def __init__(self, row):
        self.c_name, self.op, caps, self.signature = row.split("|", 3)
        self.capabilities = int(caps)
        self.params = [Param(p) for p in _split(self.signature)]


def _split(signature):
    """The parameters of a signature: split at commas outside brackets."""
    out, item, depth = [], "", 0
    for ch in signature:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(item.strip())
            item = ""
        else:
            item += ch
    return out + [item.strip()]


def _read_table():
    if not hasattr(lib, "tc_op_entry"):
        return {}
    count = declare("tc_op_entry_count", c_int32)
    entry = declare("tc_op_entry", c_char_p, c_int32)
    rows = (entry(i).decode() for i in range(count()))
    return {e.c_name: e for e in map(Entry, rows)}


ENTRIES = _read_table()


def argtypes(entry, structs=()):
    """ctypes argument types of an entry's signature; `structs` are the ctypes
    mirrors of its descriptor types."""
    by_name = {s._c_name_.replace("struct ", ""): s for s in structs}
    out = []
    for p in entry.params:
        if p.kind == "ctx" or p.is_buffer:
            out.append(handle)
        elif p.kind == "desc":
            if p.ctype not in by_name:
                raise TypeError("%s: no ctypes mirror given for %s" % (entry.c_name, p.ctype))
            out.append(POINTER(by_name[p.ctype]))
        else:
            out.append(_SCALARS[p.kind])
    return out


class Op:
    """tc_<op> and tc_<op>_async with their prototypes from the table.

    op(stream, *args) runs the synchronous entry when stream is None, else the
    _async one on `stream`, keeping the Buffer arguments alive until the
    stream's next sync; a failing status raises."""

    def __init__(self, c_name, *structs):
        self.name = c_name
        entry = ENTRIES.get(c_name)
        types = argtypes(entry, structs) if entry else []
        self.sync = declare(c_name, tc_status, *types)
        self.async_ = declare(c_name + "_async", tc_status, *(types + [handle]))

    def __call__(self, stream, *args, keep=()):
        if stream is None:
            check(self.sync(*args))
        else:
            self.enqueue(stream, *args, keep=keep)

    def enqueue(self, stream, *args, keep=()):
        """The _async entry on `stream` (which the library checks, None included)."""
        check(self.async_(*args, stream_arg(stream, self.name + "_async")))
        hold(stream, *(k for k in keep if k is not None))


class TCOpValue(_Struct):
    """struct tc_op_value: one argument of tc_op_call."""
    _c_name_ = "struct tc_op_value"
    _fields_ = [("handle", c_void_p), ("i", c_int64), ("f", c_double)]


_tc_op_call = declare("tc_op_call", tc_status, c_char_p, POINTER(TCOpValue), c_int32, handle)


def op_entries():
    """The library's op table: {c_name: Entry} (c_name, op, capabilities, signature, params)."""
    return dict(ENTRIES)


def op_call(name, *args, stream=None):
    """Calls the op entry point `name` ("rmsnorm_forward" or "tc_rmsnorm_forward")
    with its signature's arguments in order (Buffers, Context, numbers, dtype
    names, descriptor structs), through tc_op_call: synchronously, or enqueued
    on `stream`."""
    c_name = name if name.startswith("tc_") else "tc_" + name
    entry = ENTRIES.get(c_name)
    values = (TCOpValue * max(1, len(args)))()
    if entry is not None and len(args) == len(entry.params):
        for v, p, a in zip(values, entry.params, args):
            if p.kind == "ctx":
                v.handle = context_arg(a, c_name)
            elif p.is_buffer:
                v.handle = buffer_arg(a, c_name, p.name)
            elif p.kind == "desc":
                v.handle = ctypes.addressof(a)
            elif p.kind in ("f32", "f64"):
                v.f = float(a)
            elif p.kind == "dtype":
                v.i = dtype_code(a)
            else:
                v.i = int(a)
    check(_tc_op_call(c_name.encode(), values, len(args), stream_arg(stream, "tc_op_call")))
    if stream is not None:
        hold(stream, *args)
