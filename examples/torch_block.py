#!/usr/bin/env python3
"""torch_block.py — a small transformer block (single-head attention and a
GELU MLP, each behind a layer norm) optimized with tuned.torch: its ops are
extracted from the torch.fx graph, tuned on the daemon, and run as tuned
kernels where they match eager mode; prints what runs where and the time of
each tuned op and of the whole block against eager PyTorch.

    build/daemon/tuned --target cpu &
    PYTHONPATH=python python3 examples/torch_block.py --trials 64

Options: --socket PATH, --tokens T (64), --dim D (128), --trials N (32),
--repeat R (timing repetitions, 50), --min-speedup X (1.0: a kernel is used
only where it beat torch on the same inputs; 0: wherever it is right)."""

import argparse
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tuned  # noqa: E402
import tuned.torch  # noqa: E402


class Block(nn.Module):
    """x + attention(ln1(x)), then + mlp(ln2(.)): one head, D -> 4D -> D MLP."""

    def __init__(self, dim):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim) for _ in range(4))
        self.up, self.act, self.down = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.scale = 1.0 / math.sqrt(dim)

    def forward(self, x):
        h = self.ln1(x)
        scores = torch.matmul(self.q(h), self.k(h).t()) * self.scale
        x = x + self.out(torch.matmul(scores.softmax(-1), self.v(h)))
        return x + self.down(self.act(self.up(self.ln2(x))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="the daemon's socket (default: $TUNED_SOCKET or the default one)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--trials", type=int, default=32, help="tuning trials per op")
    ap.add_argument("--repeat", type=int, default=50, help="timing repetitions (the median is printed)")
    ap.add_argument("--min-speedup", type=float, default=1.0,
                    help="a kernel replaces torch only when this much faster on the same inputs (0: whenever right)")
    a = ap.parse_args()

    torch.manual_seed(0)
    model, x = Block(a.dim).eval(), torch.randn(a.tokens, a.dim)
    plan = tuned.torch.extract(model, (x,))
    print(f"{len(plan.tasks)} tuning tasks in the block's graph:")
    for t in plan.tasks:
        print(f"  {t.name}: {t.kind}{''.join(' + ' + e for e in t.epilogue)} {t.params}")
    try:
        fast = tuned.torch.optimize(model, (x,), trials=a.trials, socket=a.socket, min_speedup=a.min_speedup)
    except tuned.ConnectError as e:
        sys.exit(f"torch_block: {e}\ntorch_block: start the daemon first, e.g. `tuned --target cpu &`")
    print(fast.tuned_report)

    rows = tuned.torch.profile(model, fast, (x,), repeat=a.repeat)
    print(f"\n{'op':<36} {'tuned us':>10} {'torch us':>10} {'speed-up':>9}")
    for name, tuned_secs, torch_secs in rows:
        label = "whole block (vs eager)" if name == "model" else name
        print(f"{label:<36} {tuned_secs * 1e6:>10.1f} {torch_secs * 1e6:>10.1f} {torch_secs / tuned_secs:>8.2f}x")
    with torch.no_grad():
        err = (fast(x) - model(x)).abs().max().item()
    print(f"max |optimized - eager| = {err:.2e}")


if __name__ == "__main__":
    main()
