"""torch.py — tuned for PyTorch models: the tuning tasks of a torch.fx graph
(linear, matmul/bmm, conv2d, softmax, layer_norm, with bias, ReLU and GELU
epilogues fused into the producing matmul or convolution) as .tw workloads
with their shapes (extract), and optimize: tune them and return the module
with each op whose tuned kernel matches torch running that kernel.

    import tuned.torch
    fast = tuned.torch.optimize(model, (x,), trials=64)   # submits, waits
    print(fast.tuned_report)                              # which ops run tuned
    with torch.no_grad():
        y = fast(x)

Only float32 CPU tensors run tuned kernels (tuned.load runs C kernels);
everything else, and every call whose shapes differ from the example
inputs' or that needs autograd, runs in torch."""

import dataclasses
import math
import operator
import re
import time
import warnings

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.passes.shape_prop import ShapeProp
from torch.utils._pytree import tree_flatten

from ._errors import Error, NoKernel
from .client import Client
from .kernel import from_cache, load

__all__ = ["Plan", "Task", "Skipped", "TunedOp", "Report", "OpReport", "extract", "plan_graph", "optimize", "profile",
           "backend", "export"]

# ---- what the graph holds ------------------------------------------------------------


@dataclasses.dataclass
class Task:
    """One tuning task: a producing op and the epilogue fused into it, as a
    .tw workload whose parameters default to the model's shapes."""
    name: str           # the workload's name (a C identifier, at most 47 characters)
    kind: str           # linear, matmul, bmm, conv2d, softmax or layer_norm
    epilogue: tuple     # fused elementwise ops in order: "bias", "relu", "gelu", "gelu_tanh"
    text: str           # the workload
    params: dict        # its parameters: the shapes
    nodes: list         # the fx nodes it computes (names), producer first
    operands: list      # its inputs in the workload's order: fx node names or attribute paths
    in_shapes: list     # each operand's shape in the model
    out_shape: tuple    # the last node's shape in the model
    attrs: dict         # what torch needs to compute it (stride, padding, eps, ...)
    _nodes: list = dataclasses.field(default_factory=list, repr=False, compare=False)
    _operands: list = dataclasses.field(default_factory=list, repr=False, compare=False)
    _bypassed: list = dataclasses.field(default_factory=list, repr=False, compare=False)  # transposes read through


@dataclasses.dataclass
class Skipped:
    """A node that computes something but has no tuning task: it runs in torch."""
    node: str
    op: str
    reason: str


@dataclasses.dataclass
class Plan:
    """What extract found: the traced module (shapes in each node's
    meta["tensor_meta"]), its tasks and the ops it left to torch."""
    module: fx.GraphModule
    tasks: list
    skipped: list
    values: dict = dataclasses.field(default_factory=dict, repr=False)  # node name -> value on the example


class _Recorder(ShapeProp):
    """Shape propagation that also keeps every node's value (and the node
    it runs, for errors)."""

    def __init__(self, gm):
        super().__init__(gm)
        # PyTorch 2's ShapeProp runs on fake tensors inside Dynamo's tracing
        # (a torch.compile backend); the values here must be real
        self.fake_module = self.fake_mode = None
        self.values, self.current = {}, None

    def run_node(self, n):
        self.current = n
        result = super().run_node(n)
        self.values[n.name] = result
        return result


class _Operand:
    """An input of a task: an fx node of the graph, or a parameter of a
    submodule (nn.Linear's weight), named by its attribute path."""

    def __init__(self, node=None, attr=None, tensor=None):
        self.node, self.attr, self.tensor = node, attr, tensor

    @property
    def name(self):
        return self.node.name if self.node is not None else self.attr

    def meta(self):
        """(shape, dtype) or None when it is not a tensor."""
        if self.node is None:
            return tuple(self.tensor.shape), self.tensor.dtype
        m = self.node.meta.get("tensor_meta") if isinstance(self.node, fx.Node) else None
        return (tuple(m.shape), m.dtype) if m is not None and hasattr(m, "shape") else None


def _bind(n, names, defaults=None):
    """A call node's arguments by name (positional first, then keywords)."""
    got = dict(defaults or {})
    got.update(zip(names, n.args))
    got.update(n.kwargs)
    return got


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _targets(*names):
    """The callables named (torch.x.y, torch.ops.aten.z.overload) that this
    torch has: Dynamo's graphs name torch's C functions (torch._C._nn.linear)
    and torch.export's the aten overloads, where torch.fx names F.linear."""
    out = set()
    for name in names:
        obj = torch
        try:
            for part in name.split(".")[1:]:
                obj = getattr(obj, part)
        except (AttributeError, RuntimeError):
            continue
        out.add(obj)
    return out


_LINEARS = {F.linear} | _targets("torch._C._nn.linear", "torch.ops.aten.linear.default")
_MATMULS = {torch.matmul, operator.matmul, torch.mm, torch.bmm} | _targets(
    "torch.ops.aten.matmul.default", "torch.ops.aten.mm.default", "torch.ops.aten.bmm.default")
