#!/usr/bin/env bash
# The training step bench (issue 22) on the GPU machine: builds h3c and its Python package into build-gpu, then
# bench/backward_bench.py with diffusers' carried source: diffusers eager and regional torch.compile with per-block
# gradient checkpointing, and h3c through its Python package, LoRA rank 64 and all parameters, forward + backward.
# Plans: $H3C_PLANS (default carry/plans) holding <config>-backward-lora64-ckpt and <config>-backward-ckpt
# (scripts/gpu-plans.sh with H3C_PLANS_BACKWARD_FULL=1). Arguments go to the script, e.g.
#   bash bench/backward_bench.sh                                        # full config, S = 8,349
#   bash bench/backward_bench.sh --config small --tokens 2048 --skip-compile   # a quick check
# JSON lines in $H3C_BENCH_OUT/backward.jsonl (default build-gpu/bench-out); the table comes last.
set -uo pipefail
# shellcheck source=bench/gpu_build.sh
source "$(dirname "$0")/gpu_build.sh" backward-bench h3c h3c_python
src=${H3C_DIFFUSERS_SRC:-$root/carry/diffusers/src}
skip=()
if [ ! -d "$src/diffusers" ]; then
  echo "backward-bench: no diffusers source in $src (carry carry/diffusers): h3c's cases only"; skip=(--skip-diffusers)
fi
PYTHONPATH="$build/python:$src${PYTHONPATH:+:$PYTHONPATH}" \
  python3 "$root/bench/backward_bench.py" --h3c "$build/bin/h3c" --plans "${H3C_PLANS:-$root/carry/plans}" \
  --out "$out/backward.jsonl" "${skip[@]}" "$@"
