#!/usr/bin/env python3
"""tvm_ms — TVM MetaSchedule on the bench/cpu cases at equal trials.

Builds the same computation as workloads/NAME.tw in TVM's tensor expression
language (same shapes, layouts and dtypes; the parameters are the .tw file's,
given with --set), tunes it with MetaSchedule (tune_tir: post-order-apply
design space, evolutionary search, XGBoost cost model, 64 candidates per
iteration, LocalBuilder/LocalRunner; the build function is the default one
without its tensor-intrinsic import, see build_without_intrinsics) for --trials candidates with --seed on the target
llvm -mcpu=native -num-cores N, checks the best kernel against a numpy
float64 reference, re-times it alone the way tuned's worker does (a warm-up,
then repeats until 0.1 s and at least 3, the median) and prints one JSON
object: the same shape as a bench/cpu/run row's "tuned" part.

Needs TVM from PyPI: bench/cpu/install-tvm [VENV] makes a virtual environment
with apache-tvm 0.27.0.post1 and the packages MetaSchedule needs (it pins
apache-tvm-ffi 0.1.14.post0: the 0.1.15.post2 that pip picks by default
segfaults in tvm.ir.save_json); bench/cpu/run runs this script when
TVM_PYTHON names that environment's python.

  python3 bench/cpu/tvm_ms.py CASE [--set NAME=VALUE ...] --trials N [--seed S]
                              [--threads N] [--work-dir DIR] [--json OUT]
  CASE: matmul, batch_matmul, gemv, conv2d_nhwc, dense_bias_gelu, softmax, layer_norm
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time

import numpy as np

CASES = {
    "matmul": {"M": 1024, "N": 1024, "K": 1024},
    "batch_matmul": {"BATCH": 16, "M": 128, "N": 128, "K": 64},
    "gemv": {"M": 4096, "N": 4096},
    "conv2d_nhwc": {"N": 1, "H": 56, "W": 56, "C": 64, "F": 64, "R": 3, "S": 3, "P": 1},
    "dense_bias_gelu": {"B": 128, "IN": 768, "OUT": 3072},
    "softmax": {"M": 256, "N": 1024},
    "layer_norm": {"M": 4096, "N": 1024},
}


def build(case, p):
    """(list of TE tensors: inputs then the output, numpy reference function, FLOPs)."""
    from tvm import te
    f32 = "float32"
    if case == "matmul":
        M, N, K = p["M"], p["N"], p["K"]
        A = te.placeholder((M, K), f32, "A")
        B = te.placeholder((K, N), f32, "B")
        k = te.reduce_axis((0, K), "k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
        return [A, B, C], lambda a, b: a @ b, 2.0 * M * N * K
    if case == "batch_matmul":
        Bt, M, N, K = p["BATCH"], p["M"], p["N"], p["K"]
        A = te.placeholder((Bt, M, K), f32, "A")
        B = te.placeholder((Bt, K, N), f32, "B")
        k = te.reduce_axis((0, K), "k")
        C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), "C")
        return [A, B, C], lambda a, b: a @ b, 2.0 * Bt * M * N * K
    if case == "gemv":
        M, N = p["M"], p["N"]
        A = te.placeholder((M, N), f32, "A")
        x = te.placeholder((N,), f32, "x")
        j = te.reduce_axis((0, N), "j")
        y = te.compute((M,), lambda i: te.sum(A[i, j] * x[j], axis=j), "y")
        return [A, x, y], lambda a, v: a @ v, 2.0 * M * N
    if case == "conv2d_nhwc":
        Nn, H, W, C, F, R, S, P = (p[x] for x in "N H W C F R S P".split())
        OH, OW = H + 2 * P - R + 1, W + 2 * P - S + 1
        X = te.placeholder((Nn, H, W, C), f32, "X")
        Wt = te.placeholder((R, S, C, F), f32, "Wt")
        Xp = te.compute((Nn, H + 2 * P, W + 2 * P, C),
                        lambda n, h, w, c: te.if_then_else(
                            te.all(h >= P, h < H + P, w >= P, w < W + P), X[n, h - P, w - P, c], 0.0), "Xp")
        r = te.reduce_axis((0, R), "r")
        s = te.reduce_axis((0, S), "s")
        c = te.reduce_axis((0, C), "c")
        Y = te.compute((Nn, OH, OW, F),
                       lambda n, y, x, f: te.sum(Xp[n, y + r, x + s, c] * Wt[r, s, c, f], axis=[r, s, c]), "Y")

        def ref(x, w):
            xp = np.pad(x, ((0, 0), (P, P), (P, P), (0, 0)))
            out = np.zeros((Nn, OH, OW, F))
            for rr in range(R):
                for ss in range(S):
                    out += xp[:, rr:rr + OH, ss:ss + OW, :] @ w[rr, ss]
            return out
        return [X, Wt, Y], ref, 2.0 * Nn * OH * OW * F * R * S * C
    if case == "dense_bias_gelu":
        Bn, IN, OUT = p["B"], p["IN"], p["OUT"]
        X = te.placeholder((Bn, IN), f32, "X")
        Wm = te.placeholder((OUT, IN), f32, "W")
        bias = te.placeholder((OUT,), f32, "bias")
        k = te.reduce_axis((0, IN), "k")
        D = te.compute((Bn, OUT), lambda b, o: te.sum(X[b, k] * Wm[o, k], axis=k), "D")
        Z = te.compute((Bn, OUT), lambda b, o: D[b, o] + bias[o], "Z")
        Y = te.compute((Bn, OUT), lambda b, o: 0.5 * Z[b, o] * (1.0 + te.tanh(
            0.7978845608028654 * (Z[b, o] + 0.044715 * Z[b, o] * Z[b, o] * Z[b, o]))), "Y")

        def ref(x, w, b):
            z = x @ w.T + b
            return 0.5 * z * (1 + np.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)))
        return [X, Wm, bias, Y], ref, 2.0 * Bn * IN * OUT
    if case == "softmax":
        M, N = p["M"], p["N"]
        A = te.placeholder((M, N), f32, "A")
        j1 = te.reduce_axis((0, N), "j1")
        rmax = te.compute((M,), lambda i: te.max(A[i, j1], axis=j1), "rmax")
        E = te.compute((M, N), lambda i, j: te.exp(A[i, j] - rmax[i]), "E")
        j2 = te.reduce_axis((0, N), "j2")
        rsum = te.compute((M,), lambda i: te.sum(E[i, j2], axis=j2), "rsum")
        S = te.compute((M, N), lambda i, j: E[i, j] / rsum[i], "S")

        def ref(a):
            e = np.exp(a - a.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        return [A, S], ref, 5.0 * M * N
    if case == "layer_norm":
        M, N = p["M"], p["N"]
        X = te.placeholder((M, N), f32, "X")
        g = te.placeholder((N,), f32, "gamma")
        bt = te.placeholder((N,), f32, "beta")
        j1 = te.reduce_axis((0, N), "j1")
        s1 = te.compute((M,), lambda i: te.sum(X[i, j1], axis=j1), "s1")
        j2 = te.reduce_axis((0, N), "j2")
        s2 = te.compute((M,), lambda i: te.sum(X[i, j2] * X[i, j2], axis=j2), "s2")
        Y = te.compute((M, N), lambda i, j: (X[i, j] - s1[i] / N) / te.sqrt(
            s2[i] / N - (s1[i] / N) * (s1[i] / N) + 1e-5) * g[j] + bt[j], "Y")

        def ref(x, gm, bb):
            mean = x.mean(axis=1, keepdims=True)
            var = (x * x).mean(axis=1, keepdims=True) - mean * mean
            return (x - mean) / np.sqrt(var + 1e-5) * gm + bb
        return [X, g, bt, Y], ref, 8.0 * M * N
    if case in TE_CASES:
        return te_case(case, p)
    raise SystemExit(f"tvm_ms: unknown case '{case}' (cases: {', '.join(CASES)})")


# MetaSchedule's own single-operator benchmark (meta_schedule/testing/te_workload.py): each of
# these workloads/NAME.tw files is written after one of its functions; the .tw parameters map
# onto the function's arguments here.  The reference is the same function built unscheduled.
TE_CASES = {
    "conv1d_nlc": ("conv1d_nlc", {"N": 1, "L": 256, "CI": 64, "CO": 128, "KL": 3, "ST": 2, "P": 1, "D": 1, "G": 1},
                   lambda p: (p["N"], p["L"], p["CI"], p["CO"], p["KL"], p["ST"], p["P"], p["D"], p["G"])),
    "conv2d_nhwc_sdg": ("conv2d_nhwc", {"N": 1, "H": 224, "W": 224, "CI": 3, "CO": 64, "KS": 7, "ST": 2, "P": 3,
                                        "D": 1, "G": 1},
                        lambda p: (p["N"], p["H"], p["W"], p["CI"], p["CO"], p["KS"], p["ST"], p["P"], p["D"], p["G"])),
    "conv3d_ndhwc": ("conv3d_ndhwc", {"N": 1, "DD": 16, "H": 224, "W": 224, "CI": 3, "CO": 64, "KS": 7, "ST": 2,
                                      "P": 3, "D": 1, "G": 1},
                     lambda p: (p["N"], p["DD"], p["H"], p["W"], p["CI"], p["CO"], p["KS"], p["ST"], p["P"], p["D"],
                                p["G"])),
    "depthwise_conv2d_nhwc": ("depthwise_conv2d_nhwc", {"N": 1, "H": 112, "W": 112, "C": 32, "KS": 3, "ST": 1,
                                                        "P": 1, "D": 1},
                              lambda p: (p["N"], p["H"], p["W"], p["C"], p["KS"], p["ST"], p["P"], p["D"])),
    "conv2d_transpose_nhwc": ("conv2d_transpose_nhwc", {"N": 1, "H": 4, "W": 4, "CI": 512, "CO": 256, "KS": 4,
                                                        "P": 1},
                              lambda p: (p["N"], p["H"], p["W"], p["CI"], p["CO"], p["KS"], 2, p["P"])),
    "conv2d_capsule_nhwijc": ("conv2d_capsule_nhwijc", {"N": 1, "H": 16, "W": 16, "CI": 32, "CO": 32, "KS": 3,
                                                        "ST": 2, "P": 1, "CAP": 4},
                              lambda p: (p["N"], p["H"], p["W"], p["CI"], p["CO"], p["KS"], p["ST"], p["P"], p["CAP"])),
    "norm_bmn": ("norm_bmn", {"B": 1, "M": 256, "N": 256}, lambda p: (p["B"], p["M"], p["N"])),
    "conv2d_nhwc_bn_relu": ("conv2d_nhwc_bn_relu", {"N": 1, "H": 224, "W": 224, "CI": 3, "CO": 64, "KS": 7,
                                                    "ST": 2, "P": 3, "D": 1},
                            lambda p: (p["N"], p["H"], p["W"], p["CI"], p["CO"], p["KS"], p["ST"], p["P"], p["D"])),
    "transpose_batch_matmul": ("transpose_batch_matmul", {"BATCH": 1, "SEQ": 128, "HEADS": 12, "DIM": 64},
                               lambda p: (p["BATCH"], p["SEQ"], p["HEADS"], p["DIM"])),
}


def te_case(case, p):
    """A te_workload function's tensors, with its unscheduled build as the reference."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload
    fn, _, args = TE_CASES[case]
    tensors = list(getattr(te_workload, fn)(*args(p)))
    func = te.create_prim_func(tensors).with_attr("global_symbol", "main")
    naive = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    out_shape = [int(d) for d in tensors[-1].shape]

    def ref(*ins):
        dev = tvm.cpu(0)
        args_ = [tvm.runtime.tensor(x.astype("float32"), dev) for x in ins]
        args_.append(tvm.runtime.empty(out_shape, "float32", dev))
        naive["main"](*args_)
        return args_[-1].numpy().astype(np.float64)
    flops = 0.0  # bench/cpu/run takes FLOPs from tunectl check
    return tensors, ref, flops


