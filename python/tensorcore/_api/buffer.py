"""Buffers (include/tensorcore/buffer.h) and their NumPy interop.

write/read copy between a buffer and any C-contiguous host array at a byte
offset; the range is checked here first (a clear ValueError, which is also a
TensorcoreError with TC_ERR_INVALID_ARG) and again by the library.
"""

import ctypes
from ctypes import byref, c_size_t, c_void_p

import numpy as np

from .._args import host_memory, numpy_dtype, size
from .._constants import TC_ERR_INVALID_ARG
from .._errors import TensorcoreValueError, check
from .._lib import (tc_buffer_alloc, tc_buffer_device_ptr, tc_buffer_free, tc_buffer_from_ptr, tc_buffer_map,
                    tc_buffer_read, tc_buffer_size, tc_buffer_write)
from .._objects import buffer_arg, buffer_method, context_arg, context_method, new_buffer, wrapper_of

__all__ = ["buffer_alloc", "buffer_from_ptr", "buffer_from_array", "buffer_free", "buffer_map", "buffer_size",
           "buffer_device_ptr", "buffer_write", "buffer_read", "buffer_to_numpy"]


@context_method("buffer")
def buffer_alloc(ctx, nbytes):
    """A Buffer of `nbytes` (> 0) of the context's memory; contents unspecified."""
    n = size(nbytes, "tc_buffer_alloc", "nbytes")
    out = c_void_p()
    check(tc_buffer_alloc(context_arg(ctx, "tc_buffer_alloc"), n, byref(out)))
    return new_buffer(ctx, out.value, nbytes=n)


@context_method
def buffer_from_ptr(ctx, ptr, nbytes=None):
    """A Buffer over caller memory, without copying or owning it.

    `ptr` is an address (int or c_void_p), a ctypes object, a writable
    C-contiguous NumPy array / buffer-protocol object, or another library's
    array with __cuda_array_interface__ or __dlpack__ (a torch or cupy CUDA
    tensor on a CUDA context; see _api/interop.py). Objects are kept alive by
    the Buffer and `nbytes` (default: all of the object) must lie within
    them. Raw addresses must stay valid until the buffer is freed and need
    `nbytes`."""
    from .interop import external_memory  # interop builds on this module

    fn = "tc_buffer_from_ptr"
    keep, extent = None, None
    external = None
    if not isinstance(ptr, (int, c_void_p, ctypes._SimpleCData, ctypes.Array, ctypes.Structure, ctypes.Union)) \
            and ptr is not None:
        external = external_memory(ptr, fn, "ptr", ctx)
    if nbytes is None:
        if external is None and (ptr is None or isinstance(ptr, (int, c_void_p))):
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: nbytes is required for a raw address" % fn)
    n = None if nbytes is None else size(nbytes, fn, "nbytes")
    if external is not None:
        address, extent, keep = external.address, external.nbytes, external.keep
    elif ptr is None or (isinstance(ptr, int) and not isinstance(ptr, bool)):
        address = ptr
        if address is not None and not 0 <= address < (1 << 64):
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: ptr = %d is not an address" % (fn, address))
    elif isinstance(ptr, c_void_p):
        address = ptr.value
    elif isinstance(ptr, (ctypes._SimpleCData, ctypes.Array, ctypes.Structure, ctypes.Union)):
        address, extent, keep = ctypes.addressof(ptr), ctypes.sizeof(ptr), ptr
    else:
        mem = host_memory(ptr, fn, "ptr", writable=True)
        address, extent, keep = mem.address, mem.nbytes, mem.keep
    if n is None:
        n = extent
    if extent is not None and n > extent:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: nbytes = %d exceeds the %d bytes of ptr" % (fn, n, extent))
    out = c_void_p()
    check(tc_buffer_from_ptr(context_arg(ctx, fn), address, n, byref(out)))
    return new_buffer(ctx, out.value, keep=keep, nbytes=n)


@context_method
def buffer_from_array(ctx, arr):
    """Allocates a Buffer of arr.nbytes and copies the C-contiguous array into it."""
    mem = host_memory(arr, "buffer_from_array", "arr")
    buf = buffer_alloc(ctx, mem.nbytes)
    try:
        _write(buf, buffer_arg(buf, "tc_buffer_write"), mem, 0)
    except BaseException:
        buf.close()
        raise
    return buf


def buffer_free(buf):
    """tc_buffer_free (a Buffer is closed; work already enqueued keeps its memory)."""
    owner = wrapper_of("buffer", buf)
    if owner is not None:
        owner.close()
    else:
        check(tc_buffer_free(buffer_arg(buf, "tc_buffer_free")))


@buffer_method("map")
def buffer_map(buf):
    """Host address of the bytes (CPU buffers); device-only memory is TC_ERR_UNSUPPORTED."""
    out = c_void_p()
    check(tc_buffer_map(buffer_arg(buf, "tc_buffer_map"), byref(out)))
    return out.value or 0


@buffer_method("device_ptr")
def buffer_device_ptr(buf):
    """Device address of the bytes (the host address on the CPU)."""
    out = c_void_p()
    check(tc_buffer_device_ptr(buffer_arg(buf, "tc_buffer_device_ptr"), byref(out)))
    return out.value or 0


@buffer_method("size")
def buffer_size(buf):
    out = c_size_t()
    check(tc_buffer_size(buffer_arg(buf, "tc_buffer_size"), byref(out)))
    return out.value


def _extent(buf, address):
    owner = wrapper_of("buffer", buf)
    return owner.nbytes if owner is not None else buffer_size(address)


def _check_range(fn, buf, address, offset, nbytes):
    total = _extent(buf, address)
    if offset > total or nbytes > total - offset:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: range [%d, %d + %d) is outside the buffer of %d bytes" % (
            fn, offset, offset, nbytes, total))


def _write(buf, address, mem, offset):
    _check_range("tc_buffer_write", buf, address, offset, mem.nbytes)
    check(tc_buffer_write(address, offset, mem.address, mem.nbytes))


@buffer_method("write")
def buffer_write(buf, arr, offset=0):
    """Copies the bytes of a C-contiguous host array into the buffer at byte `offset`."""
    address = buffer_arg(buf, "tc_buffer_write")
    _write(buf, address, host_memory(arr, "tc_buffer_write", "arr"), size(offset, "tc_buffer_write", "offset"))


@buffer_method("read")
def buffer_read(buf, arr, offset=0):
    """Fills a writable C-contiguous host array in place from byte `offset`; returns it."""
    fn = "tc_buffer_read"
    address = buffer_arg(buf, fn)
    mem = host_memory(arr, fn, "arr", writable=True)
    off = size(offset, fn, "offset")
    _check_range(fn, buf, address, off, mem.nbytes)
    check(tc_buffer_read(address, off, mem.address, mem.nbytes))
    return arr


@buffer_method("to_numpy")
def buffer_to_numpy(buf, shape, dtype, offset=0):
    """A new array of `shape` and `dtype` copied from byte `offset`.

    dtype: a NumPy dtype or a tensorcore name ("f16", "bf16", "f32", "i8",
    "i32", "f64"; "bf16" gives ml_dtypes.bfloat16 when installed, else uint16)."""
    shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
    if any(int(d) < 0 for d in shape):
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "to_numpy: negative dimension in shape %s" % (shape,))
    out = np.empty(shape, dtype=numpy_dtype(dtype))
    return buffer_read(buf, out, offset)
