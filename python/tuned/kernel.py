"""kernel.py — tuned.load: the best kernel of a workload as a Python
callable over numpy arrays and DLPack tensors (torch), with every argument
checked against the kernel's parameters (shape, dtype, device, layout)
before the kernel sees a pointer.  CPU kernels (language "c") are compiled
here with the C compiler, as the daemon's builder does, and cached."""

import ctypes
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from ._errors import ArgumentError, BuildError, Error
from .client import Client

# ---- building a C kernel -------------------------------------------------------------


def _cache_dir():
    d = os.environ.get("TUNED_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "tuned", "kernels")
    os.makedirs(d, exist_ok=True)
    return d


def _compiler(cc):
    return cc or os.environ.get("TUNED_CC") or os.environ.get("CC") or "cc"


def _flags(cc):
    flags = ["-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC"]
    if "clang" in os.path.basename(cc):
        flags.append("-fbracket-depth=1000000")  # clang's nesting limit; gcc has none
    return flags


def cache_key(source, cc=None):
    """The kernel cache's name for a C kernel's source built with compiler cc."""
    cc = _compiler(cc)
    return hashlib.sha256("\0".join([cc, *_flags(cc), source]).encode()).hexdigest()[:32]


def build_c(source, cc=None):
    """Compiles a C kernel's source into a shared object (cached by compiler,
    flags and source: cache_key) and returns its path.  The flags are the
    daemon's CPU builder's: -O3 -march=native -fno-math-errno -fopenmp."""
    cc = _compiler(cc)
    flags = _flags(cc)
    key = cache_key(source, cc)
    d = _cache_dir()
    so = os.path.join(d, f"kernel-{key}.so")
    if os.path.exists(so):
        return so
    if not shutil.which(cc):
        raise BuildError(f"cannot compile the kernel: C compiler '{cc}' not found (set CC or TUNED_CC)")
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        src, out = os.path.join(tmp, "kernel.c"), os.path.join(tmp, "kernel.so")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        cmd = [cc, *flags, "-o", out, src, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"{' '.join(cmd)} failed (status {r.returncode}):\n{(r.stderr + r.stdout)[-4000:]}")
        os.replace(out, so)  # atomic: a concurrent loader sees all of it or nothing
    return so


# ---- arguments -----------------------------------------------------------------------

# DLPack (dlpack.h): DLTensor and DLManagedTensor, the type codes used.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_CPU = 1
_DL_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm",
               13: "cuda_managed"}
_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dl_dtype(t):
    if t.lanes != 1:
        return f"a {t.lanes}-lane vector type"
    name = _DL_CODES.get(t.code, f"type code {t.code}")
    return "bool" if name == "bool" else f"{name}{t.bits}"


class _Arg:
    """One argument as the kernel sees it: its address and what keeps it alive."""

    def __init__(self, ptr, nbytes, keep, kind):
        self.ptr, self.nbytes, self.keep, self.kind = ptr, nbytes, keep, kind


