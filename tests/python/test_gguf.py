"""GGUF files against gguf-py (PyPI `gguf`, optional: cross-checks skip
without it): files it writes read identically with ours, files we write read
identically with its GGUFReader, loaded tensors compute the right GEMV, and
bad files (truncated, corrupted, hostile) fail cleanly.
"""

import os
import struct

import numpy as np
import pytest

import tensorcore as tc
from conftest import TOLERANCE, assert_close, poison, random_array, to_f64
from test_quant import random_weights, reference_weights

SUPPORTED = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"]
UNSUPPORTED = "iq4_nl"  # read and sized, never computed with: 32 weights in 18 bytes


def gguf_py():
    return pytest.importorskip("gguf")


def qtype(name):
    from gguf.constants import GGMLQuantizationType as T
    return getattr(T, name.upper())


def expect_error(status, fn, *args, **kwargs):
    with pytest.raises(tc.TensorcoreError) as e:
        fn(*args, **kwargs)
    assert e.value.status == status, str(e.value)
    assert e.value.detail, "no detail for %s" % e.value
    return e.value


# Metadata written through gguf-py: (key, value, GGUFValueType name, array element type name).
def metadata_cases():
    return [
        ("t.u8", 250, "UINT8", None), ("t.i8", -100, "INT8", None), ("t.u16", 65000, "UINT16", None),
        ("t.i16", -32000, "INT16", None), ("t.u32", 4000000000, "UINT32", None), ("t.i32", -2000000000, "INT32", None),
        ("t.f32", 0.1, "FLOAT32", None), ("t.bool", True, "BOOL", None), ("t.u64", 2**64 - 1, "UINT64", None),
        ("t.i64", -2**63, "INT64", None), ("t.f64", -1e300, "FLOAT64", None), ("t.str", "héllo wörld ✓", "STRING", None),
        ("t.empty_str", "", "STRING", None),
        ("a.u8", [0, 1, 255], "ARRAY", "UINT8"), ("a.i16", [-5, 7], "ARRAY", "INT16"),
        ("a.u32", [1, 2, 3], "ARRAY", "UINT32"), ("a.i32", [-1, 0, 1], "ARRAY", "INT32"),
        ("a.u64", [2**63 + 5], "ARRAY", "UINT64"), ("a.i64", [-2**40, 2**40], "ARRAY", "INT64"),
        ("a.f32", [0.5, -1.25, 3e38], "ARRAY", "FLOAT32"), ("a.f64", [1e-300, 2.5], "ARRAY", "FLOAT64"),
        ("a.bool", [True, False, True], "ARRAY", "BOOL"), ("a.str", ["a", "", "ccc", "✓"], "ARRAY", "STRING"),
        ("a.nested", [[1, 2], [3], [4, 5, 6]], "ARRAY", "ARRAY"),
        ("a.nested_str", [["x"], ["y", "z"]], "ARRAY", "ARRAY"),
    ]


