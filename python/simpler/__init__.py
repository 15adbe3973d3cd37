"""simpler: a task runtime on tensorcore devices.

A Worker drives one device (level 2: platform "cpu" or "cuda"). Its runs
execute an orchestration (a host shared object) that submits kernels as
tasks; dependencies are inferred from the tensors each task reads and writes.

    from simpler import Worker
    from simpler.task_interface import ArgDirection, CallConfig, ChipCallable, ...

`Worker` and `simpler.task_interface` load on first access, so `import
simpler` alone stays cheap.
"""

from __future__ import annotations

import importlib

from ._errors import SimplerArgumentError, SimplerError, SimplerTimeoutError, SimplerUnsupportedError

__all__ = ["Worker", "RunHandle", "CallableHandle", "Buffer", "SimplerError", "SimplerArgumentError",
           "SimplerTimeoutError", "SimplerUnsupportedError", "RemoteWorkerSpec", "RemoteCallable", "RemoteExport",
           "MpiGroupSpec", "task_interface", "version"]

_LAZY = {"Worker": "worker", "RunHandle": "worker", "CallableHandle": "worker", "Buffer": "worker",
         "RemoteWorkerSpec": "remote", "RemoteCallable": "remote", "RemoteExport": "remote",
         "MpiGroupSpec": "remote"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name == "task_interface":
        return importlib.import_module(".task_interface", __name__)
    raise AttributeError(f"module 'simpler' has no attribute {name!r}")


def version() -> str:
    from ._lib import version as _v

    return _v()
