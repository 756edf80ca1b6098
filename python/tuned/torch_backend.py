"""torch_backend.py — tuned for PyTorch 2: a torch.compile backend and
torch.export with tuned kernels.

    compiled = torch.compile(model, backend=tuned.torch.backend(target="cpu", trials=32))
    ep = tuned.torch.export(model, (x,), trials=32)    # an ExportedProgram
    torch.export.save(ep, "model.pt2")                  # later: import tuned.torch; torch.export.load(...)

Every tuning task of the graph (tuned.torch's: linear, matmul/bmm, conv2d,
softmax, layer_norm with bias/ReLU/GELU epilogues fused) is tuned in this
process (libtuned_local, into a database file; or on a daemon), its best
kernel checked against torch on the example inputs and raced against
torch's own computation of the same nodes on the same inputs in the same
run: it replaces those nodes only when it is right and faster.  A kernel in
the graph is a call of the custom op tuned::kernel(key, inputs, out_shape)
(torch.library: Library and register_fake), so the graph compiles with
Inductor, exports and saves; the key names the kernel in the kernel cache (tuned.from_cache), so a saved
program runs in another process without a daemon.  Everything else — ops
tuned does not take, slower or wrong kernels — is left to Inductor (or to
torch with inductor=False), with the reason logged on the "tuned.torch"
logger and kept in Backend.report.  float32 CPU tensors; inference (a graph
that needs autograd is left whole to Inductor)."""

import logging

import torch

from . import torch as tt
from ._errors import Error, NoKernel
from .kernel import from_cache, load

log = logging.getLogger("tuned.torch")

if not hasattr(torch, "library") or not hasattr(torch.library, "register_fake"):
    raise Error(f"tuned's torch.compile backend needs PyTorch 2.4 or newer (torch.library.register_fake); this is "
                f"{torch.__version__} (tuned.torch.optimize works with it)")

# ---- the custom op -------------------------------------------------------------------

_KERNELS = {}  # kernel cache key -> TunedFunction, loaded once per process


def _kernel(key):
    f = _KERNELS.get(key)
    if f is None:
        f = _KERNELS[key] = from_cache(key)
    return f


def kernel_op(key, inputs, out_shape):
    """tuned::kernel's CPU implementation: runs the tuned C kernel `key`
    (kernel cache) on float32 CPU inputs (in the workload's order) into a
    new float32 tensor of out_shape."""
    f = _kernel(key)
    if len(inputs) != len(f.inputs):
        raise Error(f"tuned::kernel {key} ({f.__name__}): {len(inputs)} inputs, the kernel takes {len(f.inputs)}")
    dense = [a if a.is_contiguous() else a.contiguous() for a in inputs]
    for p, a in zip(f.inputs, dense):
        if a.dtype != torch.float32 or a.numel() != p.elements:
            raise Error(f"tuned::kernel {key} ({f.__name__}): input {p.name} is {a.dtype} {list(a.shape)}; the "
                        f"kernel takes float32{list(p.shape)}")
    out = torch.empty(out_shape, dtype=torch.float32)
    f.launch([a.data_ptr() for a in dense] + [out.data_ptr()],
             keep={p.name: a for p, a in zip(f.inputs, dense)} if f.packed else None)
    return out


# Defined with torch.library.Library, not custom_op: the dispatcher then calls
# kernel_op directly (about 15 us a call on the 2-core machine against 44 us
# through custom_op's wrappers, which matter next to microsecond kernels).
_LIB = torch.library.Library("tuned", "DEF")
_LIB.define("kernel(str key, Tensor[] inputs, int[] out_shape) -> Tensor")
_LIB.impl("kernel", kernel_op, "CPU")


@torch.library.register_fake("tuned::kernel")
def _kernel_fake(key, inputs, out_shape):
    return inputs[0].new_empty(out_shape, dtype=torch.float32)


# ---- the backend ----------------------------------------------------------------------


