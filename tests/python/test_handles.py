"""Stale handles: a handle value kept after its object was freed is refused,
even when the allocator has put a new object of the same kind at the same
address (handles carry a generation in their top 16 bits, src/core/handles.h).

The C functions are called through ctypes directly, with raw handle values,
so that nothing in the Python wrappers stands between the stale value and
the library."""

import ctypes
from ctypes import POINTER, byref, c_char_p, c_int32, c_size_t, c_uint8, c_void_p

import pytest

import tensorcore as tc

ADDRESS_MASK = (1 << 48) - 1
TC_OK, TC_ERR_INVALID_ARG = 0, -7
MAX_TRIES = 2000

lib = ctypes.CDLL(tc.library_path)
for name, args in {
    "tc_init_device": (c_char_p, POINTER(c_void_p)),
    "tc_shutdown": (c_void_p,),
    "tc_buffer_alloc": (c_void_p, c_size_t, POINTER(c_void_p)),
    "tc_buffer_free": (c_void_p,),
    "tc_buffer_size": (c_void_p, POINTER(c_size_t)),
    "tc_stream_create": (c_void_p, POINTER(c_void_p)),
    "tc_stream_destroy": (c_void_p,),
    "tc_stream_sync": (c_void_p,),
    "tc_gguf_writer_create": (POINTER(c_void_p),),
    "tc_gguf_writer_free": (c_void_p,),
    "tc_gguf_writer_set_u8": (c_void_p, c_char_p, c_uint8),
}.items():
    getattr(lib, name).argtypes = list(args)
    getattr(lib, name).restype = c_int32
lib.tc_last_error_detail.restype = c_char_p
lib.tc_last_error_detail.argtypes = []


def made(fn, *args):
    out = c_void_p()
    assert fn(*args, byref(out)) == TC_OK, lib.tc_last_error_detail().decode()
    return out.value


def address(handle):
    return handle & ADDRESS_MASK


def reuse_address(make, free, stale):
    """Makes objects until one lands at the stale handle's address; frees
    the others and returns that one's handle."""
    others = []
    try:
        for _ in range(MAX_TRIES):
            h = make()
            if address(h) == address(stale):
                return h
            others.append(h)
        pytest.fail("no new object landed at the freed address in %d tries" % MAX_TRIES)
    finally:
        for h in others:
            free(h)


def assert_stale(status):
    detail = lib.tc_last_error_detail().decode()
    assert status == TC_ERR_INVALID_ARG, detail
    assert "stale" in detail and "freed" in detail, detail


@pytest.fixture
def ctx():
    h = made(lib.tc_init_device, b"cpu")
    yield h
    assert lib.tc_shutdown(h) == TC_OK, lib.tc_last_error_detail().decode()


def test_handles_carry_a_generation(ctx):
    a = made(lib.tc_buffer_alloc, ctx, 64)
    assert a >> 48 != 0  # a generation above the address
    assert lib.tc_buffer_free(a) == TC_OK
    assert lib.tc_buffer_free(a) == TC_ERR_INVALID_ARG  # freed, address not reused: still refused
    assert "not a live tensorcore buffer" in lib.tc_last_error_detail().decode()
    # The plain address is not a handle either.
    assert lib.tc_buffer_free(address(a) or 1) == TC_ERR_INVALID_ARG


def test_stale_buffer_at_a_reused_address(ctx):
    stale = made(lib.tc_buffer_alloc, ctx, 64)
    assert lib.tc_buffer_free(stale) == TC_OK
    new = reuse_address(lambda: made(lib.tc_buffer_alloc, ctx, 128), lib.tc_buffer_free, stale)
    assert new != stale
    size = c_size_t()
    assert_stale(lib.tc_buffer_size(stale, byref(size)))
    assert_stale(lib.tc_buffer_free(stale))
    # The new buffer is untouched and still works through its own handle.
    assert lib.tc_buffer_size(new, byref(size)) == TC_OK and size.value == 128
    assert lib.tc_buffer_free(new) == TC_OK