_BMMS = {torch.bmm} | _targets("torch.ops.aten.bmm.default")
_CONVS = {F.conv2d, torch.conv2d} | _targets("torch.ops.aten.conv2d.default")
_RELUS = {F.relu, torch.relu, torch.relu_} | _targets("torch.ops.aten.relu.default")
_GELUS = {F.gelu} | _targets("torch._C._nn.gelu", "torch.ops.aten.gelu.default")
_ADDS = {operator.add, torch.add} | _targets("torch.ops.aten.add.Tensor")
_SOFTMAXES = {F.softmax, torch.softmax} | _targets("torch.ops.aten.softmax.int")
_ATEN_SOFTMAX = _targets("torch.ops.aten._softmax.default")  # (x, dim, half_to_float)
_LAYER_NORMS = {F.layer_norm} | _targets("torch.layer_norm", "torch.ops.aten.layer_norm.default")
_TRANSPOSES = {torch.transpose} | _targets("torch.ops.aten.transpose.int")
_TS = {torch.t} | _targets("torch.ops.aten.t.default")


def _classify(gm, n):
    """What a node computes: (op, info) with op one of linear, matmul,
    conv2d, softmax, layer_norm, relu, gelu, add and info its operands
    (_Operand) and attributes; None when it is none of those."""
    def op(x):
        return _Operand(node=x) if isinstance(x, fx.Node) else None

    def attr(path):
        return _Operand(attr=path, tensor=gm.get_parameter(path)) if path else None

    if n.op == "call_module":
        m = gm.get_submodule(n.target)
        x = op(n.args[0]) if n.args else None
        t = n.target
        if isinstance(m, torch.nn.Linear):
            return "linear", {"x": x, "w": attr(f"{t}.weight"), "bias": attr(m.bias is not None and f"{t}.bias")}
        if isinstance(m, torch.nn.Conv2d):
            return "conv2d", {"x": x, "w": attr(f"{t}.weight"), "bias": attr(m.bias is not None and f"{t}.bias"),
                              "stride": m.stride, "padding": m.padding, "dilation": m.dilation, "groups": m.groups,
                              "padding_mode": m.padding_mode}
        if isinstance(m, torch.nn.Softmax):
            return "softmax", {"x": x, "dim": m.dim}
        if isinstance(m, torch.nn.LayerNorm):
            return "layer_norm", {"x": x, "shape": tuple(m.normalized_shape), "eps": m.eps,
                                  "weight": attr(m.weight is not None and f"{t}.weight"),
                                  "bias": attr(m.bias is not None and f"{t}.bias")}
        if isinstance(m, torch.nn.ReLU):
            return "relu", {"x": x}
        if isinstance(m, torch.nn.GELU):
            return "gelu", {"x": x, "approximate": getattr(m, "approximate", "none")}
        return None
    if n.op == "call_function":
        f = n.target
        if f in _LINEARS:
            a = _bind(n, ["input", "weight", "bias"])
            return "linear", {"x": op(a.get("input")), "w": op(a.get("weight")), "bias": op(a.get("bias"))}
        if f in _MATMULS:
            a = _bind(n, ["input", "other"])
            a.setdefault("other", a.get("mat2"))
            return "matmul", {"a": op(a.get("input", a.get("self"))), "b": op(a.get("other")),
                              "batched_only": f in _BMMS}
        if f in _CONVS:
            a = _bind(n, ["input", "weight", "bias", "stride", "padding", "dilation", "groups"],
                      {"stride": 1, "padding": 0, "dilation": 1, "groups": 1})
            return "conv2d", {"x": op(a.get("input")), "w": op(a.get("weight")), "bias": op(a.get("bias")),
                              "stride": a["stride"], "padding": a["padding"], "dilation": a["dilation"],
                              "groups": a["groups"], "padding_mode": "zeros"}
        if f in _SOFTMAXES:
            a = _bind(n, ["input", "dim", "_stacklevel" if f is F.softmax else "dtype", "dtype"])
            return "softmax", {"x": op(a.get("input", a.get("self"))), "dim": a.get("dim"), "dtype": a.get("dtype")}
        if f in _ATEN_SOFTMAX:
            a = _bind(n, ["self", "dim", "half_to_float"])
            return "softmax", {"x": op(a.get("self")), "dim": a.get("dim"),
                               "dtype": torch.float32 if a.get("half_to_float") else None}
        if f in _LAYER_NORMS:
            a = _bind(n, ["input", "normalized_shape", "weight", "bias", "eps"], {"eps": 1e-5})
            shape = a.get("normalized_shape")
            return "layer_norm", {"x": op(a.get("input")), "shape": tuple(shape) if isinstance(shape, (list, tuple))
                                  else (shape,), "eps": a["eps"], "weight": op(a.get("weight")),
                                  "bias": op(a.get("bias"))}
        if f in _RELUS:
            a = _bind(n, ["input"])
            return "relu", {"x": op(a.get("input", a.get("self")))}
        if f in _GELUS:
            a = _bind(n, ["input", "approximate"], {"approximate": "none"})
            return "gelu", {"x": op(a.get("input", a.get("self"))), "approximate": a["approximate"]}
        if f in _ADDS:
            a = _bind(n, ["input", "other"])
            return "add", {"a": a.get("input", a.get("self")), "b": a.get("other"), "alpha": a.get("alpha", 1)}
        return None
    if n.op == "call_method":
        a = list(n.args)
        if n.target == "relu" and len(a) == 1 and not n.kwargs:
            return "relu", {"x": op(a[0])}
        if n.target == "softmax":
            b = _bind(n, ["self", "dim", "dtype"])
            return "softmax", {"x": op(b.get("self")), "dim": b.get("dim"), "dtype": b.get("dtype")}
        if n.target == "matmul" and len(a) == 2 and not n.kwargs:
            return "matmul", {"a": op(a[0]), "b": op(a[1]), "batched_only": False}
        if n.target == "add" and len(a) == 2 and not n.kwargs:
            return "add", {"a": a[0], "b": a[1], "alpha": 1}
    return None


