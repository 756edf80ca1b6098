"""test_fx.py — tuned.torch: tuning tasks extracted from torch.fx graphs
(each op kind's workload text and shapes, where epilogues fuse and where
they must not, ops left to torch with the reason), every generated workload
accepted by the daemon, and optimize on a real daemon with real tunes: a
small MLP and a model of every other kind give eager's outputs, say which ops
run tuned, fall back to torch for other shapes, autograd and mismatches.
Skipped, with the reason, where torch is not installed."""

import os
import re
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch; PyPI: torch)")
nn, F = torch.nn, torch.nn.functional

import tuned  # noqa: E402
import tuned.torch as tt  # noqa: E402


class MLP(nn.Module):
    def __init__(self, sizes=(16, 32, 8), act=nn.GELU):
        super().__init__()
        self.fc1, self.act1 = nn.Linear(sizes[0], sizes[1]), nn.ReLU()
        self.fc2, self.act2 = nn.Linear(sizes[1], sizes[2]), act()

    def forward(self, x):
        return self.act2(self.fc2(self.act1(self.fc1(x))))


class Zoo(nn.Module):
    """Every other kind: conv2d (stride 2, padding 1) + ReLU, layer norm,
    softmax, attention scores (4-D matmul of K transposed), a matmul with a
    bias add, and a sigmoid that stays in torch."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.ln = nn.LayerNorm(6, eps=1e-6)
        self.w = nn.Parameter(torch.randn(6, 5))
        self.b = nn.Parameter(torch.randn(5))

    def forward(self, img, q, k):
        c = F.relu(self.conv(img))
        s = torch.matmul(q, k.transpose(-2, -1)).softmax(-1)
        h = self.ln(q)
        return c, s, torch.sigmoid(h @ self.w + self.b)


def zoo_inputs():
    g = torch.Generator().manual_seed(2)
    return (torch.randn(2, 3, 9, 9, generator=g), torch.randn(2, 3, 5, 6, generator=g),
            torch.randn(2, 3, 5, 6, generator=g))


def by_name(tasks):
    return {t.name: t for t in tasks}


def reasons(plan):
    return {s.node: s.reason for s in plan.skipped}


# ---- extraction ----------------------------------------------------------------------

def test_mlp_tasks():
    plan = tt.extract(MLP(), torch.randn(4, 16))
    assert [t.name for t in plan.tasks] == ["linear_bias_relu_fc1", "linear_bias_gelu_fc2"]
    fc1, fc2 = plan.tasks
    assert (fc1.kind, fc1.epilogue, fc1.params) == ("linear", ("bias", "relu"), {"M": 4, "N": 32, "K": 16})
    assert fc1.nodes == ["fc1", "act1"] and fc1.operands == ["x", "fc1.weight", "fc1.bias"]
    assert fc1.in_shapes == [(4, 16), (32, 16), (32,)] and fc1.out_shape == (4, 32)
    # nn.Linear keeps W as OUT x IN: Y = X W^T + b
    assert fc1.text == """\
# fc1: linear + bias + relu (extracted by tuned.torch)
param M = 4, N = 32, K = 16
input  X: float32[M, K]
input  W: float32[N, K]
input  bias: float32[N]
temp   D: float32[M, N]
temp   Z1: float32[M, N]
output Y: float32[M, N]
D[i, j] = sum(k < K: X[i, k] * W[j, k])
Z1[i, j] = D[i, j] + bias[j]
Y[i, j] = max(Z1[i, j], 0.0)
"""
    assert (fc2.epilogue, fc2.params, fc2.operands) == (("bias", "gelu"), {"M": 4, "N": 8, "K": 32},
                                                        ["act1", "fc2.weight", "fc2.bias"])
    # exact GELU through an erf approximation (the language has no erf)
    assert "temp   Q2: float32[M, N]" in fc2.text
    assert "Y[i, j] = 0.5 * Z1[i, j] * select(Z1[i, j] >= 0.0, 2.0 - Q2[i, j], Q2[i, j])" in fc2.text
    assert plan.skipped == []


def test_sequential_names():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    plan = tt.extract(model, torch.randn(2, 8))
    assert [(t.name, t.nodes) for t in plan.tasks] == [("linear_bias_gelu_0", ["_0", "_1"]), ("linear_bias_2", ["_2"])]


def test_linear_flattens_leading_dimensions_and_tanh_gelu():
    plan = tt.extract(MLP((16, 12, 8), act=lambda: nn.GELU(approximate="tanh")), torch.randn(2, 3, 16))
    fc1, fc2 = plan.tasks
    assert fc1.params == {"M": 6, "N": 12, "K": 16} and fc1.in_shapes[0] == (2, 3, 16) and fc1.out_shape == (2, 3, 12)
    assert fc2.epilogue == ("bias", "gelu_tanh") and "tanh(0.7978845608028654 * (Z1[i, j]" in fc2.text


class Shared(nn.Module):
    """fc's result is used twice: nothing may fuse into it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return F.relu(y) + y


