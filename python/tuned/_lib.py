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
import sysconfig
import threading

from ._errors import LibraryNotFound, error_from

# ---- structs (client/tuned.h; the layouts must match it field by field) ----------

MAX_DIMS = 8


# TUNED_HASH_SIZE: a workload hash's 64 hex digits and the NUL
HASH_SIZE = 65


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
                ("workload", ctypes.c_char * HASH_SIZE), ("name", ctypes.c_char * 64), ("target", ctypes.c_char * 64),
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
                ("fallback_json", ctypes.c_char_p), ("unscheduled_json", ctypes.c_char_p)]


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
    ("tuned_workload_hash", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char * HASH_SIZE, _ERR]),
    ("tuned_submit_defaults", SubmitStruct, []),
    ("tuned_submit", ctypes.c_int,
     [_P, ctypes.POINTER(SubmitStruct), ctypes.POINTER(ctypes.c_int64), ctypes.c_char * HASH_SIZE, _ERR]),
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
    ("tuned_kernel_parse", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(KernelStruct)), _ERR]),
]

# libtuned_local (client/tuned_local.h): the tuner in this process.
LOCAL_PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p)


class LocalTuneStruct(ctypes.Structure):
    _fields_ = [("workload_text", ctypes.c_char_p), ("name", ctypes.c_char_p), ("params_json", ctypes.c_char_p),
                ("target", ctypes.c_char_p), ("db_path", ctypes.c_char_p), ("trials", ctypes.c_int),
                ("seconds", ctypes.c_double), ("seed", ctypes.c_int64), ("remeasure", ctypes.c_int),
                ("progress", LOCAL_PROGRESS_FN), ("ctx", ctypes.c_void_p)]


_LOCAL_FUNCTIONS = [
    ("tuned_local_tune_defaults", LocalTuneStruct, []),
    ("tuned_local_tune", ctypes.c_int, [ctypes.POINTER(LocalTuneStruct), ctypes.POINTER(_P), _ERR]),
    ("tuned_local_kernel", ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_P), _ERR]),
    ("tuned_local_free", None, [_P]),
]

# ---- finding the library ----------------------------------------------------------

def _installed_dirs():
    """Where `meson install` puts libtuned with the default prefix, and the
    system's, for this machine's architecture (no duplicates)."""
    arch = sysconfig.get_config_var("MULTIARCH")
    dirs = []
    for prefix in ("/usr/local", "/usr"):
        dirs += ([f"{prefix}/lib/{arch}"] if arch else []) + [f"{prefix}/lib64", f"{prefix}/lib"]
    return [d for d in dirs if os.path.isdir(d)]


def packaged_dir():
    """tuned/_native/ of a package installed from its wheel (which carries
    libtuned, libtuned_local, tunectl, tuned, tuned-worker and the target
    files), or None for a package without it (a source checkout, meson
    install)."""
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")
    return d if os.path.isfile(os.path.join(d, "lib", "libtuned.so")) else None


def _meson_installed_dir():
    """The library directory `meson install` put libtuned in beside this
    package (its _install_paths.py, found relative to this file), or None."""
    try:
        from . import _install_paths as p
    except ImportError:
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, os.path.relpath(p.LIBDIR, p.PKGDIR)))


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
    out = []
    pkg = packaged_dir()
    if pkg:
        out.append(("this package", os.path.join(pkg, "lib", "libtuned.so")))
    installed = _meson_installed_dir()
    if installed:
        out += [("installed with this package", os.path.join(installed, name)) for name in ("libtuned.so.1",
                                                                                              "libtuned.so")]
    out += [("build directory", p) for p in _source_tree_builds()]
    pc = _pkg_config_dir()
    dirs = ([pc] if pc else []) + [d for d in _installed_dirs() if d != pc]
    out += [("installed", os.path.join(d, name)) for d in dirs for name in ("libtuned.so.1", "libtuned.so")
            if os.path.exists(os.path.join(d, name))]
    found = ctypes.util.find_library("tuned")
    if found:
        out.append(("ld.so.cache", found))
    seen, unique = set(), []
    for what, path in out:
        key = os.path.realpath(path) if os.path.sep in path else path
        if key not in seen:
            seen.add(key)
            unique.append((what, path))
    return unique


_lib = None
_lib_path = None
_lock = threading.Lock()


def _declare(lib, functions=_FUNCTIONS):
    for name, restype, argtypes in functions:
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
            if not hasattr(handle, "tuned_hash_size") or handle.tuned_hash_size() != HASH_SIZE:
                tried.append(f"{path} ({what}): libtuned of an older tuned (16-digit workload hashes)")
                continue
            _declare(handle)
            _lib, _lib_path = handle, path
            return _lib
        if not tried:
            tried.append("no libtuned.so in this package, a build directory of its source tree, or the "
                         "installed library directories")
        raise LibraryNotFound(
            "cannot find libtuned, the client library of tuned; tried:\n  " + "\n  ".join(tried) +
            "\nbuild it (meson compile -C build) and set TUNED_LIB=/path/to/build/client/libtuned.so, "
            "or install it (meson install -C build)")


_local = None


def local_lib():
    """libtuned_local (the tuner in this process), loaded on first use from
    the directory libtuned was loaded from; LibraryNotFound when it is not
    there."""
    global _local
    path = os.path.join(os.path.dirname(lib_path()), "libtuned_local.so")
    with _lock:
        if _local is not None:
            return _local
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryNotFound(f"cannot load libtuned_local, the tuner for use without a daemon: {e} (it is "
                                  f"built next to libtuned, {_lib_path}; rebuild tuned)") from None
        if not hasattr(handle, "tuned_local_tune"):
            raise LibraryNotFound(f"{path} is not libtuned_local (no tuned_local_tune)")
        _declare(handle, _LOCAL_FUNCTIONS)
        _local = handle
        return _local


def take_local_string(ptr):
    """The text of a string libtuned_local allocated (then freed)."""
    try:
        return ctypes.string_at(ptr).decode("utf-8") if ptr else None
    finally:
        if ptr:
            local_lib().tuned_local_free(ptr)


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