# ---- the workloads -------------------------------------------------------------------

# erf(x) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-x^2), t = 1 / (1 + p |x|)
# (Abramowitz and Stegun 7.1.26, |error| <= 1.5e-7): the language has no erf.
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _num(x):
    """A float as a .tw decimal."""
    s = repr(float(x))
    return s if ("." in s or "e" in s) else s + ".0"


def _gelu(x, q, idx):
    """The declarations and statements of exact (erf) GELU of x: a temp q
    holds t P(t) exp(-x^2/2) = 1 - erf(|x|/sqrt 2)."""
    t = f"(1.0 / (1.0 + {_num(_ERF_P / math.sqrt(2))} * abs({x})))"
    poly = _num(_ERF_A[-1])
    for a in reversed(_ERF_A[:-1]):
        poly = f"({_num(a)} + {t} * {poly})"
    stmt = f"{q}[{idx}] = {t} * {poly} * exp(-0.5 * {x} * {x})"
    return stmt, f"0.5 * {x} * select({x} >= 0.0, 2.0 - {q}[{idx}], {q}[{idx}])"


def _epilogue(epilogue, idx, shape, bias_index):
    """Declarations and statements from the producer's D to the output Y
    through the fused epilogue; biases are the inputs bias, bias2, ..."""
    decls, stmts, prev, nbias = [], [], "D", 0
    for i, step in enumerate(epilogue):
        dst = "Y" if i == len(epilogue) - 1 else f"Z{i + 1}"
        if dst != "Y":
            decls.append(f"temp   {dst}: float32[{shape}]")
        x = f"{prev}[{idx}]"
        if step == "bias":
            nbias += 1
            expr = f"{x} + {'bias' if nbias == 1 else f'bias{nbias}'}[{bias_index}]"
        elif step == "relu":
            expr = f"max({x}, 0.0)"
        elif step == "gelu_tanh":
            expr = f"0.5 * {x} * (1.0 + tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))"
        else:
            q = f"Q{i + 1}"
            decls.append(f"temp   {q}: float32[{shape}]")
            stmt, expr = _gelu(x, q, idx)
            stmts.append(stmt)
        stmts.append(f"{dst}[{idx}] = {expr}")
        prev = dst
    return decls, stmts


def _bias_inputs(epilogue, dim):
    n = epilogue.count("bias")
    return [f"input  {'bias' if i == 0 else f'bias{i + 1}'}: float32[{dim}]" for i in range(n)]


def _workload(title, params, inputs, producer, idx, shape, epilogue=(), bias_index=None, before=((), ())):
    """A .tw text: a comment, the parameters with the model's values, the
    inputs, the temps and statements `before` the producer (padding, row
    statistics), the producer's result (D, or Y without an epilogue) and
    the epilogue."""
    decls, stmts = _epilogue(epilogue, idx, shape, bias_index)
    lines = [f"# {title} (extracted by tuned.torch)",
             "param " + ", ".join(f"{k} = {v}" for k, v in params.items()), *inputs, *before[0]]
    if epilogue:
        lines.append(f"temp   D: float32[{shape}]")
    lines += [*decls, f"output Y: float32[{shape}]", *before[1], f"{'D' if epilogue else 'Y'}[{idx}] = {producer}",
              *stmts]
    return "\n".join(lines) + "\n"


def _matmul_text(title, params, linear, transposed_b, epilogue):
    """linear: X W^T as nn.Linear (W is OUT x IN); else A B, or A B^T with B
    read in place where the model transposed it."""
    batched = "BATCH" in params
    bt = "BATCH, " if batched else ""
    b = "b, " if batched else ""
    x, w = ("X", "W") if linear else ("A", "B")
    if transposed_b or linear:
        ins = [f"input  {x}: float32[{bt}M, K]", f"input  {w}: float32[{bt}N, K]"]
        prod = f"sum(k < K: {x}[{b}i, k] * {w}[{b}j, k])"
    else:
        ins = [f"input  A: float32[{bt}M, K]", f"input  B: float32[{bt}K, N]"]
        prod = f"sum(k < K: A[{b}i, k] * B[{b}k, j])"
    return _workload(title, params, ins + _bias_inputs(epilogue, "N"), prod, f"{b}i, j", f"{bt}M, N", epilogue,
                     "j")


def _conv_text(title, p, epilogue):
    ins = ["input  X: float32[N, C, H, W]", "input  Wt: float32[F, C, R, S]"] + _bias_inputs(epilogue, "F")
    shape = "N, F, (H + 2 * PH - R) // SH + 1, (W + 2 * PW - S) // SW + 1"
    src, pad = "X", ((), ())
    if p["PH"] or p["PW"]:
        src = "Xp"
        pad = (["temp   Xp: float32[N, C, H + 2 * PH, W + 2 * PW]"],
               ["Xp[n, c, h, w] = select(h >= PH && h < H + PH && w >= PW && w < W + PW, X[n, c, h - PH, w - PW], "
                "0.0)"])
    prod = f"sum(c < C, r < R, s < S: {src}[n, c, y * SH + r, x * SW + s] * Wt[f, c, r, s])"
    return _workload(title, p, ins, prod, "n, f, y, x", shape, epilogue, "f", before=pad)


