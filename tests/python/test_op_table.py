"""The op table against everything derived from it or written beside it:

- src/core/ops.def (backend ops) and src/capi/entries.def (entry points and
  their signatures), as the library reports them through tc_op_entry();
- the C headers: each entry and its _async twin declared with the
  signature's parameter names and C types, in order;
- the binding: the ctypes argument types of both;
- the capability bits: every op's bit is a header constant the binding
  knows, reported available on the CPU backend (which implements every op),
  and every op-level capability of the header belongs to some op."""

import ctypes
import re

import pytest

import tensorcore as tc
from conftest import REPO
from tensorcore import _optable

HEADERS = sorted((REPO / "include" / "tensorcore").glob("*.h"))
TABLE = REPO / "src" / "capi" / "entries.def"
OPS = REPO / "src" / "core" / "ops.def"

# C type of each signature kind.
C_TYPES = {"ctx": "tc_context", "in": "tc_buffer", "out": "tc_buffer", "inout": "tc_buffer", "i64": "int64_t",
           "i32": "int32_t", "f32": "float", "f64": "double", "dtype": "tc_dtype", "quant": "tc_quant_type"}
CTYPES = {"ctx": ctypes.c_void_p, "in": ctypes.c_void_p, "out": ctypes.c_void_p, "inout": ctypes.c_void_p,
          "i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float, "f64": ctypes.c_double,
          "dtype": ctypes.c_int32, "quant": ctypes.c_int32}
# Capability bits that belong to ops (the rest describe the device or other areas).
OP_CAPABILITIES = {"GEMM_F32", "GEMM_F16", "GEMM_BF16", "GEMM_I8", "GEMM_BATCHED", "TRAINING_KERNELS", "CONV2D",
                   "ATTENTION", "ATTENTION_BACKWARD", "QUANTIZED"}


def prototypes():
    """name -> [(C type, parameter name)] of every TC_API function in the headers."""
    text = re.sub(r"/\*.*?\*/", " ", "\n".join(h.read_text() for h in HEADERS), flags=re.S)
    flat = re.sub(r"\s+", " ", text)
    out = {}
    for name, params in re.findall(r"TC_API [^;(]*?\b(tc_\w+)\s*\(([^)]*)\)\s*;", flat):
        pairs = []
        for p in params.split(","):
            m = re.fullmatch(r"\s*(.*?)\s*(\w+)\s*", p)
            pairs.append((re.sub(r"\s*\*", "*", m.group(1)), m.group(2)))
        out[name] = pairs
    return out


def expected_c(param):
    if param.kind == "desc":
        return ("const %s*" % param.ctype, param.name)
    return (C_TYPES[param.kind], param.name)


def test_the_library_reports_every_table_row():
    rows = re.findall(r"^TC_ENTRY\((\w+),\s*(\w+),", TABLE.read_text(), flags=re.M)
    assert len(rows) >= 26
    assert sorted(_optable.ENTRIES) == sorted("tc_" + e for e, _ in rows)
    ops = set(re.findall(r"^TC_OP\((\w+),", OPS.read_text(), flags=re.M))
    for entry, op in rows:
        assert op in ops, "%s reaches %s, which is not in ops.def" % (entry, op)
        assert _optable.ENTRIES["tc_" + entry].op == op


@pytest.mark.skipif(not HEADERS, reason="C headers not found")
@pytest.mark.parametrize("name", sorted(_optable.ENTRIES))
def test_headers_declare_each_entry_and_its_async_twin(name):
    protos = prototypes()
    entry = _optable.ENTRIES[name]
    want = [expected_c(p) for p in entry.params]
    assert protos.get(name) == want, "%s: header %s, table %s" % (name, protos.get(name), want)
    assert protos.get(name + "_async") == want + [("tc_stream", "stream")], name + "_async"


