"""Task and callable types: ArgDirection, DataType, ChipTensor,
ChipStorageTaskArgs, CallConfig, CoreCallable, ChipCallable.

The C side validates and owns the data; these classes hold handles and build
the plain structs the C ABI takes.
"""

from __future__ import annotations

import collections.abc
import ctypes
import enum
import struct
from typing import Any, Iterable, Mapping, Sequence

from . import _errors
from ._lib import CCallConfig, CChipTensor, CTaskArgs, MAX_TENSOR_DIMS, RING_COUNT, check, lib

__all__ = [
    "ArgDirection",
    "DataType",
    "ChipTensor",
    "ChipStorageTaskArgs",
    "CallConfig",
    "CoreCallable",
    "ChipCallable",
    "scalar_to_uint64",
]


class ArgDirection(enum.IntEnum):
    """Positional signature entries of a callable."""

    SCALAR = 0
    IN = 1
    OUT = 2
    INOUT = 3


_SCALAR = ArgDirection.SCALAR  # a module global: the enum's class attribute costs ~70 ns a look-up


class DataType(enum.IntEnum):
    """Element types (numbers as in include/simpler/tensor.h)."""

    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2
    INT8 = 3
    INT16 = 4
    INT32 = 5
    INT64 = 6
    UINT8 = 7
    UINT16 = 8
    UINT32 = 9
    UINT64 = 10
    FLOAT64 = 11
    BOOL = 12

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    def to_numpy(self):
        """The NumPy dtype (bf16 needs ml_dtypes)."""
        import numpy as np

        if self is DataType.BFLOAT16:
            try:
                import ml_dtypes
            except ImportError as e:  # pragma: no cover - depends on the environment
                raise TypeError("bfloat16 arrays need the ml_dtypes package") from e
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(_NUMPY_NAMES[self])

    @classmethod
    def from_numpy(cls, dtype) -> "DataType":
        try:  # the spellings seen before ("float32", np.float32, a dtype): a dict lookup
            hit = _FROM_NUMPY_CACHE.get(dtype)
        except TypeError:  # unhashable
            return cls._from_numpy(dtype)
        if hit is None:
            hit = _FROM_NUMPY_CACHE[dtype] = cls._from_numpy(dtype)
        return hit

    @classmethod
    def _from_numpy(cls, dtype) -> "DataType":
        import numpy as np

        dt = np.dtype(dtype)
        if dt.name == "bfloat16":
            return cls.BFLOAT16
        for member, name in _NUMPY_NAMES.items():
            if dt == np.dtype(name):
                return member
        raise TypeError(f"no simpler DataType for NumPy dtype {dt}")


_FROM_NUMPY_CACHE: dict = {}
_TENSOR_LAYOUT = struct.Struct("<QQQIi5II5q")  # ChipTensor, 96 bytes
_ZEROS = (0,) * MAX_TENSOR_DIMS
_TENSOR_HEAD = struct.Struct("<QQQ")  # buffer.addr, buffer.size, start_offset
# (shape, dtype) -> (nbytes, the layout's bytes after _TENSOR_HEAD) of a
# contiguous ChipTensor.make: the per-task path of level 3 makes the same
# few shapes over and over.
_CONTIGUOUS: dict = {}

_ITEMSIZE = {
    DataType.FLOAT32: 4, DataType.FLOAT16: 2, DataType.BFLOAT16: 2, DataType.INT8: 1, DataType.INT16: 2,
    DataType.INT32: 4, DataType.INT64: 8, DataType.UINT8: 1, DataType.UINT16: 2, DataType.UINT32: 4,
    DataType.UINT64: 8, DataType.FLOAT64: 8, DataType.BOOL: 1,
}
_NUMPY_NAMES = {
    DataType.FLOAT32: "float32", DataType.FLOAT16: "float16", DataType.INT8: "int8", DataType.INT16: "int16",
    DataType.INT32: "int32", DataType.INT64: "int64", DataType.UINT8: "uint8", DataType.UINT16: "uint16",
    DataType.UINT32: "uint32", DataType.UINT64: "uint64", DataType.FLOAT64: "float64", DataType.BOOL: "bool",
}


