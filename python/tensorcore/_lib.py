"""Finds and loads libtensorcore, and declares the C prototypes.

Search order (the first library that loads wins):
  1. $TENSORCORE_LIB (a file, or a directory holding the library). When set
     it is the only candidate: an explicit choice fails loudly rather than
     silently picking another build.
  2. The library next to this package's __init__.py (`pip install .` puts it
     there).
  3. Standard prefixes: /opt/tensorcore/lib, /usr/local/lib, /usr/lib,
     /usr/lib/x86_64-linux-gnu and the CMake default install prefix's lib dir.
  4. The build tree: <repo>/build/ (python/tensorcore/../../build).
If nothing loads, importing tensorcore raises TensorcoreError naming every
searched path and why each failed.

Prototypes: this module declares the foundation (diagnostics, context,
buffer, stream); each op area declares its own functions with `declare()` in
its module under _api/.
"""

import ctypes
import os
import sys
from ctypes import POINTER, c_char_p, c_int32, c_size_t, c_void_p

from . import _errors
from ._errors import TensorcoreError, TensorcoreLibraryError

if sys.platform == "darwin":
    LIBRARY_NAME = "libtensorcore.dylib"
elif sys.platform == "win32":
    LIBRARY_NAME = "tensorcore.dll"
else:
    LIBRARY_NAME = "libtensorcore.so"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# CMake's default CMAKE_INSTALL_PREFIX and its lib dir on this platform.
_CMAKE_DEFAULT_PREFIX = "C:/Program Files/tensorcore" if sys.platform == "win32" else "/usr/local"
STANDARD_DIRS = (
    "/opt/tensorcore/lib",
    "/usr/local/lib",
    "/usr/lib",
    "/usr/lib/x86_64-linux-gnu",
    os.path.join(_CMAKE_DEFAULT_PREFIX, "lib"),
)

TC_ERR_IO = -12  # status reported when the library cannot be loaded


def candidate_paths():
    """The paths tried, in order, as (path, where it came from)."""
    env = os.environ.get("TENSORCORE_LIB")
    if env:
        path = os.path.join(env, LIBRARY_NAME) if os.path.isdir(env) else env
        return [(path, "TENSORCORE_LIB")]
    found = [(os.path.join(_PACKAGE_DIR, LIBRARY_NAME), "package")]
    found += [(os.path.join(d, LIBRARY_NAME), "standard prefix") for d in STANDARD_DIRS]
    build = os.path.normpath(os.path.join(_PACKAGE_DIR, os.pardir, os.pardir, "build", LIBRARY_NAME))
    found.append((build, "build tree"))
    seen, unique = set(), []
    for path, origin in found:
        if path not in seen:
            seen.add(path)
            unique.append((path, origin))
    return unique


def _load():
    tried = []
    for path, origin in candidate_paths():
        if not os.path.exists(path):
            tried.append("%s (%s: not found)" % (path, origin))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s: dlopen failed: %s)" % (path, origin, e))
    raise TensorcoreLibraryError(
        TC_ERR_IO,
        "could not load %s; searched:\n  %s\nSet TENSORCORE_LIB to the library (or its directory), "
        "or build it: cmake -S . -B build && cmake --build build" % (LIBRARY_NAME, "\n  ".join(tried)))


lib, path = _load()

# C types of the ABI.
tc_status = c_int32
tc_dtype = c_int32
tc_backend = c_int32
handle = c_void_p  # tc_context, tc_buffer, tc_stream and later opaque handles

DECLARED = {}  # C name -> ctypes function (or the stub of a missing symbol)


def declare(name, restype, *argtypes):
    """Declares `name`'s prototype and returns the callable.

    A symbol this library lacks (an older or partial build) gives a stub that
    raises TC_ERR_UNSUPPORTED when called, so import never fails over it.
    """
    try:
        fn = getattr(lib, name)
    except AttributeError:
        def fn(*args, _name=name):
            raise TensorcoreError(-16, "%s is not in the loaded library %s" % (_name, path))
        fn.__name__ = name
        DECLARED[name] = fn
        return fn
    fn.restype = restype
    fn.argtypes = list(argtypes)
    DECLARED[name] = fn
    return fn


# diagnostics.h
tc_version = declare("tc_version", c_char_p)
tc_status_string = declare("tc_status_string", c_char_p, tc_status)
tc_dtype_name = declare("tc_dtype_name", c_char_p, tc_dtype)
tc_backend_name = declare("tc_backend_name", c_char_p, tc_backend)
tc_last_backend = declare("tc_last_backend", tc_backend)
tc_last_error_detail = declare("tc_last_error_detail", c_char_p)
tc_last_error = declare("tc_last_error", tc_status)

# context.h (the struct prototypes are declared in _api/context.py, which owns the structs)
tc_init = declare("tc_init", tc_status, POINTER(handle))
tc_init_device = declare("tc_init_device", tc_status, c_char_p, POINTER(handle))
tc_shutdown = declare("tc_shutdown", tc_status, handle)

# buffer.h
tc_buffer_alloc = declare("tc_buffer_alloc", tc_status, handle, c_size_t, POINTER(handle))
tc_buffer_from_ptr = declare("tc_buffer_from_ptr", tc_status, handle, c_void_p, c_size_t, POINTER(handle))
tc_buffer_free = declare("tc_buffer_free", tc_status, handle)
tc_buffer_map = declare("tc_buffer_map", tc_status, handle, POINTER(c_void_p))
tc_buffer_size = declare("tc_buffer_size", tc_status, handle, POINTER(c_size_t))
tc_buffer_write = declare("tc_buffer_write", tc_status, handle, c_size_t, c_void_p, c_size_t)
tc_buffer_read = declare("tc_buffer_read", tc_status, handle, c_size_t, c_void_p, c_size_t)
tc_buffer_device_ptr = declare("tc_buffer_device_ptr", tc_status, handle, POINTER(c_void_p))

# stream.h
tc_stream_create = declare("tc_stream_create", tc_status, handle, POINTER(handle))
tc_stream_sync = declare("tc_stream_sync", tc_status, handle)
tc_stream_destroy = declare("tc_stream_destroy", tc_status, handle)


def text(raw):
    """A C string from the library as str (None -> "")."""
    return raw.decode("utf-8", "replace") if raw else ""


_errors._status_string_hook = lambda status: text(tc_status_string(status))
_errors._detail_hook = lambda: text(tc_last_error_detail())

__all__ = ["lib", "path", "declare", "candidate_paths", "handle", "tc_status", "tc_dtype", "tc_backend", "text"]
