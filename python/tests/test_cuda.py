"""test_cuda.py — tuned.load of a CUDA kernel (tuned.cuda): the H100 matmul
record shipped in configs/pretuned, imported into the test daemon (which
replays and checks it, and compiles its CUBIN with NVRTC), comes back as a
CudaFunction; every argument is checked before anything reaches the
driver.  With a GPU it runs against torch.matmul; without an NVIDIA driver
a launch says so."""

import ctypes
import json
import os

import numpy as np
import pytest

import tuned
from tuned import cuda
from tuned.kernel import CudaFunction

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MATMUL_1024 = "416e69d78a53f8fafba68b976c1c5060cba44a5e31c75d9edab119ecb2868c5d"  # matmul 1024^3 fp32, among the pretuned H100 records


def has_libcuda():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def h100_matmul(daemon):
    with open(os.path.join(ROOT, "configs", "pretuned", "nvidia-h100.jsonl")) as f:
        lines = f.read()
    assert MATMUL_1024 in {json.loads(l)["workload"]["hash"] for l in lines.splitlines()}
    with tuned.Client(daemon) as c:
        c.call("db.import", jsonl=lines)
        backend = next(b for b in c.call("server.info")["backends"] if b["name"] == "cuda")
        if not backend["available"] and "NVRTC" not in backend["detail"]:  # NVRTC compiles without a GPU
            pytest.skip(f"this tuned cannot compile CUDA: {backend['detail']}")
    return tuned.load(MATMUL_1024, "nvidia/h100", socket=daemon)


def test_loads_as_cuda_function(h100_matmul):
    f = h100_matmul
    assert isinstance(f, CudaFunction)
    k = f.kernel
    assert (k.language, k.target) == ("cuda", "nvidia/h100")
    assert k.cubin[:4] == b"\x7fELF"  # NVRTC's CUBIN, for the driver's cuModuleLoadData
    assert [p.name for p in f.inputs] == ["A", "B"] and [p.name for p in f.outputs] == ["C"]
    assert all(l.name in k.source for l in k.launches)
    assert all(g >= 1 for l in k.launches for g in l.grid + l.block)


def test_numpy_refused(h100_matmul):
    a = np.ones((1024, 1024), np.float32)
    with pytest.raises(tuned.ArgumentError, match=r"argument A \(input 1 of 2\): expected a torch CUDA tensor of "
                                                  r"float32\[1024, 1024\] \(the kernel is for target nvidia/h100\), "
                                                  r"got ndarray \(torch.from_numpy\(a\).cuda\(\)\)"):
        h100_matmul(a, a)


def test_tensor_checks(h100_matmul):
    torch = pytest.importorskip("torch")
    f = h100_matmul
    cpu = torch.ones(1024, 1024)
    with pytest.raises(tuned.ArgumentError, match=r"argument A \(input 1 of 2\): on device cpu, expected a CUDA "
                                                  r"tensor \(the kernel is for target nvidia/h100\); move it with "
                                                  r"\.cuda\(\)"):
        f(cpu, cpu)
    meta = torch.empty(1024, 1024, device="meta")
    with pytest.raises(tuned.ArgumentError, match="on device meta, expected a CUDA tensor"):
        f(meta, meta)
    with pytest.raises(tuned.ArgumentError, match="argument B: given twice|takes 2 inputs"):
        f(cpu, cpu, cpu, cpu)
    with pytest.raises(tuned.ArgumentError, match=r"expected a torch CUDA tensor of float32\[1024, 1024\] .*got list$"):
        f([1.0], cpu)


def test_packed_kernels_refused():
    k = tuned.Kernel(record=7, workload="0" * 16, name="dense", target="nvidia/h100", language="cuda", entry="dense",
                     source="", median_secs=1e-3, gflops=1.0, launches=[], ptx=None, cubin=b"\x7fELF", launch={},
                     trace=None,
                     params=[tuned.Param("W", "float32", (4, 4), "input", 16, 4, "", ""),
                             tuned.Param("W_packed", "float32", (16,), "packed", 16, 4, "W", "dense_pack_W")])
    with pytest.raises(tuned.Error, match="record 7 has packed parameters, which tuned.load does not launch"):
        CudaFunction(k)
    k.params, k.cubin = k.params[:1], None
    with pytest.raises(tuned.Error, match="record 7 came without its CUBIN"):
        CudaFunction(k)
    k.cubin = b"\x7fELF"
    k.launches = [tuned.Launch("dense_kernel0", (132, 1, 1), (384, 1, 1), 0, 0,
                               [{"name": "map_a", "param": 0, "dims": [4, 4], "stride_bytes": 8, "box": [4, 4],
                                 "swizzle": 128}])]
    with pytest.raises(tuned.Error, match=r"record 7 takes TMA tensor maps \(dense_kernel0\), which tuned.load "
                                          r"does not encode yet"):
        CudaFunction(k)


@pytest.mark.skipif(has_libcuda(), reason="an NVIDIA driver is installed here")
def test_no_driver():
    with pytest.raises(tuned.Error, match=r"CUDA kernels run through the NVIDIA driver, and libcuda.so.1 cannot be "
                                          r"loaded .*: no NVIDIA driver on this machine"):
        cuda.driver()


def test_runs_on_the_gpu(h100_matmul):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.rand(1024, 1024, device="cuda", generator=g) - 0.5
    b = torch.rand(1024, 1024, device="cuda", generator=g) - 0.5
    c = h100_matmul(a, b)
    assert c.device == a.device and c.shape == (1024, 1024)
    ref = torch.matmul(a.double(), b.double())
    assert (torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)).item() < 1e-5
    out = torch.empty(1024, 1024, device="cuda")
    assert h100_matmul(a, b, out) is out
    assert torch.equal(out, c)