def build_without_intrinsics(mod, target, _params):
    """MetaSchedule's default_build less its `import tvm.s_tir.tensor_intrin`: that import
    parses every tensor intrinsic's TVMScript (CUDA's included; 23 CPU-seconds here) in every
    build worker, and LocalBuilder starts fresh workers for every batch, so on this 2-core
    machine each batch's builds timed out (30 s) before compiling anything.  No CPU schedule
    of these cases tensorizes, so the import does nothing for them."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def history_of(db_dir):
    """Per-trial run times (mean of the runner's repeats; inf if the candidate failed), in the
    order MetaSchedule committed them to its JSON database."""
    times = []
    for name in sorted(os.listdir(db_dir)):
        if not name.endswith("tuning_record.json"):
            continue
        with open(os.path.join(db_dir, name)) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                rec = json.loads(line)[1]  # [workload index, [trace, run_secs, target, args_info]]
                secs = rec[1] if len(rec) > 1 else None
                ok = secs and all(isinstance(x, (int, float)) and x < 1e9 for x in secs)
                times.append(sum(secs) / len(secs) if ok else math.inf)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="cases and defaults: " + "; ".join(
                                     f"{c} " + " ".join(f"{k}={v}" for k, v in d.items()) for c, d in CASES.items()))
    ap.add_argument("case", choices=sorted(list(CASES) + list(TE_CASES)))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="workload parameter")
    ap.add_argument("--trials", type=int, required=True, help="candidates to measure (max_trials_global)")
    ap.add_argument("--seed", type=int, default=1, help="search seed (default 1)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="-num-cores and TVM_NUM_THREADS")
    ap.add_argument("--work-dir", help="keep MetaSchedule's logs and database here (default: a temporary dir)")
    ap.add_argument("--retime", action="store_true",
                    help="do not tune: take the best schedule from --work-dir's database (an earlier run's), "
                         "check and time it")
    ap.add_argument("--json", metavar="OUT", help="also write the JSON here")
    a = ap.parse_args()
    if a.trials < 1:
        ap.error("--trials must be >= 1")
    if a.retime and not (a.work_dir and os.path.exists(os.path.join(a.work_dir, "database_tuning_record.json"))):
        ap.error("--retime needs the --work-dir of an earlier run (with its database_tuning_record.json)")
    p = dict(CASES[a.case] if a.case in CASES else TE_CASES[a.case][1])
    for kv in a.set:
        name, eq, val = kv.partition("=")
        if not eq or name not in p:
            ap.error(f"--set {kv}: {a.case} has parameters {', '.join(p)} (NAME=VALUE)")
        try:
            p[name] = int(val)
        except ValueError:
            ap.error(f"--set {kv}: the value must be an integer")
    os.environ["TVM_NUM_THREADS"] = str(a.threads)

    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    tensors, ref, flops = build(a.case, p)
    func = te.create_prim_func(tensors).with_attr("global_symbol", "main")
    mod = tvm.IRModule({"main": func})
    # TVM 0.27 takes targets as dicts (the "llvm -mcpu=native -num-cores N" string form is gone),
    # and its wheel's LLVM default triple (x86_64-conda-linux-gnu) turns mcpu=native into
    # "generic" (no AVX): name the host CPU as LLVM sees it, for the plain Linux triple.
    from tvm.target import codegen
    target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu",
                                "mcpu": codegen.llvm_get_system_cpu(), "num-cores": a.threads})

    work = a.work_dir or tempfile.mkdtemp(prefix="tvm_ms-")
    t0 = time.monotonic()
    if a.retime:
        db = ms.database.JSONDatabase(work_dir=work, module_equality="structural")
    else:
        builder = ms.builder.LocalBuilder(max_workers=a.threads, f_build=build_without_intrinsics)
        db = ms.tune_tir(mod, target, work, max_trials_global=a.trials, num_trials_per_iter=64, seed=a.seed,
                         num_tuning_cores=a.threads, builder=builder)
    wall = time.monotonic() - t0
    sch = ms.tir_integration.compile_tir(db, mod, target)
    if sch is None:
        raise SystemExit(f"tvm_ms: MetaSchedule found no valid schedule for {a.case} in {a.trials} trials")
    lib = tvm.compile(sch.mod, target=target).jit()
    dev = tvm.cpu(0)
    rng = np.random.default_rng(a.seed)
    ins = [rng.uniform(-1, 1, [int(d) for d in t.shape]).astype("float32") for t in tensors[:-1]]
    out_shape = [int(d) for d in tensors[-1].shape]
    args = [tvm.runtime.tensor(x, dev) for x in ins] + [tvm.runtime.empty(out_shape, "float32", dev)]
    f = lib["main"]
    f(*args)
    got = args[-1].numpy().astype(np.float64)
    want = ref(*[x.astype(np.float64) for x in ins])
    err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
    if not err < 1e-4:
        raise SystemExit(f"tvm_ms: {a.case}: the tuned kernel's output is wrong (relative L2 error {err:.3g})")
    timer = lib.time_evaluator("main", dev, number=1, repeat=1)
    first = timer(*args).results[0]  # warm-up
    reps = max(3, min(1000, int(math.ceil(0.1 / max(first, 1e-9)))))
    secs = list(lib.time_evaluator("main", dev, number=1, repeat=reps)(*args).results)
    hist = history_of(os.path.join(work))
    best_so_far, best = [], math.inf
    for t in hist:
        best = min(best, t)
        best_so_far.append(best)
    t90 = next((i + 1 for i, b in enumerate(best_so_far) if b <= best / 0.9), None) if best < math.inf else None
    res = {
        "case": a.case, "params": p, "tool": "tvm-metaschedule", "version": tvm.__version__,
        "target": str(target), "threads": a.threads, "trials": a.trials, "seed": a.seed,
        "wall_s": None if a.retime else round(wall, 2), "retimed": a.retime, "measured": len(hist), "flops": flops,
        "search_best_secs": best if best < math.inf else None,
        "median_secs": median(secs), "min_secs": min(secs), "repeats": len(secs),
        "gflops": flops / median(secs) * 1e-9 if flops else None,
        "verify_rel_l2": err, "trial_to_90pct": t90,
        "best_so_far_secs": [b if b < math.inf else None for b in best_so_far],
    }
    text = json.dumps(res, indent=1)
    if a.json:
        with open(a.json, "w") as fo:
            fo.write(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