def _as_datatype(dtype) -> DataType:
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, int):
        return DataType(dtype)
    return DataType.from_numpy(dtype)


def scalar_to_uint64(value) -> int:
    """The raw 64 bits a scalar argument travels as.

    int -> two's complement; Python float and ctypes.c_float -> the float32
    bit pattern in the low half (what CoreTaskArgs::add_scalar(float) does);
    ctypes.c_double -> the float64 pattern; NumPy scalars by their dtype.
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value & 0xFFFFFFFFFFFFFFFF
    if isinstance(value, ctypes.c_double):
        return struct.unpack("<Q", struct.pack("<d", value.value))[0]
    if isinstance(value, ctypes.c_float):
        return struct.unpack("<I", struct.pack("<f", value.value))[0]
    if isinstance(value, (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint8,
                          ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64)):
        return int(value.value) & 0xFFFFFFFFFFFFFFFF
    if isinstance(value, float):
        return struct.unpack("<I", struct.pack("<f", value))[0]
    try:
        import numpy as np

        if isinstance(value, np.generic):
            if value.dtype == np.float64:
                return struct.unpack("<Q", struct.pack("<d", float(value)))[0]
            if value.dtype.kind == "f":
                return struct.unpack("<I", struct.pack("<f", float(value)))[0]
            return int(value) & 0xFFFFFFFFFFFFFFFF
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot pass {type(value).__name__} as a scalar argument")


class ChipTensor:
    """A tensor argument: a strided view of device memory (or of host memory,
    which the runtime stages to the device for the run)."""

    __slots__ = ("_c", "_keep", "_l3")

    def __init__(self, c: CChipTensor, keep: Any = None):
        self._c = c
        self._keep = keep  # the host object whose memory this describes
        self._l3 = None  # a level-3 engine's resolution of it (level3/engine.py resolve)

    @classmethod
    def make(cls, data_ptr: int, shape: Sequence[int], dtype, strides: Sequence[int] | None = None,
             start_offset: int = 0, nbytes: int | None = None) -> "ChipTensor":
        """A view at `data_ptr` (device pointer from Worker.malloc, possibly an
        interior one, or a host address). Strides and offset count elements;
        row-major contiguous by default."""
        dt = dtype if type(dtype) is DataType else _as_datatype(dtype)
        shape = shape if type(shape) is tuple else tuple(shape)
        key = None
        if strides is None and not start_offset and nbytes is None:
            # The common case (a contiguous view at its address), whose bytes
            # past the address and size depend on shape and dtype only.
            key = (shape, dt)
            try:
                hit = _CONTIGUOUS.get(key)
            except TypeError:  # unhashable extents: the long way reports them
                hit = key = None
            if hit is not None:
                return cls(CChipTensor.from_buffer_copy(_TENSOR_HEAD.pack(int(data_ptr), hit[0], 0) + hit[1]))
        shape = tuple(map(int, shape))
        nd = len(shape)
        if not 1 <= nd <= MAX_TENSOR_DIMS:
            raise ValueError(f"ChipTensor.make: {nd} dimensions (1..{MAX_TENSOR_DIMS} allowed)")
        for s in shape:
            if s < 0 or s >= 1 << 32:
                raise ValueError(f"ChipTensor.make: shape {shape} has a negative or too large extent")
        if strides is None:
            if nd == 1:
                strides = (1,)
            else:
                st, acc = [], 1
                for s in reversed(shape):
                    st.append(acc)
                    acc *= s
                strides = tuple(reversed(st))
        else:
            strides = tuple(map(int, strides))
            if len(strides) != nd:
                raise ValueError("ChipTensor.make: strides and shape differ in length")
        start_offset = int(start_offset)
        if nbytes is None:
            if 0 in shape:
                nbytes = 0
            else:
                last = start_offset
                for s, st in zip(shape, strides):
                    last += (s - 1) * st
                nbytes = (last + 1) * _ITEMSIZE[dt]
        # One pack into the C layout (include/simpler/tensor.h) instead of a
        # field-by-field fill: make() is on the per-task path of level 3.
        pad = MAX_TENSOR_DIMS - nd
        packed = _TENSOR_LAYOUT.pack(int(data_ptr), int(nbytes), start_offset, nd, int(dt), *shape, *_ZEROS[:pad], 0,
                                     *strides, *_ZEROS[:pad])
        if key is not None and len(_CONTIGUOUS) < 4096:
            _CONTIGUOUS[key] = (int(nbytes), packed[_TENSOR_HEAD.size:])
        return cls(CChipTensor.from_buffer_copy(packed))

    @classmethod
    def from_array(cls, array) -> "ChipTensor":
        """A host tensor over a NumPy array (or any object exporting the array
        interface); the array must stay alive until the run completes."""
        import numpy as np

        a = np.asarray(array)
        if a.ndim == 0:
            a = a.reshape(1)
        if any(s % a.itemsize for s in a.strides) or any(s < 0 for s in a.strides):
            raise ValueError("ChipTensor.from_array: strides must be non-negative multiples of the item size")
        ptr = a.__array_interface__["data"][0]
        strides = tuple(s // a.itemsize for s in a.strides)
        span = (sum((d - 1) * s for d, s in zip(a.shape, strides)) + 1) * a.itemsize if a.size else 0
        t = cls.make(ptr, a.shape, DataType.from_numpy(a.dtype), strides=strides, nbytes=span)
        t._keep = array
        return t

    @property
    def data_ptr(self) -> int:
        return self._c.buffer.addr + self._c.start_offset * self.dtype.itemsize

    @property
    def shape(self) -> tuple:
        return tuple(self._c.shapes[i] for i in range(self._c.ndims))

    @property
    def strides(self) -> tuple:
        return tuple(self._c.strides[i] for i in range(self._c.ndims))

    @property
    def dtype(self) -> DataType:
        return DataType(self._c.dtype)

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"ChipTensor(ptr=0x{self.data_ptr:x}, shape={self.shape}, dtype={self.dtype.name})"


class _TensorBlock(collections.abc.Sequence):
    """The tensors of adopted arguments: a ChipTensor over element i of a
    ctypes CChipTensor array, made on first access (a remote task names up
    to 256 tensors, most of which its orchestration may only pass on)."""

    __slots__ = ("_descs", "_made")

    def __init__(self, descs):
        self._descs = descs
        self._made = [None] * len(descs)

    def __len__(self) -> int:
        return len(self._made)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self._made)))]
        t = self._made[i]  # IndexError, negative indices, as a list
        if t is None:
            i = i % len(self._made)
            t = self._made[i] = ChipTensor(self._descs[i])
        return t


class ChipStorageTaskArgs:
    """The arguments of a chip call: tensors in signature order, then scalars."""

    def __init__(self):
        self._tensors: list[ChipTensor] = []
        self._scalars: list[int] = []
        self._directions: list = []  # per tensor: an ArgDirection tag or None
        self._l3 = None  # a level-3 engine's resolution of the tensors (level3/engine.py resolve)

    def add_tensor(self, tensor, direction=None) -> None:
        """Adds a tensor in signature order. `direction` (IN, OUT, INOUT) tags
        it for a level-3 Python sub-task, which has no signature; a chip
        call takes the directions from its callable's signature."""
        if not isinstance(tensor, ChipTensor):
            tensor = ChipTensor.from_array(tensor)
        if type(self._tensors) is not list:  # adopted (_adopt): made a list to grow
            self._tensors = list(self._tensors)
        if len(self._tensors) >= 256:
            raise ValueError("ChipStorageTaskArgs: at most 256 tensors")
        if direction is not None:
            if type(direction) is not ArgDirection:  # the enum's own call costs more than the rest of this
                direction = ArgDirection(direction)
            if direction is _SCALAR:
                raise ValueError("ChipStorageTaskArgs.add_tensor: a tensor's direction is IN, OUT or INOUT")
        self._tensors.append(tensor)
        self._directions.append(direction)
        self._l3 = None

    @classmethod
    def _adopt(cls, descs, directions, scalars) -> "ChipStorageTaskArgs":
        """Arguments as they arrive from elsewhere (a remote TASK frame),
        checked already but for the directions: a ctypes array of
        CChipTensor (the args keep it; a ChipTensor over an element is made
        when first asked for), their ArgDirection values (IN, OUT or
        INOUT), u64 scalars; no per-item calls of add_tensor / add_scalar."""
        args = cls()
        if len(descs) > 256 or len(scalars) > 128 or len(directions) != len(descs):
            raise ValueError("ChipStorageTaskArgs: at most 256 tensors with a direction each and 128 scalars")
        try:
            args._directions = [_TENSOR_DIRECTIONS[d] for d in directions]
        except KeyError:
            bad = next(d for d in directions if d not in _TENSOR_DIRECTIONS)
            raise ValueError(f"ChipStorageTaskArgs: tensor direction {bad} is not IN, OUT or INOUT") from None
        args._tensors = _TensorBlock(descs) if len(descs) else []
        args._scalars = list(scalars)
        return args

    def add_scalar(self, value) -> None:
        if len(self._scalars) >= 128:
            raise ValueError("ChipStorageTaskArgs: at most 128 scalars")
        self._scalars.append(scalar_to_uint64(value))

    @property
    def tensor_count(self) -> int:
        return len(self._tensors)

    @property
    def scalar_count(self) -> int:
        return len(self._scalars)

    def tensor(self, i: int) -> ChipTensor:
        return self._tensors[i]

    def scalar(self, i: int) -> int:
        return self._scalars[i]

    def _to_c(self):
        """The C struct plus the arrays it points to (keep them alive)."""
        tensors = (CChipTensor * max(1, len(self._tensors)))()
        for i, t in enumerate(self._tensors):
            tensors[i] = t._c
        scalars = (ctypes.c_uint64 * max(1, len(self._scalars)))(*self._scalars)
        c = CTaskArgs(ctypes.cast(tensors, ctypes.POINTER(CChipTensor)), len(self._tensors),
                      ctypes.cast(scalars, ctypes.POINTER(ctypes.c_uint64)), len(self._scalars))
        return c, (tensors, scalars, [t._keep for t in self._tensors])


