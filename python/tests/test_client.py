"""test_client.py — tuned.Client against a real daemon: submit and watch
(progress lines and bar), best, records, kernel, the workload hash, and the
daemon's errors as tuned.Error subclasses."""

import io
import os
import re
import subprocess
import sys

import pytest

from conftest import MATMUL, SHAPE
import tuned


def test_submit_watch_best_records_kernel(tuned_matmul):
    sock, job = tuned_matmul
    assert job.trials == 8 and job.trials_done == 8
    assert job.name == "matmul" and job.target == "cpu"
    assert job.best_record and job.best_gflops > 0 and job.best_median_secs > 0
    assert sum(job.failures.values()) == 0 and job.error is None
    with tuned.Client(sock) as c:
        assert c.socket == sock
        h = c.workload_hash(MATMUL, **SHAPE)
        assert h == job.workload and c.check(MATMUL, **SHAPE)["workload"] == h
        assert c.workload_hash(MATMUL, M=32, N=48, K=41) != h
        with open(MATMUL) as f:  # the text gives the same hash as the file
            assert c.workload_hash(f.read(), **SHAPE) == h
        best = c.best(MATMUL, k=3, **SHAPE)
        assert 1 <= len(best) <= 3
        assert best[0]["id"] == job.best_record and best[0]["verified"] is True
        assert [r["median_secs"] for r in best] == sorted(r["median_secs"] for r in best)
        assert len(h) == 64
        assert c.best(h, k=1)[0]["id"] == job.best_record  # by hash
        assert c.best(h[:32], k=1)[0]["workload"] == h  # by the 128 bits a table shows, either case
        assert c.kernel(h[:40].upper()).record == job.best_record
        records = c.records(MATMUL, **SHAPE)
        assert len(records) >= 8 and job.best_record in {r["id"] for r in records}
        assert all(r["workload"] == h for r in records)
        assert c.status(job.id).best_record == job.best_record
        k = c.kernel(MATMUL, **SHAPE)
        assert k.record == job.best_record and k.workload == h and k.target == "cpu"
        assert k.language == "c" and k.entry == "matmul" and "tuned_entry_matmul" in k.source
        assert [(p.name, p.shape, p.role, p.dtype) for p in k.params] == [
            ("A", (32, 40), "input", "float32"), ("B", (40, 48), "input", "float32"),
            ("C", (32, 48), "output", "float32")]
        assert k.params[2].elements == 32 * 48 and k.params[2].elem_bytes == 4
        assert len(k.launches) == 1 and k.launches[0].name == "matmul"
        assert k.cubin is None and k.ptx is None and k.trace is not None
        assert k.launch["entry"] == "matmul"
        assert c.kernel(h).record == k.record and k.fallback is None
        # a shape never tuned: the nearest tuned matmul's record, verified there
        with pytest.raises(tuned.Error):
            c.kernel(MATMUL, M=24, N=40, K=48)
        near = c.kernel(MATMUL, fallback="nearest", M=24, N=40, K=48)
        assert near.fallback["verified"] is True and near.fallback["workload"] != near.workload
        assert near.params[2].shape == (24, 40) and near.median_secs > 0
        with pytest.raises(ValueError, match="nearest"):
            c.kernel(MATMUL, fallback="closest", **SHAPE)
        assert any(j["job"] == job.id for j in c.jobs())
        assert c.info()["target"] == "cpu"


def test_watch_plain_lines(tuned_matmul, daemon):
    with tuned.Client(daemon) as c:
        job = c.submit("param N = 512\ninput A: float32[N]\noutput B: float32[N]\nB[i] = A[i] * 2.0\n",
                       trials=4, name="double", remeasure=0, baseline=False)
        out = io.StringIO()
        final = c.watch(job, file=out)
        assert final.state == "done" and final.name == "double"
        assert final.baseline_median_secs is None  # baseline=False reached the job
        lines = out.getvalue().splitlines()
        assert lines[-1] == str(final)
        # the space of this elementwise workload has fewer than 4 candidates
        assert re.match(rf"job {job}: done, {final.trials_done}/4 trials, best [0-9.]+ us \(", lines[-1])
        assert 1 <= final.trials_done <= 4
        assert f"GFLOP/s, record {final.best_record})" in lines[-1]
        assert "\r" not in out.getvalue()
        # a watch of a finished job answers at once with the same state
        again = io.StringIO()
        assert c.watch(job, file=again).best_record == final.best_record
        assert again.getvalue().splitlines() == [str(final)]
        seen = []
        c.watch(job, progress=seen.append)
        assert seen and seen[-1].state == "done"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_watch_bar_on_a_terminal(tuned_matmul):
    sock, job = tuned_matmul
    term = _Terminal()
    bar = tuned._progress.Progress(term, use_tqdm=False)
    with tuned.Client(sock) as c:
        c.watch(job.id, progress=bar)
    bar.close()
    text = term.getvalue()
    assert text.startswith(f"\rjob {job.id} [{'#' * 30}] 8/8 trials, done, best ") and text.endswith("\n")


