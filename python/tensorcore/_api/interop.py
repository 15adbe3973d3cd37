"""Zero-copy interop with other array libraries (DLPack and the CUDA Array
Interface), in pure ctypes.

Export. A Buffer is untyped bytes; `buf.view(dtype, shape, offset=0)`
returns a BufferView that gives them a dtype and a C-contiguous shape. Both
implement the protocols, the Buffer itself as a 1-D uint8 array of its bytes:

  __dlpack__(stream=None, max_version=None, dl_device=None, copy=None)
  __dlpack_device__()              (kDLCUDA, device) or (kDLCPU, 0)
  __cuda_array_interface__         version 3; CUDA buffers only

so torch.from_dlpack(view), cupy.asarray(view) and numpy.from_dlpack(view)
(CPU buffers) see the buffer's memory without copying. The capsule's
DLManagedTensor keeps the Buffer (and so its memory) alive until the consumer
calls its deleter, even after the Buffer is closed.

Synchronisation: synchronous tensorcore calls have finished when they
return, so their results are ready for any consumer and `stream` needs no
action. Work enqueued with an `_async` call must be synced (Stream.sync())
before the memory is handed over.

Import. buffer_from_ptr(ctx, obj) also takes any object with
__cuda_array_interface__ (torch and cupy CUDA tensors, numba arrays) or
__dlpack__ (torch CPU tensors, JAX arrays, ...): the Buffer wraps the
object's memory without copying, through tc_buffer_from_ptr, and keeps the
object (or the DLPack capsule's tensor) alive until it is closed. The object
must be C-contiguous, writable, and on the context's device. tensorcore's
streams do not wait for other libraries' streams: the producer's work on the
memory must have finished (torch: torch.cuda.current_stream().synchronize()).
"""

import ctypes
from ctypes import (CFUNCTYPE, POINTER, PYFUNCTYPE, Structure, c_char_p, c_int, c_int32, c_int64, c_uint8,
                    c_uint16, c_uint32, c_uint64, c_void_p, py_object)

import numpy as np

from .._args import BFLOAT16, numpy_dtype, size
from .._constants import TC_BACKEND_CUDA, TC_ERR_INVALID_ARG, TC_ERR_UNSUPPORTED_DTYPE
from .._errors import TensorcoreTypeError, TensorcoreValueError
from .._objects import Buffer, buffer_arg, buffer_method
from .buffer import buffer_device_ptr
from .context import device_info

__all__ = ["BufferView", "kDLCPU", "kDLCUDA"]

kDLCPU, kDLCUDA = 1, 2
_kDLInt, _kDLUInt, _kDLFloat, _kDLBfloat, _kDLComplex, _kDLBool = 0, 1, 2, 4, 5, 6
_FLAG_READ_ONLY = 1


# ---- DLPack structs (dlpack.h, v1.0) ----------------------------------------------

class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


_Deleter = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", _Deleter)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", _Deleter),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


# Python C API through private prototypes (never by changing ctypes.pythonapi's).
_api = ctypes.pythonapi
_CapsuleDestructor = CFUNCTYPE(None, c_void_p)
_PyCapsule_New = PYFUNCTYPE(py_object, c_void_p, c_char_p, _CapsuleDestructor)(("PyCapsule_New", _api))
_PyCapsule_IsValid = PYFUNCTYPE(c_int, c_void_p, c_char_p)(("PyCapsule_IsValid", _api))
_PyCapsule_GetPointer = PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer", _api))
_PyCapsule_IsValid_obj = PYFUNCTYPE(c_int, py_object, c_char_p)(("PyCapsule_IsValid", _api))
_PyCapsule_GetPointer_obj = PYFUNCTYPE(c_void_p, py_object, c_char_p)(("PyCapsule_GetPointer", _api))
_PyCapsule_SetName_obj = PYFUNCTYPE(c_int, py_object, c_char_p)(("PyCapsule_SetName", _api))

# Capsule names must outlive the capsules: module-level buffers.
_NAME = ctypes.create_string_buffer(b"dltensor")
_NAME_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")
_NAME_USED = ctypes.create_string_buffer(b"used_dltensor")
_NAME_USED_VERSIONED = ctypes.create_string_buffer(b"used_dltensor_versioned")

# Exported tensors not yet released: address of the managed struct -> what it
# keeps alive (the struct, its shape array and the Buffer).
_exported = {}


@_Deleter
def _release_export(address):
    try:
        _exported.pop(address, None)
    except Exception:  # interpreter shutdown: module state may be gone
        pass


@_CapsuleDestructor
def _capsule_destructor(capsule):
    # A consumer renames the capsule to "used_..." and calls the deleter
    # itself; a capsule dropped unconsumed still owns its tensor.
    try:
        for name in (_NAME, _NAME_VERSIONED):
            if _PyCapsule_IsValid(capsule, name):
                _release_export(_PyCapsule_GetPointer(capsule, name))
                return
    except Exception:
        pass


# ---- dtypes -------------------------------------------------------------------------