_TENSOR_DIRECTIONS = {int(d): d for d in ArgDirection if d is not ArgDirection.SCALAR}

_RUNTIME_ENV_KEYS = ("ring_task_window", "ring_heap", "ring_dep_pool")
_CONFIG_FIELDS = ("aicpu_thread_num", "block_dim", "enable_chip_swimlane", "enable_dump_args", "enable_pmu",
                  "enable_dep_gen", "enable_scope_stats")


class CallConfig:
    """Per-call options; the defaults suit an ordinary run.

    aicpu_thread_num  scheduler threads (cpu: the core threads schedule
                      themselves, so this is only checked; cuda: launch streams)
    block_dim         cores the run may use (0 = all)
    enable_chip_swimlane 0 off, 1-4 detail; enable_dump_args; enable_pmu (> 0
                      event type); enable_dep_gen; enable_scope_stats
    output_prefix     directory of the diagnostic files (required when any is on)
    runtime_env       {"ring_task_window" | "ring_heap" | "ring_dep_pool": N or
                      [N0, N1, N2, N3]} (tensormap_and_ringbuffer only)

    validate() runs at every submit/run and raises ValueError on a diagnostic
    without output_prefix or a ring override that breaks its rules.
    """

    def __init__(self, aicpu_thread_num: int = 0, block_dim: int = 0, enable_chip_swimlane: int = 0,
                 enable_dump_args: int = 0, enable_pmu: int = 0, enable_dep_gen: int = 0,
                 enable_scope_stats: int = 0, output_prefix: str = "", runtime_env: Mapping | None = None):
        self.aicpu_thread_num = aicpu_thread_num
        self.block_dim = block_dim
        self.enable_chip_swimlane = enable_chip_swimlane
        self.enable_dump_args = enable_dump_args
        self.enable_pmu = enable_pmu
        self.enable_dep_gen = enable_dep_gen
        self.enable_scope_stats = enable_scope_stats
        self.output_prefix = output_prefix
        self.runtime_env = dict(runtime_env or {})

    @classmethod
    def from_dict(cls, d: Mapping | None) -> "CallConfig":
        d = dict(d or {})
        known = set(_CONFIG_FIELDS) | {"output_prefix", "runtime_env"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"CallConfig: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)

    def _ring_values(self, key: str) -> list:
        v = self.runtime_env.get(key, 0)
        if isinstance(v, (list, tuple)):
            if len(v) != RING_COUNT:
                raise ValueError(f"runtime_env.{key}: a list needs {RING_COUNT} entries (one per ring), got {len(v)}")
            vals = list(v)
        else:
            vals = [v] * RING_COUNT
        out = []
        for x in vals:
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise ValueError(f"runtime_env.{key}: {x!r} is not a non-negative integer")
            out.append(x)
        return out

    def _to_c(self) -> CCallConfig:
        unknown = sorted(set(self.runtime_env) - set(_RUNTIME_ENV_KEYS))
        if unknown:
            raise ValueError(f"runtime_env: unknown key(s) {unknown}; known: {list(_RUNTIME_ENV_KEYS)}")
        c = CCallConfig()
        c.struct_size = ctypes.sizeof(CCallConfig)
        for f in _CONFIG_FIELDS:
            v = getattr(self, f)
            if isinstance(v, bool):
                v = int(v)
            if not isinstance(v, int):
                raise ValueError(f"CallConfig.{f}: {v!r} is not an integer")
            if not -(1 << 31) <= v < (1 << 31):
                raise ValueError(f"CallConfig.{f}: {v} is out of range")
            setattr(c, f, v)
        if not isinstance(self.output_prefix, str):
            raise ValueError("CallConfig.output_prefix must be a string")
        c.output_prefix = self.output_prefix.encode() if self.output_prefix else None
        for key in _RUNTIME_ENV_KEYS:
            arr = getattr(c, key)
            for i, v in enumerate(self._ring_values(key)):
                arr[i] = v
        return c

    def validate(self) -> None:
        check(lib().simpler_call_config_validate(ctypes.byref(self._to_c())))

    def __repr__(self) -> str:
        parts = [f"{f}={getattr(self, f)}" for f in _CONFIG_FIELDS]
        parts.append(f"output_prefix={self.output_prefix!r}")
        if self.runtime_env:
            parts.append(f"runtime_env={self.runtime_env!r}")
        return "CallConfig(" + ", ".join(parts) + ")"


class _Callable:
    """A C callable handle, released with the object."""

    def __init__(self, handle: int):
        self._h = ctypes.c_void_p(handle)

    def __del__(self):
        h = getattr(self, "_h", None)
        if h and h.value:
            try:
                lib().simpler_callable_release(h)
            except Exception:  # interpreter shutdown
                pass
            self._h = None

    def _info(self):
        from ._lib import CCallableInfo

        info = CCallableInfo()
        check(lib().simpler_callable_get_info(self._h, ctypes.byref(info)))
        return info

    @property
    def digest(self) -> str:
        """SHA-256 of the content (callables are identified by it)."""
        return self._info().digest.decode()

    @property
    def binary_size(self) -> int:
        return int(self._info().binary_size)

    @property
    def signature(self) -> list:
        n = self._info().signature_len
        arr = (ctypes.c_int32 * max(1, n))()
        check(lib().simpler_callable_get_signature(self._h, arr, n))
        return [ArgDirection(arr[i]) for i in range(n)]


def _signature_array(signature: Iterable) -> tuple:
    sig = [int(ArgDirection(s)) for s in signature]
    return (ctypes.c_int32 * max(1, len(sig)))(*sig), len(sig)


def _bytes(binary) -> bytes:
    if isinstance(binary, (bytes, bytearray, memoryview)):
        return bytes(binary)
    raise TypeError(f"binary must be bytes, got {type(binary).__name__}")


class CoreCallable(_Callable):
    """One kernel: cpu, a shared object exporting kernel_entry; cuda, a cubin;
    or a built-in tensorcore op (CoreCallable.builtin)."""

    @classmethod
    def build(cls, signature: Sequence, binary) -> "CoreCallable":
        sig, n = _signature_array(signature)
        data = _bytes(binary)
        h = ctypes.c_void_p()
        check(lib().simpler_core_callable_create(sig, n, data, len(data), ctypes.byref(h)))
        obj = cls(h.value)
        obj._builtin = None
        obj._recipe = ("core", [int(ArgDirection(x)) for x in signature], data)
        return obj

    @classmethod
    def builtin(cls, op: str, **params) -> "CoreCallable":
        """A tensorcore op as a kernel, e.g. CoreCallable.builtin("gemm", transpose_b=True).

        gemm / gemm_batched: tensors (A IN, B IN, C OUT; INOUT when beta != 0)
        of 2-D (batched: 3-D) views; parameters transpose_a, transpose_b,
        alpha, beta, accum ("f32", "f16", "i32"), allow_tf32."""
        text = ";".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in params.items())
        h = ctypes.c_void_p()
        check(lib().simpler_core_callable_builtin(op.encode(), text.encode(), ctypes.byref(h)))
        obj = cls(h.value)
        obj._builtin = op
        obj._recipe = ("builtin", op, dict(params))
        return obj

    @classmethod
    def from_recipe(cls, recipe) -> "CoreCallable":
        if recipe[0] == "core":
            return cls.build(recipe[1], recipe[2])
        if recipe[0] == "builtin":
            return cls.builtin(recipe[1], **recipe[2])
        raise ValueError(f"CoreCallable.from_recipe: unknown kind {recipe[0]!r}")

    @property
    def is_builtin(self) -> bool:
        return bool(self._info().builtin)

    def __repr__(self) -> str:
        kind = f"builtin={self._builtin!r}" if getattr(self, "_builtin", None) else f"binary_size={self.binary_size}"
        return f"CoreCallable({kind}, signature={[s.name for s in self.signature]})"


