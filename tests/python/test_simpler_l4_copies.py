"""Level-4 copies in the library (simpler_l4_*), frame by frame: each side
against frames built and read here from the layout protocol.py and
src/runtime/level4_copy.cpp describe, over a real channel pair."""

from __future__ import annotations

import os
import socket
import struct
import threading

import numpy as np
import pytest

from simpler import SimplerError
from simpler.remote import copies as C
from simpler.remote import protocol as P
from tensorcore import Channel
from tensorcore import TC_ERR_CORRUPT as _CORRUPT, TC_ERR_INVALID_ARG as _INVALID, TC_ERR_TIMEOUT as _TIMEOUT

_REQ = struct.Struct("<QQQI")  # request id, address, nbytes, flags
_REPLY = struct.Struct("<QiI")  # request id, status, flags
STREAMED = 1


@pytest.fixture
def lane():
    """(parent's channel, session's channel) over one socket pair."""
    a, b = socket.socketpair()
    keys = P.keyring(os.urandom(32))
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("s", Channel.open(b, server=True, keys=keys, timeout=10)))
    t.start()
    c = Channel.open(a, server=False, keys=keys, timeout=10)
    t.join()
    yield c, got["s"]
    for ch in (c, got["s"]):
        ch.close()
    a.close()
    b.close()


def frame(ftype, body: bytes) -> bytes:
    return P.encode(ftype, body)


def request(ftype, rid, addr, n, flags=0, data=b"") -> bytes:
    return frame(ftype, _REQ.pack(rid, addr, n, flags) + bytes(data))


def parse(raw, ftype):
    kind, body = P.decode(raw, {ftype})
    return bytes(body)


def reply(rid, status=0, flags=0, data=b"") -> bytes:
    return frame(P.COPY_REPLY, _REPLY.pack(rid, status, flags) + bytes(data))


def address(a: np.ndarray) -> int:
    return a.ctypes.data


# ---- the parent's side -------------------------------------------------------------------

def test_a_copier_sends_a_small_copy_inside_its_request_and_a_long_one_as_data_frames(lane, monkeypatch):
    parent, session = lane
    monkeypatch.setattr(P, "INLINE_COPY_BYTES", 64)
    monkeypatch.setattr(P, "CHUNK_BYTES", 1000)
    cp = C.Copier(parent, 10)
    rng = np.random.default_rng(11)
    small = rng.integers(0, 255, 64, dtype=np.uint8)
    cp.send(C.COPY_TO, 5, 0x1000, address(small), small.nbytes)
    body = parse(session.recv(P.MAX_FRAME_BYTES, 10), P.COPY_TO)
    assert _REQ.unpack_from(body) == (5, 0x1000, 64, 0) and body[_REQ.size:] == small.tobytes()
    session.send(reply(5), 10)
    assert cp.await_reply() == ("done", None)

    big = rng.integers(0, 255, 2500, dtype=np.uint8)
    cp.send(C.COPY_TO, 6, 0x2000, address(big), big.nbytes)
    body = parse(session.recv(P.MAX_FRAME_BYTES, 10), P.COPY_TO)
    assert body == _REQ.pack(6, 0x2000, 2500, STREAMED)  # nothing inline
    pieces = [session.recv(P.MAX_FRAME_BYTES, 10) for _ in range(3)]
    assert [len(p) for p in pieces] == [1000, 1000, 500] and b"".join(pieces) == big.tobytes()
    session.send(reply(6), 10)
    assert cp.await_reply() == ("done", None)
    cp.close()


def test_a_copier_takes_a_copy_from_inline_or_as_data_frames_of_any_size(lane, monkeypatch):
    parent, session = lane
    monkeypatch.setattr(P, "INLINE_COPY_BYTES", 64)
    cp = C.Copier(parent, 10)
    rng = np.random.default_rng(12)
    for n, pieces in ((64, None), (65, (1, 64)), (3000, (700, 2300))):
        want = rng.integers(0, 255, n, dtype=np.uint8)
        dst = np.full(n, 0xEE, np.uint8)
        cp.send(C.COPY_FROM, 9, 0x3000, address(dst), n)
        body = parse(session.recv(P.MAX_FRAME_BYTES, 10), P.COPY_FROM)
        assert body == _REQ.pack(9, 0x3000, n, 0 if pieces is None else STREAMED)
        if pieces is None:
            session.send(reply(9, data=want.tobytes()), 10)
        else:
            session.send(reply(9, flags=STREAMED), 10)
            at = 0
            for k in pieces:
                session.send(want[at:at + k].tobytes(), 10)
                at += k
        assert cp.await_reply() == ("done", None)
        np.testing.assert_array_equal(dst, want)
    cp.close()


