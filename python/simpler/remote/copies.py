"""Remote copies in the library (simpler_l4_*, src/runtime/level4_copy.cpp):
the session serves a copy request and the parent awaits its reply without
this interpreter on either side, so a small copy costs about what its
bytes cost on the socket. Frames: COPY_TO, COPY_FROM, COPY_REPLY
(protocol.py). Anything else on the lane comes back to the caller."""

from __future__ import annotations

import ctypes

from .._lib import check, lib
from . import protocol as P

_I32, _U64, _P = ctypes.c_int32, ctypes.c_uint64, ctypes.c_void_p
COPY_TO, COPY_FROM = 0, 1
_DONE, _OTHER_FRAME = 0, 1  # copy_await's states; 2: refused


def _frame(p: _P, n: _U64) -> memoryview:
    """The channel's buffer holding a frame, until the lane's next receive."""
    if not n.value:
        return memoryview(b"")
    return memoryview((ctypes.c_ubyte * n.value).from_address(p.value)).cast("B")


def _ms(timeout_s: float) -> int:
    return max(1, int(timeout_s * 1000))


class CopyServer:
    """The session's side: reads the command lane, serving copies into and
    out of the ranges added (its allocations and imports)."""

    def __init__(self, channel, timeout_s: float):
        self._lib = lib()
        self._h = _P()
        check(self._lib.simpler_l4_server_create(channel._h, P.MAX_FRAME_BYTES, P.CHUNK_BYTES, _ms(timeout_s),
                                                       ctypes.byref(self._h)))
        self._served, self._p, self._n = _I32(), _P(), _U64()
        self._args = (self._h, ctypes.byref(self._served), ctypes.byref(self._p), ctypes.byref(self._n))

    def add(self, addr: int, nbytes: int) -> None:
        check(self._lib.simpler_l4_server_add(self._h, addr, nbytes))

    def drop(self, addr: int) -> None:
        check(self._lib.simpler_l4_server_drop(self._h, addr))

    def next_frame(self):
        """The next frame that is not a copy (a view of the channel's buffer),
        or None once a copy was served. A SimplerError with status TIMEOUT:
        no frame began (the lane is still in step)."""
        check(self._lib.simpler_l4_serve(*self._args))
        return None if self._served.value else _frame(self._p, self._n)

    def close(self) -> None:
        if self._h:
            self._lib.simpler_l4_server_destroy(self._h)
            self._h = _P()


class Copier:
    """The parent's side of one session's copies. Callers hold the lane's
    reader lock around send and await (nobody else may take the reply) and
    its send lock around send (a streamed copy's frames stay together)."""

    def __init__(self, channel, timeout_s: float):
        self._lib = lib()
        self._h = _P()
        check(self._lib.simpler_l4_copier_create(channel._h, P.MAX_FRAME_BYTES, P.INLINE_COPY_BYTES,
                                                             P.CHUNK_BYTES, _ms(timeout_s), ctypes.byref(self._h)))
        self._state = _I32()
        self._await_args = (self._h, ctypes.byref(self._state))

    def send(self, op: int, rid: int, addr: int, ptr: int, nbytes: int) -> None:
        """Sends the request (and a copy_to's bytes); a failure of the lane
        raises SimplerError."""
        check(self._lib.simpler_l4_copy_send(self._h, op, rid, addr, ptr, nbytes))

    def await_reply(self):
        """Reads one frame of the lane: ("done", None) for the reply (a
        copy_from's bytes are in place), ("refused", (status, message)) when
        the session refused the range, ("frame", view) for another frame
        that arrived first (a view of the channel's buffer, until the next
        receive). A failure of the lane raises SimplerError (status
        TIMEOUT: no frame began; call again)."""
        check(self._lib.simpler_l4_copy_await(*self._await_args))
        state = self._state.value
        if state == _DONE:
            return "done", None
        if state == _OTHER_FRAME:
            p, n = _P(), _U64()
            check(self._lib.simpler_l4_copier_frame(self._h, ctypes.byref(p), ctypes.byref(n)))
            return "frame", _frame(p, n)
        status, msg = _I32(), ctypes.c_char_p()
        check(self._lib.simpler_l4_copier_refusal(self._h, ctypes.byref(status), ctypes.byref(msg)))
        return "refused", (status.value, (msg.value or b"").decode("utf-8", "replace"))

    def close(self) -> None:
        if self._h:
            self._lib.simpler_l4_copier_destroy(self._h)
            self._h = _P()