class ChipCallable(_Callable):
    """An orchestration (host shared object exporting func_name) plus its
    kernels: children = [(func_id, CoreCallable), ...]."""

    def recipe(self):
        """What rebuilds this callable in another process (a level-3 child):
        plain data, picklable."""
        kids = [(int(fid), c._recipe) for fid, c in self.children]
        return self._recipe + (kids,)

    @classmethod
    def from_recipe(cls, recipe) -> "ChipCallable":
        kind, kids = recipe[0], recipe[-1]
        children = [(fid, CoreCallable.from_recipe(r)) for fid, r in kids]
        if kind == "chip":
            _, sig, func_name, data, config_name, _ = recipe
            return cls.build(sig, func_name, data, children, config_name)
        if kind == "tasks":
            _, sig, tasks, _ = recipe
            return cls.from_tasks(sig, tasks, children)
        raise ValueError(f"ChipCallable.from_recipe: unknown kind {kind!r}")

    @classmethod
    def build(cls, signature: Sequence, func_name: str, binary, children: Sequence = (),
              config_name: str = "") -> "ChipCallable":
        sig, n = _signature_array(signature)
        data = _bytes(binary)
        kids = list(children)
        for fid, c in kids:
            if not isinstance(c, CoreCallable):
                raise TypeError(f"ChipCallable.build: child for func_id {fid} is not a CoreCallable")
        ids = (ctypes.c_int32 * max(1, len(kids)))(*[int(fid) for fid, _ in kids])
        handles = (ctypes.c_void_p * max(1, len(kids)))(*[c._h.value for _, c in kids])
        h = ctypes.c_void_p()
        check(lib().simpler_chip_callable_create(sig, n, func_name.encode(), config_name.encode(), data, len(data),
                                                 ids, handles, len(kids), ctypes.byref(h)))
        obj = cls(h.value)
        obj.func_name = func_name
        obj.children = kids
        obj._recipe = ("chip", [int(ArgDirection(x)) for x in signature], func_name, data, config_name)
        return obj

    @classmethod
    def from_tasks(cls, signature: Sequence, tasks: Sequence, children: Sequence) -> "ChipCallable":
        """A ChipCallable whose orchestration is built in: it submits `tasks`
        in order, so a graph of built-in kernels needs no compiler at all.

        Each task is {"func_id": f, "args": [...], "scalars": [...],
        "block_num": 1}; the strings "scope_begin" / "scope_end" (or
        ("scope_begin", "manual")) open and close scopes. Tensor arguments, in
        the kernel signature's order (which also gives their access):
          ("arg", i)  or  ("arg", i, offsets, shapes)   chip argument i (a box of it)
          ("out", t, j)  or  ("out", t, j, offsets, shapes)   output j created by task t
                                                        (tasks count from 0, scope items not counted)
          ("new", shape, dtype)                         an output the runtime allocates
        """
        kids = list(children)
        sigs = {int(fid): [ArgDirection(d) for d in c.signature] for fid, c in kids}
        lines = ["simpler-task-list 1"]
        for n, task in enumerate(tasks):
            if isinstance(task, str) or (isinstance(task, tuple) and task and task[0] in ("scope_begin", "scope_end")):
                name = task if isinstance(task, str) else task[0]
                if name == "scope_begin":
                    manual = isinstance(task, tuple) and len(task) > 1 and task[1] == "manual"
                    lines.append(f"scope_begin {1 if manual else 0}")
                elif name == "scope_end":
                    lines.append("scope_end")
                else:
                    raise ValueError(f"from_tasks: unknown item {task!r}")
                continue
            fid = int(task["func_id"])
            if fid not in sigs:
                raise ValueError(f"from_tasks: item {n} uses func_id {fid}, which no child has")
            access = [int(d) for d in sigs[fid] if d != ArgDirection.SCALAR]
            targs = list(task.get("args", []))
            if len(targs) != len(access):
                raise ValueError(f"from_tasks: item {n} (func_id {fid}) passes {len(targs)} tensor(s); the kernel "
                                 f"takes {len(access)}")
            lines.append(f"task {fid} {int(task.get('block_num', 1))}")
            for acc, a in zip(access, targs):
                kind = a[0]
                if kind == "arg":
                    line = f"t {acc} arg {int(a[1])}"
                    box = a[2:]
                elif kind == "out":
                    line = f"t {acc} out {int(a[1])} {int(a[2])}"
                    box = a[3:]
                elif kind == "new":
                    shape, dt = tuple(a[1]), _as_datatype(a[2])
                    line = f"t {acc} new {len(shape)} {int(dt)} " + " ".join(str(int(x)) for x in shape)
                    box = ()
                else:
                    raise ValueError(f"from_tasks: item {n}: unknown tensor reference {a!r}")
                if box:
                    offsets, shapes = box
                    if len(offsets) != len(shapes):
                        raise ValueError(f"from_tasks: item {n}: box offsets and shapes differ in length")
                    line += f" {len(shapes)} " + " ".join(str(int(x)) for x in list(offsets) + list(shapes))
                lines.append(line)
            for v in task.get("scalars", []):
                lines.append(f"s {scalar_to_uint64(v)}")
        text = "\n".join(lines) + "\n"
        sig, nsig = _signature_array(signature)
        ids = (ctypes.c_int32 * max(1, len(kids)))(*[int(fid) for fid, _ in kids])
        handles = (ctypes.c_void_p * max(1, len(kids)))(*[c._h.value for _, c in kids])
        h = ctypes.c_void_p()
        check(lib().simpler_chip_callable_from_tasks(sig, nsig, text.encode(), ids, handles, len(kids),
                                                     ctypes.byref(h)))
        obj = cls(h.value)
        obj.func_name = "simpler_task_list"
        obj.children = kids
        obj.description = text
        obj._recipe = ("tasks", list(signature), tasks)
        return obj

    def __repr__(self) -> str:
        return (f"ChipCallable(func_name={self.func_name!r}, children={[fid for fid, _ in self.children]}, "
                f"binary_size={self.binary_size})")