def _softmax_text(title, p):
    return _workload(title, p, ["input  X: float32[M, N]"],
                     "exp(X[i, j] - max(k < N: X[i, k])) / sum(k < N: exp(X[i, k] - max(k < N: X[i, k])))",
                     "i, j", "M, N")


def _layer_norm_text(title, p, eps, affine):
    ins = ["input  X: float32[M, N]"] + (["input  gamma: float32[N]", "input  beta: float32[N]"] if affine else [])
    stats = (["temp   mu: float32[M]", "temp   rstd: float32[M]"],
             ["mu[i] = sum(k < N: X[i, k]) / N",
              f"rstd[i] = 1.0 / sqrt(sum(k < N: (X[i, k] - mu[i]) * (X[i, k] - mu[i])) / N + {_num(eps)})"])
    body = "(X[i, j] - mu[i]) * rstd[i]" + (" * gamma[j] + beta[j]" if affine else "")
    return _workload(title, p, ins, body, "i, j", "M, N", before=stats)


# ---- extraction ----------------------------------------------------------------------


class _Skip(Exception):
    """A node that cannot be a task, and why."""


def _prod(xs):
    return math.prod(int(x) for x in xs)


def _float32(*ops):
    for o in ops:
        m = o.meta() if o is not None else None
        if m is None:
            raise _Skip(f"operand {o.name if o else '?'} is not a tensor of known shape")
        if m[1] != torch.float32:
            raise _Skip(f"operand {o.name} is {str(m[1]).replace('torch.', '')}; tuned kernels here are float32")
    return [o.meta()[0] for o in ops]


def _transpose_of(o):
    """The operand whose last two dimensions swapped `o` is (x for x.t(),
    x.transpose(-2, -1), torch.transpose(x, 1, 2) of a 3-D x, ...), or None."""
    n = o.node
    if not isinstance(n, fx.Node) or o.meta() is None or not n.args or not isinstance(n.args[0], fx.Node):
        return None
    nd = len(o.meta()[0])
    if (n.op == "call_method" and n.target == "t") or (n.op == "call_function" and n.target in _TS):
        swapped = nd == 2 and len(n.args) == 1
    elif (n.op == "call_method" and n.target == "transpose") or (n.op == "call_function" and
                                                                 n.target in _TRANSPOSES):
        dims = n.args[1:]
        swapped = len(dims) == 2 and all(isinstance(d, int) and -nd <= d < nd for d in dims) and \
            {d % nd for d in dims} == {nd - 2, nd - 1}
    else:
        return None
    src = _Operand(node=n.args[0])
    return src if swapped and not n.kwargs and src.meta() is not None else None


def _producer(kind, info):
    """(task kind, operands, params, attrs) of a producing op, or _Skip."""
    if kind == "linear":
        (xs, ws) = _float32(info["x"], info["w"])
        if len(xs) < 1 or len(ws) != 2 or xs[-1] != ws[1]:
            raise _Skip(f"linear of shapes {xs} and {ws}")
        return "linear", [info["x"], info["w"]], {"M": _prod(xs[:-1]), "N": ws[0], "K": ws[1]}, {}
    if kind == "matmul":
        a, b = info["a"], info["b"]
        if a is None or b is None:
            raise _Skip("a matmul with a constant operand")
        sa, sb = _float32(a, b)
        bt = _transpose_of(b)  # A @ B^T reads B where it is: no transposed copy
        attrs = {"transposed_b": bt is not None}
        if len(sa) >= 2 and len(sb) == 2 and sa[-1] == sb[0] and not info["batched_only"]:
            return "matmul", [a, bt or b], {"M": _prod(sa[:-1]), "N": sb[1], "K": sb[0]}, attrs
        if len(sa) == len(sb) >= 3 and sa[:-2] == sb[:-2] and sa[-1] == sb[-2]:
            return "bmm", [a, bt or b], {"BATCH": _prod(sa[:-2]), "M": sa[-2], "N": sb[-1], "K": sa[-1]}, attrs
        raise _Skip(f"matmul of shapes {list(sa)} and {list(sb)}: tuned takes 2-D @ 2-D, N-D @ 2-D and batches of "
                    f"equal batch dimensions (no broadcasting)")
    if kind == "conv2d":
        xs, ws = _float32(info["x"], info["w"])
        if info["groups"] != 1 or _pair(info["dilation"]) != (1, 1) or info["padding_mode"] != "zeros":
            raise _Skip(f"conv2d with groups={info['groups']}, dilation={info['dilation']}, padding_mode="
                        f"{info['padding_mode']}: tuned takes groups 1, dilation 1, zero padding")
        if len(xs) != 4 or len(ws) != 4 or xs[1] != ws[1]:
            raise _Skip(f"conv2d of shapes {list(xs)} and {list(ws)}: tuned takes NCHW input and OIHW weights")
        pad = info["padding"]
        if isinstance(pad, str):
            if pad == "valid":
                pad = (0, 0)
            else:
                raise _Skip(f"conv2d with padding='{pad}': give the padding as numbers")
        (sh, sw), (ph, pw) = _pair(info["stride"]), _pair(pad)
        p = {"N": xs[0], "C": xs[1], "H": xs[2], "W": xs[3], "F": ws[0], "R": ws[2], "S": ws[3], "PH": ph,
             "PW": pw, "SH": sh, "SW": sw}
        return "conv2d", [info["x"], info["w"]], p, {"stride": (sh, sw), "padding": (ph, pw)}
    if kind == "softmax":
        (xs,) = _float32(info["x"])
        dim = info["dim"]
        if info.get("dtype") is not None or dim is None or not isinstance(dim, int) or dim not in (-1, len(xs) - 1):
            raise _Skip(f"softmax over dim {dim}: tuned takes the last dimension of float32")
        return "softmax", [info["x"]], {"M": _prod(xs[:-1]), "N": xs[-1]}, {}
    if kind == "layer_norm":
        xs = _float32(info["x"])[0]
        shape, w, b = info["shape"], info["weight"], info["bias"]
        if tuple(xs[len(xs) - len(shape):]) != tuple(shape) or len(shape) > len(xs):
            raise _Skip(f"layer_norm over {list(shape)} of a {list(xs)} tensor")
        if (w is None) != (b is None):
            raise _Skip("layer_norm with only one of weight and bias")
        ops = [info["x"]] + ([w, b] if w is not None else [])
        _float32(*ops)
        return "layer_norm", ops, {"M": _prod(xs[:len(xs) - len(shape)]), "N": _prod(shape)}, \
            {"shape": tuple(shape), "eps": float(info["eps"])}
    raise _Skip(f"{kind} on its own: only fused into a matmul or convolution")


