"""test_load.py — tuned.load: the tuned matmul run on numpy arrays against
numpy's result, outputs allocated or given, and every argument check (shape,
dtype, layout, count, names, aliasing) with its message."""

import os

import numpy as np
import pytest

from conftest import MATMUL, SHAPE
import tuned


@pytest.fixture(scope="module")
def mm(tuned_matmul):
    sock, job = tuned_matmul
    f = tuned.load(MATMUL, socket=sock, **SHAPE)
    assert f.kernel.record == job.best_record
    return f


def operands(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (32, 40)).astype(np.float32), rng.uniform(-1, 1, (40, 48)).astype(np.float32))


def test_matmul_on_numpy(mm):
    a, b = operands()
    c = mm(a, b)
    assert isinstance(c, np.ndarray) and c.shape == (32, 48) and c.dtype == np.float32
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    out = np.full((32, 48), np.nan, dtype=np.float32)
    assert mm(a, b, out) is out  # written in place
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    a2, b2 = operands(1)
    np.testing.assert_allclose(mm(B=b2, A=a2), a2 @ b2, rtol=1e-5, atol=1e-5)  # by name
    assert os.path.dirname(mm.path) == os.environ["TUNED_CACHE_DIR"]
    assert "matmul(A: float32[32, 40], B: float32[40, 48], C: float32[32, 48]) on cpu" in repr(mm)


def test_load_by_hash_and_with_a_client(tuned_matmul):
    sock, job = tuned_matmul
    with tuned.Client(sock) as c:
        f = tuned.load(job.workload, client=c)
        assert c.info()  # the client stays open
    a, b = operands(2)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("args, message", [
    (lambda a, b: (a, b.T.copy()), "matmul: argument B (input 2 of 2): expected shape (40, 48), got (48, 40)"),
    (lambda a, b: (a.astype(np.float64), b), "matmul: argument A (input 1 of 2): expected dtype float32, got float64"),
    (lambda a, b: (a, np.asfortranarray(b)), "matmul: argument B (input 2 of 2): not C-contiguous"),
    (lambda a, b: (np.zeros((32, 80), np.float32)[:, ::2], b), "argument A (input 1 of 2): not C-contiguous"),
    (lambda a, b: (a, b, np.zeros((48, 32), np.float32)),
     "matmul: argument C (output 1 of 1): expected shape (32, 48), got (48, 32)"),
    (lambda a, b: (a,), "matmul: missing input B"),
    (lambda a, b: (a, b, np.zeros((32, 48), np.float32), a), "matmul: takes 2 inputs (A, B) and optionally 1 "
                                                              "outputs (C), got 4 arguments"),
    (lambda a, b: (a.tolist(), b), "argument A (input 1 of 2): expected a numpy array or a DLPack tensor "
                                   "(torch.Tensor) of float32[32, 40], got list"),
])
def test_argument_checks(mm, args, message):
    a, b = operands()
    with pytest.raises(tuned.ArgumentError) as e:
        mm(*args(a, b))
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_argument_checks_outputs(mm):
    a, b = operands()
    ro = np.zeros((32, 48), np.float32)
    ro.flags.writeable = False
    with pytest.raises(tuned.ArgumentError, match=r"argument C \(output 1 of 1\): read-only array"):
        mm(a, b, ro)
    whole = np.zeros(32 * 48 + 40 * 48, np.float32)  # C overlaps B
    with pytest.raises(tuned.ArgumentError, match="argument C .* shares memory with argument B"):
        mm(a, whole[32 * 48 - 40:][:40 * 48].reshape(40, 48), whole[:32 * 48].reshape(32, 48))
    with pytest.raises(tuned.ArgumentError, match="matmul: no parameter D"):
        mm(a, b, D=1)
    with pytest.raises(tuned.ArgumentError, match="matmul: argument A given twice"):
        mm(a, b, A=a)


class _OnGpu:
    """A DLPack producer on another device (what a CUDA tensor reports)."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("must not be exported: the device check comes first")


def test_device_check(mm):
    a, b = operands()
    with pytest.raises(tuned.ArgumentError) as e:
        mm(a, _OnGpu())
    assert "argument B (input 2 of 2): on device cuda:0, expected cpu (the kernel is for target cpu)" in str(e.value)


def test_no_record(daemon):
    with pytest.raises(tuned.NoKernel, match="no tuned kernel yet"):
        tuned.load(MATMUL, socket=daemon, M=16, N=16, K=16)


def test_build_error(kernel_cache, tmp_path):
    with pytest.raises(tuned.BuildError) as e:
        tuned.build_c("int broken(void) { return }\n")
    assert "failed (status 1)" in str(e.value) and "error" in str(e.value)
    with pytest.raises(tuned.BuildError, match="C compiler 'no-such-cc' not found"):
        tuned.build_c("int ok(void) { return 0; }\n", cc="no-such-cc")