def test_no_fusion_into_a_shared_intermediate():
    plan = tt.extract(Shared(), torch.randn(2, 8))
    (t,) = plan.tasks
    assert (t.name, t.epilogue, t.nodes) == ("linear_bias_fc", ("bias",), ["fc"])
    assert "Y[i, j] = D[i, j] + bias[j]" in t.text and "max(" not in t.text
    assert reasons(plan) == {"relu": "relu on its own: only fused into a matmul or convolution",
                             "add": "add on its own: only fused into a matmul or convolution"}


class Adds(nn.Module):
    def __init__(self):
        super().__init__()
        self.w, self.b = nn.Parameter(torch.randn(6, 5)), nn.Parameter(torch.randn(5))

    def forward(self, x, r):
        biased = F.gelu(self.b + x @ self.w)      # bias add (either side), then GELU: fused
        residual = torch.mm(x, self.w) + r        # a same-shape add is no bias: not fused
        nobias = F.relu(F.linear(x, self.w.t()))  # F.linear without bias, ReLU fused
        return biased, residual, nobias


def test_matmul_epilogues():
    plan = tt.extract(Adds(), (torch.randn(4, 6), torch.randn(4, 5)))
    t = by_name(plan.tasks)
    assert set(t) == {"matmul_bias_gelu_matmul", "matmul_mm", "linear_relu_linear"}
    m = t["matmul_bias_gelu_matmul"]
    assert m.nodes == ["matmul", "add", "gelu"] and m.operands == ["x", "w", "b"]
    assert "D[i, j] = sum(k < K: A[i, k] * B[k, j])" in m.text and "Z1[i, j] = D[i, j] + bias[j]" in m.text
    assert t["matmul_mm"].epilogue == () and t["matmul_mm"].nodes == ["mm"]
    assert "Y[i, j] = sum(k < K: A[i, k] * B[k, j])" in t["matmul_mm"].text
    lin = t["linear_relu_linear"]
    assert lin.epilogue == ("relu",) and lin.operands == ["x", "t"] and lin.params == {"M": 4, "N": 5, "K": 6}
    assert reasons(plan)["add_1"] == "add on its own: only fused into a matmul or convolution"


class Batched(nn.Module):
    def forward(self, a, b, q, k, v):
        kt = k.transpose(2, 3)
        return torch.bmm(a, b), (q @ k.transpose(-2, -1)) @ v, torch.matmul(q, b), q @ kt, kt, a[0] @ a[1].t()


def test_bmm_and_broadcasting():
    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 2)
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 7)
    plan = tt.extract(Batched(), (a, b, q, k, v))
    t = by_name(plan.tasks)
    assert t["bmm_bmm"].params == {"BATCH": 3, "M": 4, "N": 2, "K": 5}
    assert "Y[b, i, j] = sum(k < K: A[b, i, k] * B[b, k, j])" in t["bmm_bmm"].text
    assert "input  A: float32[BATCH, M, K]" in t["bmm_bmm"].text
    # attention scores: K transposed is read in place (no copy), the transpose absorbed
    qk = t["bmm_matmul"]
    assert qk.params == {"BATCH": 6, "M": 4, "N": 4, "K": 5} and qk.attrs == {"transposed_b": True}
    assert qk.operands == ["q", "k"] and qk.in_shapes == [(2, 3, 4, 5), (2, 3, 4, 5)]
    assert qk.out_shape == (2, 3, 4, 4) and "input  B: float32[BATCH, N, K]" in qk.text
    assert "Y[b, i, j] = sum(k < K: A[b, i, k] * B[b, j, k])" in qk.text
    assert t["bmm_matmul_1"].params == {"BATCH": 6, "M": 4, "N": 7, "K": 4}
    assert t["bmm_matmul_1"].attrs == {"transposed_b": False} and t["bmm_matmul_1"].operands == ["matmul", "v"]
    # kt has another user (it is returned): read through all the same, and it stays
    assert t["bmm_matmul_3"].operands == ["q", "k"]
    mt = t["matmul_matmul_4"]  # a[0] @ a[1].t()
    assert mt.operands == ["getitem", "getitem_1"] and mt.params == {"M": 4, "N": 4, "K": 5}
    assert "Y[i, j] = sum(k < K: A[i, k] * B[j, k])" in mt.text
    why = reasons(plan)
    assert "broadcasting" in why["matmul_2"]  # [2, 3, 4, 5] @ [3, 5, 2]
    assert "transpose" in why and "transpose_1" not in why and "t" not in why  # kt stays; the others are absorbed


