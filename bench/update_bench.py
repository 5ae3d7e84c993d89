#!/usr/bin/env python3
"""Weights that change (issue 21), on the GPU: the time of a hot update of the whole 33B model from CUDA tensors
(target < 1 s) and the rate from pinned host memory (target >= 20 GB/s), and the time to merge and unmerge a rank-64
LoRA adapter on every block linear, through the Python package on a resident engine (synthetic weights).

    update_bench.py --plan PLANS/full --out OUT.jsonl [--host-gib 16]

Each update includes the whole contract: names and shapes checked, NaN / Inf scanned (torch on the device for CUDA
tensors, h3c's threads for host ones), the copies, and the device hashes of the written tensors (the ledger's
weights record). Prints one line per figure and appends them to OUT.jsonl."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

import h3c

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import st_numpy  # noqa: E402 - the one safetensors writer of the Python scripts


def write_lora(path, shapes, rank, seed):
    """A diffusers-layout adapter (transformer.<module>.lora_A/B.weight, float32) on every 2-D block weight."""
    g = torch.Generator().manual_seed(seed)
    arrays = {}
    for n, s in sorted(shapes.items()):
        if not n.startswith("transformer_blocks.") or len(s) != 2 or not n.endswith(".weight"):
            continue
        m = "transformer." + n[:-len(".weight")]
        for key, shape in ((m + ".lora_A.weight", (rank, s[1])), (m + ".lora_B.weight", (s[0], rank))):
            arrays[key] = (torch.randn(shape, generator=g) * 0.01).numpy().astype(np.float32)
    st_numpy.write(path, arrays)
    return len(arrays) // 2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plan", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--host-gib", type=float, default=16.0)
    p.add_argument("--lora-rank", type=int, default=64)
    p.add_argument("--tmp", default="/tmp")
    a = p.parse_args()
    rows = []

    def figure(name, **kw):
        rows.append({"bench": name, **kw})
        print(f"FIGURE {name}: " + ", ".join(f"{k} {v}" for k, v in kw.items()), flush=True)

    t0 = time.perf_counter()
    t = h3c.Transformer(plan=a.plan, synthetic=7, device="cuda")
    t.weights  # the upload and the first device hashes
    figure("load_and_hash", seconds=round(time.perf_counter() - t0, 3))
    shapes = {n: tuple(int(x) for x in s) for n, s in t._engine.weight_shapes.items()}
    dtypes = {n: {"BF16": torch.bfloat16, "F32": torch.float32}[d] for n, d in t._engine.weight_dtypes.items()}
    size = lambda n: int(np.prod(shapes[n])) * (2 if dtypes[n] == torch.bfloat16 else 4)  # noqa: E731
    total = sum(size(n) for n in shapes)

    sd = {n: torch.empty(shapes[n], dtype=dtypes[n], device="cuda").normal_(0, 0.02) for n in shapes}
    for rep in range(2):
        torch.cuda.synchronize()
        w0 = time.perf_counter()
        t.update_weights(sd)
        dt = time.perf_counter() - w0
        figure("update_all_from_cuda", rep=rep, tensors=len(sd), gib=round(total / 2**30, 2), seconds=round(dt, 3),
               gb_per_s=round(total / 1e9 / dt, 1))
    del sd
    torch.cuda.empty_cache()

    host, hb = {}, 0
    for n in sorted(shapes, key=size, reverse=True):
        if hb + size(n) > a.host_gib * 2**30:
            continue
        # Drawn on the device and copied into pinned memory: torch's CPU generator takes minutes for 16 GiB.
        host[n] = torch.empty(shapes[n], dtype=dtypes[n], pin_memory=True)
        host[n].copy_(torch.empty(shapes[n], dtype=dtypes[n], device="cuda").normal_(0, 0.02))
        hb += size(n)
    for rep in range(2):
        w0 = time.perf_counter()
        t.update_weights(host)
        dt = time.perf_counter() - w0
        figure("update_from_pinned_host", rep=rep, tensors=len(host), gib=round(hb / 2**30, 2),
               seconds=round(dt, 3), gb_per_s=round(hb / 1e9 / dt, 1))
    del host

    path = os.path.join(a.tmp, f"h3c_bench_lora_r{a.lora_rank}.safetensors")
    modules = write_lora(path, shapes, a.lora_rank, 1)
    w0 = time.perf_counter()
    t.load_lora(path, 1.0)
    figure("lora_merge", rank=a.lora_rank, modules=modules, seconds=round(time.perf_counter() - w0, 3))
    w0 = time.perf_counter()
    t.unload_lora()
    figure("lora_unmerge", rank=a.lora_rank, modules=modules, seconds=round(time.perf_counter() - w0, 3))
    os.remove(path)
    with open(a.out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
