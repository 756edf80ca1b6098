"""tuned — Python client of the tuned kernel auto-tuner daemon, over
libtuned (the C client library) with ctypes.

    import tuned
    with tuned.Client() as c:                       # $TUNED_SOCKET or the default socket
        job = c.submit("workloads/matmul.tw", trials=64, M=256, N=256, K=256)
        c.watch(job)                                 # a progress bar on a terminal
    mm = tuned.load("workloads/matmul.tw", M=256, N=256, K=256)
    C = mm(A, B)                                     # numpy arrays or torch CPU tensors
    fast = tuned.torch.optimize(model, (x,))         # a torch model's ops on tuned kernels
    r = tuned.tune("workloads/matmul.tw", "cpu", trials=32, M=128, N=128, K=128)   # no daemon
    mm = tuned.load("workloads/matmul.tw", db=r.db, M=128, N=128, K=128)
    compiled = torch.compile(model, backend=tuned.torch.backend(trials=32))

libtuned is found through $TUNED_LIB, the package's own copy (a wheel's
tuned/_native/lib), the build directories of the source tree this package
sits in, then the places `meson install` uses."""

from ._errors import (ArgumentError, BadWorkload, BuildError, ConnectError, ConnectionLost, DaemonError, Error,
                      InvalidParams, LibraryNotFound, NoKernel, NotFound, ProtocolError, ShuttingDown, TargetRefused,
                      Timeout)
from ._lib import lib_path
from .client import Client, Job, Kernel, Launch, Param
from .kernel import TunedFunction, build_c, from_cache, load
from .local import TuneResult, default_db, tune

__version__ = "0.1.0"


def __getattr__(name):
    """tuned.torch (the PyTorch integration) is imported when first used: torch loads slowly."""
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'tuned' has no attribute {name!r}")

__all__ = ["ArgumentError", "BadWorkload", "BuildError", "Client", "ConnectError", "ConnectionLost", "DaemonError",
           "Error", "InvalidParams", "Job", "Kernel", "Launch", "LibraryNotFound", "NoKernel", "NotFound", "Param",
           "ProtocolError", "ShuttingDown", "TargetRefused", "Timeout", "TuneResult", "TunedFunction", "build_c",
           "default_db", "from_cache", "lib_path", "load", "tune"]
