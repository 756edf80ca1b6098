"""conftest.py — the fixtures of the Python package's tests: a real tuned
daemon (--target cpu) on a temporary socket and database, and a small
matmul tuned on it once for the session."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # the package of this source tree

import tuned  # noqa: E402

MATMUL = os.path.join(ROOT, "workloads", "matmul.tw")
SHAPE = {"M": 32, "N": 48, "K": 40}  # not square: a transposed operand shows


def _daemon_binary():
    """$TUNED, else the daemon of the build libtuned was loaded from, else tuned on PATH."""
    if os.environ.get("TUNED"):
        return os.environ["TUNED"]
    build = os.path.dirname(os.path.dirname(tuned.lib_path()))
    for path in (os.path.join(build, "daemon", "tuned"), shutil.which("tuned")):
        if path and os.access(path, os.X_OK):
            return path
    pytest.fail("no tuned daemon to test with: set TUNED=/path/to/build/daemon/tuned")


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    """A running `tuned --target cpu`: yields its socket path."""
    d = tmp_path_factory.mktemp("daemon")
    sock, log = str(d / "tuned.sock"), d / "tuned.log"
    env = dict(os.environ, TUNED_CONFIG_DIR=os.environ.get("TUNED_CONFIG_DIR", ""))
    with open(log, "w") as err:
        proc = subprocess.Popen([_daemon_binary(), "--target", "cpu", "--socket", sock, "--db", str(d / "tuned.db")],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        for _ in range(400):
            if proc.poll() is not None:
                pytest.fail(f"tuned exited at start-up ({proc.returncode}):\n{log.read_text()}")
            try:
                tuned.Client(sock).close()
                break
            except tuned.ConnectError:
                time.sleep(0.05)
        else:
            pytest.fail(f"tuned did not answer on {sock} within 20 s:\n{log.read_text()}")
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory):
    """Compiled kernels go to a fresh directory: every session compiles."""
    d = str(tmp_path_factory.mktemp("kernels"))
    os.environ["TUNED_CACHE_DIR"] = d
    return d


@pytest.fixture(scope="session")
def tuned_matmul(daemon, kernel_cache):
    """matmul 32x48x40 tuned for 8 trials: (socket, final Job)."""
    with tuned.Client(daemon) as c:
        job = c.submit(MATMUL, trials=8, seed=1, **SHAPE)
        final = c.watch(job, progress=False, timeout=300)
    assert final.state == "done", final
    return daemon, final