def test_a_copier_hands_back_frames_that_arrive_before_its_reply_and_a_refusal(lane):
    parent, session = lane
    cp = C.Copier(parent, 10)
    dst = np.full(16, 0xEE, np.uint8)
    cp.send(C.COPY_FROM, 3, 0x10, address(dst), 16)
    completion = P.encode(P.COMPLETION, P.completion_body(77, 0, ""))
    session.send(completion, 10)
    session.send(reply(3, status=_INVALID, data=b"[0x10, +16) is not inside one remote allocation"), 10)
    state, got = cp.await_reply()
    assert state == "frame" and bytes(got) == completion
    assert cp.await_reply() == ("refused", (_INVALID, "[0x10, +16) is not inside one remote allocation"))
    assert (dst == 0xEE).all()
    # No frame at all: a timeout that leaves the lane usable.
    short = C.Copier(parent, 0.05)
    short.send(C.COPY_TO, 4, 0x10, address(dst), 16)
    with pytest.raises(SimplerError) as e:
        short.await_reply()
    assert e.value.status == _TIMEOUT
    session.recv(P.MAX_FRAME_BYTES, 10)
    session.send(reply(4), 10)
    assert short.await_reply() == ("done", None)
    for c in (cp, short):
        c.close()


@pytest.mark.parametrize("bad", ["another request", "bytes to a copy_to", "too few bytes", "streamed, not inline",
                                 "unknown flags", "short"])
def test_a_reply_that_does_not_match_its_copy_is_corrupt_and_leaves_the_destination(lane, bad):
    parent, session = lane
    cp = C.Copier(parent, 10)
    dst = np.full(32, 0xEE, np.uint8)
    op = C.COPY_TO if bad == "bytes to a copy_to" else C.COPY_FROM
    cp.send(op, 8, 0x10, address(dst), 32)
    session.recv(P.MAX_FRAME_BYTES, 10)
    session.send({"another request": reply(9, data=bytes(32)),
                  "bytes to a copy_to": reply(8, data=bytes(4)),
                  "too few bytes": reply(8, data=bytes(31)),
                  "streamed, not inline": reply(8, flags=STREAMED),
                  "unknown flags": reply(8, flags=4, data=bytes(32)),
                  "short": frame(P.COPY_REPLY, struct.pack("<Qi", 8, 0))}[bad], 10)
    with pytest.raises(SimplerError) as e:
        cp.await_reply()
    assert e.value.status == _CORRUPT
    assert (dst == 0xEE).all()
    cp.close()


def test_a_copier_checks_its_arguments(lane, monkeypatch):
    parent, _ = lane
    monkeypatch.setattr(P, "INLINE_COPY_BYTES", P.MAX_FRAME_BYTES)  # no room for the request's own fields
    with pytest.raises(SimplerError, match="inline_max"):
        C.Copier(parent, 10)
    monkeypatch.undo()
    cp = C.Copier(parent, 10)
    with pytest.raises(SimplerError, match="op 2"):
        cp.send(2, 1, 0x10, 0, 0)
    with pytest.raises(SimplerError, match="buf is null"):
        cp.send(C.COPY_TO, 1, 0x10, 0, 8)
    with pytest.raises(SimplerError, match="no copy awaits"):
        cp.await_reply()
    cp.close()


# ---- the session's side ------------------------------------------------------------------

