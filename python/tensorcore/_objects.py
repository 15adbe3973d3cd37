"""Owned wrappers (Context, Buffer, Stream), the conversion of wrapper-or-raw-
handle arguments for raw functions, and the registry through which each area
module adds methods to the wrappers.

Ownership rules:
- A wrapper owns its handle and releases it at close(), at `with` exit and
  when garbage collected. close() is idempotent.
- A Buffer or Stream holds its Context strongly, the Context holds its
  children weakly; Context.close() closes streams (which drains their work),
  then buffers, then shuts down, so closing a Context never fails because of
  live children. The raw `shutdown(ctx)` is the C call itself and refuses
  (TC_ERR_INVALID_ARG) while buffers or streams are alive.
- Raw functions accept a wrapper or a raw handle (int address or c_void_p)
  wherever the C ABI takes a handle. A closed wrapper is refused in Python
  (its address may already belong to a new object); a stale raw handle is
  passed on for the library to refuse.
- An async op holds the Python objects it uses (buffers over caller memory
  included) on its Stream until the next sync, so they outlive the work.
"""

import functools
import inspect
import weakref
from ctypes import byref, c_size_t, c_void_p

from . import _lib
from ._closing import Closing
from ._constants import TC_ERR_INVALID_ARG
from ._errors import TensorcoreTypeError, TensorcoreValueError, check

# (kind, address) -> the live wrapper of that handle, so a raw handle can be
# traced back to its owner (raw frees close the wrapper; buffers made from a
# raw context handle join that context's children).
_live = weakref.WeakValueDictionary()
_HANDLE_MAX = (1 << 64) - 1


class _Size(int):
    """A byte count usable both as a value (`buf.nbytes`) and a call (`buf.nbytes()`)."""

    def __call__(self):
        return int(self)


class _Owned(Closing):
    _kind = "handle"
    _handle = None  # int address while open, None once closed

    def _adopt(self, address):
        self._handle = address
        _live[(self._kind, address)] = self

    def _forget(self):
        address, self._handle = self._handle, None
        if address is not None and _live.get((self._kind, address)) is self:
            del _live[(self._kind, address)]

    def _checked(self, fn, name):
        if self._handle is None:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s (%s) is closed" % (fn, name, type(self).__name__))
        return self._handle

    @property
    def closed(self):
        return self._handle is None

    @property
    def handle(self):
        """The raw C handle as an int (None once closed)."""
        return self._handle

    @property
    def _as_parameter_(self):  # lets a wrapper be passed straight to a ctypes function
        return c_void_p(self._checked("ctypes call", self._kind))

    def __repr__(self):
        state = "closed" if self._handle is None else "0x%x" % self._handle
        return "<tensorcore.%s %s%s>" % (type(self).__name__, state, self._repr_extra())

    def _repr_extra(self):
        return ""


