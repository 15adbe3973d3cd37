"""Level 4 over the network: remote level-3 Workers in session processes
that a daemon (python -m simpler.remote_worker) starts per connection,
or in the ranks of an MPI group (python -m simpler.remote_mpi under mpirun).
See docs/simpler.md, "Level 4: remote workers" and "MPI groups"."""

from .client import RemoteCallable, RemoteWorkerSpec
from .mpi_client import MpiGroupSpec
from .ops import RemoteExport

__all__ = ["MpiGroupSpec", "RemoteCallable", "RemoteExport", "RemoteWorkerSpec"]