@pytest.mark.parametrize("name", sorted(_optable.ENTRIES))
def test_binding_prototypes_follow_the_table(name):
    entry = _optable.ENTRIES[name]
    for c_name, extra in ((name, []), (name + "_async", [ctypes.c_void_p])):
        fn = tc._lib.DECLARED[c_name]
        got = list(fn.argtypes)
        assert len(got) == len(entry.params) + len(extra), c_name
        for t, p in zip(got, entry.params):
            if p.kind == "desc":
                assert issubclass(t, ctypes._Pointer), (c_name, p.name)
                assert t._type_._c_name_.replace("struct ", "") == p.ctype, (c_name, p.name)
            else:
                assert t is CTYPES[p.kind], (c_name, p.name, t)
        assert got[len(entry.params):] == extra
        assert fn.restype is ctypes.c_int32


def test_capability_bits_follow_the_ops():
    names = {getattr(tc, "TC_CAPABILITY_" + n): n for n in OP_CAPABILITIES}
    covered = 0
    for entry in _optable.ENTRIES.values():
        bits = entry.capabilities
        assert bits, "%s has no capability bit" % entry.c_name
        assert not bits & ~sum(names), "%s: unknown capability bits %#x" % (entry.c_name, bits)
        covered |= bits
    assert covered == sum(names), "op capabilities without an op: %s" % [
        n for b, n in names.items() if not covered & b]
    with tc.Context("cpu") as ctx:
        caps = ctx.runtime_capabilities()
        for b, n in names.items():
            assert tc.capability_available(caps, b), "the CPU backend has every op, but not %s" % n


def test_shape_rules_name_parameters():
    """Every dimension a shape rule names is a parameter (the library refuses
    such a table when it parses it, on the first call)."""
    for entry in _optable.ENTRIES.values():
        names = {p.name for p in entry.params}
        for shape in re.findall(r"\[([^\]*]+)\]", entry.signature):
            for dim in shape.split(","):
                assert dim.strip() in names, (entry.c_name, dim)


def test_calls_by_name_equal_the_direct_calls(rng):
    """tc_op_call boxes the same arguments; synchronous and on a stream."""
    import numpy as np
    with tc.Context("cpu") as ctx:
        x = rng.standard_normal((3, 8)).astype(np.float32)
        X = ctx.buffer_from_array(x)
        Y1, Y2, Y3 = (ctx.buffer(x.nbytes) for _ in range(3))
        tc.softmax_forward(ctx, X, Y1, 3, 8, dtype="f32")
        tc.op_call("softmax_forward", ctx, X, Y2, 3, 8, "f32")
        with ctx.stream() as s:
            tc.op_call("tc_softmax_forward", ctx, X, Y3, 3, 8, "f32", stream=s)
            s.sync()
        want = Y1.to_numpy(x.nbytes, np.uint8).tobytes()
        assert Y2.to_numpy(x.nbytes, np.uint8).tobytes() == want
        assert Y3.to_numpy(x.nbytes, np.uint8).tobytes() == want
        d = tc.TCRopeDesc(batch=1, heads=1, seq=2, head_dim=4, dtype=tc.TC_DTYPE_F32, interleaved=0)
        T = ctx.buffer_from_array(np.ones(4, np.float32))
        R = ctx.buffer_from_array(np.ones(8, np.float32))
        tc.op_call("rope_forward", ctx, R, T, T, d)  # a descriptor by address
        for args, what in (((ctx, X, Y2, 3, 8), "takes 6 arguments"), ((ctx,), "takes 6 arguments")):
            with pytest.raises(tc.TensorcoreError, match=what) as e:
                tc.op_call("softmax_forward", *args)
            assert e.value.status == tc.TC_ERR_INVALID_ARG
        with pytest.raises(tc.TensorcoreError, match="not an op entry point"):
            tc.op_call("no_such_op", ctx)
        with pytest.raises(tc.TensorcoreError) as e:  # validated as the direct call
            tc.op_call("softmax_forward", ctx, X, X, 3, 9, "f32")
        assert e.value.status == tc.TC_ERR_INVALID_ARG