def write_gguf_py(path, rng, alignment=None, tensors=SUPPORTED + [UNSUPPORTED], extra=()):
    """A v3 file from gguf-py with every metadata case and a tensor of each
    type (random bytes with sane scales); returns {name: (type, shape, bytes)}."""
    gguf = gguf_py()
    from gguf.constants import GGUFValueType as V
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, value, vtype, sub in metadata_cases():
        w.add_key_value(key, value, V[vtype], sub_type=V[sub] if sub and sub != "ARRAY" else None)
    for key, value in extra:
        w.add_key_value(key, value[0], value[1])
    written = {}
    for i, fmt in enumerate(tensors):
        N, K = 3 + i, 256
        name = "blk.%d.%s.weight" % (i, fmt)
        if fmt == UNSUPPORTED:
            data = rng.integers(0, 256, (N, K // 32 * 18), dtype=np.uint8)
            w.add_tensor(name, data, raw_dtype=qtype(fmt))  # shape from the bytes
        elif fmt == "f32":
            data = rng.standard_normal((N, K)).astype(np.float32)
            w.add_tensor(name, data)
        elif fmt == "f16":
            data = rng.standard_normal((N, K)).astype(np.float16)
            w.add_tensor(name, data)
        else:
            data = random_weights(rng, fmt, N, K)
            w.add_tensor(name, data, raw_dtype=qtype(fmt))
        written[name] = (fmt, (N, K), np.ascontiguousarray(data).view(np.uint8).reshape(-1))
    w.add_tensor("vec.f32", np.arange(8, dtype=np.float32))
    written["vec.f32"] = ("f32", (8,), np.arange(8, dtype=np.float32).view(np.uint8))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


def plain(v):
    """NumPy arrays inside a value as lists, for == comparisons."""
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def same_value(ours, expected):
    if isinstance(expected, list):
        if isinstance(ours, np.ndarray):
            return ours.tolist() == expected if ours.dtype.kind != "f" else \
                np.array_equal(ours, np.array(expected, dtype=ours.dtype))
        return len(ours) == len(expected) and all(same_value(o, e) for o, e in zip(ours, expected))
    if isinstance(expected, float):
        return ours == expected or ours == float(np.float32(expected))
    return ours == expected and type(ours) is type(expected)


# ---- gguf-py writes, we read ----------------------------------------------------------------------

@pytest.mark.parametrize("alignment", [None, 64])
def test_files_written_by_gguf_py_read_identically(tmp_path, rng, alignment):
    gguf = gguf_py()
    path = tmp_path / "m.gguf"
    written = write_gguf_py(path, rng, alignment)
    ref = gguf.GGUFReader(str(path))
    with tc.GgufFile(path) as g:
        assert g.version == 3
        assert g.alignment == (alignment or 32)
        ref_keys = [k for k in ref.fields if not k.startswith("GGUF.")]  # gguf-py adds the header as fields
        assert g.keys() == ref_keys
        assert g.metadata_count() == len(ref_keys)
        for key, value, vtype, sub in metadata_cases():
            got = g.meta_get(key)
            assert same_value(got, value), (key, got, value)
            t, et, n = g.meta_type(key)
            assert t == getattr(tc, "TC_GGUF_TYPE_" + vtype)
            if sub:
                assert et == getattr(tc, "TC_GGUF_TYPE_" + sub) and n == len(value)
            field = ref.fields[key]
            if sub != "ARRAY":  # gguf-py flattens nested arrays
                assert same_value(got if not isinstance(got, np.ndarray) else got.tolist(), field.contents()) or \
                    np.allclose(got, field.contents()), key
        # The typed getters agree with meta_get.
        assert g.meta_get_i64("t.i8") == -100 and g.meta_get_u64("t.u64") == 2**64 - 1
        assert g.meta_get_f64("t.u16") == 65000.0 and g.meta_get_i64("t.bool") == 1
        assert g.meta_get_str("general.architecture") == "llama"
        assert g.meta_array_count("a.str") == 4 and g.meta_array_get_str("a.str", 3) == "✓"
        assert g.meta_array_get_i64("a.i16", 0) == -5 and g.meta_array_get_f64("a.f32", 1) == -1.25
        assert g.meta_array_get_u64("a.u64", 0) == 2**63 + 5
        expect_error(tc.TC_ERR_INVALID_ARG, g.meta_get_i64, "a.u64")      # an array, not an integer
        expect_error(tc.TC_ERR_INVALID_ARG, g.meta_array_get_i64, "a.u64", 0)  # above INT64_MAX
        expect_error(tc.TC_ERR_INVALID_ARG, g.meta_get_i64, "missing.key")
        assert g.meta_get_i64("missing.key", default=7) == 7
        assert g.meta_get_f64("missing.key", default=0.5) == 0.5
        assert g.meta_get_str("missing.key", default="x") == "x"
        # Tensors: infos, offsets and bytes as gguf-py sees them.
        assert g.tensor_count() == len(ref.tensors)
        for i, rt in enumerate(ref.tensors):
            t = g.tensor_at(i)
            assert t == g.get_tensor(rt.name) and g.find_tensor(rt.name) == i
            assert t["name"] == rt.name and t["type"] == int(rt.tensor_type)
            assert t["dims"] == [int(d) for d in rt.shape] and t["n_dims"] == len(rt.shape)
            assert t["n_bytes"] == rt.n_bytes and t["file_offset"] == rt.data_offset
            assert t["file_offset"] % (alignment or 32) == 0
            data = g.tensor_bytes(rt.name)
            assert np.array_equal(data, np.asarray(rt.data).view(np.uint8).reshape(-1))
            assert np.array_equal(data, written[rt.name][2])
        assert g.find_tensor("nope") == -1
        expect_error(tc.TC_ERR_INVALID_ARG, g.get_tensor, "nope")
        info = g.quantized_matrix_info("blk.3.q4_0.weight")
        assert info == {"quant_type": tc.TC_QUANT_Q4_0, "gguf_type": tc.TC_GGML_TYPE_Q4_0, "N": 6, "K": 256,
                        "n_bytes": 6 * 8 * 18}
        name = "blk.%d.%s.weight" % (len(SUPPORTED), UNSUPPORTED)
        e = expect_error(tc.TC_ERR_UNSUPPORTED_DTYPE, g.quantized_matrix_info, name)
        assert "tensor '%s' has type IQ4_NL, which tensorcore does not compute with" % name in str(e)


def test_metadata_all_and_from_bytes(tmp_path, rng):
    path = tmp_path / "m.gguf"
    write_gguf_py(path, rng, tensors=["q8_0"])
    data = path.read_bytes()
    with tc.GgufFile(path) as a, tc.GgufFile.from_bytes(data) as b:
        ma, mb = a.metadata(), b.metadata()
        assert list(ma) == list(mb)
        assert plain(ma) == plain(mb)
        assert a.tensors() == b.tensors()


# ---- we write, gguf-py reads ------------------------------------------------------------------------

def test_files_we_write_read_identically_with_gguf_py(tmp_path, rng):
    gguf = gguf_py()
    from gguf.constants import GGUFValueType as V
    path = tmp_path / "ours.gguf"
    expected_tensors = {}
    with tc.GgufWriter() as w:
        w.set_alignment(64)
        w.add_string("general.architecture", "llama")
        for key, value, vtype, sub in metadata_cases():
            if vtype == "ARRAY":
                et = None if sub == "ARRAY" else getattr(tc, "TC_GGUF_TYPE_" + sub)
                w.add_array(key, value, et)
            else:
                w.add_value(key, value, getattr(tc, "TC_GGUF_TYPE_" + vtype))
        w.add_array("a.np_u16", np.array([1, 2, 65535], np.uint16))
        w.add_array("a.np_f64", np.array([0.25, -8.0]))
        for i, fmt in enumerate(SUPPORTED + [UNSUPPORTED]):
            N, K = 2 + i, 512
            if fmt == UNSUPPORTED:
                data = rng.integers(0, 256, (N, K // 32 * 18), dtype=np.uint8)
            else:
                data = random_weights(rng, fmt, N, K)
            w.add_tensor("t.%s" % fmt, data, ggml_type=fmt, shape=(N, K))
            expected_tensors["t.%s" % fmt] = (fmt, (N, K), data.reshape(-1))
        arr = rng.standard_normal((3, 5)).astype(np.float32)
        w.add_tensor("t.array_f32", arr)  # type and shape from the array
        expected_tensors["t.array_f32"] = ("f32", (3, 5), arr.view(np.uint8).reshape(-1))
        w.write(path)
    ref = gguf.GGUFReader(str(path))
    assert int(ref.fields["GGUF.version"].contents()) == 3
    assert ref.alignment == 64
    for key, value, vtype, sub in metadata_cases():
        f = ref.fields[key]
        assert f.types[0] == V[vtype], key
        if sub and sub != "ARRAY":
            assert f.types[-1] == V[sub], key
            got = f.contents()
            assert got == value or np.allclose(got, value), key
        elif not sub:
            got = f.contents()
            assert got == value or got == pytest.approx(value, rel=1e-7), key
    assert ref.fields["a.nested"].types[:2] == [V.ARRAY, V.ARRAY]
    assert ref.fields["a.np_u16"].types == [V.ARRAY, V.UINT16]
    assert ref.fields["a.np_f64"].contents() == [0.25, -8.0]
    assert ref.fields["general.alignment"].contents() == 64
    assert len(ref.tensors) == len(expected_tensors)
    for rt in ref.tensors:
        fmt, shape, data = expected_tensors[rt.name]
        assert rt.tensor_type == qtype(fmt)
        assert [int(d) for d in rt.shape] == list(reversed(shape))
        assert np.array_equal(np.asarray(rt.data).view(np.uint8).reshape(-1), data)
        assert rt.data_offset % 64 == 0
    # And ours reads it back, nested arrays included.
    with tc.GgufFile(path) as g:
        for key, value, _, _ in metadata_cases():
            assert same_value(g.meta_get(key), value), key


def test_version_2_and_quantize_then_save(tmp_path, cpu_ctx, rng):
    gguf = gguf_py()
    N, K = 8, 256
    x = random_array(rng, (N, K), "f16")
    src = cpu_ctx.buffer_from_array(x)
    path = tmp_path / "q.gguf"
    with tc.GgufWriter() as w:
        w.set_version(2)
        for fmt in ("q4_0", "q8_0"):
            q = cpu_ctx.buffer(tc.quantized_size(fmt, N, K))
            cpu_ctx.quantize_weights(src, q, fmt, N, K)
            w.add_tensor("w." + fmt, q, ggml_type=fmt, shape=(N, K))  # a Buffer: copied now
        w.write(path)
    ref = gguf.GGUFReader(str(path))
    assert int(ref.fields["GGUF.version"].contents()) == 2
    for rt in ref.tensors:
        theirs = gguf.quants.quantize(to_f64(x).astype(np.float32), rt.tensor_type)
        assert np.array_equal(np.asarray(rt.data).view(np.uint8).reshape(-1), theirs.reshape(-1))
    with tc.GgufFile(path) as g:
        assert g.version == 2


def test_writer_misuse(tmp_path):
    with tc.GgufWriter() as w:
        w.add_uint32("a", 1)
        expect_error(tc.TC_ERR_INVALID_ARG, w.add_int8, "a", 2)  # duplicate key
        expect_error(tc.TC_ERR_INVALID_ARG, w.add_uint64, "general.alignment", 64)
        expect_error(tc.TC_ERR_INVALID_ARG, w.set_alignment, 48)
        expect_error(tc.TC_ERR_INVALID_ARG, w.set_version, 1)
        expect_error(tc.TC_ERR_INVALID_SHAPE, w.add_tensor, "t", np.zeros(18, np.uint8), ggml_type="q4_0",
                     shape=(1, 33))
        expect_error(tc.TC_ERR_INVALID_ARG, w.add_tensor, "t", np.zeros(17, np.uint8), ggml_type="q4_0",
                     shape=(1, 32))
        expect_error(tc.TC_ERR_IO, w.write, "/nonexistent/dir/x.gguf")
        w.write(tmp_path / "ok.gguf")
    with tc.GgufFile(tmp_path / "ok.gguf") as g:
        assert g.keys() == ["a"] and g.tensor_count() == 0


# ---- loading ------------------------------------------------------------------------------------------

def test_load_supported_tensors_and_gemv(tmp_path, ctx, rng):
    path = tmp_path / "m.gguf"
    written = write_gguf_py(path, rng)
    with tc.GgufFile(path) as g:
        model = ctx.load_supported_tensors(g)
    assert model.tensor_count() == len(SUPPORTED) + 1 and model.skipped_tensor_count() == 1  # iq4_nl
    for t in model.tensors():
        fmt, shape, data = written[t["name"]]
        assert isinstance(t, dict) and t.model is model
        assert t["dims"] == list(reversed(shape)) and t["n_bytes"] == data.size
        assert t["quant_type"] == tc.quant_code(fmt)
        buf = t["buffer"]
        assert buf is t.buffer
        assert np.array_equal(buf.to_numpy((data.size,), np.uint8), data)
    for fmt in ("q4_0", "q5_0", "q5_1", "q4_k", "q6_k", "f16"):
        name = [n for n, v in written.items() if v[0] == fmt and n.startswith("blk")][0]
        q = model.quantized_matrix(name)
        N, K = written[name][1]
        assert (q.N, q.K, q.quant_type, q.n_bytes) == (N, K, tc.quant_code(fmt), written[name][2].size)
        wd = reference_weights(written[name][2].reshape(N, -1), fmt, N, K).astype(np.float64)
        for M in (1, 4):
            x = random_array(rng, (M, K), "f16")
            X = ctx.buffer_from_array(x)
            Y = q.output(M)
            Y.write(poison(M * N * 2))
            if M == 1:
                q.gemv(X, Y, M=M)
            else:
                with ctx.stream() as s:
                    q.gemv_async(X, Y, s, M=M)
            ref = to_f64(x) @ wd.T
            assert_close(Y.to_numpy((M, N), np.float16), ref, np.abs(to_f64(x)) @ np.abs(wd).T, TOLERANCE["f16"],
                         name)
    # Buffers belong to the model: freeing one is refused; closing the model
    # makes every accessor raise.
    t = model.get_tensor("vec.f32")
    assert tc._lib.tc_buffer_free(t.buffer.handle) == tc.TC_ERR_INVALID_ARG
    t.buffer.close()  # closing the wrapper only drops it; the next access gives a fresh one
    assert not t.buffer.closed and t.buffer.to_numpy((8,), np.float32)[7] == 7
    q = model.quantized_matrix("blk.3.q4_0.weight")
    model.close()
    model.close()
    assert model.closed
    expect_error(tc.TC_ERR_INVALID_ARG, lambda: t.buffer)
    expect_error(tc.TC_ERR_INVALID_ARG, lambda: t["buffer"])
    expect_error(tc.TC_ERR_INVALID_ARG, q.gemv, None, None)
    assert t["name"] == "vec.f32"  # the description stays


def test_context_close_frees_models(tmp_path, rng):
    path = tmp_path / "m.gguf"
    write_gguf_py(path, rng, tensors=["q8_0"])
    ctx = tc.Context("cpu")
    g = ctx.open_gguf(path)
    model = tc.gguf_load_supported_tensors(ctx, g)
    g.close()
    buf = model.get_tensor("vec.f32").buffer
    expect_error(tc.TC_ERR_INVALID_ARG, tc.shutdown, ctx.handle)  # the C call refuses: model buffers live
    ctx.close()
    assert model.closed and buf.closed


def test_tensor_to_buffer_is_private(tmp_path, cpu_ctx, rng):
    path = tmp_path / "m.gguf"
    write_gguf_py(path, rng, tensors=["f32"])
    before = path.read_bytes()
    with tc.GgufFile(path) as g:
        a = g.tensor_to_buffer(cpu_ctx, "vec.f32")
        b = cpu_ctx.gguf_tensor_to_buffer(g, "vec.f32")
        model = cpu_ctx.load_supported_tensors(g)
    a.write(np.full(8, 9.0, np.float32))
    assert np.array_equal(b.to_numpy((8,), np.float32), np.arange(8))
    assert np.array_equal(model.get_tensor("vec.f32").buffer.to_numpy((8,), np.float32), np.arange(8))
    assert path.read_bytes() == before
    model.close()


def test_llama_config(tmp_path, rng):
    gguf = gguf_py()
    path = tmp_path / "llama.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(2048)
    w.add_block_count(16)
    w.add_feed_forward_length(5632)
    w.add_head_count(32)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(500000.0)
    w.add_token_list(["<s>", "</s>", "a", "b", "c"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with tc.GgufFile(path) as g:
        cfg = g.llama_config()
        assert cfg == tc.gguf_get_llama_config(g)
    assert cfg.architecture == "llama" and cfg["embedding_length"] == 2048
    assert (cfg.vocab_size, cfg.context_length, cfg.block_count, cfg.feed_forward_length) == (5, 4096, 16, 5632)
    assert (cfg.attention_head_count, cfg.attention_head_count_kv, cfg.rope_dimension_count) == (32, 4, 64)
    assert cfg.rms_norm_epsilon == pytest.approx(1e-6) and cfg.rope_freq_base == 500000.0
    assert cfg.rope_freq_scale == 1.0
    # A file without the architecture's keys.
    path2 = tmp_path / "x.gguf"
    write_gguf_py(path2, rng, tensors=[])
    with tc.GgufFile(path2) as g:
        expect_error(tc.TC_ERR_UNSUPPORTED, g.llama_config)


# ---- bad files ------------------------------------------------------------------------------------------

def small_file(tmp_path, rng):
    path = tmp_path / "small.gguf"
    write_gguf_py(path, rng, tensors=["q4_0", "f16"])
    return path.read_bytes()


def open_bytes(data):
    with tc.GgufFile.from_bytes(bytes(data)):
        pass


def test_truncated_at_every_offset(tmp_path, rng):
    data = small_file(tmp_path, rng)
    open_bytes(data)
    for n in range(len(data)):
        expect_error(tc.TC_ERR_CORRUPT, open_bytes, data[:n])
    path = tmp_path / "cut.gguf"
    for n in (0, 10, 30, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:n])
        expect_error(tc.TC_ERR_CORRUPT, tc.GgufFile, path)


def test_bad_magic_and_versions(tmp_path, rng):
    data = bytearray(small_file(tmp_path, rng))
    e = expect_error(tc.TC_ERR_CORRUPT, open_bytes, b"GGUX" + data[4:])
    assert "magic" in e.detail
    for version, status in [(1, tc.TC_ERR_UNSUPPORTED), (0, tc.TC_ERR_CORRUPT), (4, tc.TC_ERR_CORRUPT),
                            (0x03000000, tc.TC_ERR_UNSUPPORTED), (0xFFFFFFFF, tc.TC_ERR_CORRUPT)]:
        expect_error(status, open_bytes, data[:4] + struct.pack("<I", version) + data[8:])


def test_hostile_counts_offsets_and_dims(tmp_path, rng):
    data = bytes(small_file(tmp_path, rng))
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    for nt, nk in [(2**64 - 1, n_kv), (n_tensors, 2**64 - 1), (2**40, n_kv), (n_tensors, 2**40)]:
        expect_error(tc.TC_ERR_CORRUPT, open_bytes, data[:8] + struct.pack("<QQ", nt, nk) + data[24:])
    # The first key's length, then a string value's length.
    expect_error(tc.TC_ERR_CORRUPT, open_bytes, data[:24] + struct.pack("<Q", 2**63) + data[32:])
    key = b"t.str"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key) + 4  # the value's length field
    expect_error(tc.TC_ERR_CORRUPT, open_bytes, data[:at] + struct.pack("<Q", 2**64 - 9) + data[at + 8:])
    key = b"a.u32"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key) + 8  # the array's count
    expect_error(tc.TC_ERR_CORRUPT, open_bytes, data[:at] + struct.pack("<Q", 2**62) + data[at + 8:])
    # Tensor infos: "vec.f32" has n_dims 1, dims [8], type F32, an offset.
    name = b"vec.f32"
    info = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims_at, dim0_at, type_at, offset_at = info, info + 4, info + 12, info + 16
    size = len(data)

    def patched(at, fmt, value):
        return data[:at] + struct.pack(fmt, value) + data[at + struct.calcsize(fmt):]

    with tc.GgufFile.from_bytes(data) as g:
        offset = g.get_tensor("vec.f32")["offset"]
    for at, fmt, value, what in [
            (offset_at, "<Q", offset + 1, "misaligned"), (offset_at, "<Q", offset + 32 * 1000, "past the end"),
            (offset_at, "<Q", 2**64 - 32, "wrapping offset"), (dim0_at, "<Q", 2**63, "dim beyond int64"),
            (dim0_at, "<Q", 2**40, "data beyond the file"), (n_dims_at, "<I", 9, "too many dims"),
            (type_at, "<I", 99, "unknown type"), (type_at, "<I", 4, "removed type")]:
        expect_error(tc.TC_ERR_CORRUPT, open_bytes, patched(at, fmt, value))
    # Overflowing dims: the q4_0 tensor's two dims multiplied past 2^64.
    name = b"blk.0.q4_0.weight"
    info = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    bad = data[:info + 4] + struct.pack("<QQ", 2**32 * 32, 2**33) + data[info + 20:]
    expect_error(tc.TC_ERR_CORRUPT, open_bytes, bad)
    assert len(data) == size


def test_open_errors(tmp_path):
    expect_error(tc.TC_ERR_IO, tc.GgufFile, tmp_path / "missing.gguf")
    expect_error(tc.TC_ERR_IO, tc.GgufFile, tmp_path)
    (tmp_path / "empty.gguf").write_bytes(b"")
    expect_error(tc.TC_ERR_CORRUPT, tc.GgufFile, tmp_path / "empty.gguf")
    g = tc.GgufFile.from_bytes(struct.pack("<IIQQ", 0x46554747, 3, 0, 0))
    assert g.tensor_count() == 0 and g.keys() == []
    g.close()
    expect_error(tc.TC_ERR_INVALID_ARG, g.tensor_count)
    expect_error(tc.TC_ERR_INVALID_ARG, tc.gguf_tensor_count, 12345)  # not a handle the library gave out


def test_reference_example(tmp_path, rng):
    """The reference document's GgufFile / LoadedModel / QuantizedMatrix example, as written."""
    gguf = gguf_py()
    path = tmp_path / "llama.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_head_count(4)
    q_bytes = random_weights(rng, "q4_0", 64, 64)
    w.add_tensor("blk.0.attn_q.weight", q_bytes, raw_dtype=qtype("q4_0"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with tc.GgufFile(str(path)) as g:
        assert g.tensor_count() == 1
        cfg = g.llama_config()
        assert (cfg.embedding_length, cfg.attention_head_count) == (64, 4)
        assert g.meta_get_str("general.architecture") == "llama"
    with tc.Context() as ctx, tc.GgufFile(str(path)) as g:
        model = ctx.load_supported_tensors(g)
        assert (model.tensor_count(), model.skipped_tensor_count()) == (1, 0)
        q = model.quantized_matrix("blk.0.attn_q.weight")
        assert (q.N, q.K, q.quant_type) == (64, 64, tc.TC_QUANT_Q4_0)
        activation = random_array(rng, (1, 64), "f16")
        x = ctx.buffer_from_array(activation)
        y = q.output(M=1)
        q.gemv(x, y, M=1)
        with ctx.stream() as s:
            y2 = q.output(M=1)
            q.gemv_async(x, y2, s, M=1)
            s.sync()
        wd = reference_weights(q_bytes, "q4_0", 64, 64).astype(np.float64)
        ref = to_f64(activation) @ wd.T
        for out in (y, y2):
            assert_close(out.to_numpy((1, 64), np.float16), ref, np.abs(to_f64(activation)) @ np.abs(wd).T,
                         TOLERANCE["f16"], "reference example")