def _epilogue_step(gm, kind, cur, out_shape):
    """The epilogue op of the single user of `cur`, or None: (step, user node, bias operand or None)."""
    if len(cur.users) != 1:
        return None
    (u,) = cur.users
    c = _classify(gm, u)
    if c is None:
        return None
    op, info = c
    if op == "relu" and info["x"] is not None and info["x"].node is cur:
        return "relu", u, None
    if op == "gelu" and info["x"] is not None and info["x"].node is cur and info["approximate"] in ("none", "tanh"):
        return ("gelu" if info["approximate"] == "none" else "gelu_tanh"), u, None
    if op == "add" and info["alpha"] == 1 and kind != "conv2d":
        other = info["b"] if info["a"] is cur else info["a"] if info["b"] is cur else None
        if not isinstance(other, fx.Node) or other is cur:
            return None
        o = _Operand(node=other)
        m, mu = o.meta(), u.meta.get("tensor_meta")
        if m and m[1] == torch.float32 and m[0] == (out_shape[-1],) and mu is not None and \
                tuple(mu.shape) == tuple(out_shape):
            return "bias", u, o
    return None


def _name(kind, epilogue, node):
    stem = "_".join([kind, *epilogue, node])
    stem = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", stem))  # Sequential's children are _0, _1, ...
    return stem[:47].rstrip("_")


def _task(gm, n, kind, info):
    out = n.meta.get("tensor_meta")
    if out is None or not hasattr(out, "shape"):
        raise _Skip("its result is not a tensor")
    out_shape = tuple(out.shape)
    tkind, operands, params, attrs = _producer(kind, info)
    epilogue, nodes = [], [n]
    if kind in ("linear", "conv2d") and info["bias"] is not None:
        _float32(info["bias"])
        epilogue.append("bias")
        operands.append(info["bias"])
    if tkind in ("linear", "matmul", "bmm", "conv2d"):
        while True:
            step = _epilogue_step(gm, tkind, nodes[-1], out_shape)
            if step is None:
                break
            epilogue.append(step[0])
            nodes.append(step[1])
            if step[2] is not None:
                operands.append(step[2])
    name = _name(tkind, epilogue, n.name)
    what = f"{n.name}: {' + '.join([tkind, *epilogue])}" + (" (B transposed)" if attrs.get("transposed_b") else "")
    if tkind in ("linear", "matmul", "bmm"):
        text = _matmul_text(what, params, tkind == "linear", attrs.get("transposed_b"), tuple(epilogue))
    elif tkind == "conv2d":
        text = _conv_text(what, params, tuple(epilogue))
    elif tkind == "softmax":
        text = _softmax_text(what, params)
    else:
        text = _layer_norm_text(what, params, attrs["eps"], len(operands) == 3)
    last = nodes[-1].meta["tensor_meta"]
    return Task(name=name, kind=tkind, epilogue=tuple(epilogue), text=text, params=dict(params),
                nodes=[x.name for x in nodes], operands=[o.name for o in operands],
                in_shapes=[o.meta()[0] for o in operands], out_shape=tuple(last.shape), attrs=attrs,
                _nodes=nodes, _operands=operands, _bypassed=[info["b"].node] if attrs.get("transposed_b") else [])


def _inputs(example_inputs):
    return tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)


def extract(model, example_inputs):
    """Traces `model` (an nn.Module) with torch.fx, runs it on the example
    inputs (a tensor or a tuple) for the shapes, and returns a Plan: the
    tuning tasks in graph order, and the ops left to torch with the reason."""
    try:
        gm = fx.symbolic_trace(model)
    except Exception as e:  # control flow on values, untraceable calls: torch.fx says which
        raise Error(f"torch.fx cannot trace {type(model).__name__}: {e}") from e
    return plan_graph(gm, example_inputs, type(model).__name__)


