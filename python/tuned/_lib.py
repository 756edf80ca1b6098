"""_lib.py — finds and loads libtuned (the C client library) with ctypes,
declares its structs and functions (client/tuned.h), and turns its error
structs into tuned.Error exceptions.  Every daemon call goes through here:
the package never speaks the protocol itself."""

import ctypes
import ctypes.util
import glob
import os
import shutil
import subprocess
import threading

from ._errors import LibraryNotFound, error_from

# ---- structs (client/tuned.h; the layouts must match it field by field) ----------

MAX_DIMS = 8


class ErrorStruct(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("rpc_code", ctypes.c_int), ("message", ctypes.c_char * 1024),
                ("sys_errno", ctypes.c_int)]


class SubmitStruct(ctypes.Structure):
    _fields_ = [("workload", ctypes.c_char_p), ("name", ctypes.c_char_p), ("params_json", ctypes.c_char_p),
                ("target", ctypes.c_char_p), ("trials", ctypes.c_int), ("seconds", ctypes.c_double),
                ("seed", ctypes.c_int64), ("strategy", ctypes.c_char_p), ("model", ctypes.c_char_p),
                ("remeasure", ctypes.c_int), ("baseline", ctypes.c_int), ("allow_tf32", ctypes.c_int)]


class JobStruct(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int64), ("state", ctypes.c_int), ("state_name", ctypes.c_char * 16),
                ("workload", ctypes.c_char * 17), ("name", ctypes.c_char * 64), ("target", ctypes.c_char * 64),
                ("trials", ctypes.c_int64), ("trials_done", ctypes.c_int64), ("seconds", ctypes.c_double),
                ("best_record", ctypes.c_int64), ("best_median_secs", ctypes.c_double),
                ("best_gflops", ctypes.c_double), ("build_errors", ctypes.c_int64), ("run_errors", ctypes.c_int64),
                ("timeouts", ctypes.c_int64), ("wrong_results", ctypes.c_int64), ("error", ctypes.c_char * 512),
                ("too_slow", ctypes.c_int64), ("baseline_median_secs", ctypes.c_double),
                ("baseline_gflops", ctypes.c_double), ("first_failure_trial", ctypes.c_int64),
                ("first_failure_status", ctypes.c_char * 16), ("first_failure", ctypes.c_char * 1024)]


class TensorMapStruct(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("param", ctypes.c_int), ("dims", ctypes.c_int64 * 2),
                ("stride_bytes", ctypes.c_int64), ("box", ctypes.c_int * 2), ("swizzle", ctypes.c_int)]


class LaunchStruct(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("grid", ctypes.c_int64 * 3), ("block", ctypes.c_int64 * 3),
                ("shared_bytes", ctypes.c_int64), ("static_shared_bytes", ctypes.c_int64),
                ("tensor_maps", ctypes.POINTER(TensorMapStruct)), ("ntensor_maps", ctypes.c_int)]


class ParamStruct(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("role", ctypes.c_char_p), ("elements", ctypes.c_int64),
                ("elem_bytes", ctypes.c_int), ("packs", ctypes.c_char_p), ("pack_function", ctypes.c_char_p)]


class KernelStruct(ctypes.Structure):
    _fields_ = [("record", ctypes.c_int64), ("workload", ctypes.c_char_p), ("name", ctypes.c_char_p),
                ("target", ctypes.c_char_p), ("language", ctypes.c_char_p), ("entry", ctypes.c_char_p),
                ("source", ctypes.c_char_p), ("median_secs", ctypes.c_double), ("gflops", ctypes.c_double),
                ("kernels", ctypes.POINTER(LaunchStruct)), ("nkernels", ctypes.c_int),
                ("params", ctypes.POINTER(ParamStruct)), ("nparams", ctypes.c_int), ("ptx", ctypes.c_char_p),
                ("cubin", ctypes.POINTER(ctypes.c_ubyte)), ("cubin_size", ctypes.c_size_t),
                ("launch_json", ctypes.c_char_p), ("trace_json", ctypes.c_char_p),
                ("fallback_json", ctypes.c_char_p)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(JobStruct), ctypes.c_void_p)

