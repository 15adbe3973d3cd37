"""TensorcoreError: every failing tensorcore call raises it.

The C library returns a status code and records a human-readable detail
(which argument, which sizes) per thread; `check()` turns a non-zero status
into an exception carrying both, read right after the failing call. Checks the
binding makes itself before calling C (a closed wrapper, an out-of-range copy,
an unknown dtype name) raise subclasses that are also ValueError / TypeError,
with the status the library would have given, so `except TensorcoreError`
catches every failure of a tensorcore call.
"""

# Fallback messages for when the library is not loaded (import failure); they
# are the ABI's own strings (tc_status_string).
from ._status import MESSAGES as _STATUS_STRINGS  # noqa: E402

# Set by _lib once the library is loaded: the library's tc_status_string.
_status_string_hook = None


def _status_message(status):
    if _status_string_hook is not None:
        try:
            return _status_string_hook(status)
        except Exception:  # never let message rendering mask the error
            pass
    return _STATUS_STRINGS.get(status, "unknown status")


class TensorcoreError(Exception):
    """A tensorcore call failed.

    Attributes: `status` (the negative TC_ERR_* code), `message` (its
    tc_status_string) and `detail` (what exactly was wrong; may be "").
    str(e) is "tensorcore error <status>: <message>[: <detail>]".
    """

    def __init__(self, status, detail=""):
        super().__init__(status, detail)
        self.status = int(status)
        self.detail = detail or ""
        self.message = _status_message(self.status)

    def __str__(self):
        text = "tensorcore error %d: %s" % (self.status, self.message)
        return text + ": " + self.detail if self.detail else text

    def __repr__(self):
        return "%s(%d, %r)" % (type(self).__name__, self.status, self.detail)


class TensorcoreValueError(TensorcoreError, ValueError):
    """Bad argument value caught by the binding before calling the library."""


class TensorcoreTypeError(TensorcoreError, TypeError):
    """Argument of the wrong Python type caught by the binding."""


class TensorcoreLibraryError(TensorcoreError, ImportError):
    """libtensorcore could not be loaded (raised at import)."""


# Set by _lib once loaded: reads tc_last_error_detail() of this thread.
_detail_hook = None


def check(status):
    """Raises TensorcoreError for a non-zero status, with the thread's detail."""
    if status != 0:
        detail = _detail_hook() if _detail_hook is not None else ""
        raise TensorcoreError(status, detail)
    return status
