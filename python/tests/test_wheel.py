"""test_wheel.py — the package as a user installs it: `pip install ./python`
into a fresh venv (the build backend packs this build's libtuned,
libtuned_local, tunectl, tuned, tuned-worker and the targets), then, with no
TUNED_* variable set and outside the source tree: import tuned, tune a
matmul in-process, run its kernel from the database file on numpy arrays,
the packaged tunectl; and where PyTorch 2 is there, torch.compile a model
with the tuned backend, export it, save it and reload it in a new process."""

import os
import subprocess
import sys
import sysconfig

import pytest

from conftest import ROOT
import tuned

BUILD = os.environ.get("TUNED_BUILD_DIR") or os.path.dirname(os.path.dirname(tuned.lib_path()))


def _torch2():
    try:
        import torch
    except ImportError:
        return False
    return hasattr(torch, "library") and hasattr(torch.library, "register_fake")


USE = r'''
import os, sys, numpy as np, tuned
assert not [k for k in os.environ if k.startswith("TUNED_")], "a TUNED_ variable is set"
lib = tuned.lib_path()
assert lib.startswith(sys.prefix) and "/tuned/_native/lib/" in lib, lib
work = sys.argv[1]
mm_tw = os.path.join(work, "mm.tw")
with open(mm_tw, "w") as f:
    f.write("param M = 16, N = 12, K = 8\ninput  A: float32[M, K]\ninput  B: float32[K, N]\n"
            "output C: float32[M, N]\nC[i, j] = sum(k < K: A[i, k] * B[k, j])\n")
r = tuned.tune(mm_tw, "cpu", trials=3, db=os.path.join(work, "t.db"))
assert r.best_median_secs > 0, r
mm = tuned.load(mm_tw, db=r.db)
a, b = np.random.rand(16, 8).astype(np.float32), np.random.rand(8, 12).astype(np.float32)
assert np.abs(mm(a, b) - a @ b).max() < 1e-4
print("OK", r.trials, lib)
'''

TORCH = r'''
import os, sys, torch, tuned, tuned.torch
work = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
x = torch.randn(8, 32)
b = tuned.torch.backend(target="cpu", trials=2, db=os.path.join(work, "t.db"), inductor=False, min_speedup=0.0)
with torch.no_grad():
    y = torch.compile(model, backend=b)(x)
assert torch.allclose(y, model(x), atol=1e-4), (y - model(x)).abs().max()
assert [r.status for r in b.report if r.kind == "linear"] == ["tuned", "tuned"], str(b.report)
ep = tuned.torch.export(model, (x,), trials=2, db=os.path.join(work, "t.db"), min_speedup=0.0)
assert "tuned.kernel" in str(ep.graph), ep.graph
torch.export.save(ep, os.path.join(work, "m.pt2"))
torch.save(x, os.path.join(work, "x.pt"))
torch.save(model(x), os.path.join(work, "y.pt"))
print("OK torch")
'''

RELOAD = r'''
import os, sys, torch, tuned.torch
work = sys.argv[1]
ep = torch.export.load(os.path.join(work, "m.pt2"))
x, want = torch.load(os.path.join(work, "x.pt")), torch.load(os.path.join(work, "y.pt"))
got = ep.module()(x)
assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
print("OK reload")
'''


def test_pip_install_in_a_fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    torch2 = _torch2()
    # PyTorch 2 (this venv's) is made visible by a .pth file; otherwise the system's numpy
    cmd = [sys.executable, "-m", "venv", str(venv)] + ([] if torch2 else ["--system-site-packages"])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"no venv here ({r.stderr.strip()[-200:]}; Debian: apt-get install python3-venv)")
    py = str(venv / "bin" / "python")
    if torch2:
        site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(site, "torch2.pth"), "w") as f:
            f.write(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNED_") and k not in ("PYTHONPATH",)}
    env["HOME"] = str(tmp_path / "home")  # the kernel cache and default database start empty
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "-q",
                        "--config-settings", f"builddir={BUILD}", os.path.join(ROOT, "python")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    work = tmp_path / "work"
    work.mkdir()
    for script in [USE] + ([TORCH, RELOAD] if torch2 else []):
        out = subprocess.run([py, "-c", script, str(work)], capture_output=True, text=True, env=env,
                             cwd=str(work), timeout=900)
        assert out.returncode == 0 and "OK" in out.stdout, out.stdout + out.stderr
    tunectl = venv / "bin" / "tunectl"
    out = subprocess.run([str(tunectl), "kernel", str(work / "mm.tw"), "--db", str(work / "t.db"), "--emit",
                          "source"], capture_output=True, text=True, env=env, cwd=str(work), timeout=120)
    assert out.returncode == 0 and "tuned_entry_mm" in out.stdout, out.stderr