def _dl_dtype(dt):
    if BFLOAT16 is not None and dt == BFLOAT16:
        return DLDataType(_kDLBfloat, 16, 1)
    code = {"f": _kDLFloat, "i": _kDLInt, "u": _kDLUInt, "b": _kDLBool, "c": _kDLComplex}.get(dt.kind)
    if code is None:
        raise TensorcoreTypeError(TC_ERR_UNSUPPORTED_DTYPE, "DLPack: dtype %s has no DLPack code" % dt)
    return DLDataType(code, dt.itemsize * 8, 1)


def _typestr(dt):
    if (BFLOAT16 is not None and dt == BFLOAT16) or dt.kind not in "fiubc":
        raise TensorcoreTypeError(TC_ERR_UNSUPPORTED_DTYPE, "__cuda_array_interface__: dtype %s has no typestr "
                                  "consumers understand; use __dlpack__" % dt)
    return dt.str


def _contiguous_strides(shape, itemsize):
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def _is_c_contiguous(shape, strides_bytes, itemsize):
    if strides_bytes is None:
        return True
    expect = _contiguous_strides(shape, itemsize)
    return all(d <= 1 or s == e for d, s, e in zip(shape, strides_bytes, expect))


# ---- export -------------------------------------------------------------------------

class BufferView:
    """A typed, C-contiguous view of a Buffer's bytes for DLPack and the CUDA
    Array Interface (see the module doc). Holds the Buffer strongly."""

    def __init__(self, buffer, dtype, shape=None, offset=0):
        if not isinstance(buffer, Buffer):
            raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "view: buffer must be a Buffer, got %s"
                                      % type(buffer).__name__)
        buffer_arg(buffer, "view", "buffer")  # refuses a closed Buffer
        self.buffer = buffer
        self.dtype = numpy_dtype(dtype)
        self.offset = size(offset, "view", "offset")
        total = int(buffer.nbytes)
        if self.offset > total:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "view: offset %d is past the buffer's %d bytes"
                                       % (self.offset, total))
        if shape is None:
            shape = ((total - self.offset) // self.dtype.itemsize,)
        shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
        self.shape = tuple(size(d, "view", "shape") for d in shape)
        self.nbytes = int(np.prod(self.shape, dtype=object)) * self.dtype.itemsize
        if self.offset + self.nbytes > total:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "view: %s of %s at offset %d needs %d bytes, the buffer "
                                       "has %d" % (self.shape, self.dtype, self.offset, self.nbytes, total))

    def _device(self):
        ctx = self.buffer.context
        if ctx is None:
            raise BufferError("tensorcore: the buffer's context is not a Context wrapper; its device is unknown")
        cache = getattr(self.buffer, "_interop_device", None)
        if cache is None:
            info = device_info(ctx)
            cache = (kDLCUDA, info.device_index) if info.backend == TC_BACKEND_CUDA else (kDLCPU, 0)
            self.buffer._interop_device = cache  # a context with live buffers never changes device
        return cache

    def _address(self):
        return buffer_device_ptr(self.buffer) + self.offset

    def __dlpack_device__(self):
        return self._device()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        device = self._device()
        if copy:
            raise BufferError("tensorcore: __dlpack__(copy=True) is not supported; the buffer is exported in place")
        if dl_device is not None and tuple(dl_device) != device:
            raise BufferError("tensorcore: the buffer lives on device %s, %s was asked for" % (device, dl_device))
        if stream is not None and (device[0] == kDLCPU or not isinstance(stream, int)):
            if device[0] == kDLCPU:
                raise BufferError("tensorcore: stream must be None for a CPU buffer")
            raise TypeError("stream must be an int or None")
        versioned = max_version is not None and int(max_version[0]) >= 1
        managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        ndim = len(self.shape)
        shape = (c_int64 * max(ndim, 1))(*self.shape)
        t = managed.dl_tensor
        t.data = self._address()
        t.device = DLDevice(*device)
        t.ndim = ndim
        t.dtype = _dl_dtype(self.dtype)
        t.shape = ctypes.cast(shape, POINTER(c_int64))
        t.strides = None  # compact row-major
        t.byte_offset = 0
        managed.deleter = _release_export
        if versioned:
            managed.version = DLPackVersion(1, 0)
            managed.flags = 0
        address = ctypes.addressof(managed)
        _exported[address] = (managed, shape, self.buffer)
        try:
            return _PyCapsule_New(address, _NAME_VERSIONED if versioned else _NAME, _capsule_destructor)
        except BaseException:
            _exported.pop(address, None)
            raise

    @property
    def __cuda_array_interface__(self):
        device = self._device()
        if device[0] != kDLCUDA:
            raise AttributeError("__cuda_array_interface__: the buffer is host memory (CPU context)")
        return {"shape": self.shape, "typestr": _typestr(self.dtype), "descr": [("", _typestr(self.dtype))],
                "data": (self._address() if self.nbytes else 0, False), "strides": None, "version": 3,
                "stream": None}  # synchronous work is complete; see the module doc for `_async` work

    def __repr__(self):
        return "<tensorcore.BufferView %s %s offset=%d of %r>" % (self.dtype, self.shape, self.offset, self.buffer)


