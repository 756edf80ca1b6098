"""test_backend.py — tuned as a torch.compile backend and in torch.export
(PyTorch 2.4+; skipped on older torch): a transformer block written as
ordinary PyTorch code (shape unpacking, chunk: what torch.fx cannot trace)
compiled with Inductor and equal to eager, each op's fate in the report with
its reason and the race against torch, a kernel never used where torch is
faster, graphs that need autograd left alone, and an exported program saved
and run in another process from the kernel cache alone."""

import logging
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not (hasattr(torch, "library") and hasattr(torch.library, "register_fake")):
    pytest.skip(f"torch {torch.__version__}: the torch.compile backend needs PyTorch 2.4+ (the python-torch2 test "
                "runs it in build/torch-venv)", allow_module_level=True)

from conftest import ROOT  # noqa: E402
import tuned.torch  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "examples"))
from torch_models import Block  # noqa: E402  (ordinary PyTorch code: shape unpacking, chunk)

nn, F = torch.nn, torch.nn.functional


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch (Dynamo marks sizes dynamic after it saw two)."""
    torch._dynamo.reset()
    yield


@pytest.fixture(scope="module")
def db(tmp_path_factory, kernel_cache):
    return str(tmp_path_factory.mktemp("backend") / "records.db")


def test_block_compiles_with_inductor(db, caplog):
    torch.manual_seed(0)
    model, x = Block(d=32, heads=2).eval(), torch.randn(2, 8, 32)
    b = tuned.torch.backend(target="cpu", trials=3, db=db)
    with caplog.at_level(logging.INFO, logger="tuned.torch"), torch.no_grad():
        y = torch.compile(model, backend=b)(x)
        want = model(x)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-4)
    kinds = {r.kind for r in b.report}
    assert {"linear", "layer_norm", "softmax", "bmm"} <= kinds, str(b.report)
    fc1 = [r for r in b.report if r.name.startswith("linear_bias_gelu")]
    assert len(fc1) == 1, str(b.report)  # fc1's bias and GELU fused into its task
    for r in b.report:
        if r.status in ("tuned", "slower"):
            assert r.tuned_secs > 0 and r.torch_secs > 0 and r.max_error is not None, r
            assert (r.status == "tuned") == (r.torch_secs / r.tuned_secs > 1.0), r
        else:
            assert r.detail, r  # every op left to Inductor says why
    assert "left to Inductor" in caplog.text or "runs tuned" in caplog.text
    assert b.graphs and sum(str(g.graph).count("tuned.kernel") for g in b.graphs) == \
        sum(r.status == "tuned" for r in b.report)


def test_never_slower_leaves_everything_to_torch(db):
    """A kernel must beat torch's time on the same inputs: asked for a 1e9x
    speed-up, none does, and the graph keeps torch's ops."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).eval()
    x = torch.randn(8, 32)
    b = tuned.torch.backend(target="cpu", trials=2, db=db, inductor=False, min_speedup=1e9)
    with torch.no_grad():
        y = torch.compile(model, backend=b)(x)
    torch.testing.assert_close(y, model(x))
    linears = [r for r in b.report if r.kind == "linear"]
    assert [r.status for r in linears] == ["slower", "slower"], str(b.report)
    assert all("against torch's" in r.detail for r in linears)
    assert "tuned.kernel" not in str(b.graphs[0].graph)


def test_autograd_graph_left_alone(db):
    model = nn.Sequential(nn.Linear(16, 16)).train()
    b = tuned.torch.backend(target="cpu", trials=2, db=db, inductor=False)
    y = torch.compile(model, backend=b)(torch.randn(4, 16, requires_grad=True))
    y.sum().backward()
    assert model[0].weight.grad is not None
    assert b.report[0].status == "torch" and "autograd" in b.report[0].detail


def test_dynamic_shapes_left_alone(db):
    """A graph with symbolic sizes is for many shapes, a kernel for one."""
    model = nn.Sequential(nn.Linear(16, 16)).eval()
    b = tuned.torch.backend(target="cpu", trials=2, db=db, inductor=False)
    f = torch.compile(model, backend=b, dynamic=True)
    with torch.no_grad():
        for n in (3, 5):
            x = torch.randn(n, 16)
            torch.testing.assert_close(f(x), model(x))
    assert b.report[0].status == "torch" and "dynamic shapes" in b.report[0].detail, str(b.report)


def test_export_save_reload_in_another_process(db, tmp_path):
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16), nn.Softmax(dim=-1)).eval()
    x = torch.randn(8, 32)
    ep = tuned.torch.export(model, (x,), trials=2, db=db, min_speedup=0.0)  # every kernel, to test them all
    statuses = {r.name: r.status for r in ep.tuned_report}
    assert list(statuses.values()).count("tuned") == 3, str(ep.tuned_report)
    assert str(ep.graph).count("tuned.kernel") == 3
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=1e-4, atol=1e-5)
    path = str(tmp_path / "model.pt2")
    torch.export.save(ep, path)
    torch.save({"x": x, "y": model(x).detach()}, str(tmp_path / "io.pt"))
    code = ("import sys, torch, tuned.torch; ep = torch.export.load(sys.argv[1]); io = torch.load(sys.argv[2]); "
            "torch.testing.assert_close(ep.module()(io['x']), io['y'], rtol=1e-4, atol=1e-5); print('ok')")
    env = {k: v for k, v in os.environ.items() if k not in ("TUNED_SOCKET",)}
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    out = subprocess.run([sys.executable, "-c", code, path, str(tmp_path / "io.pt")], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_optimized_module_pickles(db, tmp_path):
    """optimize's module (TunedOp submodules) saves with torch.save and loads
    back, its kernels from the kernel cache."""
    from tuned.torch_backend import Backend
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(16, 24), nn.ReLU()).eval()
    x = torch.randn(4, 16)
    plan = tuned.torch.extract(model, (x,))
    fn = Backend(trials=2, db=db).kernel(plan.tasks[0])
    op = tuned.torch.TunedOp(plan.tasks[0], fn)
    path = str(tmp_path / "op.pt")
    torch.save(op, path)
    back = torch.load(path, weights_only=False)
    assert back.cache_key == fn.cache_key and back._fn is None
    with torch.no_grad():
        torch.testing.assert_close(back(x, model[0].weight, model[0].bias), model(x), rtol=1e-4, atol=1e-5)