class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.strided = nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0))
        self.plain = nn.Conv2d(3, 2, 1, bias=False)
        self.grouped = nn.Conv2d(4, 4, 3, groups=2)

    def forward(self, x):
        y = F.relu(self.strided(x))
        return self.plain(x) + 1.0, self.grouped(y)


def test_conv2d():
    plan = tt.extract(Convs(), torch.randn(2, 3, 9, 8))
    t = by_name(plan.tasks)
    s = t["conv2d_bias_relu_strided"]
    assert s.params == {"N": 2, "C": 3, "H": 9, "W": 8, "F": 4, "R": 3, "S": 2, "PH": 1, "PW": 0, "SH": 2, "SW": 1}
    assert s.out_shape == (2, 4, 5, 7) and s.nodes == ["strided", "relu"]
    assert ("D[n, f, y, x] = sum(c < C, r < R, s < S: Xp[n, c, y * SH + r, x * SW + s] * Wt[f, c, r, s])"
            in s.text)
    assert "Z1[n, f, y, x] = D[n, f, y, x] + bias[f]" in s.text
    assert "output Y: float32[N, F, (H + 2 * PH - R) // SH + 1, (W + 2 * PW - S) // SW + 1]" in s.text
    p = t["conv2d_plain"]  # no padding: no padded copy; no bias; the scalar add is not fused
    assert p.epilogue == () and "Xp" not in p.text and p.operands == ["x", "plain.weight"]
    assert "Y[n, f, y, x] = sum(c < C, r < R, s < S: X[n, c, y * SH + r, x * SW + s] * Wt[f, c, r, s])" in p.text
    assert "groups=2" in reasons(plan)["grouped"]


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8, eps=1e-6)
        self.ln2 = nn.LayerNorm((3, 8), elementwise_affine=False)

    def forward(self, x):
        return F.softmax(self.ln(x), dim=-1), self.ln2(x), torch.softmax(x, 0), x.double().softmax(-1)


def test_softmax_and_layer_norm():
    plan = tt.extract(Norms(), torch.randn(2, 3, 8))
    t = by_name(plan.tasks)
    assert set(t) == {"layer_norm_ln", "softmax_softmax", "layer_norm_ln2"}
    ln = t["layer_norm_ln"]
    assert ln.params == {"M": 6, "N": 8} and ln.operands == ["x", "ln.weight", "ln.bias"]
    assert "rstd[i] = 1.0 / sqrt(sum(k < N: (X[i, k] - mu[i]) * (X[i, k] - mu[i])) / N + 1e-06)" in ln.text
    assert "Y[i, j] = (X[i, j] - mu[i]) * rstd[i] * gamma[j] + beta[j]" in ln.text
    ln2 = t["layer_norm_ln2"]
    assert ln2.params == {"M": 2, "N": 24} and ln2.operands == ["x"] and "gamma" not in ln2.text
    sm = t["softmax_softmax"]
    assert sm.params == {"M": 6, "N": 8}
    assert "Y[i, j] = exp(X[i, j] - max(k < N: X[i, k])) / sum(k < N: exp(X[i, k] - max(k < N: X[i, k])))" in sm.text
    why = reasons(plan)
    assert why["softmax_1"] == "softmax over dim 0: tuned takes the last dimension of float32"
    assert why["softmax_2"] == "operand double is float64; tuned kernels here are float32"
    assert why["double"] == "no tuning task for this op"


