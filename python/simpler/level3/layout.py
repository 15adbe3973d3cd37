"""The shared-memory mailbox: byte layout shared by the parent and its
children (level 3).

One segment per Worker holds a 64-byte global header (the parent's
`sleeping` flag) and one block per child:

    child header (64 B)   state, sleeping, ctrl_state, ctrl_len
    control frame         pickled request / reply (rare operations)
    task frames           a ring of FRAMES, fixed layout, no pickling: the
                          task of seq s sits in frame (s - 1) % FRAMES, so the
                          parent can post several tasks per wakeup and the
                          child finds the next one without a search

A task frame (FRAME_BYTES):

    @0   state u32        FREE -> POSTED (parent) -> DONE (child) -> FREE; the
                          values fit its low byte, which either side may read
                          or write alone (the other bytes stay 0)
    @4   seq u32          tasks of a child run in seq order
    @8   task_id u64
    @16  kind, callable, config, ntensors, nscalars, nmaps  (u32 each)
    @40  status i32, msg_len u32                            (completion)
    @64  maps             shared buffers this child maps before running
                          (idx u32, pad, size u64, parent base u64, name)
    @TAGS    u32 per tensor: 0 = the child's device memory, i+1 = buffer i
    @DIRS    u8 per tensor: ArgDirection
    @TENSORS ChipTensor (96 B) per tensor; buffer.addr is the parent's
             address of the buffer (the child rebases it) or a device
             pointer tagged with the child in its top byte
    @SCALARS u64 per scalar
    @MSG     the error message of a failed task

Stores are ordered on x86 (TSO), so a reader that sees `state` flip also
sees the payload written before it.
"""

from __future__ import annotations

import struct

MAX_TENSORS = 256
MAX_SCALARS = 128
MAX_MAPS = 8
MAP_ENTRY = 64
NAME_BYTES = 40

GLOBAL_BYTES = 64
CHILD_HEADER = 64
CTRL_BYTES = 64 * 1024
FRAME_BYTES = 32 * 1024
FRAMES = 16  # tasks a child can have posted at once (a power of two: seq wraps at 2**32)
CHILD_BYTES = CHILD_HEADER + CTRL_BYTES + FRAMES * FRAME_BYTES

# Frame offsets.
F_STATE = 0
F_HDR = 4  # seq, task_id, kind, callable, config, ntensors, nscalars, nmaps
F_STATUS = 40
F_MAPS = 64
F_TAGS = F_MAPS + MAX_MAPS * MAP_ENTRY
F_DIRS = F_TAGS + 4 * MAX_TENSORS
F_TENSORS = F_DIRS + MAX_TENSORS
F_SCALARS = F_TENSORS + 96 * MAX_TENSORS
F_MSG = F_SCALARS + 8 * MAX_SCALARS
MSG_BYTES = FRAME_BYTES - F_MSG
assert MSG_BYTES >= 2048

HDR = struct.Struct("<IQIIIIII")  # seq, task_id, kind, callable, config, ntensors, nscalars, nmaps
STATUS = struct.Struct("<iI")
MAP = struct.Struct(f"<IIQQ{NAME_BYTES}s")
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")
# A ChipTensor (include/simpler/tensor.h): buffer.addr, buffer.size,
# start_offset, ndims, dtype, shapes[5], scope_tag, strides[5].
TENSOR = struct.Struct("<QQQIi5II5q")
TENSOR_HEAD = struct.Struct("<QQQ")
TENSOR_FRONT = struct.Struct("<QQQIi")  # TENSOR_HEAD, ndims, dtype
assert TENSOR.size == 96
_ARRAYS: dict = {}


def _array_struct(code: str, n: int) -> struct.Struct:
    """struct.Struct("<{n}{code}"), cached: the per-task paths of both sides
    pack and unpack arrays of a few sizes over and over."""
    s = _ARRAYS.get((code, n))
    if s is None:
        s = _ARRAYS[(code, n)] = struct.Struct(f"<{n}{code}")
    return s


def u32s(n: int) -> struct.Struct:
    return _array_struct("I", n)


def u64s(n: int) -> struct.Struct:
    return _array_struct("Q", n)


# Bytes per element by DataType number.
ITEMSIZE = (4, 2, 2, 1, 2, 4, 8, 1, 2, 4, 8, 8, 1)

# Child header offsets.
C_STATE = 0  # STARTING, READY, FAILED
C_SLEEPING = 4
C_CTRL_STATE = 8  # CTRL_IDLE, CTRL_REQUEST, CTRL_REPLY
C_CTRL_LEN = 12

# Values.
FREE, POSTED, DONE = 0, 1, 2
STARTING, READY, FAILED = 0, 1, 2
CTRL_IDLE, CTRL_REQUEST, CTRL_REPLY = 0, 1, 2
KIND_CHIP, KIND_SUB, KIND_REMOTE = 1, 2, 3

# A device pointer travels tagged with its child (top byte), so pointers of
# different children never meet in the TensorMap.
DEV_TAG_SHIFT = 56
DEV_MASK = (1 << DEV_TAG_SHIFT) - 1


def segment_bytes(children: int) -> int:
    return GLOBAL_BYTES + children * CHILD_BYTES


def child_base(k: int) -> int:
    return GLOBAL_BYTES + k * CHILD_BYTES


def frame_base(k: int, f: int) -> int:
    return child_base(k) + CHILD_HEADER + CTRL_BYTES + f * FRAME_BYTES
