"""The status codes of include/tensorcore/types.h, which simpler shares.

The one table of them in Python: tensorcore's TC_* constants and fallback
messages and simpler's status names all come from here. Values are ABI.
"""

# (code, name, tc_status_string's message)
STATUSES = (
    (0, "OK", "ok"),
    (-1, "NOT_INITIALIZED", "context not initialized"),
    (-2, "ALREADY_INITIALIZED", "context already initialized"),
    (-3, "NO_DEVICE", "no device available"),
    (-4, "UNSUPPORTED_FAMILY", "operation unsupported on this device"),
    (-5, "UNSUPPORTED_DTYPE", "dtype unsupported"),
    (-6, "INVALID_SHAPE", "invalid_shape"),
    (-7, "INVALID_ARG", "invalid argument"),
    (-8, "ALLOC", "allocation failure"),
    (-9, "KERNEL_NOT_FOUND", "kernel not found"),
    (-10, "PIPELINE", "kernel pipeline creation failed"),
    (-11, "DISPATCH", "dispatch failed"),
    (-12, "IO", "i/o error"),
    (-13, "CORRUPT", "corrupt or truncated data"),
    (-14, "TIMEOUT", "timed out"),
    (-15, "AUTH", "authentication failed"),
    (-16, "UNSUPPORTED", "unsupported feature"),
    (-99, "INTERNAL", "internal error"),
)

CODES = {name: code for code, name, _ in STATUSES}     # "INVALID_ARG" -> -7
NAMES = {code: name for code, name, _ in STATUSES}     # -7 -> "INVALID_ARG"
MESSAGES = {code: msg for code, _, msg in STATUSES}    # -7 -> "invalid argument"

# The C names: TC_OK and TC_ERR_<NAME>.
C_NAMES = {("TC_OK" if name == "OK" else "TC_ERR_" + name): code for code, name, _ in STATUSES}
globals().update(C_NAMES)
__all__ = sorted(C_NAMES)