def test_every_workload_checks_on_the_daemon(daemon):
    plans = [tt.extract(Zoo(), zoo_inputs()), tt.extract(Convs(), torch.randn(2, 3, 9, 8)),
             tt.extract(Norms(), torch.randn(2, 3, 8)), tt.extract(Adds(), (torch.randn(4, 6), torch.randn(4, 5))),
             tt.extract(MLP((16, 12, 8), act=lambda: nn.GELU(approximate="tanh")), torch.randn(2, 3, 16))]
    with tuned.Client(daemon) as c:
        for t in (t for p in plans for t in p.tasks):
            assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,46}", t.name), t.name
            tensors = {x["name"]: tuple(x["shape"]) for x in c.check(t.text, **t.params)["tensors"]}
            inputs = [n for n in tensors if n != "Y"]
            # each operand reshapes to its kernel parameter, the output to the model's
            assert [_numel(tensors[n]) for n in inputs] == [_numel(s) for s in t.in_shapes], t.text
            assert _numel(tensors["Y"]) == _numel(t.out_shape)


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# ---- optimize on a real daemon -------------------------------------------------------

@pytest.fixture(scope="module")
def mlp(daemon, kernel_cache):
    """An MLP optimized with a real tune (3 trials per op): (model, x, optimized)."""
    torch.manual_seed(0)
    model, x = MLP((16, 32, 8)).eval(), torch.randn(4, 16)
    fast = tt.optimize(model, (x,), trials=3, seed=1, socket=daemon, progress=False, timeout=300, min_speedup=0.0)
    return model, x, fast


def test_optimize_mlp(mlp):
    model, x, fast = mlp
    report = fast.tuned_report
    assert [(r.name, r.status) for r in report] == [("linear_bias_relu_fc1", "tuned"),
                                                    ("linear_bias_gelu_fc2", "tuned")]
    assert all(r.record is not None and r.job and r.max_error < 1e-5 for r in report)
    for o in (m for m in fast.modules() if isinstance(m, tt.TunedOp)):  # a record, or the unscheduled program
        k = o.fn.kernel                                                # served in place of a slower one
        assert k.record > 0 or (k.unscheduled and k.unscheduled["best_record"] > 0), k
    assert report.max_error < 1e-5 and "linear_bias_relu_fc1" in str(report)
    ops = [m for m in fast.modules() if isinstance(m, tt.TunedOp)]
    assert [o.name for o in ops] == ["linear_bias_relu_fc1", "linear_bias_gelu_fc2"]
    with torch.no_grad():
        want = model(x)
        before = [o.tuned_calls for o in ops]
        got = fast(x)
    assert [o.tuned_calls - b for o, b in zip(ops, before)] == [1, 1]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # another batch size: torch runs those ops, same results
    x5 = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(fast(x5), model(x5), rtol=0, atol=0)
    assert all(o.torch_calls == 1 for o in ops)
    # autograd needed: torch runs them and gradients flow to the weights
    fast(x).sum().backward()
    assert model.fc1.weight.grad is not None and all(o.torch_calls == 2 for o in ops)
    model.zero_grad()


def test_profile(mlp):
    model, x, fast = mlp
    rows = tt.profile(model, fast, x, repeat=3)
    assert [r[0] for r in rows] == ["linear_bias_relu_fc1", "linear_bias_gelu_fc2", "model"]
    assert all(a > 0 and b > 0 for _, a, b in rows)


def test_mismatch_falls_back(mlp, daemon):
    """With no tolerance the erf-approximated GELU differs from torch's:
    that op warns and stays torch; the tuned records are reused (tune=False)."""
    model, x, _ = mlp
    with pytest.warns(RuntimeWarning, match=r"linear_bias_gelu_fc2: record \d+: max error .* against torch"):
        fast = tt.optimize(model, x, tune=False, rtol=0, atol=0, socket=daemon)
    status = {r.name: r.status for r in fast.tuned_report}
    assert status["linear_bias_gelu_fc2"] == "mismatch"
    assert [m.name for m in fast.modules() if isinstance(m, tt.TunedOp)] == \
        [n for n, s in status.items() if s == "tuned"]
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-5, atol=1e-5)


def test_never_slower_than_torch(mlp, daemon):
    """Each matching kernel is raced against torch's computation of the same
    nodes on the same inputs: asked for a 1e9x speed-up, none is used."""
    model, x, _ = mlp
    fast = tt.optimize(model, x, tune=False, socket=daemon, min_speedup=1e9)
    report = fast.tuned_report
    assert [r.status for r in report] == ["slower", "slower"], str(report)
    assert all(r.tuned_secs > 0 and r.torch_secs > 0 and "against torch's" in r.detail for r in report)
    assert not any(isinstance(m, tt.TunedOp) for m in fast.modules())
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=0, atol=0)


