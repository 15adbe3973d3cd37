"""Argument helpers of scene tests: Tensor / Scalar specs, TaskArgsBuilder,
CallableNamespace, and conversion of host arrays (NumPy, or torch where it
is installed) into ChipTensor arguments."""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from simpler.task_interface import ArgDirection, ChipStorageTaskArgs, ChipTensor, DataType

__all__ = ["Tensor", "Scalar", "TaskArgsBuilder", "CallableNamespace", "make_chip_tensor_arg",
           "numpy_dtype_to_datatype", "torch_dtype_to_datatype", "build_chip_task_args"]


class Tensor(NamedTuple):
    """A tensor argument: a name and a host array (NumPy array or torch tensor)."""

    name: str
    value: Any


class Scalar(NamedTuple):
    """A scalar argument: a name and a value (int, float, ctypes or NumPy scalar)."""

    name: str
    value: Any


class TaskArgsBuilder:
    """Ordered arguments (tensors first, then scalars) with access by name:
    args.a, args.f[:] = ... in compute_golden."""

    def __init__(self, *specs):
        self._specs: list = []
        self._data: dict[str, Any] = {}
        self._has_scalar = False
        for spec in specs:
            if isinstance(spec, Tensor):
                self._add_tensor(spec)
            elif isinstance(spec, Scalar):
                self._add_scalar(spec)
            else:
                raise TypeError(f"TaskArgsBuilder takes Tensor and Scalar specs, got {type(spec).__name__}")

    def add_tensor(self, name: str, value: Any) -> None:
        self._add_tensor(Tensor(name, value))

    def add_scalar(self, name: str, value: Any) -> None:
        self._add_scalar(Scalar(name, value))

    def _add_tensor(self, spec: Tensor) -> None:
        if self._has_scalar:
            raise ValueError("Cannot add tensor after scalar (tensor-before-scalar ordering required)")
        if spec.name in self._data:
            raise ValueError(f"TaskArgsBuilder: argument '{spec.name}' given twice")
        self._specs.append(spec)
        self._data[spec.name] = spec.value

    def _add_scalar(self, spec: Scalar) -> None:
        if spec.name in self._data:
            raise ValueError(f"TaskArgsBuilder: argument '{spec.name}' given twice")
        self._has_scalar = True
        self._specs.append(spec)
        self._data[spec.name] = spec.value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"TaskArgsBuilder has no argument '{name}'") from None

    def clone(self) -> "TaskArgsBuilder":
        """Deep copy: tensors copied, scalars copied."""
        new = TaskArgsBuilder()
        for spec in self._specs:
            if isinstance(spec, Tensor):
                v = spec.value
                v = v.clone() if hasattr(v, "clone") else v.copy()
                new._add_tensor(Tensor(spec.name, v))
            else:
                new._add_scalar(Scalar(spec.name, copy.copy(spec.value)))
        return new

    @property
    def specs(self) -> list:
        return self._specs

    def tensor_names(self) -> list[str]:
        return [s.name for s in self._specs if isinstance(s, Tensor)]


class CallableNamespace:
    """Dot access to compiled callables (callables.vector_kernel), with
    keep() to hold objects for as long as the namespace lives."""

    def __init__(self, entries: dict):
        self._entries = dict(entries)
        self._keepalive: list = []

    def __getattr__(self, name: str):
        try:
            return self._entries[name]
        except KeyError:
            raise AttributeError(f"CallableNamespace has no entry '{name}'") from None

    def keep(self, *objs):
        if not objs:
            return None
        self._keepalive.extend(objs)
        return objs[0] if len(objs) == 1 else objs


def numpy_dtype_to_datatype(dtype) -> DataType:
    return DataType.from_numpy(dtype)


_TORCH_NAMES = {"float32": DataType.FLOAT32, "float16": DataType.FLOAT16, "bfloat16": DataType.BFLOAT16,
                "int8": DataType.INT8, "int16": DataType.INT16, "int32": DataType.INT32, "int64": DataType.INT64,
                "uint8": DataType.UINT8, "uint16": DataType.UINT16, "uint32": DataType.UINT32,
                "uint64": DataType.UINT64, "float64": DataType.FLOAT64, "bool": DataType.BOOL}


def torch_dtype_to_datatype(dtype) -> DataType:
    """torch.float32 -> DataType.FLOAT32, ... (needs torch)."""
    name = str(dtype).replace("torch.", "")
    if name not in _TORCH_NAMES:
        raise TypeError(f"no simpler DataType for torch dtype {dtype}")
    return _TORCH_NAMES[name]


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def make_chip_tensor_arg(x) -> ChipTensor:
    """A ChipTensor over a host array (NumPy, torch CPU) or a torch CUDA tensor
    (passed through as device memory). The array must outlive the run."""
    if isinstance(x, ChipTensor):
        return x
    if _is_torch(x):
        shape = tuple(x.shape) or (1,)
        strides = tuple(x.stride()) or (1,)
        span = (sum((d - 1) * s for d, s in zip(shape, strides)) + 1) * x.element_size() if x.numel() else 0
        t = ChipTensor.make(x.data_ptr(), shape, torch_dtype_to_datatype(x.dtype), strides=strides, nbytes=span)
        t._keep = x
        return t
    return ChipTensor.from_array(x)


def build_chip_task_args(test_args: TaskArgsBuilder, signature: list):
    """ChipStorageTaskArgs from a TaskArgsBuilder, and the names of its OUT /
    INOUT tensors (those a scene test compares)."""
    chip_args = ChipStorageTaskArgs()
    outputs: list[str] = []
    tensor_dirs = [d for d in signature if ArgDirection(d) != ArgDirection.SCALAR]
    ti = 0
    for spec in test_args.specs:
        if isinstance(spec, Tensor):
            if ti >= len(tensor_dirs):
                raise ValueError(f"Tensor '{spec.name}' at index {ti} has no matching entry in the orchestration "
                                 f"signature ({len(tensor_dirs)} tensor entries)")
            chip_args.add_tensor(make_chip_tensor_arg(spec.value))
            if ArgDirection(tensor_dirs[ti]) in (ArgDirection.OUT, ArgDirection.INOUT):
                outputs.append(spec.name)
            ti += 1
        else:
            chip_args.add_scalar(spec.value)
    return chip_args, outputs
