#!/usr/bin/env python3
"""gpu_baselines — the vendor-library and Triton baselines that scripts/gpu-check
compares tuned's kernels with, measured in the same run on the same GPU.

For each case: PyTorch (cuBLAS for matmul and batched matmul, cuDNN for conv2d,
PyTorch's own softmax kernel) and, where written here, a Triton kernel with
autotune.  The GEMMs come in fp32 ("matmul"), fp16 ("hmatmul"), bf16
("bfmatmul") and batched fp16 ("hbmm": BATCHxMxNxK, float32 out as
workloads/batch_matmul_f16.tw has it); conv2d in fp32 ("conv2d") and in fp16
channels-last ("hconv2d", NHWC as workloads/conv2d_nhwc_f16.tw, fp16 out,
cuDNN's fp32 accumulation); the 16-bit ones accumulate in fp32
(cuBLAS's default, tl.dot's accumulator) and autotune over tiles of K 64 that
suit Hopper's warpgroup MMA.  Times
are medians from triton.testing.do_bench (CUDA events, L2 flushed between
repeats, as tuned's worker does).  fp32 matmuls run in full fp32 (TF32 off in
PyTorch, input_precision="ieee" in Triton): tuned does not use TF32 unless a
job asks.  Every result is checked against a float64 reference first.

The float16 operators of MetaSchedule's suite ("op16:C1D", C2D, DIL, C3D, CBR,
TBG: workloads/*_f16.tw at their defaults) against cuDNN (torch's convolutions,
channels-last) and cuBLAS.

  python3 bench/gpu_baselines.py --json OUT.json [--cases matmul:1024,hmatmul:4096,hbmm:16x1024x1024x1024,op16:C2D,...]
"""
import argparse
import json
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

try:
    import triton
    import triton.language as tl
    from triton.testing import do_bench
