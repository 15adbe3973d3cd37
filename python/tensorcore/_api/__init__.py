"""Raw functions, one module per C header (include/tensorcore/<area>.h ->
_api/<area>.py). Each module declares its C prototypes with _lib.declare,
defines its structs and constants, its raw functions (context first), and
registers the wrapper methods with context_method / buffer_method /
stream_method; it lists its public names in __all__, and the package's
__init__ re-exports them with one `from ._api.<area> import *` line."""
