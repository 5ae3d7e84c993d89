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
if [ -n "${H3C_PLANS:-}" ] && [ -f "$H3C_PLANS/full-lora/plan.json" ]; then
  # The forward at S = 8,349 with an unmerged rank-64 adapter on every slot (issue 21's target: <= 1.1x the same
  # forward without it), beside the plain plan and the LoRA plan with empty slots, alternated; device-event times.
  echo "== unmerged LoRA forward (full, rank 64)"
  cmake --build "$build" -j"$(nproc)" --target h3c >/dev/null
  "$build/bin/h3c" request make --config full --text 512 --audio 157 --video 8,30,32 --timesteps 2 --seed 5 \
    --dtype BF16 -o "$out/lora_req.st" >/dev/null
  python3 "$root/scripts/lora_make.py" --plan "$H3C_PLANS/full-lora" --rank 64 --seed 1 -o "${TMPDIR:-/tmp}/h3c_lora64.st"
  for rep in 1 2; do
    for form in plain zero adapter; do
      plan=$H3C_PLANS/full-lora; lora=()
      [ $form = plain ] && plan=$H3C_PLANS/full
      [ $form = adapter ] && lora=(--lora "${TMPDIR:-/tmp}/h3c_lora64.st")
      ms=$(H3C_GPU_PROFILE=1 "$build/bin/h3c" run --config full --synthetic 7 --plan "$plan" --inputs "$out/lora_req.st" \
        --out "$out/lora_$form.st" --device gpu --ledger "$out/lora_$form.json" "${lora[@]}" 2>&1 |
        grep -oE "forward [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+")
      echo "{\"bench\": \"lora_forward\", \"form\": \"$form\", \"rep\": $rep, \"ms\": ${ms:-null}}" | tee -a "$out/lora.jsonl"
    done
  done
  rm -f "${TMPDIR:-/tmp}/h3c_lora64.st"
fi
if [ -n "${H3C_PLANS:-}" ] && cmake --build "$build" -j"$(nproc)" --target h3c_python >/dev/null; then
  echo "== weights that change: whole-model hot updates, merged LoRA (issue 21)"
  PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" \
    python3 "$root/bench/update_bench.py" --plan "$H3C_PLANS/full" --out "$out/update.jsonl"
fi
if [ "${H3C_BENCH_BACKWARD:-0}" = 1 ]; then
  # The training step, forward + backward at S = 8,349 (issue 22): diffusers eager / regional torch.compile with
  # per-block checkpointing beside h3c's Python package, LoRA rank 64 and all parameters (bench/backward_bench.sh).
  echo "== training step (forward + backward) beside diffusers"
  H3C_PLANS=${H3C_PLANS:-$root/carry/plans} bash "$root/bench/backward_bench.sh" --deadline "${H3C_BENCH_BACKWARD_S:-540}"
fi