class Backend:
    """torch.compile(model, backend=Backend(...)).  Options:
      target     the tuning target (a CPU target: "cpu")
      trials     measured candidates per task when it is tuned
      seconds    wall-time budget per task (None: none)
      seed       the search seed
      db         the database file (None: tuned.default_db()); tasks with a
                 verified record there are not tuned again unless retune
      client, socket  tune on a daemon instead (tuned.Client)
      retune     tune even what the database has
      inductor   compile the rewritten graph with Inductor (default) or run it as is
      min_speedup  a kernel replaces torch's ops only when torch's time over
                 its time exceeds this (default 1.0: faster)
      rtol, atol the check against torch on the example inputs (atol scaled
                 by the op's largest output), as tuned.torch.optimize's
      progress   tuning progress on stderr
    After a compile, report (a tuned.torch.Report, every graph's ops in
    order) says what runs where and why; graphs holds the rewritten
    GraphModules (before Inductor)."""

    def __init__(self, target="cpu", trials=32, *, seconds=None, seed=None, db=None, client=None, socket=None,
                 retune=False, inductor=True, min_speedup=1.0, rtol=1e-4, atol=1e-5, progress=False, cc=None):
        self.target, self.trials, self.seconds, self.seed = target, trials, seconds, seed
        self.db, self.client, self.socket, self.retune = db, client, socket, retune
        self.inductor, self.min_speedup, self.rtol, self.atol = inductor, min_speedup, rtol, atol
        self.progress, self.cc = progress, cc
        self.report, self.graphs = tt.Report(), []
        self._fns = {}  # workload text -> TunedFunction (a task met again in another graph)

    def __repr__(self):
        return f"tuned.torch.backend(target={self.target!r}, trials={self.trials})"

    def __call__(self, gm, example_inputs):
        substitute(gm, example_inputs, self)
        self.graphs.append(gm)
        if not self.inductor:
            return gm.forward
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, example_inputs)

    # -- kernels

    def _tune(self, task):
        """Tunes the task (in this process, or on the daemon)."""
        if self.client is not None or self.socket is not None:
            from .client import Client
            c = self.client or Client(self.socket)
            try:
                job = c.submit(task.text, self.target, trials=self.trials, seconds=self.seconds, seed=self.seed,
                               name=task.name)
                c.watch(job, progress=self.progress)
            finally:
                if self.client is None:
                    c.close()
            return
        from .local import tune
        r = tune(task.text, self.target, trials=self.trials, seconds=self.seconds, seed=self.seed, db=self.db,
                 name=task.name, progress=self.progress)
        log.info("tuned %s: %s", task.name, r)

    def _load(self, task):
        if self.client is not None or self.socket is not None:
            return load(task.text, self.target, client=self.client, socket=self.socket, cc=self.cc)
        return load(task.text, self.target, db=self.db or True, cc=self.cc)

    def kernel(self, task):
        """The task's tuned kernel (a TunedFunction), tuned first when the
        database has none (or retune); NoKernel when tuning found none."""
        f = self._fns.get(task.text)
        if f is not None:
            return f
        f = None
        if not self.retune:
            try:
                f = self._load(task)
            except NoKernel:
                f = None
        if f is None:
            self._tune(task)
            f = self._load(task)
        self._fns[task.text] = f
        return f


def _leave(b, r, status, detail):
    r.status, r.detail = status, detail
    log.info("tuned.torch: %s (%s) left to %s: %s", r.name, r.kind, "Inductor" if b.inductor else "torch", detail)
    b.report.append(r)


def substitute(gm, example_inputs, b):
    """Rewrites gm in place: each task whose tuned kernel matches torch on the
    example inputs and beats torch's computation of the same nodes there is a
    tuned::kernel call; the reasons for the rest go to b.report and the log."""
    # Dynamo calls its backend inside its fake-tensor mode: the kernels run on real tensors
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return _substitute(gm, example_inputs, b)


def _dynamic(gm):
    """Whether Dynamo traced gm with symbolic sizes (dynamic=True, or a shape
    that changed between calls): a tuned kernel is for one shape."""
    for n in gm.graph.nodes:
        v = n.meta.get("example_value")
        if isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape):
            return True
    return False


