"""The wire format of level-4 sessions (a parent Worker(4) and the session
process that serves one remote level-3 Worker).

Every frame travels inside an authenticated channel (tensorcore's
Channel: dist's HMAC handshake, then an AES-256-GCM tag per frame under a
key of the connection and direction), so a frame that reaches the decoder
came from a key holder; it is still bounds-checked field by field, because a bug or a
version skew must fail with a message, never with a wrong read.

    header (12 B)   magic b"SL4F", version u16, type u16, body length u32
    body            exactly `body length` bytes, laid out per type below

Two connections per session: the command lane (CONTROL / CONTROL_REPLY,
TASK / COMPLETION, SHUTDOWN, in order) and the health lane (HEARTBEAT both
ways), so a long task never delays the liveness check.

A copy is a COPY_TO or COPY_FROM request and a COPY_REPLY, served by the
session and awaited by the parent in the library (simpler_l4_*,
src/runtime/level4_copy.cpp, which lays the three out), not in Python. A
copy of at most INLINE_COPY_BYTES travels inside its request (to) or reply
(from); a longer one follows it as data frames of at most CHUNK_BYTES with
no header (the channel's MAC covers each frame and its place in the lane),
which the receiver reads straight into the destination. An MPI group's
ranks copy in pieces inside CONTROL frames instead, since rank 0 passes
them on as MPI messages.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct

MAGIC = b"SL4F"
VERSION = 3
HEADER = struct.Struct("<4sHHI")

TASK, COMPLETION, CONTROL, CONTROL_REPLY, SHUTDOWN, HEARTBEAT = 1, 2, 3, 4, 5, 6
# A TASK or CONTROL frame for one rank of an MPI group (simpler.remote_mpi);
# ordinary sessions refuse it.
ROUTED = 7
# Copies, in the library's layout (src/runtime/level4_copy.cpp).
COPY_TO, COPY_FROM, COPY_REPLY = 8, 9, 10
NAMES = {TASK: "TASK", COMPLETION: "COMPLETION", CONTROL: "CONTROL", CONTROL_REPLY: "CONTROL_REPLY",
         SHUTDOWN: "SHUTDOWN", HEARTBEAT: "HEARTBEAT", ROUTED: "ROUTED", COPY_TO: "COPY_TO",
         COPY_FROM: "COPY_FROM", COPY_REPLY: "COPY_REPLY"}
COMMAND_TYPES = {TASK, COMPLETION, CONTROL, CONTROL_REPLY, SHUTDOWN}
HEALTH_TYPES = {HEARTBEAT}

# Copies travel in frames of at most this size, so a frame (and, for the
# pieces of an MPI rank's copy, the receiver's buffer for it) stays bounded
# whatever the transfer.
CHUNK_BYTES = 16 << 20
MAX_FRAME_BYTES = CHUNK_BYTES + (1 << 20)
# Copies up to this size travel inside their COPY_TO / COPY_REPLY frame:
# below it a second frame (a send and a receive on each side) costs more
# than the pass through the channel's buffer that streaming saves.
INLINE_COPY_BYTES = 64 << 10
# An MPI rank's copy: its pieces, and how many go unanswered at once (each
# piece is a pickled MPI message between rank 0 and the rank).
COPY_PIECE_BYTES = 1 << 20
COPY_WINDOW = 4
MAX_TENSORS = 256
MAX_SCALARS = 128
TENSOR_BYTES = 96

IDENTITY = "simpler-l4"  # both ends hold the same shared key
KEY_ID = 1
MIN_KEY_BYTES = 32

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TASK_HEAD = struct.Struct("<QII")  # task id, name length, config length
_COUNTS = struct.Struct("<II")
_COMPLETION = struct.Struct("<QiI")
_CONTROL = struct.Struct("<QI")
_REPLY = struct.Struct("<QiI")


class ProtocolError(Exception):
    """A frame that does not parse: the connection must be dropped."""


def encode(ftype: int, body: bytes = b"") -> bytes:
    return HEADER.pack(MAGIC, VERSION, ftype, len(body)) + body


def decode(frame: bytes, allowed) -> tuple:
    """(type, body) of a whole frame; ProtocolError names what is wrong."""
    if len(frame) < HEADER.size:
        raise ProtocolError(f"truncated frame: {len(frame)} bytes, the header alone has {HEADER.size}")
    magic, version, ftype, n = HEADER.unpack_from(frame)
    if magic != MAGIC:
        raise ProtocolError(f"not a level-4 frame (magic {magic!r})")
    if version != VERSION:
        raise ProtocolError(f"frame version {version}; this side speaks version {VERSION}")
    if ftype not in allowed:
        raise ProtocolError(f"unexpected frame type {NAMES.get(ftype, ftype)} on this lane")
    if n != len(frame) - HEADER.size:
        raise ProtocolError(f"{NAMES[ftype]} frame announces a {n}-byte body but carries {len(frame) - HEADER.size}")
    return ftype, memoryview(frame)[HEADER.size:]


def _json(raw, what: str):
    """A JSON value, or ProtocolError (never a ValueError or RecursionError
    of the parser: the caller drops the connection on ProtocolError alone)."""
    try:
        return json.loads(bytes(raw).decode("utf-8", "strict"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ProtocolError(f"{what} is not JSON: {type(e).__name__}: {e}"[:300]) from None


def _need(body, at: int, n: int, what: str) -> None:
    if n < 0 or at + n > len(body):
        raise ProtocolError(f"truncated {what}: needs {at + n} bytes, the body has {len(body)}")


# ---- TASK / COMPLETION ---------------------------------------------------------

def task_body(task_id: int, name, config, dirs: bytes, tensors: bytes, scalars) -> bytes:
    """A TASK body. name: str, or its UTF-8 bytes; config: a dict, or its
    JSON as bytes (a sender encodes each callable and config once);
    scalars: a sequence of ints, or their packed little-endian u64 bytes."""
    nm = name if isinstance(name, bytes) else name.encode()
    cfg = config if isinstance(config, bytes) else json.dumps(config).encode()
    nt = len(dirs)
    if not isinstance(scalars, bytes):
        scalars = struct.pack(f"<{len(scalars)}Q", *scalars)
    return b"".join((_TASK_HEAD.pack(task_id, len(nm), len(cfg)), nm, cfg, _COUNTS.pack(nt, len(scalars) // 8),
                     bytes(dirs), tensors, scalars))


# Names and configs decoded so far, by their bytes: a session receives the
# same few again and again. Bounded: a peer sending ever new ones only
# empties them.
_NAMES: dict = {}
_CONFIGS: dict = {}
_DECODED_MAX = 256


def _task_name(raw: bytes) -> str:
    name = _NAMES.get(raw)
    if name is None:
        try:
            name = raw.decode("utf-8", "strict")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"TASK callable name is not UTF-8 ({e})") from None
        if len(_NAMES) >= _DECODED_MAX:
            _NAMES.clear()
        _NAMES[raw] = name
    return name


def _task_config(raw: bytes) -> dict:
    """The config object (a fresh dict: callers may keep or change it)."""
    config = _CONFIGS.get(raw)
    if config is None:
        config = _json(raw, "TASK config")
        if not isinstance(config, dict):
            raise ProtocolError("TASK config is not an object")
        if len(_CONFIGS) >= _DECODED_MAX:
            _CONFIGS.clear()
        _CONFIGS[raw] = config
    return dict(config)


def parse_task(body) -> tuple:
    """(task id, callable name, config dict, directions, tensors, scalars):
    directions one byte a tensor, tensors their 96-byte descriptors back to
    back (bytes)."""
    _need(body, 0, _TASK_HEAD.size, "TASK header")
    tid, nn, nc = _TASK_HEAD.unpack_from(body)
    at = _TASK_HEAD.size
    _need(body, at, nn, "TASK callable name")
    name = _task_name(bytes(body[at:at + nn]))
    at += nn
    _need(body, at, nc, "TASK config")
    config = _task_config(bytes(body[at:at + nc])) if nc else {}
    at += nc
    _need(body, at, _COUNTS.size, "TASK counts")
    nt, ns = _COUNTS.unpack_from(body, at)
    at += _COUNTS.size
    if nt > MAX_TENSORS or ns > MAX_SCALARS:
        raise ProtocolError(f"TASK with {nt} tensors and {ns} scalars (at most {MAX_TENSORS} and {MAX_SCALARS})")
    want = nt + nt * TENSOR_BYTES + 8 * ns
    if len(body) - at != want:
        raise ProtocolError(f"TASK body has {len(body) - at} bytes of arguments; {nt} tensors and {ns} scalars "
                            f"take {want}")
    dirs = bytes(body[at:at + nt])
    at += nt
    tensors = bytes(body[at:at + nt * TENSOR_BYTES])
    at += nt * TENSOR_BYTES
    scalars = list(struct.unpack_from(f"<{ns}Q", body, at))
    return tid, name, config, dirs, tensors, scalars


def completion_body(task_id: int, status: int, message: str) -> bytes:
    m = message.encode("utf-8", "replace")[:8192]
    return _COMPLETION.pack(task_id, status, len(m)) + m


def parse_completion(body) -> tuple:
    _need(body, 0, _COMPLETION.size, "COMPLETION")
    tid, status, n = _COMPLETION.unpack_from(body)
    if len(body) != _COMPLETION.size + n:
        raise ProtocolError(f"COMPLETION announces a {n}-byte message but carries {len(body) - _COMPLETION.size}")
    return tid, status, bytes(body[_COMPLETION.size:]).decode("utf-8", "replace")


# ---- CONTROL / CONTROL_REPLY ------------------------------------------------------
# A request is a JSON object {"op": ..., ...} and raw bytes after it (the data
# of a copy); a reply is a status, a JSON value and raw bytes.

def control_body(req_id: int, request: dict, data: bytes = b"") -> bytes:
    js = json.dumps(request).encode()
    return _CONTROL.pack(req_id, len(js)) + js + data


def control_frame(req_id: int, request: dict, data=b"") -> list:
    """encode(CONTROL, control_body(...)) as the parts of one frame
    (Channel.send takes the list): the head, then `data` itself (any
    buffer: a copy's piece goes from the caller's memory to the socket)."""
    js = json.dumps(request).encode()
    head = _CONTROL.pack(req_id, len(js))
    n = memoryview(data).nbytes
    top = HEADER.pack(MAGIC, VERSION, CONTROL, len(head) + len(js) + n) + head + js
    return [top, data] if n else [top]


def reply_frame(req_id: int, status: int, value, data=b"") -> list:
    """encode(CONTROL_REPLY, reply_body(...)) as the parts of one frame."""
    js = json.dumps(value).encode()
    head = _REPLY.pack(req_id, status, len(js))
    n = memoryview(data).nbytes
    top = HEADER.pack(MAGIC, VERSION, CONTROL_REPLY, len(head) + len(js) + n) + head + js
    return [top, data] if n else [top]


def parts_bytes(frame) -> int:
    """The length of a frame given as bytes or as a list of parts."""
    if isinstance(frame, list):
        return sum(memoryview(p).nbytes for p in frame)
    return len(frame)


def parse_control(body, copy: bool = True) -> tuple:
    """(request id, request, data); data is bytes, or with copy=False a
    view into `body`."""
    _need(body, 0, _CONTROL.size, "CONTROL header")
    rid, n = _CONTROL.unpack_from(body)
    _need(body, _CONTROL.size, n, "CONTROL request")
    req = _json(body[_CONTROL.size:_CONTROL.size + n], "CONTROL request")
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        raise ProtocolError("CONTROL request is not an object with an 'op'")
    data = memoryview(body)[_CONTROL.size + n:]
    return rid, req, bytes(data) if copy else data


def reply_body(req_id: int, status: int, value, data: bytes = b"") -> bytes:
    js = json.dumps(value).encode()
    return _REPLY.pack(req_id, status, len(js)) + js + data


def parse_reply(body, copy: bool = True) -> tuple:
    """(request id, status, value, data); data is bytes, or with
    copy=False a view into `body`."""
    _need(body, 0, _REPLY.size, "CONTROL_REPLY header")
    rid, status, n = _REPLY.unpack_from(body)
    _need(body, _REPLY.size, n, "CONTROL_REPLY value")
    value = _json(body[_REPLY.size:_REPLY.size + n], "CONTROL_REPLY value")
    data = memoryview(body)[_REPLY.size + n:]
    return rid, status, value, bytes(data) if copy else data


def data_pieces(nbytes: int, piece: int):
    """(offset, length) of each piece of `piece` bytes of a copy of nbytes
    (an MPI rank's copy)."""
    return [(at, min(piece, nbytes - at)) for at in range(0, nbytes, piece)]


# ---- ROUTED ----------------------------------------------------------------------
# The rank (u32), then a whole TASK or CONTROL frame for that rank. Replies
# need no rank: task ids and request ids are unique within the group.

def routed_body(rank: int, frame: bytes) -> bytes:
    return _U32.pack(rank) + frame


def routed_frame(rank: int, frame) -> list:
    """encode(ROUTED, routed_body(rank, frame)) as parts; `frame` is bytes
    or the parts of one frame (control_frame), which are not joined."""
    inner = frame if isinstance(frame, list) else [frame]
    return [HEADER.pack(MAGIC, VERSION, ROUTED, _U32.size + parts_bytes(inner)) + _U32.pack(rank)] + inner


def parse_routed(body) -> tuple:
    _need(body, 0, _U32.size, "ROUTED rank")
    return _U32.unpack_from(body)[0], bytes(body[_U32.size:])


def heartbeat_body(seq: int) -> bytes:
    return _U64.pack(seq)


def parse_heartbeat(body) -> int:
    if len(body) != _U64.size:
        raise ProtocolError(f"HEARTBEAT body of {len(body)} bytes, not {_U64.size}")
    return _U64.unpack_from(body)[0]


# ---- keys -----------------------------------------------------------------------

def check_key(key) -> bytes:
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"the session key must be bytes or str, got {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the session key has {len(key)} bytes; at least {MIN_KEY_BYTES} are required")
    return bytes(key)


def read_key_file(path: str) -> bytes:
    """The secret in `path` (one trailing newline dropped). The file must
    not be readable by group or others: the key admits anyone to run code
    on the host."""
    st = os.stat(path)
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionError(f"key file {path} is accessible to group or others (mode {stat.S_IMODE(st.st_mode):o}); "
                              f"chmod 600 it")
    with open(path, "rb") as f:
        key = f.read()
    if key.endswith(b"\n"):
        key = key[:-1]
    return check_key(key)


def keyring(key: bytes):
    return [(IDENTITY, KEY_ID, key)]


def parse_address(address: str) -> tuple:
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def host_id() -> str:
    """Names this host's shared-memory namespace: the host name and the
    kernel's boot id (a new boot, or another machine, is another host)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"