def test_a_server_serves_copies_into_and_out_of_its_ranges(lane):
    parent, session = lane
    srv = C.CopyServer(session, 10)
    mem = np.zeros(4096, np.uint8)
    base = address(mem)
    srv.add(base, mem.nbytes)
    rng = np.random.default_rng(13)
    small = rng.integers(0, 255, 100, dtype=np.uint8)
    parent.send(request(P.COPY_TO, 1, base + 10, 100, data=small), 10)
    assert srv.next_frame() is None
    assert parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY) == _REPLY.pack(1, 0, 0)
    np.testing.assert_array_equal(mem[10:110], small)

    big = rng.integers(0, 255, 3000, dtype=np.uint8)
    parent.send(request(P.COPY_TO, 2, base + 1000, 3000, STREAMED), 10)
    for at in (0, 1, 2000):  # any frame sizes, up to what is left
        parent.send(big[at:{0: 1, 1: 2000, 2000: 3000}[at]].tobytes(), 10)
    assert srv.next_frame() is None
    assert parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY) == _REPLY.pack(2, 0, 0)
    np.testing.assert_array_equal(mem[1000:4000], big)

    parent.send(request(P.COPY_FROM, 3, base + 10, 100), 10)
    assert srv.next_frame() is None
    assert parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY) == _REPLY.pack(3, 0, 0) + small.tobytes()
    parent.send(request(P.COPY_FROM, 4, base + 1000, 3000, STREAMED), 10)
    assert srv.next_frame() is None
    assert parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY) == _REPLY.pack(4, 0, STREAMED)
    assert parent.recv(P.MAX_FRAME_BYTES, 10) == big.tobytes()
    # Empty copies, at the range's very end too.
    parent.send(request(P.COPY_TO, 5, base + 4096, 0), 10)
    assert srv.next_frame() is None
    assert parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY) == _REPLY.pack(5, 0, 0)
    srv.close()


def test_a_server_refuses_ranges_outside_its_memory_and_keeps_the_lane_in_step(lane):
    parent, session = lane
    srv = C.CopyServer(session, 10)
    mem = np.full(256, 0x11, np.uint8)
    base = address(mem)
    srv.add(base, 128)
    for rid, addr, n in ((1, base + 120, 9), (2, base - 1, 2), (3, base + 128, 1), (4, base + 1000, 4)):
        parent.send(request(P.COPY_TO, rid, addr, n, data=bytes(n)), 10)
        assert srv.next_frame() is None
        body = parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY)
        assert _REPLY.unpack_from(body) == (rid, _INVALID, 0)
        assert b"is not inside one remote allocation" in body[_REPLY.size:]
    # A refused streamed copy_to: its data frames are read and dropped.
    parent.send(request(P.COPY_TO, 5, base + 100, 200, STREAMED), 10)
    parent.send(bytes(150), 10)
    parent.send(bytes(50), 10)
    assert srv.next_frame() is None
    assert _REPLY.unpack_from(parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY)) == (5, _INVALID, 0)
    parent.send(request(P.COPY_FROM, 6, base + 100, 200, STREAMED), 10)
    assert srv.next_frame() is None
    assert _REPLY.unpack_from(parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY)) == (6, _INVALID, 0)
    assert (mem == 0x11).all()
    # A range dropped is refused too; the lane is still in step.
    srv.drop(base)
    parent.send(request(P.COPY_FROM, 7, base, 1), 10)
    assert srv.next_frame() is None
    assert _REPLY.unpack_from(parse(parent.recv(P.MAX_FRAME_BYTES, 10), P.COPY_REPLY)) == (7, _INVALID, 0)
    srv.close()


def test_a_server_hands_back_every_other_frame(lane):
    parent, session = lane
    srv = C.CopyServer(session, 10)
    task = P.encode(P.TASK, P.task_body(1, "m:f", {}, b"", b"", []))
    older = struct.pack("<4sHHI", P.MAGIC, P.VERSION - 1, P.COPY_TO, 28) + _REQ.pack(1, 0, 0, 0)
    for raw in (task, older, b"garbage"):
        parent.send(raw, 10)
        assert bytes(srv.next_frame()) == raw
    with pytest.raises(SimplerError) as e:
        C.CopyServer(session, 0.05).next_frame()
    assert e.value.status == _TIMEOUT
    srv.close()


