"""Streams (include/tensorcore/stream.h): ordered queues of work. An `_async`
op enqueues and returns at once; sync waits and reports the first failure of
the work since the previous sync."""

from ctypes import byref, c_void_p

from .._errors import check
from .._lib import tc_stream_create, tc_stream_destroy, tc_stream_sync
from .._objects import context_arg, context_method, new_stream, stream_arg, stream_method, wrapper_of

__all__ = ["stream_create", "stream_sync", "stream_destroy"]


@context_method("stream")
def stream_create(ctx):
    """A new Stream of the context."""
    out = c_void_p()
    check(tc_stream_create(context_arg(ctx, "tc_stream_create"), byref(out)))
    return new_stream(ctx, out.value)


@stream_method("sync")
def stream_sync(stream):
    """Waits for all enqueued work; raises the first failure of that work."""
    owner = wrapper_of("stream", stream)
    try:
        check(tc_stream_sync(stream_arg(stream, "tc_stream_sync")))
    finally:  # the work is done either way: release what it held
        if owner is not None:
            owner._pending = []


def stream_destroy(stream):
    """Waits for enqueued work, then destroys the stream (a Stream is closed)."""
    owner = wrapper_of("stream", stream)
    if owner is not None:
        owner.close()
    else:
        check(tc_stream_destroy(stream_arg(stream, "tc_stream_destroy")))