def plan_graph(gm, example_inputs, what="the graph"):
    """extract's Plan for a graph already traced (torch.fx, Dynamo's graph of
    torch.compile, torch.export's module): shapes and values from running
    it on the example inputs (real tensors)."""
    rec = _Recorder(gm)
    try:
        with torch.no_grad():
            rec.propagate(*_inputs(example_inputs))
    except Exception as e:  # ShapeProp's message names the node; torch's own is the one it replaced
        where = f" at node {rec.current.name}" if rec.current is not None else ""
        why = e.__cause__ or e.__context__ or e
        raise Error(f"{what} fails on the example inputs{where}: {why}") from e
    tasks, skipped, claimed = [], [], set()
    for n in gm.graph.nodes:
        if n in claimed or n.op not in ("call_module", "call_function", "call_method"):
            continue
        c = _classify(gm, n)
        what = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
        if c is None:
            skipped.append(Skipped(n.name, what, "no tuning task for this op"))
            continue
        try:
            t = _task(gm, n, *c)
        except _Skip as e:
            skipped.append(Skipped(n.name, c[0], str(e)))
            continue
        claimed.update(t._nodes)
        tasks.append(t)
    absorbed = {n.name for t in tasks for n in t._bypassed if len(n.users) == 1}
    return Plan(gm, tasks, [s for s in skipped if s.node not in absorbed], rec.values)


# ---- running tuned kernels -----------------------------------------------------------


class TunedOp(torch.nn.Module):
    """A task's nodes replaced by its tuned kernel: forward(*operands) runs
    the kernel when the operands are float32 CPU tensors of the example's
    shapes and no autograd is needed, and torch otherwise.  tuned_calls and
    torch_calls count which ran."""

    def __init__(self, task, fn):
        super().__init__()
        self.name, self.kind, self.epilogue, self.attrs = task.name, task.kind, task.epilogue, dict(task.attrs)
        self.in_shapes, self.out_shape = [torch.Size(s) for s in task.in_shapes], torch.Size(task.out_shape)
        self._fn = fn
        self.cache_key = getattr(fn, "cache_key", None)  # pickled instead of the kernel (from_cache)
        got = [(p.dtype, math.prod(p.shape)) for p in fn.inputs + fn.outputs]
        want = [("float32", math.prod(s)) for s in [*self.in_shapes, self.out_shape]]
        if got != want:  # the kernel's signature is the workload's, which extract wrote for these shapes
            raise Error(f"{task.name}: the kernel takes {got} (dtype, elements), the model's operands {want}")
        self.tuned_calls = self.torch_calls = 0

    @property
    def fn(self):
        """The kernel (a TunedFunction); after unpickling, loaded from the
        kernel cache by its key, with no daemon."""
        if self._fn is None:
            self._fn = from_cache(self.cache_key)
        return self._fn

    def __getstate__(self):
        if self.cache_key is None:
            raise Error(f"{self.name}: this kernel has no kernel cache key (not a C kernel): it cannot be pickled")
        state = dict(self.__dict__)
        state["_fn"] = None  # ctypes handles do not pickle: the cache key brings the kernel back
        return state

    def extra_repr(self):
        return f"{self.name}, record {self.fn.kernel.record}"

    def fits(self, args):
        """Whether the kernel can compute these operands."""
        if len(args) != len(self.in_shapes) or (torch.is_grad_enabled() and
                                                 any(getattr(a, "requires_grad", False) for a in args)):
            return False
        return all(isinstance(a, torch.Tensor) and a.dtype == torch.float32 and a.is_cpu and a.shape == s
                   for a, s in zip(args, self.in_shapes))

    def forward(self, *args):
        if self.fits(args):
            self.tuned_calls += 1
            return self.run_tuned(*args)
        self.torch_calls += 1
        return self.run_torch(*args)

    def run_tuned(self, *args):
        """The tuned kernel on operands of the example's shapes (not checked):
        a dense row-major tensor is what the kernel indexes, whatever its
        shape, so only non-contiguous operands are copied."""
        dense = [a if a.is_contiguous() else a.contiguous() for a in args]
        out = torch.empty(self.out_shape)
        self.fn.launch([a.data_ptr() for a in dense] + [out.data_ptr()])
        return out

    def run_torch(self, *args):
        """What the replaced nodes computed, in torch."""
        k, a = self.kind, list(args)
        if k == "linear":
            y = F.linear(a[0], a[1])
        elif k in ("matmul", "bmm"):
            y = torch.matmul(a[0], a[1].transpose(-2, -1) if self.attrs.get("transposed_b") else a[1])
        elif k == "conv2d":
            y = F.conv2d(a[0], a[1], None, self.attrs["stride"], self.attrs["padding"])
        elif k == "softmax":
            return torch.softmax(a[0], -1)
        else:
            w, b = (a[1], a[2]) if len(a) == 3 else (None, None)
            return F.layer_norm(a[0], self.attrs["shape"], w, b, self.attrs["eps"])
        biases = iter(a[2:])
        for step in self.epilogue:
            if step == "bias":
                b = next(biases)
                y = y + (b.reshape(-1, 1, 1) if k == "conv2d" else b)
            elif step == "relu":
                y = torch.relu(y)
            else:
                y = F.gelu(y, approximate="none" if step == "gelu" else "tanh")
        return y


@dataclasses.dataclass
class OpReport:
    """What optimize or the torch.compile backend did with one task (or one
    op left to torch)."""
    name: str
    kind: str
    nodes: list
    status: str                 # tuned, no record, mismatch, slower, failed, torch
    detail: str = ""
    record: int | None = None
    job: int | None = None
    max_error: float | None = None
    module: str | None = None   # the TunedOp's submodule name in the optimized module
    tuned_secs: float | None = None  # the backend's race on the example inputs: the tuned kernel's median
    torch_secs: float | None = None  # and torch's on the same inputs in the same run


