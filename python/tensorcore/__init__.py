"""tensorcore: a pure-ctypes binding of the tensorcore C ABI.

Three layers, all importable from here (`import tensorcore as tc`):
  1. Raw functions mirroring the C ABI with tc_ dropped (tc.init, tc.gemm,
     tc.buffer_write, ...). The context comes first; every failure raises
     TensorcoreError (status, tc_status_string and the library's detail).
  2. Structs mirroring the C ones (TCDeviceInfo, TCRuntimeCapabilities,
     TCGemmDesc) and every TC_ constant, with string aliases ("f16", "bf16").
  3. Owned wrappers Context, Buffer, Stream: context managers that release
     their handle at close()/exit/collection; Context.close() closes the
     buffers and streams it made first.

The library is found through $TENSORCORE_LIB, next to this package, standard
prefixes, then the repository's build/ tree (see _lib.py); `library_path`
says which file was loaded. `python -m tensorcore` prints a smoke check.
"""

from ._errors import TensorcoreError, TensorcoreLibraryError, TensorcoreTypeError, TensorcoreValueError
from ._lib import path as library_path
from ._args import numpy_dtype
from ._constants import *  # noqa: F401,F403  TC_ constants and alias tables
from ._structs import *  # noqa: F401,F403
from ._objects import Buffer, Context, Stream

# Raw functions and wrapper methods, one module per C header (_api/<area>.py).
from ._api.diagnostics import *  # noqa: F401,F403
from ._api.config import *  # noqa: F401,F403
from ._api.context import *  # noqa: F401,F403
from ._api.buffer import *  # noqa: F401,F403
from ._api.interop import *  # noqa: F401,F403
from ._api.stream import *  # noqa: F401,F403
from ._api.gemm import *  # noqa: F401,F403
from ._api.attention import *  # noqa: F401,F403
from ._api.cuda import *  # noqa: F401,F403
from ._api.tokenizer import *  # noqa: F401,F403
from ._api.training import *  # noqa: F401,F403
from ._api.memory import *  # noqa: F401,F403
from ._api.hip import *  # noqa: F401,F403
from ._api.tensorops import *  # noqa: F401,F403
# -- dist --
from ._api.dist import *  # noqa: F401,F403
from ._api.channel import *  # noqa: F401,F403
from ._api.diloco import *  # noqa: F401,F403
from ._api.conv2d import *  # noqa: F401,F403
from ._api.quant import *  # noqa: F401,F403
from ._api.gguf import *  # noqa: F401,F403
from ._api.llama import *  # noqa: F401,F403

__version__ = version().split()[1] if version().startswith("tensorcore ") else "0.0.0"
