#!/usr/bin/env bash
# The GPU bench in one run: h3c's kernels and torch's (cuBLAS, SDPA, eager norm) at M = 8349, 2048, 925 and 70, then
# the full forward through `h3c run --device gpu` when a full plan is given (H3C_PLANS/full), with peak GPU memory,
# and then (with diffusers' source carried in carry/diffusers) bench/forward_bench.py: diffusers eager and with
# regional torch.compile, h3c through its Python package and `h3c generate`, in the same run.
# Writes bench/<...>.jsonl under $H3C_BENCH_OUT (default build-gpu/bench-out) and prints the tables.
set -uo pipefail
# shellcheck source=bench/gpu_build.sh
source "$(dirname "$0")/gpu_build.sh" bench h3c_kernel_bench
# The rollout lengths of issue 12, each with the Hopper linear's tuning sweep beside the mma.sync kernel and cuBLASLt
# (--vendor: the plain GEMM of each shape in the same process). For the sustained, power-aware comparison use
# `h3c_kernel_bench --energy` and `torch_bench.py OUT M --sustained` (bench/NOTES.md, 2026-12-04).
for rows in ${H3C_BENCH_ROWS:-8349 2048 925 70}; do
  echo "== h3c kernels (M = $rows)"
  "$build/bin/h3c_kernel_bench" "$out/h3c_kernels_$rows.jsonl" --rows "$rows" --sweep --vendor
  echo "== torch (M = $rows)"
  python3 "$root/bench/torch_bench.py" "$out/torch_$rows.jsonl" "$rows"
done
if [ -n "${H3C_PLANS:-}" ] && [ -f "$root/scripts/gpu-e2e.sh" ]; then
  echo "== full forward"
  H3C_E2E_ONLY=full_bench H3C="$build/bin/h3c" bash "$root/scripts/gpu-e2e.sh"
fi
if [ -n "${H3C_PLANS:-}" ] && [ -d "${H3C_DIFFUSERS_SRC:-$root/carry/diffusers/src}" ] &&
   cmake --build "$build" -j"$(nproc)" --target h3c h3c_python >/dev/null; then
  echo "== full forward beside diffusers (eager, regional torch.compile)"
  PYTHONPATH="$build/python:${H3C_DIFFUSERS_SRC:-$root/carry/diffusers/src}${PYTHONPATH:+:$PYTHONPATH}" \
    python3 "$root/bench/forward_bench.py" --h3c "$build/bin/h3c" --plan "$H3C_PLANS/full" --out "$out/forward.jsonl"
fi
if [ -n "${H3C_PLANS:-}" ] && cmake --build "$build" -j"$(nproc)" --target h3c_python >/dev/null; then
  echo "== weights that change: whole-model hot updates, merged LoRA (issue 21)"
  PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" \
    python3 "$root/bench/update_bench.py" --plan "$H3C_PLANS/full" --out "$out/update.jsonl"
fi
