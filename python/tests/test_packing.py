"""test_packing.py — a C kernel with a hoisted packing (a weight declared
`const`, packed by a function of its own) run through TunedFunction: the
source and launch configuration come from `tunectl emit` on a design space
that hoists the packing; the weight is packed once per address, again for
another weight or after repack(), and every result is numpy's."""

import json
import os
import subprocess

import numpy as np
import pytest

import tuned
from tuned.client import Kernel, Param
from tuned.kernel import _callable

DENSE = """param B = 12, IN = 24, OUT = 48
input  X: float32[B, IN]
input  W: float32[OUT, IN] const
input  bias: float32[OUT]
temp   D: float32[B, OUT]
output Y: float32[B, OUT]
D[b, o] = sum(k < IN: X[b, k] * W[o, k])
Y[b, o] = max(D[b, o] + bias[o], 0.0)
"""


def _tunectl():
    path = os.path.join(os.path.dirname(os.path.dirname(tuned.lib_path())), "client", "tunectl")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no tunectl beside libtuned ({path})")
    return path


@pytest.fixture(scope="module")
def dense(tmp_path_factory, kernel_cache):
    d = tmp_path_factory.mktemp("packing")
    wl, trace = d / "dense_const.tw", d / "trace.json"
    wl.write_text(DENSE)
    env = dict(os.environ, TUNED_CONFIG_DIR=os.environ.get("TUNED_CONFIG_DIR", ""))
    out = subprocess.run([_tunectl(), "space", str(wl), "--target", "cpu"], env=env, check=True,
                         capture_output=True, text=True).stdout.split("\n# space ")
    hoisted = [s for s in out if "(hoisted)" in s.split("\n", 1)[0]]
    if not hoisted:
        pytest.skip("no intrinsic fits this CPU (AVX2+FMA): no hoisted packing space")
    trace.write_text(hoisted[0].split("\n", 1)[1])

    def emit(kind):
        return subprocess.run([_tunectl(), "emit", str(wl), "--target", "cpu", "--trace", str(trace),
                               "--emit", kind], env=env, check=True, capture_output=True, text=True).stdout
    launch = json.loads(emit("launch"))
    params = [Param(p["name"], p["dtype"], tuple(p["shape"]), p["role"], p["elements"], 4, p.get("packs"),
                    p.get("pack_function")) for p in launch["params"]]
    k = Kernel(record=0, workload="", name="dense_const", target="cpu", language="c", entry=launch["entry"],
               source=emit("c"), median_secs=0.0, gflops=0.0, launches=[], params=params, ptx=None, cubin=None,
               launch=launch, trace=None)
    return _callable(k)


def layer(x, w, b):
    return np.maximum(x @ w.T + b, 0)


def test_packed_once_per_weight(dense):
    assert [p.name for p in dense.packed] == ["W_local"]
    p = dense.packed[0]
    assert (p.packs, p.pack_function, p.shape) == ("W", "dense_const_pack_W", (24, 48))
    assert p.elements == 24 * 80  # rows of 48 padded to 64 n + 16
    rng = np.random.default_rng(0)
    x, w, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((12, 24), (48, 24), (48,)))
    np.testing.assert_allclose(dense(x, w, b), layer(x, w, b), rtol=1e-5, atol=1e-5)
    copy = dense._packs["W_local"][1]
    x2 = rng.uniform(-1, 1, (12, 24)).astype(np.float32)
    np.testing.assert_allclose(dense(x2, w, b), layer(x2, w, b), rtol=1e-5, atol=1e-5)
    assert dense._packs["W_local"][1] is copy and dense._packs["W_local"][2] is w  # not packed again; w kept
    w2 = rng.uniform(-1, 1, (48, 24)).astype(np.float32)
    np.testing.assert_allclose(dense(x, w2, b), layer(x, w2, b), rtol=1e-5, atol=1e-5)  # another weight
    old = w2.copy()
    w2 *= 2  # in place: the kernel still sees the old copy ...
    np.testing.assert_allclose(dense(x, w2, b), layer(x, old, b), rtol=1e-5, atol=1e-5)
    dense.repack()  # ... until repacked
    np.testing.assert_allclose(dense(x, w2, b), layer(x, w2, b), rtol=1e-5, atol=1e-5)