except Exception as exc:  # Triton missing: time with CUDA events ourselves
    triton = None
    print(f"gpu_baselines: no Triton ({exc}); timing with CUDA events", file=sys.stderr)

    def do_bench(fn, warmup=25, rep=100, return_mode="median"):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        times.sort()
        return times[len(times) // 2]


def rel_err(out, ref):
    out = out.double()
    return float(torch.linalg.norm((out - ref).flatten()) / torch.linalg.norm(ref.flatten()))


def bench(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e-3  # seconds


if triton is not None:
    # (BM, BN, BK, warps, stages): fp32 tiles, and 16-bit tiles of K 64
    # (one 128-byte row per stage, what Hopper's warpgroup MMA reads)
    _F32_TILES = [(128, 128, 32, 8, 3), (128, 128, 16, 8, 4), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
                  (128, 256, 32, 8, 3), (256, 128, 32, 8, 3), (64, 64, 32, 4, 4), (128, 128, 64, 8, 2)]
    _F16_TILES = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4),
                  (128, 64, 64, 4, 4), (64, 256, 32, 4, 4)]

    def _configs(tiles):
        return [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GM": 8}, num_warps=w, num_stages=s)
                for bm, bn, bk, w, s in tiles]

    def _mm_body(a, b, c, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        # one BM x BN tile of batch program_id(1), tiles in grouped order
        pid = tl.program_id(0)
        bat = tl.program_id(1)
        a += bat * sab
        b += bat * sbb
        c += bat * scb
        npm, npn = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = GM * npn
        first = (pid // group) * GM
        gsz = min(npm - first, GM)
        pm = first + (pid % group) % gsz
        pn = (pid % group) // gsz
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ka = k0 + rk
            x = tl.load(a + rm[:, None] * sam + ka[None, :] * sak,
                        mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            y = tl.load(b + ka[:, None] * sbk + rn[None, :] * sbn,
                        mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc, input_precision="ieee" if x.dtype == tl.float32 else None)
        tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    # one kernel, autotuned separately over the fp32 and the 16-bit tiles
    _mm_jit = triton.jit(_mm_body)
    _mm_kernel = triton.autotune(configs=_configs(_F32_TILES), key=["M", "N", "K"])(_mm_jit)
    _mm16_kernel = triton.autotune(configs=_configs(_F16_TILES), key=["M", "N", "K"])(_mm_jit)

    def triton_matmul(a, b, out_dtype=None):
        """a @ b for 2-D or batched 3-D operands, the product in out_dtype (default a's)."""
        a3, b3 = (a, b) if a.dim() == 3 else (a.unsqueeze(0), b.unsqueeze(0))
        nb, M, K = a3.shape
        N = b3.shape[2]
        c3 = torch.empty((nb, M, N), device=a.device, dtype=out_dtype or a.dtype)
        kernel = _mm_kernel if a.dtype == torch.float32 else _mm16_kernel
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]), nb)
        kernel[grid](a3, b3, c3, M, N, K, a3.stride(0), a3.stride(1), a3.stride(2), b3.stride(0), b3.stride(1),
                     b3.stride(2), c3.stride(0), c3.stride(1), c3.stride(2))
        return c3 if a.dim() == 3 else c3[0]

    @triton.jit
    def _softmax_kernel(x, y, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        v = tl.load(x + row * N + cols, mask=cols < N, other=-float("inf"))
        v = v - tl.max(v, axis=0)
        e = tl.exp(v)
        tl.store(y + row * N + cols, e / tl.sum(e, axis=0), mask=cols < N)

    def triton_softmax(x):
        M, N = x.shape
        y = torch.empty_like(x)
        block = triton.next_power_of_2(N)
        _softmax_kernel[(M,)](x, y, N, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return y


def run_impls(impls, ref, flop):
    """Checks and times each (name, fn): rows of secs, GFLOP/s and the error against ref."""
    rows = []
    for name, fn in impls:
        err = rel_err(fn(), ref)
        s = bench(fn)
        rows.append({"impl": name, "secs": s, "gflops": flop / s * 1e-9, "rel_err": err})
    return rows


def case_matmul(M, N, K, dtype):
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    ref = a.double() @ b.double()
    impls = [("torch (cuBLAS)", lambda: a @ b)]
    if triton is not None:
        impls.append(("triton (autotune)", lambda: triton_matmul(a, b)))
    return run_impls(impls, ref, 2.0 * M * N * K)


def torch_bmm_f32(a, b):
    """torch.bmm with a float32 result from 16-bit operands where this PyTorch has out_dtype
    (cuBLAS writes float32 as tuned's kernel does), else None."""
    try:
        out = torch.bmm(a[:1, :8, :8], b[:1, :8, :8], out_dtype=torch.float32)
        if out.dtype == torch.float32:
            return lambda: torch.bmm(a, b, out_dtype=torch.float32), "torch.bmm (cuBLAS)"
    except (TypeError, RuntimeError):
        pass
    return None


def case_bmm(B, M, N, K, dtype):
    a = torch.randn(B, M, K, device="cuda", dtype=dtype)
    b = torch.randn(B, K, N, device="cuda", dtype=dtype)
    ref = torch.bmm(a.double(), b.double())
    f32 = torch_bmm_f32(a, b)
    # without out_dtype, cuBLAS writes 16-bit results: half the output bytes of tuned's
    impls = [(f32[1], f32[0]) if f32 else ("torch.bmm (cuBLAS, fp16 out)", lambda: torch.bmm(a, b))]
    if triton is not None:
        impls.append(("triton (autotune)", lambda: triton_matmul(a, b, torch.float32)))
    return run_impls(impls, ref, 2.0 * B * M * N * K)


def case_softmax(M, N):
    x = torch.randn(M, N, device="cuda")
    ref = torch.softmax(x.double(), dim=1)
    nbytes = 2.0 * M * N * 4
    rows = []
    impls = [("torch", lambda: torch.softmax(x, dim=1))]
    if triton is not None:
        impls.append(("triton", lambda: triton_softmax(x)))
    for name, fn in impls:
        err = rel_err(fn(), ref)
        s = bench(fn)
        rows.append({"impl": name, "secs": s, "gbps": nbytes / s * 1e-9, "rel_err": err})
    return rows


def case_conv2d(N, C, H, W, F, R, S, P, half=False):
    """3x3 conv: fp32 NCHW, or (half) fp16 NHWC as conv2d_nhwc_f16.tw (channels_last, cuDNN's implicit GEMM)."""
    x = torch.randn(N, C, H, W, device="cuda")
    w = torch.randn(F, C, R, S, device="cuda")
    if half:
        x, w = (t.half().to(memory_format=torch.channels_last) for t in (x, w))
    ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=P)
    flop = 2.0 * N * F * (H + 2 * P - R + 1) * (W + 2 * P - S + 1) * C * R * S
    fn = lambda: torch.nn.functional.conv2d(x, w, padding=P)
    err = rel_err(fn(), ref)
    s = bench(fn)
    return [{"impl": "torch (cuDNN)", "secs": s, "gflops": flop / s * 1e-9, "rel_err": err}]


# The float16 operators of MetaSchedule's suite that tuned tunes as implicit
# GEMMs on tensor cores (workloads/*_f16.tw at their defaults, the suite's
# first configs): cuDNN through torch's convolutions (channels-last), cuBLAS
# for attention's Q K^T.  CAP (capsule) has no single torch call: left out.
OPS16 = {  # tag: (conv dims, N, C, spatial, F, kernel, stride, padding, dilation)
    "C1D": (1, 1, 64, (256,), 128, 3, 2, 1, 1),
    "C2D": (2, 1, 3, (224, 224), 64, 7, 2, 3, 1),
    "DIL": (2, 1, 3, (224, 224), 64, 7, 2, 3, 2),
    "C3D": (3, 1, 3, (16, 224, 224), 64, 7, 2, 3, 1),
    "CBR": (2, 1, 3, (224, 224), 64, 7, 2, 3, 1),
}


def case_op16(tag):
    """One float16 operator of the suite ("op16:C2D"): cuDNN's time, checked against float64."""
    F_ = torch.nn.functional
    if tag == "TBG":  # Q K^T per head, [batch, seq, head, dim], float32 out as the workload has it
        q = torch.randn(1, 128, 12, 64, device="cuda", dtype=torch.float16)
        k = torch.randn(1, 128, 12, 64, device="cuda", dtype=torch.float16)
        ref = torch.matmul(q.double().permute(0, 2, 1, 3), k.double().permute(0, 2, 3, 1))
        fn = lambda: torch.matmul(q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1)).float()
        return run_impls([("torch.matmul (cuBLAS)", fn)], ref, 2.0 * 12 * 128 * 128 * 64)
    nd, n, c, sp, f, ks, st, pad, dil = OPS16[tag]
    conv = (F_.conv1d, F_.conv2d, F_.conv3d)[nd - 1]
    fmt = {1: torch.contiguous_format, 2: torch.channels_last, 3: torch.channels_last_3d}[nd]
    x = torch.randn(n, c, *sp, device="cuda").half().to(memory_format=fmt)
    w = torch.randn(f, c, *([ks] * nd), device="cuda").half().to(memory_format=fmt)
    bias, scale, off = (torch.randn(f, device="cuda") for _ in range(3))
    out_sp = [(d + 2 * pad - dil * (ks - 1) - 1) // st + 1 for d in sp]
    flop = 2.0 * n * f * c * ks ** nd
    for d in out_sp:
        flop *= d
    kw = dict(stride=st, padding=pad, dilation=dil)
    ref = conv(x.double(), w.double(), **kw)
    if tag == "CBR":  # bias, batch norm and ReLU after the conv, as conv2d_nhwc_bn_relu_f16.tw
        shape = [1, f] + [1] * nd
        ref = torch.relu((ref + bias.double().view(shape)) * scale.double().view(shape) + off.double().view(shape))
        hb, hs, ho = (t.half().view(shape) for t in (bias, scale, off))
        fn = lambda: torch.relu((conv(x, w, **kw) + hb) * hs + ho)
    else:
        fn = lambda: conv(x, w, **kw)
    return run_impls([("torch (cuDNN)", fn)], ref, flop)


def copy_bandwidth():
    n = 1 << 28  # 1 GiB of fp32
    x = torch.empty(n, device="cuda")
    y = torch.empty_like(x)
    s = bench(lambda: y.copy_(x))
    return {"impl": "device copy", "secs": s, "gbps": 2.0 * n * 4 / s * 1e-9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--cases", default="matmul:1024,softmax:4096x4096,conv2d:1x64x56x56x64")
    args = ap.parse_args()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": getattr(triton, "__version__", None), "cases": {}}
    out["copy"] = copy_bandwidth()
    for spec in args.cases.split(","):
        kind, _, dims = spec.partition(":")
        d = [int(v) for v in dims.split("x")] if kind != "op16" else []
        try:
            if kind == "matmul":
                M, N, K = (d * 3)[:3] if len(d) == 1 else d
                rows = case_matmul(M, N, K, torch.float32)
            elif kind in ("hmatmul", "bfmatmul"):
                M, N, K = (d * 3)[:3] if len(d) == 1 else d
                rows = case_matmul(M, N, K, torch.float16 if kind == "hmatmul" else torch.bfloat16)
            elif kind == "hbmm":
                rows = case_bmm(*d, torch.float16)
            elif kind == "softmax":
                rows = case_softmax(*d)
            elif kind == "op16":
                rows = case_op16(dims)
            elif kind in ("conv2d", "hconv2d"):
                n, c, h, w, f = d
                rows = case_conv2d(n, c, h, w, f, 3, 3, 1, half=kind == "hconv2d")
            else:
                raise ValueError(f"unknown case {kind}")
        except Exception as exc:  # one broken baseline must not hide the others
            rows = [{"impl": "error", "error": repr(exc)}]
        out["cases"][spec] = rows
        for r in rows:
            rate = f"{r['gflops']:.0f} GFLOP/s" if "gflops" in r else (
                f"{r['gbps']:.0f} GB/s" if "gbps" in r else r.get("error", ""))
            secs = f"{r['secs'] * 1e3:.4f} ms" if "secs" in r else ""
            print(f"baseline {spec:28s} {r['impl']:18s} {secs:>12s} {rate:>16s} "
                  f"err {r.get('rel_err', float('nan')):.1e}")
    print(f"baseline device copy {out['copy']['gbps']:.0f} GB/s (read + write)")
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