class Report(list):
    """optimize's report: an OpReport per task, then one per op left to torch;
    max_error: the optimized module's largest difference from eager mode on
    the example inputs."""
    max_error = None

    def tuned(self):
        return [r for r in self if r.status == "tuned"]

    def __str__(self):
        rows = [f"{'op':<40} {'status':<10} detail"]
        for r in self:
            detail = r.detail or (f"record {r.record}, max error {r.max_error:.2e}" if r.status == "tuned" else "")
            if r.status == "tuned" and r.tuned_secs and r.torch_secs:
                detail += f", {r.tuned_secs * 1e6:.1f} us against torch's {r.torch_secs * 1e6:.1f} us " \
                          f"({r.torch_secs / r.tuned_secs:.2f}x)"
            rows.append(f"{r.name:<40} {r.status:<10} {detail}")
        if self.max_error is not None:
            rows.append(f"whole model: max error {self.max_error:.2e} against eager on the example inputs")
        return "\n".join(rows)


def _max_error(got, want, rtol, atol):
    """(max |got - want|, whether every element is within atol + rtol |want|)."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return math.inf, False
    diff = (got - want).abs().nan_to_num(0.0)
    ok = bool(torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True).all())
    return float(diff.max()) if diff.numel() else 0.0, ok


def _rewrite(gm, task, replaced, call_of):
    """Replaces the task's nodes in gm's graph with the node call_of(graph,
    operand nodes) makes; `replaced` maps the last node of each task
    replaced so far to its call (an operand may be one)."""
    g, last = gm.graph, task._nodes[-1]
    with g.inserting_before(last):
        args = [replaced.get(o.node, o.node) if o.node is not None else g.get_attr(o.attr) for o in task._operands]
        call = call_of(g, args)
    call.meta = dict(last.meta)
    last.replace_all_uses_with(call)
    replaced[last] = call
    for n in reversed(task._nodes):
        g.erase_node(n)
    for n in task._bypassed:
        if not n.users:
            g.erase_node(n)


def _tune(c, plan, target, trials, seconds, seed, progress, timeout):
    """Submits every distinct task and waits: {text: final Job}."""
    jobs = {}
    for t in plan.tasks:
        if t.text not in jobs:
            jobs[t.text] = c.submit(t.text, target, trials=trials, seconds=seconds, seed=seed, name=t.name)
    return {text: c.watch(job, progress=progress, timeout=timeout) for text, job in jobs.items()}


def optimize(model, example_inputs, *, trials=32, seconds=None, seed=None, target=None, socket=None, client=None,
             tune=True, progress=True, timeout=None, rtol=1e-4, atol=1e-5, cc=None, min_speedup=1.0):
    """Extracts model's tuning tasks (see extract), tunes them on the daemon
    (`tune=False`: only what is already tuned; trials, seconds, seed and
    target as Client.submit; progress and timeout as Client.watch), and
    returns a torch.fx.GraphModule in which every task with a tuned kernel
    runs it (a TunedOp submodule) and everything else runs in torch.  Each
    kernel is checked on the example inputs against what torch computed
    there (|tuned - torch| <= atol + rtol |torch| elementwise; atol scaled by
    the op's largest output): a mismatch warns and leaves that op to torch.
    A kernel that matches is raced against torch's computation of the same
    nodes on the same operands (race): unless torch's time over its time
    exceeds min_speedup (default 1.0: it is faster) the op stays in torch
    ("slower"; min_speedup=0 keeps every kernel that matches).
    The module's tuned_report (a Report) says what runs where."""
    plan = extract(model, example_inputs)
    gm, values, report, replaced = plan.module, plan.values, Report(), {}
    if not plan.tasks:
        return _finish(model, gm, example_inputs, report, plan, rtol, atol)
    own = client is None
    c = Client(socket) if own else client
    try:
        finals = _tune(c, plan, target, trials, seconds, seed, progress, timeout) if tune and plan.tasks else {}
        fns = {}
        for i, t in enumerate(plan.tasks):
            r = OpReport(t.name, t.kind, list(t.nodes), "tuned")
            job = finals.get(t.text)
            r.job = job.id if job else None
            try:
                if t.text not in fns:
                    fns[t.text] = load(t.text, target, client=c, cc=cc)
                fn = fns[t.text]
            except NoKernel:
                r.status, r.detail = "no record", "nothing tuned for this workload" + (
                    f" (job {job.id}: {job.state}{': ' + job.error if job.error else ''})" if job else "")
                report.append(r)
                continue
            except Error as e:
                r.status, r.detail = "failed", str(e)
                warnings.warn(f"tuned.torch: {t.name}: {e}; it runs in torch", RuntimeWarning, stacklevel=2)
                report.append(r)
                continue
            want = values[t.nodes[-1]]
            try:
                op = TunedOp(t, fn)
                with torch.no_grad():
                    got = op.run_tuned(*[values[o.node.name] if o.node is not None else o.tensor
                                         for o in t._operands])
            except Error as e:
                r.status, r.detail = "failed", str(e)
                warnings.warn(f"tuned.torch: {e}; it runs in torch", RuntimeWarning, stacklevel=2)
                report.append(r)
                continue
            scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
            r.record = fn.kernel.record
            r.max_error, ok = _max_error(got, want, rtol, atol * scale)
            if not ok:
                r.status = "mismatch"
                r.detail = (f"record {r.record}: max error {r.max_error:.3g} against torch on the example inputs "
                            f"(rtol {rtol}, atol {atol * scale:.3g}); it runs in torch")
                warnings.warn(f"tuned.torch: {t.name}: {r.detail}", RuntimeWarning, stacklevel=2)
                report.append(r)
                continue
            args = [values[o.node.name] if o.node is not None else o.tensor for o in t._operands]
            with torch.no_grad():
                r.tuned_secs, r.torch_secs = race(lambda: op.run_tuned(*args), lambda: op.run_torch(*args))
            if r.torch_secs / r.tuned_secs <= min_speedup:
                r.status = "slower"
                r.detail = (f"record {r.record}: {r.tuned_secs * 1e6:.1f} us against torch's {r.torch_secs * 1e6:.1f} "
                            f"us on the same inputs ({r.torch_secs / r.tuned_secs:.2f}x); it runs in torch")
                report.append(r)
                continue
            r.module = f"tuned_{i}_{t.name}"
            gm.add_submodule(r.module, op)
            _rewrite(gm, t, replaced, lambda g, args, sub=r.module: g.call_module(sub, tuple(args)))
            report.append(r)
    finally:
        if own:
            c.close()
    return _finish(model, gm, example_inputs, report, plan, rtol, atol)


def _finish(model, gm, example_inputs, report, plan, rtol, atol):
    """The rewritten module with its report, checked against eager."""
    gm.graph.lint()
    gm.recompile()
    report.extend(OpReport(s.node, s.op, [s.node], "torch", s.reason) for s in plan.skipped)
    report.max_error, ok = _check_model(model, gm, example_inputs, rtol, atol)
    if not ok:
        warnings.warn(f"tuned.torch: the optimized module differs from eager by up to {report.max_error:.3g} on the "
                      f"example inputs (rtol {rtol}, atol {atol} times each output's largest value)", RuntimeWarning,
                      stacklevel=3)
    gm.tuned_report = report
    return gm


def _check_model(model, gm, example_inputs, rtol, atol):
    """(max error, whether within tolerance) of gm against eager model on the example inputs."""
    xs = _inputs(example_inputs)
    with torch.no_grad():
        want, _ = tree_flatten(model(*xs))
        got, _ = tree_flatten(gm(*xs))
    worst, ok = 0.0, len(got) == len(want)
    for g, w in zip(got, want):
        if not isinstance(w, torch.Tensor):
            ok = ok and g == w
            continue
        scale = max(1.0, float(w.abs().max())) if w.numel() and w.is_floating_point() else 1.0
        err, close = _max_error(g, w, rtol, atol * scale)
        worst, ok = max(worst, err), ok and close
    return worst, ok


# ---- timing --------------------------------------------------------------------------


def race(*fns, rounds=5, min_secs=0.02):
    """Median seconds of each function, timed in interleaved rounds (each
    round runs every function in turn, each repeated until min_secs / rounds
    have passed), so that the load of a shared machine falls on all alike."""
    for f in fns:
        f()  # warm up
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for f, times in zip(fns, samples):
            t_end = time.perf_counter() + min_secs / rounds
            while True:
                t0 = time.perf_counter()
                f()
                t1 = time.perf_counter()
                times.append(t1 - t0)
                if t1 >= t_end:
                    break
    return [sorted(t)[len(t) // 2] for t in samples]



def _seconds(f, repeat):
    f()  # warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def profile(model, optimized, example_inputs, repeat=20):
    """Median seconds, under torch.no_grad, of every TunedOp of `optimized`
    (tuned kernel against its torch computation, on the operands it sees on
    the example inputs) and of the whole model (eager `model` against
    `optimized`): a list of (name, tuned_secs, torch_secs), the whole model
    last, named "model"."""
    ops, seen = [m for m in optimized.modules() if isinstance(m, TunedOp)], {}
    hooks = [m.register_forward_pre_hook(lambda m, args: seen.setdefault(m, args) and None) for m in ops]
    xs = _inputs(example_inputs)
    with torch.no_grad():
        try:
            optimized(*xs)
        finally:
            for h in hooks:
                h.remove()
        rows = [(m.name, _seconds(lambda: m.run_tuned(*seen[m]), repeat),
                 _seconds(lambda: m.run_torch(*seen[m]), repeat)) for m in ops if m in seen]
        rows.append(("model", _seconds(lambda: optimized(*xs), repeat), _seconds(lambda: model(*xs), repeat)))
    return rows


# ---- torch.compile and torch.export (PyTorch 2.4+: torch_backend.py) ----------------


def backend(target="cpu", trials=32, **options):
    """A torch.compile backend: torch.compile(model, backend=tuned.torch.
    backend(target="cpu", trials=32)).  See tuned.torch_backend.Backend."""
    from .torch_backend import Backend
    return Backend(target=target, trials=trials, **options)


def export(model, example_inputs, target="cpu", trials=32, **options):
    """torch.export.export of `model` with its ops on tuned kernels where they
    are faster (tuned::kernel custom ops): save it with torch.export.save,
    load it with torch.export.load after `import tuned.torch`.  See
    tuned.torch_backend.export."""
    from .torch_backend import export as _export
    return _export(model, example_inputs, target=target, trials=trials, **options)


if hasattr(torch, "library") and hasattr(torch.library, "register_fake"):
    # registers the custom op tuned::kernel: a saved ExportedProgram that calls it loads after `import tuned.torch`
    from . import torch_backend as _torch_backend  # noqa: E402,F401