class Context(_Owned):
    """A device context: `Context()` (tc_init's choice: TC_DEVICE, else CUDA
    device 0 when present, else the CPU), `Context("cpu")`, `Context("cuda")`,
    `Context("cuda:1")`. Methods mirror the raw functions without the context
    argument (ctx.gemm(A, B, C, M, N, K, ...))."""

    _kind = "context"

    def __init__(self, device=None, *, memory_budget=None, host_memory_budget=None, spill_dir=None):
        """memory_budget / host_memory_budget: byte caps of the context's
        buffers in device memory / host RAM (set_memory_budget); spill_dir:
        directory of its disk-tier files (set_spill_dir). See _api/memory.py."""
        self._device = device
        self._streams = weakref.WeakSet()
        self._buffers = weakref.WeakSet()
        self._groups = weakref.WeakSet()  # dist groups: closed before streams and buffers
        self._children = 0  # open Buffers and Streams made by this context
        self._close_pending = False
        out = c_void_p()
        if device is None:
            check(_lib.tc_init(byref(out)))
        elif isinstance(device, str):
            check(_lib.tc_init_device(device.encode(), byref(out)))
        else:
            raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "Context: device must be None or a string such as "
                                      "'cpu', 'cuda', 'cuda:0'; got %s" % type(device).__name__)
        self._adopt(out.value)
        if memory_budget is not None or host_memory_budget is not None or spill_dir is not None:
            try:  # methods of _api/memory.py
                if spill_dir is not None:
                    self.set_spill_dir(spill_dir)
                if memory_budget is not None:
                    self.set_memory_budget(memory_budget)
                if host_memory_budget is not None:
                    self.set_host_memory_budget(host_memory_budget)
            except BaseException:
                self.close()
                raise

    @property
    def device(self):
        """The device string asked for (None: the library's choice)."""
        return self._device

    def _add_child(self, child):
        (self._streams if isinstance(child, Stream) else self._buffers).add(child)
        self._children += 1

    def _add_group(self, group):
        """Tracks an object built on the context that must close before its
        streams and buffers (a DistContext, which closes its DiLoCo first)."""
        self._groups.add(group)
        self._children += 1

    def _child_closed(self):
        self._children -= 1
        # A context collected together with its children (a reference cycle)
        # may be finalized first; it then shuts down after the last child.
        if self._close_pending and self._children <= 0 and self._handle is not None:
            try:
                self._shutdown()
            except Exception:
                pass

    def _shutdown(self):
        """tc_shutdown itself: refused while children are alive."""
        check(_lib.tc_shutdown(self._checked("tc_shutdown", "ctx")))
        self._forget()

    def close(self):
        """Closes every dist group (and its DiLoCo), every stream (draining its
        work), then every buffer made by this context, then shuts it down.
        Idempotent."""
        if self._handle is None:
            return
        first = None
        for group in (self._groups, self._streams, self._buffers):
            for child in list(group):
                try:
                    child.close()
                except Exception as e:  # close the rest, report the first failure
                    first = first or e
        self._shutdown()
        if first is not None:
            raise first

    def __del__(self):
        try:
            self.close()
        except Exception:
            self._close_pending = True

    def _repr_extra(self):
        return " device=%r" % (self._device,) if self._device is not None else ""


class Buffer(_Owned):
    """Device memory (host memory on the CPU). Made by Context.buffer(),
    buffer_from_ptr(), buffer_from_array() or the raw buffer_* functions;
    the constructor wraps a handle the library returned and is internal."""

    _kind = "buffer"

    def __init__(self, address, context=None, keep=None, nbytes=None):
        self._context = context  # strong: the context outlives its buffers
        self._keep = keep        # caller memory wrapped by buffer_from_ptr
        self._nbytes = None if nbytes is None else _Size(nbytes)
        self._adopt(address)
        if context is not None:
            context._add_child(self)

    @property
    def context(self):
        return self._context

    @property
    def nbytes(self):
        """Size in bytes; both `buf.nbytes` and `buf.nbytes()` work."""
        if self._nbytes is None:
            out = c_size_t()
            check(_lib.tc_buffer_size(self._checked("buffer_size", "buf"), byref(out)))
            self._nbytes = _Size(out.value)
        return self._nbytes

    def close(self):
        """Frees the handle (work already enqueued keeps the memory alive). Idempotent."""
        if self._handle is None:
            return
        address = self._handle
        self._forget()
        self._keep = None
        context, self._context = self._context, None
        try:
            check(_lib.tc_buffer_free(address))
        finally:
            if context is not None:
                context._child_closed()

    def _repr_extra(self):
        return " nbytes=%d" % self._nbytes if self._nbytes is not None else ""


