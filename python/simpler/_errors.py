"""Exceptions of the simpler runtime: one base class, refined by status."""

from __future__ import annotations

from tensorcore._status import CODES, NAMES

# tensorcore/types.h status codes (simpler shares them), as module names:
# OK, NOT_INITIALIZED, ..., INVALID_ARG, ..., INTERNAL.
globals().update(CODES)

STATUS_NAMES = {code: name for code, name in NAMES.items() if code != CODES["OK"]}


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