class TunedFunction:
    """A tuned kernel callable on arrays: f(*inputs) returns the outputs
    (allocated as numpy arrays, or torch tensors when an input is one);
    f(*inputs, *outputs) writes into the given outputs and returns them.
    Arguments may also be passed by parameter name.  Attributes: kernel
    (the Kernel: record, median_secs, source, ...), inputs and outputs (its
    Params).

    A kernel with a hoisted packing (an input declared `const`, packed by
    a function of its own) packs each weight once: the packed copy is kept
    per weight data address, with a reference to the weight, and made again
    only for another address.  A const input is taken not to change: after
    changing a weight in place, call repack()."""

    def __init__(self, kernel, entry, path, pack_functions=None):
        self.kernel = kernel
        self.path = path
        self._entry = entry
        self.inputs = [p for p in kernel.params if p.role == "input"]
        self.outputs = [p for p in kernel.params if p.role == "output"]
        self.workspaces = [p for p in kernel.params if p.role == "workspace"]
        self.packed = [p for p in kernel.params if p.role == "packed"]
        position = {p.name: i for i, p in enumerate(self.inputs + self.outputs + self.workspaces + self.packed)}
        self._order = [position[p.name] for p in kernel.params]
        self._pack_functions = pack_functions or {}
        self._packs = {}  # packed param name -> (weight address, copy, the weight kept alive)
        self.__name__ = kernel.entry
        self.cache_key = None  # C kernels: the kernel cache's name for it (from_cache)

    def __repr__(self):
        sig = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.inputs + self.outputs)
        return (f"<tuned kernel {self.kernel.name or self.kernel.entry}({sig}) on {self.kernel.target}, "
                f"record {self.kernel.record}, {self.kernel.median_secs * 1e3:.3f} ms>")

    def _what(self, p):
        group = self.inputs if p.role == "input" else self.outputs
        return f"{self.__name__}: argument {p.name} ({p.role} {group.index(p) + 1} of {len(group)})"

    def _bind(self, args, kwargs):
        params = self.inputs + self.outputs
        if len(args) > len(params):
            raise ArgumentError(f"{self.__name__}: takes {len(self.inputs)} inputs "
                                f"({', '.join(p.name for p in self.inputs)}) and optionally {len(self.outputs)} "
                                f"outputs ({', '.join(p.name for p in self.outputs)}), got {len(args)} arguments")
        bound = dict(zip((p.name for p in params), args))
        for name, value in kwargs.items():
            if name not in {p.name for p in params}:
                raise ArgumentError(f"{self.__name__}: no parameter {name} (parameters: "
                                    f"{', '.join(p.name for p in params)})")
            if name in bound:
                raise ArgumentError(f"{self.__name__}: argument {name} given twice")
            bound[name] = value
        missing = [p.name for p in self.inputs if p.name not in bound]
        if missing:
            raise ArgumentError(f"{self.__name__}: missing input{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(missing)}")
        return bound

    def _check(self, p, shape, dtype, contiguous, what):
        if dtype != p.dtype:
            raise ArgumentError(f"{what}: expected dtype {p.dtype}, got {dtype}")
        if tuple(shape) != p.shape:
            raise ArgumentError(f"{what}: expected shape {p.shape}, got {tuple(shape)}")
        if not contiguous:
            raise ArgumentError(f"{what}: not C-contiguous (row-major, dense); the kernel indexes it as "
                                f"{p.dtype}{list(p.shape)} in row-major order: pass a contiguous copy")

    def _numpy(self, a, p, what):
        self._check(p, a.shape, str(a.dtype), a.flags.c_contiguous, what)
        if p.role == "output" and not a.flags.writeable:
            raise ArgumentError(f"{what}: read-only array; an output must be writable")
        if not a.flags.aligned:
            raise ArgumentError(f"{what}: not aligned to its element size")
        return _Arg(a.ctypes.data, a.nbytes, a, "numpy")

    def _expect_device(self, dev_type, dev_id, what):
        if int(dev_type) != _DL_CPU:
            dev = _DL_DEVICES.get(int(dev_type), f"DLPack device {int(dev_type)}")
            raise ArgumentError(f"{what}: on device {dev}:{dev_id}, expected cpu (the kernel is for target "
                                f"{self.kernel.target}); move it with .cpu()")

    def _dlpack(self, t, p, what):
        try:
            dev_type, dev_id = t.__dlpack_device__()
        except Exception as e:  # torch: meta tensors and other devices DLPack cannot name
            raise ArgumentError(f"{what}: its device cannot be exported through DLPack ({e}); "
                                f"this {self.kernel.language} kernel runs on the CPU") from None
        self._expect_device(dev_type, dev_id, what)
        if getattr(t, "requires_grad", False):
            raise ArgumentError(f"{what}: requires grad; tuned kernels do not record autograd: pass "
                                f"{p.name}.detach()")
        try:
            capsule = t.__dlpack__()
        except Exception as e:
            raise ArgumentError(f"{what}: cannot be exported through DLPack: {e}") from None
        # The capsule owns the DLManagedTensor (its DLTensor comes first)
        # until it is garbage collected: it is kept alive with the call.
        dl = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
        shape = tuple(dl.shape[i] for i in range(dl.ndim))
        contiguous = True
        if dl.strides:
            expect = 1
            for i in reversed(range(dl.ndim)):
                if shape[i] != 1 and dl.strides[i] != expect:
                    contiguous = False
                expect *= shape[i]
        self._check(p, shape, _dl_dtype(dl.dtype), contiguous, what)
        nbytes = p.elements * p.elem_bytes
        return _Arg((dl.data or 0) + dl.byte_offset, nbytes, (capsule, t), "dlpack")

    def _arg(self, value, p):
        what = self._what(p)
        np = _numpy_module()
        if np is not None and isinstance(value, np.ndarray):
            return self._numpy(value, p, what)
        if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
            return self._dlpack(value, p, what)
        raise ArgumentError(f"{what}: expected a numpy array or a DLPack tensor (torch.Tensor) of "
                            f"{p.dtype}{list(p.shape)}, got {type(value).__name__}")

    def _allocate(self, p, like_torch):
        if like_torch:
            import torch
            dtype = getattr(torch, p.dtype, None)
            if dtype is None:
                raise Error(f"{self.__name__}: cannot allocate output {p.name}: torch has no dtype {p.dtype}")
            return torch.empty(p.shape, dtype=dtype)
        np = _numpy_module()
        if np is None:
            raise Error(f"{self.__name__}: allocating output {p.name} needs numpy (or pass the output)")
        return np.empty(p.shape, dtype=p.dtype)

    def __call__(self, *args, **kwargs):
        bound = self._bind(args, kwargs)
        given = {p.name: self._arg(bound[p.name], p) for p in self.inputs + self.outputs if p.name in bound}
        like_torch = any(type(bound[p.name]).__module__.startswith("torch") for p in self.inputs)
        results = []
        for p in self.outputs:
            if p.name not in bound:
                bound[p.name] = self._allocate(p, like_torch)
                given[p.name] = self._arg(bound[p.name], p)
            results.append(bound[p.name])
        for p in self.outputs:  # the kernel writes outputs while it reads the rest
            o = given[p.name]
            for q, a in given.items():
                if q != p.name and a.ptr < o.ptr + o.nbytes and o.ptr < a.ptr + a.nbytes:
                    raise ArgumentError(f"{self._what(p)}: shares memory with argument {q}; outputs must not "
                                        f"overlap other arguments")
        self.launch([given[p.name].ptr for p in self.inputs + self.outputs],
                    keep={p.name: given[p.name].keep for p in self.inputs})
        del given  # the arguments stay alive up to here
        return results[0] if len(results) == 1 else tuple(results)

    def repack(self):
        """Forgets the packed copies of the const inputs: the next call packs
        them again (after a weight changed in place)."""
        self._packs.clear()

    def _packed(self, addresses, keep):
        """The packed copy of each const input, made when its address is new."""
        out = []
        for p in self.packed:
            weight = addresses[[q.name for q in self.inputs].index(p.packs)]
            have = self._packs.get(p.name)
            if have is None or have[0] != weight:
                copy = have[1] if have else ctypes.create_string_buffer(max(p.elements * p.elem_bytes, 1))
                rc = self._pack_functions[p.name](weight, ctypes.addressof(copy))
                if rc != 0:
                    raise Error(f"{self.__name__}: packing {p.packs} ({p.pack_function}) returned {rc}")
                have = (weight, copy, (keep or {}).get(p.packs))
                self._packs[p.name] = have
            out.append(ctypes.addressof(have[1]))
        return out

    def launch(self, addresses, keep=None):
        """Runs the kernel on the data addresses (ints) of its inputs, then
        its outputs, in that order, unchecked: the caller vouches for their
        shapes, dtypes and layout (tuned.torch does, once per call).  The
        const inputs of a hoisted packing are packed when their address is
        new (keep: input name -> an object holding the weight alive while its
        copy is kept)."""
        scratch = [ctypes.create_string_buffer(max(p.elements * p.elem_bytes, 1)) for p in self.workspaces]
        ptrs = list(addresses) + [ctypes.addressof(s) for s in scratch] + self._packed(addresses, keep)
        # the C kernel takes its arguments in the launch's order
        argv = (ctypes.c_void_p * max(len(ptrs), 1))(*[ptrs[i] for i in self._order])
        rc = self._entry(argv)
        del scratch
        if rc != 0:
            raise Error(f"{self.__name__}: the kernel returned {rc} (out of memory for its temporaries?)")