def test_freed_stream(ctx):
    # A stream's creation allocates small objects of its own (the queue, its
    # thread) that take a freed stream's address first, so only the freed
    # handle is checked here; buffers, contexts and writers cover reuse.
    stale = made(lib.tc_stream_create, ctx)
    assert lib.tc_stream_destroy(stale) == TC_OK
    assert lib.tc_stream_sync(stale) == TC_ERR_INVALID_ARG
    assert "not a live tensorcore stream" in lib.tc_last_error_detail().decode()


def test_stale_context_at_a_reused_address(ctx):
    stale = made(lib.tc_init_device, b"cpu")
    assert lib.tc_shutdown(stale) == TC_OK
    new = reuse_address(lambda: made(lib.tc_init_device, b"cpu"), lib.tc_shutdown, stale)
    out = c_void_p()
    assert_stale(lib.tc_buffer_alloc(stale, 16, byref(out)))
    assert out.value is None
    assert_stale(lib.tc_shutdown(stale))
    assert lib.tc_shutdown(new) == TC_OK


def test_stale_gguf_writer_at_a_reused_address():
    stale = made(lib.tc_gguf_writer_create)
    assert lib.tc_gguf_writer_free(stale) == TC_OK
    new = reuse_address(lambda: made(lib.tc_gguf_writer_create), lib.tc_gguf_writer_free, stale)
    assert_stale(lib.tc_gguf_writer_set_u8(stale, b"a", 1))
    assert lib.tc_gguf_writer_set_u8(new, b"a", 1) == TC_OK
    assert lib.tc_gguf_writer_free(new) == TC_OK


def test_handle_of_another_kind_is_refused(ctx):
    s = made(lib.tc_stream_create, ctx)
    size = c_size_t()
    assert lib.tc_buffer_size(s, byref(size)) == TC_ERR_INVALID_ARG
    assert "a stream handle" in lib.tc_last_error_detail().decode()
    assert lib.tc_stream_destroy(s) == TC_OK


def test_stale_simpler_callable_at_a_reused_address():
    # simpler's handles (Worker, callable, run) carry a generation too.
    from simpler import _lib as simpler_lib

    s = ctypes.CDLL(str(simpler_lib.library_path()))
    s.simpler_core_callable_builtin.argtypes = [c_char_p, c_char_p, POINTER(c_void_p)]
    s.simpler_core_callable_builtin.restype = c_int32
    s.simpler_callable_release.argtypes = [c_void_p]
    s.simpler_callable_release.restype = c_int32
    s.simpler_callable_get_signature.argtypes = [c_void_p, POINTER(c_int32), ctypes.c_uint32]
    s.simpler_callable_get_signature.restype = c_int32
    s.simpler_last_error_detail.restype = c_char_p

    def builtin():
        out = c_void_p()
        assert s.simpler_core_callable_builtin(b"gemm", b"", byref(out)) == TC_OK
        return out.value

    # Creating a callable allocates other small objects before the handle's,
    # and they take a single freed address first: free many, then make new
    # ones until one lands where any of them was.
    freed = [builtin() for _ in range(64)]
    assert all(h >> 48 for h in freed)
    for h in freed:
        assert s.simpler_callable_release(h) == TC_OK
    by_address = {address(h): h for h in freed}
    made_, new = [], None
    for _ in range(MAX_TRIES):
        h = builtin()
        if address(h) in by_address:
            new, stale = h, by_address[address(h)]
            break
        made_.append(h)
    for h in made_:
        assert s.simpler_callable_release(h) == TC_OK
    assert new is not None, "no new callable landed at a freed address"
    assert new != stale
    sig = (c_int32 * 8)()
    assert s.simpler_callable_get_signature(stale, sig, 8) == TC_ERR_INVALID_ARG
    detail = s.simpler_last_error_detail().decode()
    assert "not a live callable handle" in detail and "stale" in detail, detail
    assert s.simpler_callable_get_signature(new, sig, 8) == TC_OK
    assert s.simpler_callable_release(new) == TC_OK
