"""laggard's MPI side channel from Python: the C++ "mpi" transport (laggard/mpi.hpp) for a Python
program started by ``mpirun``/``mpiexec`` — with or without mpi4py, with or without
torch.distributed.

    an = laggard.Analyzer(enabled=True, interval=10, transport="mpi")

The Analyzer then takes its rank and world size from MPI_COMM_WORLD (unless given), and its side
channel duplicates that communicator: laggard never sends on the application's own. MPI must
run with MPI_THREAD_MULTIPLE (laggard's background thread calls MPI): laggard initializes MPI so
if nothing did yet, and finalizes it at exit; a program that initializes MPI itself (mpi4py)
must ask for that level (``mpi4py.rc.thread_level = "multiple"``, mpi4py's default).

Every rank must create its Analyzer with transport="mpi", at the same point of its program: the
transport's construction duplicates the communicator (MPI_Comm_dup) and finds the hosts with
collectives, which MPI can neither time out nor cancel, so a rank that never creates one holds
the others at theirs. (A nonblocking MPI_Comm_idup would not help: a collective left pending can
be neither cancelled nor finalized.) The gloo side channel, the default, has setup_timeout_s
instead and waits for nobody (docs/reference/failure-contract.md).

The transport lives in laggard._mpi, built by a source build (scripts/build.sh) when MPI is
found, and into a wheel only on request (``pip install . -Ccmake.define.LAGGARD_WITH_MPI=ON``:
the default wheel does not depend on libmpi; Open MPI's must be installed where such a wheel
runs); without it, transport="mpi" is a
warning and the rank records without a side channel, as any failure of the side channel is.
"""

import atexit
import threading

_lock = threading.Lock()
_state = {}


def available():
    """Whether this package was built with the MPI side channel (laggard._mpi)."""
    try:
        from . import _mpi  # noqa: F401
    except ImportError:
        return False
    return True


def setup():
    """Initializes MPI (if needed), registers the "mpi" transport with laggard's engine and
    returns (rank, size) of MPI_COMM_WORLD. Raises RuntimeError saying why when it cannot."""
    with _lock:
        if "world" in _state:
            return _state["world"]
        try:
            from . import _mpi
        except ImportError as e:
            raise RuntimeError("laggard was built without its MPI side channel (laggard._mpi: "
                               "%s); build the package with it: pip install . "
                               "-Ccmake.define.LAGGARD_WITH_MPI=ON, Open MPI installed "
                               "(libopenmpi-dev)" % e)
        from . import _core

        world = tuple(_mpi.init())
        _core.register_transport_capsule("mpi", _mpi.factory)
        if _mpi.initialized_here():
            atexit.register(_mpi.finalize)
        _state["world"] = world
        return world
