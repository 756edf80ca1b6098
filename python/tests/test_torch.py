"""test_torch.py — tuned.load on torch CPU tensors through DLPack: results
against torch's matmul, outputs allocated as torch tensors, and the checks
(dtype, layout, autograd, devices DLPack cannot name).  Skipped, with the
reason, where torch is not installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch; PyPI: torch)")

from conftest import MATMUL, SHAPE  # noqa: E402
import tuned  # noqa: E402


@pytest.fixture(scope="module")
def mm(tuned_matmul):
    sock, _ = tuned_matmul
    return tuned.load(MATMUL, socket=sock, **SHAPE)


def operands(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(32, 40, generator=g) * 2 - 1, torch.rand(40, 48, generator=g) * 2 - 1


def test_matmul_on_torch(mm):
    a, b = operands()
    c = mm(a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and tuple(c.shape) == (32, 48)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    out = torch.full((32, 48), float("nan"))
    assert mm(a, b, out) is out
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)
    # a view at an offset into a larger tensor is fine when it is dense
    big = torch.zeros(10 + 32 * 40)
    big[10:] = a.reshape(-1)
    torch.testing.assert_close(mm(big[10:].view(32, 40), b), a @ b, rtol=1e-5, atol=1e-5)
    # torch and numpy mixed: the output follows the torch input
    assert isinstance(mm(a.numpy(), b), torch.Tensor)


@pytest.mark.parametrize("make, message", [
    (lambda a, b: (a.double(), b), "argument A (input 1 of 2): expected dtype float32, got float64"),
    (lambda a, b: (a, b.t().contiguous().t()), "argument B (input 2 of 2): not C-contiguous"),
    (lambda a, b: (a, torch.zeros(48, 40)), "argument B (input 2 of 2): expected shape (40, 48), got (48, 40)"),
    (lambda a, b: (a.requires_grad_(), b), "argument A (input 1 of 2): requires grad; tuned kernels do not "
                                           "record autograd: pass A.detach()"),
    (lambda a, b: (a, torch.empty(40, 48, device="meta")), "argument B (input 2 of 2): its device cannot be "
                                                           "exported through DLPack"),
    (lambda a, b: (a, b, torch.zeros(32, 48, dtype=torch.float16)),
     "argument C (output 1 of 1): expected dtype float32, got float16"),
])
def test_torch_argument_checks(mm, make, message):
    a, b = operands()
    with pytest.raises(tuned.ArgumentError) as e:
        mm(*make(a, b))
    assert message in str(e.value)


def test_matches_numpy_path(mm):
    a, b = operands(3)
    np.testing.assert_array_equal(mm(a, b).numpy(), mm(a.numpy(), b.numpy()))