class CudaFunction(TunedFunction):
    """A tuned CUDA kernel callable on torch CUDA tensors (all on one
    device): its CUBIN is loaded through the driver API on that device and
    its kernels launched on the device's current stream (tuned.cuda).  The
    call returns once the launches are queued, as torch's own ops do."""

    def __init__(self, kernel):
        from . import cuda
        cuda.check_kernel(kernel)
        super().__init__(kernel, None, None)
        self._device = None
        self._modules = {}  # device ordinal -> the CUBIN loaded there

    def _arg(self, value, p):
        # torch's own accessors: exporting a CUDA tensor through DLPack
        # without naming a stream would order it after the legacy stream
        what = self._what(p)
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(value, torch.Tensor):
            hint = " (torch.from_numpy(a).cuda())" if type(value).__module__ == "numpy" else ""
            raise ArgumentError(f"{what}: expected a torch CUDA tensor of {p.dtype}{list(p.shape)} (the kernel is "
                                f"for target {self.kernel.target}), got {type(value).__name__}{hint}")
        from . import cuda
        cuda.expect_device(self, value.device, what)
        if value.requires_grad:
            raise ArgumentError(f"{what}: requires grad; tuned kernels do not record autograd: pass "
                                f"{p.name}.detach()")
        self._check(p, tuple(value.shape), str(value.dtype).replace("torch.", ""), value.is_contiguous(), what)
        return _Arg(value.data_ptr(), p.elements * p.elem_bytes, value, "torch")

    def _allocate(self, p, like_torch):
        import torch
        return torch.empty(p.shape, dtype=getattr(torch, p.dtype), device=f"cuda:{self._device}")

    def __call__(self, *args, **kwargs):
        self._device = None  # the first CUDA argument names it
        return super().__call__(*args, **kwargs)

    def launch(self, addresses, keep=None):
        """Queues the kernels on the current stream of the arguments' device
        (the data addresses of the inputs, then the outputs; unchecked)."""
        from . import cuda
        cuda.launch(self, addresses)


