"""test_local.py — tuned without a daemon: a matmul tuned in this process
(libtuned_local) into a database file, its kernel served from that file
(tuned.load(db=...), `tunectl kernel --db`) and from the kernel cache in
another process, the unscheduled program served when the best record is
slower than it, and the errors (no kernel, bad workload, refused target)."""

import json
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from conftest import MATMUL, ROOT
import tuned

SMALL = {"M": 24, "N": 16, "K": 20}


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory, kernel_cache):
    """matmul 24x16x20 tuned in this process for 6 trials: (db path, TuneResult)."""
    db = str(tmp_path_factory.mktemp("local") / "records.db")
    seen = []
    r = tuned.tune(MATMUL, "cpu", trials=6, seed=1, db=db, progress=seen.append, **SMALL)
    assert seen and seen[-1]["trials_done"] == 6 and seen[-1]["trials_total"] == 6
    return db, r


def operands():
    rng = np.random.default_rng(3)
    return rng.uniform(-1, 1, (24, 20)).astype(np.float32), rng.uniform(-1, 1, (20, 16)).astype(np.float32)


def test_tune_in_process(tuned_db):
    db, r = tuned_db
    assert r.trials == 6 and r.target == "cpu" and r.db == db and len(r.workload) == 64
    assert r.best_median_secs > 0 and r.best_record > 0 and r.baseline_median_secs > 0
    assert r.status_counts["ok"] >= 1 and r.speedup == pytest.approx(r.baseline_median_secs / r.best_median_secs)
    assert "matmul on cpu: 6 trials, best" in str(r)


def test_load_from_db(tuned_db):
    db, r = tuned_db
    mm = tuned.load(MATMUL, db=db, **SMALL)
    assert mm.kernel.workload == r.workload and mm.kernel.target == "cpu"
    a, b = operands()
    np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-5, atol=1e-5)
    # by hash too, and the same kernel as tuned.local.kernel returns
    k = tuned.local.kernel(r.workload, db=db)
    assert k.source == mm.kernel.source and k.record == mm.kernel.record


def test_kernel_from_cache_in_another_process(tuned_db):
    """A fresh process with no daemon and no database gets the kernel by its cache key."""
    db, _ = tuned_db
    mm = tuned.load(MATMUL, db=db, **SMALL)
    a, b = operands()
    code = ("import sys, numpy as np, tuned; f = tuned.from_cache(sys.argv[1]); "
            "a = np.load(sys.argv[2]); b = np.load(sys.argv[3]); print(float(np.abs(f(a, b) - a @ b).max()))")
    d = os.path.dirname(db)
    np.save(os.path.join(d, "a.npy"), a)
    np.save(os.path.join(d, "b.npy"), b)
    env = {k: v for k, v in os.environ.items() if k not in ("TUNED_SOCKET",)}
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    out = subprocess.run([sys.executable, "-c", code, mm.cache_key, os.path.join(d, "a.npy"),
                          os.path.join(d, "b.npy")], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 1e-4
    with pytest.raises(tuned.NoKernel, match="no kernel 0123456789abcdef0123456789abcdef in the kernel cache"):
        tuned.from_cache("0123456789abcdef0123456789abcdef")
    with pytest.raises(tuned.ArgumentError, match="not a kernel cache key"):
        tuned.from_cache("../etc/passwd")


def test_tunectl_kernel_db(tuned_db):
    """`tunectl kernel --db` serves the same kernel without a daemon."""
    db, r = tuned_db
    tunectl = os.environ.get("TUNECTL") or os.path.join(os.path.dirname(os.path.dirname(tuned.lib_path())),
                                                        "client", "tunectl")
    env = dict(os.environ, TUNED_SOCKET="/nonexistent/tuned.sock")
    sets = [x for k, v in SMALL.items() for x in ("--set", f"{k}={v}")]
    out = subprocess.run([tunectl, "kernel", MATMUL, *sets, "--db", db, "--emit", "json"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    k = json.loads(out.stdout)
    assert k["workload"] == r.workload and k["source"] == tuned.local.kernel(MATMUL, db=db, **SMALL).source
    out = subprocess.run([tunectl, "kernel", r.workload, "--db", db, "--emit", "source"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0 and "tuned_entry_matmul" in out.stdout, out.stderr
    out = subprocess.run([tunectl, "kernel", "matmul", "--db", db, "--emit", "source"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 1 and "with --db, name the workload by its FILE or HASH" in out.stderr
    out = subprocess.run([tunectl, "kernel", MATMUL, "--db", db, "--fallback", "nearest", "--emit", "source"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and "--fallback nearest needs the daemon" in out.stderr


def test_never_serves_a_best_slower_than_unscheduled(tuned_db, tmp_path):
    """With the unscheduled program's recorded time below the best record's,
    the unscheduled program is served, and says so."""
    db, r = tuned_db
    copy = str(tmp_path / "copy.db")
    with sqlite3.connect(db) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    with sqlite3.connect(copy) as c:
        assert c.execute("UPDATE baselines SET median_secs = 1e-9").rowcount == 1
    k = tuned.local.kernel(MATMUL, db=copy, **SMALL)
    assert k.record == 0 and k.trace is None and k.median_secs == pytest.approx(1e-9)
    assert k.unscheduled["best_record"] == r.best_record and k.unscheduled["median_secs"] == pytest.approx(1e-9)
    mm = tuned.load(MATMUL, db=copy, **SMALL)
    a, b = operands()
    np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-5, atol=1e-5)  # the unscheduled program, right
    tunectl = os.environ.get("TUNECTL") or os.path.join(os.path.dirname(os.path.dirname(tuned.lib_path())),
                                                        "client", "tunectl")
    out = subprocess.run([tunectl, "kernel", r.workload, "--db", copy, "--emit", "source"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "the unscheduled program (" in out.stderr and "is slower" in out.stderr


def test_local_errors(tuned_db, tmp_path):
    db, _ = tuned_db
    with pytest.raises(tuned.NoKernel, match="was never tuned"):
        tuned.local.kernel(MATMUL, db=db, M=8, N=8, K=8)
    with pytest.raises(tuned.NoKernel, match="does not exist"):
        tuned.local.kernel(MATMUL, db=str(tmp_path / "none.db"), **SMALL)
    with pytest.raises(tuned.BadWorkload, match=r"workload.tw:2:17: '\[' is never closed"):
        tuned.tune("param M = 4\ninput A: float32[M\n", db=str(tmp_path / "x.db"), trials=1)
    with pytest.raises(tuned.Error, match="unknown target"):
        tuned.tune(MATMUL, "nosuch", trials=1, db=str(tmp_path / "x.db"), **SMALL)
    with pytest.raises(tuned.Error, match="trials must be 1 to 1000000"):
        tuned.tune(MATMUL, trials=0, db=str(tmp_path / "x.db"), **SMALL)
    with pytest.raises(ValueError, match="not its hash"):
        tuned.tune("0123456789abcdef" * 4, db=str(tmp_path / "x.db"))