@pytest.mark.parametrize("raw", [
    frame(P.COPY_TO, _REQ.pack(1, 0, 8, 0)[:20]),  # a request cut short
    request(P.COPY_TO, 1, 0, 8, data=bytes(7)),  # bytes that are not the count
    request(P.COPY_TO, 1, 0, 8, STREAMED, data=bytes(8)),  # streamed, yet carrying bytes
    request(P.COPY_TO, 1, 0, 8, 2, data=bytes(8)),  # unknown flags
    request(P.COPY_FROM, 1, 0, 8, data=bytes(8)),  # a copy_from with bytes
], ids=["short", "count", "streamed-inline", "flags", "from-with-bytes"])
def test_a_malformed_copy_request_is_corrupt(lane, raw):
    parent, session = lane
    srv = C.CopyServer(session, 10)
    mem = np.full(64, 0x22, np.uint8)
    srv.add(address(mem), 64)
    parent.send(raw, 10)
    with pytest.raises(SimplerError) as e:
        srv.next_frame()
    assert e.value.status == _CORRUPT
    assert (mem == 0x22).all()
    srv.close()


def test_a_server_checks_its_ranges(lane):
    _, session = lane
    srv = C.CopyServer(session, 10)
    srv.add(0x10000, 0x1000)
    for addr, n in ((0x10800, 0x1000), (0xF800, 0x1000), (0x10000, 1), (0, 16), (0x20000, 0)):
        with pytest.raises(SimplerError):
            srv.add(addr, n)
    srv.add(0x11000, 16)  # adjacent is fine
    with pytest.raises(SimplerError, match="not a range served"):
        srv.drop(0x10001)
    srv.close()


def test_the_copy_entry_points_refuse_bad_arguments(lane):
    import ctypes

    from simpler._lib import lib

    parent, session = lane
    L = lib()
    h, st, p, n = ctypes.c_void_p(), ctypes.c_int32(), ctypes.c_void_p(), ctypes.c_uint64()

    def refused(status, *words):
        detail = L.simpler_last_error_detail().decode()
        assert status == _INVALID and all(w in detail for w in words), (status, detail)

    F, K = P.MAX_FRAME_BYTES, P.CHUNK_BYTES
    refused(L.simpler_l4_server_create(None, F, K, 1000, ctypes.byref(h)), "channel is null")
    refused(L.simpler_l4_server_create(session._h, 16, 8, 1000, ctypes.byref(h)), "max_frame_bytes")
    refused(L.simpler_l4_server_create(session._h, 1 << 31, K, 1000, ctypes.byref(h)), "max_frame_bytes")
    refused(L.simpler_l4_server_create(session._h, F, K, 0, ctypes.byref(h)), "timeout_ms")
    refused(L.simpler_l4_server_create(session._h, F, K, 1000, None), "out is null")
    refused(L.simpler_l4_server_create(session._h, F, 0, 1000, ctypes.byref(h)), "chunk_bytes")
    refused(L.simpler_l4_server_create(session._h, 4096, 4096, 1000, ctypes.byref(h)), "chunk_bytes")
    refused(L.simpler_l4_copier_create(parent._h, P.MAX_FRAME_BYTES, 64, 0, 1000, ctypes.byref(h)), "chunk_bytes")
    refused(L.simpler_l4_copier_create(parent._h, 4096, 64, 8192, 1000, ctypes.byref(h)), "chunk_bytes")
    for call in (lambda: L.simpler_l4_serve(None, ctypes.byref(st), ctypes.byref(p), ctypes.byref(n)),
                 lambda: L.simpler_l4_server_add(None, 0x1000, 16), lambda: L.simpler_l4_server_drop(None, 0x1000),
                 lambda: L.simpler_l4_copy_send(None, 0, 1, 0x1000, None, 0),
                 lambda: L.simpler_l4_copy_await(None, ctypes.byref(st)),
                 lambda: L.simpler_l4_copier_frame(None, ctypes.byref(p), ctypes.byref(n))):
        refused(call(), "null handle")
    srv = C.CopyServer(session, 10)
    refused(L.simpler_l4_serve(srv._h, None, ctypes.byref(p), ctypes.byref(n)), "output is null")
    srv.close()
    cp = C.Copier(parent, 10)
    refused(L.simpler_l4_copy_await(cp._h, None), "state is null")
    refused(L.simpler_l4_copier_refusal(cp._h, None, None), "output is null")
    cp.close()
    # Destroying nothing is harmless.
    assert L.simpler_l4_server_destroy(None) == 0 and L.simpler_l4_copier_destroy(None) == 0