def _numpy_module():
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def load(workload, target=None, *, socket=None, client=None, cc=None, db=None, **params):
    """The best tuned kernel of a workload (a .tw path, its text or its hash)
    on a target (None: the daemon's) with parameter overrides (M=64, ...), as
    a callable on numpy arrays and torch CPU tensors (see TunedFunction), or,
    for a CUDA target, on torch CUDA tensors (see CudaFunction).
    `client` or `socket` choose the daemon; `db` (a database file, or True:
    tuned.local.default_db()) serves the kernel from that file in this
    process instead, without a daemon (target None: "cpu"); `cc` the C
    compiler (default $TUNED_CC, $CC, cc).  tuned.NoKernel when nothing is
    tuned yet."""
    if db is not None and db is not False:
        from . import local
        k = local.kernel(workload, target or "cpu", db=None if db is True else db, **params)
    else:
        own = client is None
        c = Client(socket) if own else client
        try:
            k = c.kernel(workload, target, **params)
        finally:
            if own:
                c.close()
    if k.language == "cuda":
        return CudaFunction(k)
    if k.language != "c":
        raise Error(f"tuned.load runs C kernels (CPU targets) and CUDA kernels; the best kernel of "
                    f"{k.name or k.workload} on {k.target} is {k.language}: fetch it with Client.kernel() and "
                    f"launch it with its launches and params")
    return _callable(k, cc)


def _meta_path(key):
    return os.path.join(_cache_dir(), f"kernel-{key}.json")


def _save_meta(k, key):
    """The Kernel beside its compiled code in the cache (kernel-KEY.json), so
    that from_cache can load it with no daemon and no database."""
    path = _meta_path(key)
    if os.path.exists(path):
        return
    d = {f.name: getattr(k, f.name) for f in dataclasses.fields(k) if f.name not in ("cubin",)}
    d["launches"] = [dataclasses.asdict(x) for x in k.launches]
    d["params"] = [dataclasses.asdict(x) for x in k.params]
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(d, f)
    os.replace(tmp, path)


def from_cache(key, cc=None):
    """The C kernel the cache keeps under `key` (TunedFunction.cache_key of an
    earlier load, in this process or another) as a TunedFunction, without a
    daemon or a database; tuned.NoKernel when the cache has no such kernel."""
    from ._errors import NoKernel
    from .client import Kernel, Launch, Param
    if not re.fullmatch(r"[0-9a-f]{32}", key or ""):
        raise ArgumentError(f"{key!r} is not a kernel cache key (32 hex digits)")
    try:
        with open(_meta_path(key), encoding="utf-8") as f:
            d = json.load(f)
    except FileNotFoundError:
        raise NoKernel(f"no kernel {key} in the kernel cache {_cache_dir()} (load it once with tuned.load)",
                       -4, -32004) from None
    d["launches"] = [Launch(**{**x, "grid": tuple(x["grid"]), "block": tuple(x["block"])}) for x in d["launches"]]
    d["params"] = [Param(**{**x, "shape": tuple(x["shape"])}) for x in d["params"]]
    return _callable(Kernel(**d, cubin=None), cc)


def _callable(k, cc=None):
    """The C kernel k (a Kernel) compiled and loaded as a TunedFunction."""
    path = build_c(k.source, cc)
    key = cache_key(k.source, cc)
    _save_meta(k, key)
    try:
        so = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        entry = getattr(so, f"tuned_entry_{k.entry}")
    except (OSError, AttributeError) as e:
        raise BuildError(f"cannot load the compiled kernel {path}: {e}") from None
    entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    entry.restype = ctypes.c_int
    packs = {}
    for p in k.params:
        if p.role != "packed":
            continue
        try:
            fn = getattr(so, p.pack_function or "")
        except AttributeError:
            raise BuildError(f"the compiled kernel {path} has no packing function {p.pack_function} for "
                             f"{p.packs}") from None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        packs[p.name] = fn
    f = TunedFunction(k, entry, path, packs)
    f.cache_key = key
    return f
