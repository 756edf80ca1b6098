"""run.py — tuned's torch.compile backend against eager PyTorch and
torch.compile with Inductor's default mode, on the CPU, in one run:

    OMP_WAIT_POLICY=PASSIVE build/torch-venv/bin/python bench/torch/run.py [--trials N] [--models a,b]
        [--threads T] [--db PATH] [--json OUT]

Models (float32, inference): a transformer block written as ordinary PyTorch
(pre-norm multi-head attention + GELU MLP, d=256, 4 heads, 64 tokens) at
batch 1 and 8, an MLP (512-1024-1024-512, batch 64) and a ResNet basic block
(64 channels, 28x28, batch 1).  Each model is compiled three ways; the
tuned backend tunes every task for --trials trials (in-process, into
--db) and keeps a kernel only where it beat torch on the same inputs.  The
three are then timed in interleaved rounds (median of every sample; on a
shared machine the load falls on all three alike) and checked against eager.
Printed: per model the medians, tuned/Inductor and tuned/eager speed-ups,
which ops run tuned, and any op whose tuned kernel is slower than eager (none
by construction: the backend's race)."""

import argparse
import json
import os
import sys
import time

import torch

nn, F = torch.nn, torch.nn.functional
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "examples")]
import tuned.torch  # noqa: E402
from torch_models import BasicBlock, Block  # noqa: E402
from tuned.torch import race  # noqa: E402


def models():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 512))
    block = Block()
    return {"block-b1": (block, torch.randn(1, 64, 256)), "block-b8": (block, torch.randn(8, 64, 256)),
            "mlp": (mlp, torch.randn(64, 512)), "resnet-block": (BasicBlock(), torch.randn(1, 64, 28, 28))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--models", default="block-b1,block-b8,mlp,resnet-block")
    ap.add_argument("--db", default=os.path.join("build", "bench-torch.db"))
    ap.add_argument("--json")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads (tuned's kernels share torch's OpenMP runtime); 0: torch's default")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    all_models, rows = models(), []
    for name in a.models.split(","):
        model, x = all_models[name]
        model.eval()
        torch._dynamo.reset()
        b = tuned.torch.backend(target="cpu", trials=a.trials, db=a.db)
        t0 = time.time()
        with torch.no_grad():
            want = model(x)
            ind = torch.compile(model)
            ind(x)
            t_ind = time.time() - t0
            tun = torch.compile(model, backend=b)
            t1 = time.time()
            got = tun(x)
            t_tun = time.time() - t1
            err = float((got - want).abs().max())
            eager_s, ind_s, tun_s = race(lambda: model(x), lambda: ind(x), lambda: tun(x), rounds=7, min_secs=0.3)
        tuned_ops = [r for r in b.report if r.status == "tuned"]
        slower = [r for r in b.report if r.status == "tuned" and r.torch_secs < r.tuned_secs]
        row = {"model": name, "eager_ms": eager_s * 1e3, "inductor_ms": ind_s * 1e3, "tuned_ms": tun_s * 1e3,
               "tuned_vs_inductor": ind_s / tun_s, "tuned_vs_eager": eager_s / tun_s, "max_error": err,
               "trials": a.trials, "compile_s": {"inductor": t_ind, "tuned": t_tun},
               "ops": [{"name": r.name, "status": r.status, "record": r.record, "tuned_us": (r.tuned_secs or 0) * 1e6,
                        "torch_us": (r.torch_secs or 0) * 1e6, "detail": r.detail}
                       for r in b.report if r.status != "torch"],
               "slower_than_eager": [r.name for r in slower]}
        rows.append(row)
        print(f"{name:13} eager {row['eager_ms']:8.3f} ms  inductor {row['inductor_ms']:8.3f} ms  tuned "
              f"{row['tuned_ms']:8.3f} ms  tuned/inductor {row['tuned_vs_inductor']:.2f}x  tuned/eager "
              f"{row['tuned_vs_eager']:.2f}x  max error {err:.1e}  ({len(tuned_ops)} ops tuned; compile "
              f"{t_tun:.0f} s)", flush=True)
        for r in b.report:
            if r.status != "torch":
                timing = (f" {r.tuned_secs * 1e6:.1f} us vs torch {r.torch_secs * 1e6:.1f} us" if r.status == "tuned"
                        else "")
                print(f"    {r.name:36} {r.status:9} {r.detail or ''}{timing}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