@buffer_method("view")
def buffer_view(buf, dtype, shape=None, offset=0):
    """A BufferView of `shape` (default: as many elements as fit after
    `offset`) and `dtype` over the buffer's bytes from byte `offset`, for
    torch.from_dlpack / cupy.asarray / numpy.from_dlpack."""
    return BufferView(buf, dtype, shape, offset)


def _bytes_view(buf):
    return BufferView(buf, np.uint8)


# The Buffer itself exports its bytes (uint8, 1-D).
Buffer.__dlpack__ = lambda self, **kw: _bytes_view(self).__dlpack__(**kw)
Buffer.__dlpack_device__ = lambda self: _bytes_view(self).__dlpack_device__()
Buffer.__cuda_array_interface__ = property(lambda self: _bytes_view(self).__cuda_array_interface__)


# ---- import -------------------------------------------------------------------------

class _Imported:
    """Owns a consumed DLPack tensor: calls its deleter when collected."""

    def __init__(self, address, deleter, capsule):
        self.address, self.deleter, self.capsule = address, deleter, capsule

    def __del__(self):
        deleter, self.deleter = self.deleter, None
        if deleter:
            deleter(self.address)


class ExternalMemory:
    """Address, extent and owner of another library's array (see external_memory)."""

    __slots__ = ("address", "nbytes", "keep", "device")

    def __init__(self, address, nbytes, keep, device):
        self.address, self.nbytes, self.keep, self.device = address, nbytes, keep, device


def _from_cai(obj, fn, name):
    cai = obj.__cuda_array_interface__
    shape = tuple(int(d) for d in cai["shape"])
    dt = np.dtype(cai["typestr"])
    address, readonly = cai["data"]
    if cai.get("mask") is not None:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s has a mask" % (fn, name))
    if readonly:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is read-only" % (fn, name))
    strides = cai.get("strides")
    if not _is_c_contiguous(shape, None if strides is None else tuple(strides), dt.itemsize):
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is not C-contiguous (strides %s)" % (fn, name, strides))
    nbytes = int(np.prod(shape, dtype=object)) * dt.itemsize
    return ExternalMemory(int(address or 0), nbytes, obj, (kDLCUDA, None))


def _from_dlpack(obj, fn, name):
    capsule = obj.__dlpack__()  # legacy capsule: every producer offers it
    if not _PyCapsule_IsValid_obj(capsule, _NAME):
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s.__dlpack__() did not return a DLPack capsule"
                                   % (fn, name))
    address = _PyCapsule_GetPointer_obj(capsule, _NAME)
    managed = DLManagedTensor.from_address(address)
    t = managed.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    itemsize = (t.dtype.bits * t.dtype.lanes + 7) // 8
    strides = None if not t.strides else tuple(t.strides[i] * itemsize for i in range(t.ndim))
    deleter = managed.deleter if ctypes.cast(managed.deleter, c_void_p).value else None
    # The tensor is ours from here on: rename the capsule so it does not free it.
    _PyCapsule_SetName_obj(capsule, _NAME_USED)
    owner = _Imported(address, deleter, capsule)
    if not _is_c_contiguous(shape, strides, itemsize):
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is not C-contiguous (strides %s elements)"
                                   % (fn, name, None if not t.strides else [t.strides[i] for i in range(t.ndim)]))
    nbytes = int(np.prod(shape, dtype=object)) * itemsize
    data = (t.data or 0) + t.byte_offset
    return ExternalMemory(data, nbytes, (owner, obj), (t.device.device_type, t.device.device_id))


def external_memory(obj, fn, name, ctx):
    """ExternalMemory of an object with __cuda_array_interface__ or
    __dlpack__ (not a NumPy array, which the host-memory path takes), checked
    against the device of `ctx`; None for other objects."""
    if isinstance(obj, (np.ndarray, bytes, bytearray, memoryview)):
        return None
    if hasattr(obj, "__cuda_array_interface__"):
        mem = _from_cai(obj, fn, name)
    elif hasattr(obj, "__dlpack__"):
        mem = _from_dlpack(obj, fn, name)
    else:
        return None
    info = device_info(ctx)
    on_cuda = info.backend == TC_BACKEND_CUDA
    kind, index = mem.device
    if kind == kDLCUDA and not on_cuda:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is CUDA memory; the context runs on the CPU"
                                   % (fn, name))
    if kind == kDLCUDA and index is not None and index != info.device_index:
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s is on CUDA device %d, the context on device %d"
                                   % (fn, name, index, info.device_index))
    if kind not in (kDLCPU, kDLCUDA) or (kind == kDLCPU and on_cuda):
        raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s lives on DLPack device type %d, which a %s context "
                                   "cannot use" % (fn, name, kind, "CUDA" if on_cuda else "CPU"))
    return mem
