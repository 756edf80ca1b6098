"""_errors.py — the exceptions of the tuned package: one base class,
tuned.Error, with a subclass per libtuned error code (TUNED_E_*) and per
JSON-RPC error the daemon answers; the message is libtuned's or the
daemon's own."""


class Error(Exception):
    """Any error of tuned.  `code` is libtuned's TUNED_E_* code (0 when the
    error arose in Python), `rpc_code` the daemon's JSON-RPC error code (0
    when the daemon did not answer with one)."""

    def __init__(self, message, code=0, rpc_code=0, sys_errno=0):
        super().__init__(message)
        self.message = message
        self.code = code
        self.rpc_code = rpc_code
        self.errno = sys_errno


class LibraryNotFound(Error):
    """libtuned cannot be found or is too old."""


class ConnectError(Error):
    """The daemon's socket cannot be reached (no daemon?) or is served by another user."""


class ConnectionLost(Error):
    """Reading or writing the socket failed, or the daemon hung up."""


class ProtocolError(Error):
    """The daemon's answer is not what the protocol says."""


class Timeout(Error):
    """No answer within the client's timeout (the connection is then unusable)."""


class DaemonError(Error):
    """The daemon answered with a JSON-RPC error; the message is the daemon's."""


class InvalidParams(DaemonError):
    """-32602: a parameter the daemon refused (the message names it)."""


class NotFound(DaemonError):
    """-32001: no such job, workload or record."""


class BadWorkload(DaemonError):
    """-32002: the workload text does not parse (the message is the parser's FILE:LINE:COL: ...)."""


class TargetRefused(DaemonError):
    """-32003: this machine cannot measure for the target."""


class NoKernel(DaemonError):
    """-32004: nothing tuned yet for the workload on the target."""


class ShuttingDown(DaemonError):
    """-32005: the daemon is stopping and takes no new work."""


class ArgumentError(Error, ValueError):
    """An argument of a tuned kernel does not match its parameter (shape,
    dtype, device, layout); the message names the argument."""


class BuildError(Error):
    """A kernel could not be compiled or loaded in this process."""


_BY_CODE = {-1: ConnectError, -2: ConnectionLost, -3: ProtocolError, -5: Error, -6: Timeout, -7: MemoryError}
_BY_RPC = {-32602: InvalidParams, -32001: NotFound, -32002: BadWorkload, -32003: TargetRefused, -32004: NoKernel,
           -32005: ShuttingDown}


def error_from(code, rpc_code, message, sys_errno=0):
    """The exception for a libtuned return code (TUNED_E_RPC: by the daemon's code)."""
    if code == -7:
        return MemoryError(message)
    cls = _BY_RPC.get(rpc_code, DaemonError) if code == -4 else _BY_CODE.get(code, Error)
    return cls(message, code, rpc_code if code == -4 else 0, sys_errno)