def test_no_record_runs_torch(daemon, kernel_cache):
    model, x = MLP((8, 8, 8)).eval(), torch.randn(3, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast = tt.optimize(model, x, tune=False, socket=daemon)
    assert [(r.status, r.detail) for r in fast.tuned_report] == [("no record", "nothing tuned for this workload")] * 2
    assert not any(isinstance(m, tt.TunedOp) for m in fast.modules())
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=0, atol=0)


def test_optimize_every_kind(daemon, kernel_cache):
    """conv2d, softmax, layer norm, 4-D matmul and matmul + bias, one trial
    each: the generated workloads compute what torch does."""
    torch.manual_seed(1)
    model, xs = Zoo().eval(), zoo_inputs()
    fast = tt.optimize(model, xs, trials=1, seed=1, socket=daemon, progress=False, timeout=300, min_speedup=0.0)
    status = {r.name: r.status for r in fast.tuned_report}
    assert status == {"conv2d_bias_relu_conv": "tuned", "bmm_matmul": "tuned", "softmax_softmax": "tuned",
                      "layer_norm_ln": "tuned", "matmul_bias_matmul_1": "tuned", "sigmoid": "torch"}, \
        str(fast.tuned_report)
    assert "transpose" not in fast.code  # the kernel reads k as it is
    ops = [m for m in fast.modules() if isinstance(m, tt.TunedOp)]
    before = [o.tuned_calls for o in ops]
    with torch.no_grad():
        for got, want in zip(fast(*xs), model(*xs)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(ops) == 5 and [o.tuned_calls - b for o, b in zip(ops, before)] == [1] * 5


class Branchy(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


def test_untraceable_model():
    with pytest.raises(tuned.Error, match="torch.fx cannot trace Branchy: .*"):
        tt.extract(Branchy(), torch.randn(2))



def test_bad_example_inputs():
    with pytest.raises(tuned.Error) as e:
        tt.extract(MLP(), torch.randn(4, 12))
    assert "MLP fails on the example inputs at node fc1: " in str(e.value)
    assert "cannot be multiplied" in str(e.value)  # torch's own message


def test_nothing_to_tune_needs_no_daemon(tmp_path):
    model, x = nn.Sequential(nn.Sigmoid(), nn.Tanh()), torch.randn(3)
    fast = tt.optimize(model, x, socket=str(tmp_path / "no-daemon.sock"))
    assert [(r.name, r.status) for r in fast.tuned_report] == [("_0", "torch"), ("_1", "torch")]
    assert fast.tuned_report.max_error == 0.0
    torch.testing.assert_close(fast(x), model(x), rtol=0, atol=0)


def test_tuned_torch_on_first_use():
    """`import tuned` does not import torch; tuned.torch does."""
    code = ("import sys, tuned; assert 'torch' not in sys.modules; f = tuned.torch.optimize; "
            "assert 'torch' in sys.modules; print(f.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(
        os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tuned.__file__))))
    assert out.returncode == 0 and out.stdout == "tuned.torch\n", out.stderr


def test_example_torch_block(daemon, kernel_cache):
    """examples/torch_block.py at a tiny size, one trial per op: it runs, every
    op it extracts runs tuned, and it prints the timing table."""
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "examples", "torch_block.py")
    out = subprocess.run([sys.executable, example, "--socket", daemon, "--tokens", "4", "--dim", "8", "--trials", "1",
                          "--repeat", "1", "--min-speedup", "0"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "11 tuning tasks in the block's graph:" in text and "linear_bias_gelu_up: linear + bias + gelu" in text
    statuses = re.findall(r"^(\w+) +(tuned(?= +record)|torch|no record|mismatch|failed) ", text, re.M)
    assert len([s for s in statuses if s[1] == "tuned"]) == 11, text
    assert {n for n, s in statuses if s != "tuned"} == {"mul", "add", "add_1"}, text
    assert re.search(r"^whole block \(vs eager\) +[0-9.]+ +[0-9.]+ +[0-9.]+x$", text, re.M), text
    err = float(re.search(r"max \|optimized - eager\| = (\S+)", text).group(1))
    assert err < 1e-5
