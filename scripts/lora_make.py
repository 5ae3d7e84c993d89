#!/usr/bin/env python3
"""A LoRA adapter in diffusers' layout (transformer.<module>.lora_A/B.weight, float32, no alpha: alpha = rank) on
every weight that a plan's unmerged LoRA slots serve (docs/contract.md section 13: the weights of the linear and
qkv_linear ops with attrs.lora_k), with seeded normal factors. For the GPU checks and benches of issue 21.

    lora_make.py --plan PLAN_DIR --rank R --seed S [--std 0.05] -o OUT.safetensors"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_numpy  # noqa: E402 - the one safetensors writer of the Python scripts


def served_weights(plan):
    """The base weights of every op with a LoRA path, in plan order (qkv: its three matrices)."""
    names = []
    for op in plan["functions"]["forward"]["ops"]:
        if op["op"] in ("linear", "qkv_linear") and op["attrs"].get("lora_k"):
            names += op["weights"]["weight"][:3 if op["op"] == "qkv_linear" else 1]
    return names


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plan", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--std", type=float, default=0.05)
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args()
    with open(os.path.join(a.plan, "plan.json")) as f:
        plan = json.load(f)
    shapes = {t["name"]: t["shape"] for b in plan["weights"] for t in b["tensors"]}
    targets = served_weights(plan)
    if not targets:
        sys.exit(f"lora_make.py: {a.plan} has no LoRA slots (compile with --lora-rank)")
    rng = np.random.default_rng(a.seed)
    arrays = {}
    for n in targets:
        m = "transformer." + n[:-len(".weight")]
        rows, cols = shapes[n]
        arrays[m + ".lora_A.weight"] = rng.standard_normal((a.rank, cols), dtype=np.float32) * np.float32(a.std)
        arrays[m + ".lora_B.weight"] = rng.standard_normal((rows, a.rank), dtype=np.float32) * np.float32(a.std)
    st_numpy.write(a.out, arrays)
    print(f"{len(targets)} modules, rank {a.rank} -> {a.out}")


if __name__ == "__main__":
    main()
