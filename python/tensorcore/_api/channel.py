"""Authenticated message channels over a connected socket
(include/tensorcore/channel.h): dist's mutual HMAC handshake, then frames
that each carry an AES-256-GCM tag (GMAC) under a key of the connection
and direction, with the frame's sequence number as nonce.

    ch = Channel.open(sock, server=False, keys=[("simpler", 1, secret)], timeout=10)
    ch.send(b"...", timeout=5)                  # or a list of buffers: one frame, not joined
    payload = ch.recv(max_bytes=1 << 20, timeout=5)
    view = ch.recv(1 << 20, 5, copy=False)      # the channel's buffer, until the next recv
    n = ch.recv_into(dst, timeout=5)            # straight into a writable buffer

Keys are (identity, key_id, secret) tuples or mappings as in the dist
module; secrets have at least 32 bytes.
"""

import threading
from ctypes import POINTER, Structure, byref, c_char_p, c_int32, c_int64, c_size_t, c_ubyte, c_void_p, cast, string_at

import numpy as np

from .._errors import check
from .._lib import declare, handle, tc_status, text
from .dist import TCAuthConfig, _auth_config

__all__ = ["TC_CHANNEL_MAX_FRAME_BYTES", "TC_CHANNEL_MAX_PARTS", "TCChannelPart", "Channel"]

TC_CHANNEL_MAX_FRAME_BYTES = 0x40000000
TC_CHANNEL_MAX_PARTS = 32


class TCChannelPart(Structure):
    """struct tc_channel_part: one piece of a frame (tc_channel_sendv)."""
    _c_name_ = "struct tc_channel_part"
    _fields_ = [("data", c_void_p), ("nbytes", c_size_t)]


_tc_channel_open = declare("tc_channel_open", tc_status, c_int32, c_int32, POINTER(TCAuthConfig), c_char_p, c_int64,
                           POINTER(handle))
_tc_channel_send = declare("tc_channel_send", tc_status, handle, c_void_p, c_size_t, c_int64)
_tc_channel_sendv = declare("tc_channel_sendv", tc_status, handle, POINTER(TCChannelPart), c_size_t, c_int64)
_tc_channel_recv = declare("tc_channel_recv", tc_status, handle, c_size_t, c_int64, POINTER(c_void_p),
                           POINTER(c_size_t))
_tc_channel_recv_into = declare("tc_channel_recv_into", tc_status, handle, c_void_p, c_size_t, c_int64,
                                POINTER(c_size_t))
_tc_channel_set_spin = declare("tc_channel_set_spin", tc_status, handle, c_int64)
_tc_channel_peer_identity = declare("tc_channel_peer_identity", tc_status, handle, POINTER(c_char_p))
_tc_channel_shutdown = declare("tc_channel_shutdown", tc_status, handle)
_tc_channel_close = declare("tc_channel_close", tc_status, handle)


def _ms(timeout):
    return max(1, int(timeout * 1000))


def _address(part):
    """(address, nbytes) of a bytes-like object, without copying it (the
    caller keeps `part` alive while the address is used)."""
    if isinstance(part, bytes):
        return cast(c_char_p(part), c_void_p).value, len(part)
    a = np.frombuffer(part, dtype=np.uint8)  # any contiguous buffer, read-only ones too
    return a.ctypes.data, a.nbytes


class Channel:
    """One authenticated connection. send() and recv() may run in two
    threads at once; shutdown() from a third wakes both."""

    def __init__(self, h):
        self._h = h
        self._close_lock = threading.Lock()

    @classmethod
    def open(cls, sock, server, keys, timeout, expected_peer_identity="", local_identity=None):
        """Runs the handshake on `sock` (a connected socket or its fd; the
        channel works on a duplicate, the caller still closes sock)."""
        fd = sock if isinstance(sock, int) else sock.fileno()
        cfg, keep = _auth_config("tc_channel_open", local_identity, 0, keys)
        h = handle()
        check(_tc_channel_open(fd, 1 if server else 0, byref(cfg), (expected_peer_identity or "").encode(),
                               _ms(timeout), byref(h)))
        del keep
        return cls(h)

    def send(self, data, timeout):
        """Sends one frame: a bytes-like object, or a list (tuple) of them
        sent one after another as one frame's payload, none copied."""
        if isinstance(data, bytes):
            check(_tc_channel_send(self._h, data, len(data), _ms(timeout)))
            return
        parts = data if isinstance(data, (list, tuple)) else (data,)
        arr = (TCChannelPart * max(1, len(parts)))()
        for i, part in enumerate(parts):
            arr[i].data, arr[i].nbytes = _address(part)
        check(_tc_channel_sendv(self._h, arr, len(parts), _ms(timeout)))
        del parts  # alive until here

    def recv(self, max_bytes, timeout, copy=True):
        """The next frame's payload, once its MAC verified: bytes, or with
        copy=False a memoryview of the channel's own buffer, valid until
        the next recv() or close(). A timeout before any frame began
        (TensorcoreError, status TIMEOUT) leaves the channel usable."""
        p, n = c_void_p(), c_size_t()
        check(_tc_channel_recv(self._h, max_bytes, _ms(timeout), byref(p), byref(n)))
        if not copy:
            return memoryview((c_ubyte * n.value).from_address(p.value)).cast("B") if n.value else memoryview(b"")
        return string_at(p.value, n.value) if n.value else b""

    def recv_into(self, dst, timeout):
        """Receives the next frame straight into `dst` (a writable buffer
        at least as long as the frame) and returns its length. The bytes
        are checked as they arrive; after a failure dst's contents are
        unverified and the channel is out of step (see tc_channel_recv_into)."""
        view = memoryview(dst)
        if view.readonly:
            raise ValueError("Channel.recv_into: dst is read-only")
        a = np.frombuffer(view, dtype=np.uint8)
        n = c_size_t()
        check(_tc_channel_recv_into(self._h, a.ctypes.data, a.nbytes, _ms(timeout), byref(n)))
        return n.value

    def set_spin(self, spin_us):
        """Watch the connection up to spin_us microseconds before a send or
        receive blocks (0: block at once); see tc_channel_set_spin."""
        check(_tc_channel_set_spin(self._h, int(spin_us)))

    @property
    def peer_identity(self):
        out = c_char_p()
        check(_tc_channel_peer_identity(self._h, byref(out)))
        return text(out.value)

    def shutdown(self):
        if self._h:
            _tc_channel_shutdown(self._h)

    def close(self):
        with self._close_lock:
            if self._h:
                _tc_channel_close(self._h)
                self._h = None
