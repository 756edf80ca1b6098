"""cuda.py — a tuned CUDA kernel on torch CUDA tensors: its CUBIN loaded
through the CUDA driver API (libcuda.so.1 with ctypes, in the primary
context of the tensors' device, the one PyTorch uses) and launched with its
launches' grids, blocks and dynamic shared memory on the device's current
PyTorch stream.  Arguments are checked as for CPU kernels, and must all be
CUDA tensors on one device; outputs are allocated there."""

import contextlib
import ctypes

from ._errors import ArgumentError, Error

_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_DEFAULT_SHARED = 48 * 1024


class _Driver:
    """The few driver calls a launch needs, from libcuda.so.1."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise Error(f"CUDA kernels run through the NVIDIA driver, and libcuda.so.1 cannot be loaded ({e}): "
                        f"no NVIDIA driver on this machine") from None
        vp, u, i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
        sig = {"cuInit": [u], "cuGetErrorName": [i, ctypes.POINTER(ctypes.c_char_p)],
               "cuDeviceGet": [ctypes.POINTER(i), i], "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), i],
               "cuCtxPushCurrent_v2": [vp], "cuCtxPopCurrent_v2": [ctypes.POINTER(vp)],
               "cuModuleLoadData": [ctypes.POINTER(vp), ctypes.c_char_p],
               "cuModuleGetFunction": [ctypes.POINTER(vp), vp, ctypes.c_char_p],
               "cuFuncSetAttribute": [vp, i, i],
               "cuLaunchKernel": [vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]}
        for name, args in sig.items():
            f = getattr(self.lib, name)
            f.argtypes, f.restype = args, ctypes.c_int
        self.check(self.lib.cuInit(0), "cuInit")

    def check(self, rc, what):
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise Error(f"{what}: {name.value.decode() if name.value else 'CUDA error'} ({rc})")


_driver = None


def driver():
    """The loaded driver (loaded and initialised on first use)."""
    global _driver
    if _driver is None:
        _driver = _Driver()
    return _driver


class _Module:
    """The kernel's CUBIN loaded on one device: its functions by launch."""

    def __init__(self, kernel, device):
        d = driver()
        dev = ctypes.c_int()
        d.check(d.lib.cuDeviceGet(ctypes.byref(dev), device), f"cuDeviceGet({device})")
        self.ctx = ctypes.c_void_p()
        d.check(d.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        with self.current():
            self.mod = ctypes.c_void_p()
            d.check(d.lib.cuModuleLoadData(ctypes.byref(self.mod), kernel.cubin),
                    f"cuModuleLoadData ({kernel.target}'s CUBIN on cuda:{device})")
            self.fns = []
            for launch in kernel.launches:
                f = ctypes.c_void_p()
                d.check(d.lib.cuModuleGetFunction(ctypes.byref(f), self.mod, launch.name.encode()),
                        f"cuModuleGetFunction({launch.name})")
                if launch.shared_bytes > _DEFAULT_SHARED:  # opted into per kernel
                    d.check(d.lib.cuFuncSetAttribute(f, _MAX_DYNAMIC_SHARED, launch.shared_bytes),
                            f"cuFuncSetAttribute({launch.name}, MAX_DYNAMIC_SHARED_SIZE_BYTES)")
                self.fns.append(f)

    @contextlib.contextmanager
    def current(self):
        """The module's context made current on this thread for the block."""
        d = driver()
        d.check(d.lib.cuCtxPushCurrent_v2(self.ctx), "cuCtxPushCurrent")
        try:
            yield
        finally:
            d.lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def check_kernel(kernel):
    """Raises Error when the CUDA kernel cannot be launched from Python."""
    if not kernel.cubin:
        raise Error(f"the CUDA kernel of record {kernel.record} came without its CUBIN")
    maps = [l.name for l in kernel.launches if l.tensor_maps]
    if maps:
        raise Error(f"the CUDA kernel of record {kernel.record} takes TMA tensor maps ({', '.join(maps)}), which "
                    f"tuned.load does not encode yet: fetch it with Client.kernel() and launch it with its "
                    f"launch's tensor_maps")
    odd = sorted({p.role for p in kernel.params} - {"input", "output", "workspace"})
    if odd:
        raise Error(f"the CUDA kernel of record {kernel.record} has {', '.join(odd)} parameters, which tuned.load "
                    f"does not launch (hoisted packing is for C kernels)")


def expect_device(fn, device, what):
    """fn's arguments are CUDA tensors, all on one device (the first's)."""
    if device.type != "cuda":
        raise ArgumentError(f"{what}: on device {device}, expected a CUDA tensor (the kernel is for target "
                            f"{fn.kernel.target}); move it with .cuda()")
    index = device.index if device.index is not None else 0
    if fn._device is None:
        fn._device = index
    elif fn._device != index:
        raise ArgumentError(f"{what}: on cuda:{index}, and the arguments before it on cuda:{fn._device}: "
                            f"all must be on one device")


def launch(fn, addresses):
    """Launches fn's kernels in order on the current stream of its device."""
    import torch
    device = fn._device
    module = fn._modules.get(device)
    if module is None:
        module = fn._modules[device] = _Module(fn.kernel, device)
    scratch = [torch.empty(max(p.elements * p.elem_bytes, 1), dtype=torch.uint8, device=f"cuda:{device}")
               for p in fn.workspaces]
    ptrs = list(addresses) + [s.data_ptr() for s in scratch]
    values = [ctypes.c_void_p(ptrs[i]) for i in fn._order]
    argv = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
    d = driver()
    with module.current():
        for f, l in zip(module.fns, fn.kernel.launches):
            d.check(d.lib.cuLaunchKernel(f, *l.grid, *l.block, l.shared_bytes, stream, argv, None),
                    f"cuLaunchKernel({l.name}, grid {l.grid}, block {l.block}, {l.shared_bytes} B shared)")
    # PyTorch's allocator hands freed memory out again in stream order: the
    # workspaces may go now, the next user of their memory runs after these
    # launches on the same stream.
    del scratch
