"""run.py — tuned's torch.compile backend against eager PyTorch and
torch.compile with Inductor's default mode, on the CPU, in one run:

    OMP_WAIT_POLICY=PASSIVE build/torch-venv/bin/python bench/torch/run.py [--trials N] [--models a,b] [--json OUT]

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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import tuned.torch  # noqa: E402


class Block(nn.Module):
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (D // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class BasicBlock(nn.Module):
    def __init__(self, c=64):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


def models():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 512))
    block = Block()
    return {"block-b1": (block, torch.randn(1, 64, 256)), "block-b8": (block, torch.randn(8, 64, 256)),
            "mlp": (mlp, torch.randn(64, 512)), "resnet-block": (BasicBlock(), torch.randn(1, 64, 28, 28))}


def interleaved(fns, rounds=7, secs=0.3):
    """Median seconds of each function, timed in interleaved rounds."""
    for f in fns:
        f()
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for f, s in zip(fns, samples):
            end = time.perf_counter() + secs / rounds
            while True:
                t0 = time.perf_counter()
                f()
                t1 = time.perf_counter()
                s.append(t1 - t0)
                if t1 >= end:
                    break
    return [sorted(s)[len(s) // 2] for s in samples]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--models", default="block-b1,block-b8,mlp,resnet-block")
    ap.add_argument("--db", default=os.path.join("build", "bench-torch.db"))
    ap.add_argument("--json")
    a = ap.parse_args()
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
            eager_s, ind_s, tun_s = interleaved([lambda: model(x), lambda: ind(x), lambda: tun(x)])
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
                print(f"    {r.name:36} {r.status:9} {r.detail or ''}"
                      f"{'' if r.status != 'tuned' else f' {r.tuned_secs * 1e6:.1f} us vs torch {r.torch_secs * 1e6:.1f} us'}",
                      flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
