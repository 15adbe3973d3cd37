"""Exceptions of the simpler runtime: one base class, refined by status."""

from __future__ import annotations

# tensorcore/types.h status codes (simpler shares them).
OK = 0
NOT_INITIALIZED = -1
ALREADY_INITIALIZED = -2
NO_DEVICE = -3
UNSUPPORTED_FAMILY = -4
UNSUPPORTED_DTYPE = -5
INVALID_SHAPE = -6
INVALID_ARG = -7
ALLOC = -8
KERNEL_NOT_FOUND = -9
PIPELINE = -10
DISPATCH = -11
IO = -12
CORRUPT = -13
TIMEOUT = -14
AUTH = -15
UNSUPPORTED = -16
INTERNAL = -99

STATUS_NAMES = {
    NOT_INITIALIZED: "NOT_INITIALIZED",
    ALREADY_INITIALIZED: "ALREADY_INITIALIZED",
    NO_DEVICE: "NO_DEVICE",
    UNSUPPORTED_FAMILY: "UNSUPPORTED_FAMILY",
    UNSUPPORTED_DTYPE: "UNSUPPORTED_DTYPE",
    INVALID_SHAPE: "INVALID_SHAPE",
    INVALID_ARG: "INVALID_ARG",
    ALLOC: "ALLOC",
    KERNEL_NOT_FOUND: "KERNEL_NOT_FOUND",
    PIPELINE: "PIPELINE",
    DISPATCH: "DISPATCH",
    IO: "IO",
    CORRUPT: "CORRUPT",
    TIMEOUT: "TIMEOUT",
    AUTH: "AUTH",
    UNSUPPORTED: "UNSUPPORTED",
    INTERNAL: "INTERNAL",
}


class SimplerError(RuntimeError):
    """A failure reported by the runtime. `status` is the C status code."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, str(status))
        super().__init__(f"{message} [{self.status_name}]" if message else self.status_name)


class SimplerArgumentError(SimplerError, ValueError):
    """A bad argument, shape or dtype (nothing was changed)."""


class SimplerUnsupportedError(SimplerError, NotImplementedError):
    """A feature this build does not provide (level >= 3, CUDA not built, ...)."""


class SimplerTimeoutError(SimplerError, TimeoutError):
    """A wait ran past its timeout; the run goes on."""


def error_for(status: int, message: str) -> SimplerError:
    if status in (INVALID_ARG, INVALID_SHAPE, UNSUPPORTED_DTYPE):
        return SimplerArgumentError(status, message)
    if status in (UNSUPPORTED, NO_DEVICE):
        return SimplerUnsupportedError(status, message)
    if status == TIMEOUT:
        return SimplerTimeoutError(status, message)
    return SimplerError(status, message)