def test_daemon_errors(daemon):
    with tuned.Client(daemon) as c:
        with pytest.raises(tuned.BadWorkload) as e:
            c.submit("input A: float32[Q]\n", name="bad")
        assert e.value.message.startswith("bad.tw:1:18: ") and e.value.rpc_code == -32002
        with pytest.raises(tuned.InvalidParams) as e:
            c.submit(MATMUL, target="no-such-target", **SHAPE)
        assert "no-such-target" in str(e.value) and "cpu" in str(e.value)
        with pytest.raises(tuned.InvalidParams, match='unknown target "h100"; did you mean "nvidia/h100"\\?'):
            c.kernel(MATMUL, target="h100", **SHAPE)
        with pytest.raises(tuned.NotFound) as e:
            c.status(987654)
        assert "no job 987654" in str(e.value)
        with pytest.raises(tuned.NotFound, match="no job 987654"):
            c.watch(987654, progress=False)
        with pytest.raises(tuned.BadWorkload) as e:
            c.workload_hash(MATMUL, Q=3)
        assert "Q" in str(e.value)
        with pytest.raises(tuned.Error, match="parameters are integers"):
            c.submit(MATMUL, M="64")
        with pytest.raises(tuned.Error,
                           match=r"no such file, and neither a workload hash \(32 to 64 hex digits\) nor workload text"):
            c.kernel("no/such/file.tw")
        with pytest.raises(tuned.DaemonError) as e:
            c.call("no.such.method")
        assert e.value.rpc_code == -32601
        with pytest.raises(tuned.NotFound):
            c.kernel("0123456789abcdef" * 4)
        with pytest.raises(tuned.Error, match="neither a workload hash"):
            c.kernel("0123456789abcdef")  # 64 bits are not a hash


def test_no_record(daemon):
    with tuned.Client(daemon) as c:
        with pytest.raises(tuned.NoKernel) as e:
            c.kernel(MATMUL, M=8, N=8, K=8)
        assert "no tuned kernel yet" in str(e.value) and e.value.rpc_code == -32004
        with pytest.raises(tuned.NotFound, match=r"no workload [0-9a-f]{64} in the database"):
            c.best(MATMUL, M=8, N=8, K=8)


def test_no_daemon(tmp_path):
    sock = str(tmp_path / "none.sock")
    with pytest.raises(tuned.ConnectError) as e:
        tuned.Client(sock)
    assert str(e.value) == f"cannot connect to {sock}: No such file or directory"
    assert e.value.errno == 2
    with pytest.raises(tuned.ConnectError):
        tuned.load(MATMUL, socket=sock, **SHAPE)


def test_library_not_found(tmp_path):
    """TUNED_LIB names the library; a wrong one is an error that says so."""
    env = dict(os.environ, TUNED_LIB=str(tmp_path / "libtuned.so"), PYTHONPATH=os.path.dirname(tuned.__path__[0]))
    r = subprocess.run([sys.executable, "-c", "import tuned; tuned.Client()"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 1
    assert "tuned._errors.LibraryNotFound: cannot find libtuned" in r.stderr
    assert f"{tmp_path}/libtuned.so ($TUNED_LIB): no such file" in r.stderr


def test_library_from_the_build_dir():
    """Without TUNED_LIB, a package in a source tree loads the newest libtuned of its build directories."""
    import glob
    root = os.path.dirname(os.path.dirname(tuned.__path__[0]))
    builds = sorted((f for f in glob.glob(os.path.join(root, "build*", "client", "libtuned.so"))
                     if os.path.exists(f) and not tuned._lib.sanitized(f)), key=os.path.getmtime)
    if not builds:
        pytest.skip(f"no build directory inside {root} (built out of tree)")
    env = {k: v for k, v in os.environ.items() if k != "TUNED_LIB"}
    env["PYTHONPATH"] = os.path.dirname(tuned.__path__[0])
    r = subprocess.run([sys.executable, "-c", "import tuned; print(tuned.lib_path())"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == builds[-1]