def _substitute(gm, example_inputs, b):
    if _dynamic(gm):
        log.info("tuned.torch: the graph has dynamic shapes: all of it is left to Inductor (tuned kernels are "
                 "for one shape; torch.compile(..., dynamic=False) gives a graph per shape)")
        b.report.append(tt.OpReport("graph", "graph", [], "torch", "dynamic shapes: tuned kernels are for one "
                                    "shape (dynamic=False)"))
        return gm
    if torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in example_inputs):
        log.info("tuned.torch: the graph needs autograd (an input requires grad, grad enabled): all of it is "
                 "left to Inductor; compile under torch.no_grad() for tuned kernels")
        b.report.append(tt.OpReport("graph", "graph", [], "torch", "needs autograd: tuned kernels are for "
                                    "inference"))
        return gm
    plan = tt.plan_graph(gm, example_inputs, "the graph")
    values, replaced = plan.values, {}
    for t in plan.tasks:
        r = tt.OpReport(t.name, t.kind, list(t.nodes), "tuned")
        try:
            fn = b.kernel(t)
            if fn.cache_key is None:
                raise Error(f"{fn.kernel.language} kernels are not run by the backend (C kernels only)")
            op = tt.TunedOp(t, fn)
        except NoKernel as e:
            _leave(b, r, "no record", f"no verified kernel: {e}")
            continue
        except Error as e:
            _leave(b, r, "failed", str(e))
            continue
        args = [values[o.node.name] if o.node is not None else o.tensor for o in t._operands]
        want = values[t.nodes[-1]]
        with torch.no_grad():
            got = op.run_tuned(*args)
            scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
            r.record = fn.kernel.record
            r.max_error, ok = tt._max_error(got, want, b.rtol, b.atol * scale)
            if not ok:
                _leave(b, r, "mismatch", f"record {r.record}: max error {r.max_error:.3g} against torch on "
                       f"the example inputs")
                continue
            key, shape = fn.cache_key, [int(d) for d in t.out_shape]
            _KERNELS[key] = fn
            call = torch.ops.tuned.kernel.default  # raced as the graph will call it, dispatch included
            r.tuned_secs, r.torch_secs = tt.race(lambda: call(key, args, shape), lambda: op.run_torch(*args))
        speedup = r.torch_secs / r.tuned_secs
        if speedup <= b.min_speedup:
            _leave(b, r, "slower", f"record {r.record}: {r.tuned_secs * 1e6:.1f} us against torch's "
                   f"{r.torch_secs * 1e6:.1f} us on the same inputs ({speedup:.2f}x)")
            continue
        tt._rewrite(gm, t, replaced, lambda g, a, key=key, shape=shape:
                    g.call_function(torch.ops.tuned.kernel.default, (key, list(a), shape)))
        log.info("tuned.torch: %s runs tuned (record %s): %.1f us against torch's %.1f us (%.2fx)", t.name,
                 r.record, r.tuned_secs * 1e6, r.torch_secs * 1e6, speedup)
        b.report.append(r)
    for s in plan.skipped:
        b.report.append(tt.OpReport(s.node, s.op, [s.node], "torch", s.reason))
        log.debug("tuned.torch: %s (%s) left to Inductor: %s", s.node, s.op, s.reason)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return gm


def export(model, example_inputs, target="cpu", trials=32, **options):
    """torch.export.export(model, example_inputs) with every task that tuned
    runs faster (as Backend decides) as a tuned::kernel call; returns the
    ExportedProgram, whose `tuned_report` says what runs where.  Save it
    with torch.export.save; torch.export.load in a process that imported
    tuned.torch runs it (the kernels come from the kernel cache)."""
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    b = Backend(target=target, trials=trials, inductor=False, **options)
    with torch.no_grad():
        gm = torch.export.export(model, args).module()
        substitute(gm, args, b)
        ep = torch.export.export(gm, args)
    ep.tuned_report = b.report
    return ep
