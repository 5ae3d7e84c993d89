#!/usr/bin/env python3
"""torch baselines at the H3 shapes (M = 8349): cuBLAS bf16 linears (x @ W^T), SDPA over 56 heads x 128, and an
eager RMSNorm + modulate; CUDA events, 3 warm-ups, median of 20. Prints a table; writes JSON lines to argv[1].
With --sustained (anywhere in the arguments): each op launched back to back for ~0.6 s after 0.2 s of warm-up, the
mean per launch: the protocol of `h3c_kernel_bench --energy`, so the two compare at the same power state."""
import json
import sys

import torch
import torch.nn.functional as F


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def sustained_ms(fn):
    once = max(median_ms(fn, reps=3), 1e-3)
    for _ in range(max(1, int(200 / once))):
        fn()
    n = max(3, int(600 / once))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def main():
    args = [a for a in sys.argv[1:] if a != "--sustained"]
    if len(args) != len(sys.argv) - 1:
        timed = sustained_ms
    else:
        timed = median_ms
    out = args[0] if len(args) > 0 else None
    M = int(args[1]) if len(args) > 1 else 8349
    H, I, Fd, heads, d = 5376, 7168, 14336, 56, 128
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []

    def rec(name, ms, flops=0.0, nbytes=0.0):
        rows.append({"impl": "torch", "kernel": name, "rows": M, "ms": ms, "tflops": flops / ms / 1e9,
                     "gbps": nbytes / ms / 1e6})
        print(f"{name:34s} {ms:9.3f} ms  {flops / ms / 1e9:8.1f} TFLOP/s  {nbytes / ms / 1e6:8.1f} GB/s", flush=True)

    for name, K, N in [("qkv (fused to_q/k/v)", H, 3 * I), ("to_out", I, H), ("fc1", H, 2 * Fd), ("fc2", Fd, H)]:
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=g)
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16, generator=g) * 0.01
        ms = timed(lambda: F.linear(x, w))
        rec("cuBLAS " + name, ms, 2.0 * M * K * N, 2.0 * (M * K + K * N + M * N))
        del x, w
    q = torch.randn(1, heads, M, d, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn_like(q)
    v = torch.randn_like(q)
    ms = timed(lambda: F.scaled_dot_product_attention(q, k, v))
    rec("SDPA 56x128 (default backend)", ms, 4.0 * M * M * d * heads, 4.0 * M * heads * d * 2)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for be, nm in [(SDPBackend.FLASH_ATTENTION, "flash"), (SDPBackend.CUDNN_ATTENTION, "cudnn")]:
            try:
                with sdpa_kernel(be):
                    ms = timed(lambda: F.scaled_dot_product_attention(q, k, v))
                rec(f"SDPA 56x128 ({nm})", ms, 4.0 * M * M * d * heads, 4.0 * M * heads * d * 2)
            except Exception as e:  # backend unavailable
                print(f"SDPA {nm}: unavailable ({e})")
    except ImportError:
        pass
    # The backward of the same attention (FlashAttention-2's work: 2.5x the forward's), by torch autograd.
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    do = torch.randn_like(q)
    for be, nm in [(None, "default backend"), ("FLASH_ATTENTION", "flash"), ("CUDNN_ATTENTION", "cudnn")]:
        try:
            from contextlib import nullcontext
            from torch.nn.attention import SDPBackend, sdpa_kernel
            ctx = nullcontext() if be is None else sdpa_kernel(getattr(SDPBackend, be))
            with ctx:
                o = F.scaled_dot_product_attention(qg, kg, vg)  # (not `out`: the JSON path's name)
                ms = timed(lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True))
            rec(f"SDPA backward 56x128 ({nm})", ms, 10.0 * M * M * d * heads, 12.0 * M * heads * d * 2)
            del o
        except Exception as e:  # backend unavailable
            print(f"SDPA backward {nm}: unavailable ({e})")
    del qg, kg, vg, do
    x = torch.randn(M, H, device=dev, dtype=torch.bfloat16, generator=g)
    wn = torch.randn(H, device=dev, dtype=torch.bfloat16, generator=g)
    sh = torch.randn(M, H, device=dev, dtype=torch.bfloat16, generator=g)
    sc = torch.randn(M, H, device=dev, dtype=torch.bfloat16, generator=g)

    def rmsmod():
        n = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16) * wn
        return n * (1 + sc) + sh

    ms = timed(rmsmod)
    rec("eager rms_norm + modulate", ms, 0, 4.0 * M * H)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, peak allocated "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    if out:
        with open(out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
