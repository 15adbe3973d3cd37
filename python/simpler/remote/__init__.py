"""Level 4 over the network: remote level-3 Workers in session processes
that a daemon (python -m simpler.remote_worker) starts per connection.
See docs/simpler.md, "Level 4: remote workers"."""

from .client import RemoteCallable, RemoteWorkerSpec
from .ops import RemoteExport

__all__ = ["RemoteCallable", "RemoteExport", "RemoteWorkerSpec"]