# (name, result type, argument types) of every function the package calls.
_P = ctypes.c_void_p
_ERR = ctypes.POINTER(ErrorStruct)
_FUNCTIONS = [
    ("tuned_connect", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), _ERR]),
    ("tuned_close", None, [_P]),
    ("tuned_socket_path", ctypes.c_char_p, [_P]),
    ("tuned_set_timeout", None, [_P, ctypes.c_double]),
    ("tuned_call", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_P), _ERR]),
    ("tuned_workload_hash", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char * 17, _ERR]),
    ("tuned_submit_defaults", SubmitStruct, []),
    ("tuned_submit", ctypes.c_int,
     [_P, ctypes.POINTER(SubmitStruct), ctypes.POINTER(ctypes.c_int64), ctypes.c_char * 17, _ERR]),
    ("tuned_job_status", ctypes.c_int, [_P, ctypes.c_int64, ctypes.POINTER(JobStruct), _ERR]),
    ("tuned_cancel", ctypes.c_int, [_P, ctypes.c_int64, ctypes.POINTER(JobStruct), _ERR]),
    ("tuned_wait", ctypes.c_int,
     [_P, ctypes.c_int64, ctypes.c_double, PROGRESS_FN, _P, ctypes.POINTER(JobStruct), _ERR]),
    ("tuned_kernel_get", ctypes.c_int,
     [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(KernelStruct)), _ERR]),
    ("tuned_kernel_get_text", ctypes.c_int,
     [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(KernelStruct)), _ERR]),
    ("tuned_kernel_get_nearest", ctypes.c_int,
     [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.POINTER(KernelStruct)),
      _ERR]),
    ("tuned_kernel_free", None, [ctypes.POINTER(KernelStruct)]),
]

# ---- finding the library ----------------------------------------------------------

# Where `meson install` puts libtuned with the default prefix, and the system's.
_INSTALLED_DIRS = ["/usr/local/lib/x86_64-linux-gnu", "/usr/local/lib/aarch64-linux-gnu", "/usr/local/lib64",
                   "/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                   "/usr/lib"]


def _source_tree_builds():
    """libtuned.so of the build directories of the source tree this package
    sits in (python/tuned/ → the repository root), newest first; none when
    the package was installed elsewhere."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isfile(os.path.join(root, "client", "tuned.h")):
        return []
    # a half-built or cleaned build directory leaves a dangling libtuned.so link, and a sanitizer
    # build's library cannot load into an uninstrumented python (ASan aborts the process): skip both
    found = [f for f in glob.glob(os.path.join(root, "build*", "client", "libtuned.so"))
             if os.path.exists(f) and not sanitized(f)]
    return sorted(found, key=os.path.getmtime, reverse=True)


def sanitized(path):
    """Whether a shared library needs a sanitizer runtime (it names libasan or libubsan)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return b"libasan.so" in data or b"libubsan.so" in data


def _pkg_config_dir():
    if not shutil.which("pkg-config"):
        return None
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "libtuned"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def candidates():
    """The places tried, in order: (what, path)."""
    env = os.environ.get("TUNED_LIB")
    if env:
        path = os.path.join(env, "libtuned.so") if os.path.isdir(env) else env
        return [("$TUNED_LIB", path)]  # named explicitly: nothing else is tried
    out = [("build directory", p) for p in _source_tree_builds()]
    pc = _pkg_config_dir()
    dirs = ([pc] if pc else []) + _INSTALLED_DIRS
    out += [("installed", os.path.join(d, name)) for d in dirs for name in ("libtuned.so.0", "libtuned.so")]
    found = ctypes.util.find_library("tuned")
    if found:
        out.append(("ld.so.cache", found))
    return out


_lib = None
_lib_path = None
_lock = threading.Lock()


def _declare(lib):
    for name, restype, argtypes in _FUNCTIONS:
        try:
            f = getattr(lib, name)
        except AttributeError:
            continue  # an older libtuned: calls that need it say so (require())
        f.restype = restype
        f.argtypes = argtypes


def lib():
    """The loaded libtuned (loaded on first use); LibraryNotFound saying
    where it looked when it is nowhere."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for what, path in candidates():
            if os.path.sep in path and not os.path.exists(path):
                tried.append(f"{path} ({what}): no such file")
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({what}): {e}")
                continue
            if not hasattr(handle, "tuned_connect"):
                tried.append(f"{path} ({what}): not libtuned (no tuned_connect)")
                continue
            _declare(handle)
            _lib, _lib_path = handle, path
            return _lib
        raise LibraryNotFound(
            "cannot find libtuned, the client library of tuned; tried:\n  " + "\n  ".join(tried) +
            "\nbuild it (meson compile -C build) and set TUNED_LIB=/path/to/build/client/libtuned.so, "
            "or install it (meson install -C build)")


def lib_path():
    """The path libtuned was loaded from (loads it)."""
    lib()
    return _lib_path


def require(name):
    """libtuned's function `name`, or an Error saying the library is too old."""
    f = getattr(lib(), name, None)
    if f is None:
        raise LibraryNotFound(f"{_lib_path} has no {name}: it is older than this Python package; "
                              "rebuild tuned, or point TUNED_LIB at a newer libtuned.so")
    return f


# ---- calling ------------------------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def check(rc, err):
    """Raises the tuned.Error for a libtuned return code and its error struct."""
    if rc != 0:
        raise error_from(rc, err.rpc_code, err.message.decode("utf-8", "replace"), err.sys_errno)


def take_string(ptr):
    """The text of a malloc'ed C string (then freed)."""
    try:
        return ctypes.string_at(ptr).decode("utf-8") if ptr else None
    finally:
        if ptr:
            _libc.free(ptr)


def encode(s):
    return None if s is None else s.encode("utf-8")


def decode(b):
    return None if b is None else b.decode("utf-8", "replace")