class Stream(_Owned):
    """An ordered queue of work. `with ctx.stream() as s:` syncs and destroys
    the stream at exit (the sync's error is raised unless the block raised)."""

    _kind = "stream"

    def __init__(self, address, context=None):
        self._context = context
        self._pending = []  # objects used by enqueued work, released at sync
        self._adopt(address)
        if context is not None:
            context._add_child(self)

    @property
    def context(self):
        return self._context

    def _hold(self, *objects):
        self._pending.append(objects)

    def close(self):
        """Waits for enqueued work, then destroys the stream. Idempotent."""
        if self._handle is None:
            return
        address = self._handle
        self._forget()
        context, self._context = self._context, None
        try:
            check(_lib.tc_stream_destroy(address))
        finally:
            self._pending = []
            if context is not None:
                context._child_closed()

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None and self._handle is not None:
                self.sync()
        finally:
            self.close()


# ---- arguments of raw functions -------------------------------------------------

def _address(obj, cls, fn, name):
    if isinstance(obj, _Owned):  # a wrapper of another kind goes to C, which refuses it
        return obj._checked(fn, name)
    if obj is None:
        return None  # NULL: the library reports it
    if isinstance(obj, c_void_p):
        return obj.value
    if isinstance(obj, int) and not isinstance(obj, bool):
        if not 0 <= obj <= _HANDLE_MAX:
            raise TensorcoreValueError(TC_ERR_INVALID_ARG, "%s: %s = %d is not a handle" % (fn, name, obj))
        return obj
    raise TensorcoreTypeError(TC_ERR_INVALID_ARG, "%s: %s must be a %s or a raw handle, got %s" % (
        fn, name, cls.__name__, type(obj).__name__))


def context_arg(obj, fn, name="ctx"):
    """Raw handle (int or None) of a Context argument."""
    return _address(obj, Context, fn, name)


def buffer_arg(obj, fn, name="buf"):
    """Raw handle (int or None) of a Buffer argument."""
    return _address(obj, Buffer, fn, name)


def stream_arg(obj, fn, name="stream"):
    """Raw handle (int or None) of a Stream argument."""
    return _address(obj, Stream, fn, name)


def wrapper_of(kind, obj):
    """The live wrapper for a wrapper or raw handle argument, or None."""
    if isinstance(obj, _Owned):
        return obj if obj._kind == kind and obj._handle is not None else None
    address = obj.value if isinstance(obj, c_void_p) else obj
    if isinstance(address, int):
        return _live.get((kind, address))
    return None


def new_buffer(ctx, address, keep=None, nbytes=None):
    """Wraps a buffer handle the library returned for context `ctx` (a wrapper or raw handle)."""
    return Buffer(address, wrapper_of("context", ctx), keep, nbytes)


def new_stream(ctx, address):
    return Stream(address, wrapper_of("context", ctx))


def hold(stream, *objects):
    """Keeps `objects` alive until `stream`'s next sync (async ops call this)."""
    s = wrapper_of("stream", stream)
    if s is not None:
        s._hold(*objects)


# ---- the method registry ---------------------------------------------------------

def _install(cls, name, fn, pass_self):
    if name in cls.__dict__:
        raise RuntimeError("%s.%s is defined twice" % (cls.__name__, name))
    sig = inspect.signature(fn)
    if pass_self:
        def method(self, *args, **kwargs):
            return fn(self, *args, **kwargs)
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    else:
        def method(self, *args, **kwargs):
            return fn(*args, **kwargs)
    functools.update_wrapper(method, fn)
    method.__signature__ = sig
    method.__name__ = name
    method.__qualname__ = "%s.%s" % (cls.__name__, name)
    setattr(cls, name, method)


def _registrar(cls):
    def register(name=None, *, pass_self=True):
        """Decorator: also expose the raw function as `cls.<name>` with its
        first argument bound to the wrapper (`pass_self=False`: not passed)."""
        if callable(name):  # used bare: @context_method
            _install(cls, name.__name__, name, pass_self)
            return name

        def deco(fn):
            _install(cls, name or fn.__name__, fn, pass_self)
            return fn
        return deco
    return register


context_method = _registrar(Context)
buffer_method = _registrar(Buffer)
stream_method = _registrar(Stream)

__all__ = ["Context", "Buffer", "Stream"]
