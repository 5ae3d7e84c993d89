#!/usr/bin/env bash
# GPU tests (issue 6): run on a machine with an NVIDIA GPU; without one (no nvidia-smi / libcuda.so.1) it prints one
# SKIP line and exits 0. Builds h3c without MLIR (plans are compiled elsewhere and carried: H3C_PLANS=<folder with
# tiny/, small/, full/ plan folders>), then:
#   1. h3c_gpu_tests (GoogleTest): every kernel kind at the full and tiny shapes vs contract-formula references
#      (non-MMA bitwise, MMA vs fp64 within 1e-2), repeat and row-count/row-order invariance; each PASS/FAIL line
#      counts once;
#   2. end to end (when plans and `h3c run` are there): tiny + small, GPU strict vs the CPU reference, 10 repeats
#      byte-equal, batch 1 vs 4 and packed-row permutation byte-equal; the full 33B at 8,349 tokens (synthetic
#      weights, strict) when H3C_GPU_FULL=1;
#   2b. unmerged LoRA (scripts/gpu-lora-check.sh) when the -lora plans are there: empty slots = the plain plan,
#      GPU with an adapter against the CPU reference, the weights identity;
#   3. against diffusers (scripts/gpu-diffusers-check.sh) when diffusers' source is carried in carry/diffusers.
#   4. the Python package (python/, built for the python3 on PATH; pybind11 from torch's wheel when it ships it):
#      scripts/gpu-python-check.py, torch CUDA tensors against `h3c run --device gpu` byte for byte, the call
#      overhead per forward (FIGURE lines), and a diffusers denoise step with the h3c transformer swapped in.
#   5. the RL example (examples/rl_flow_grpo.py) with its rollouts and its trainer on the GPU, then its rollouts on
#      the GPU and its trainer on the CPU reference (the tiny config, where the two devices' attention agrees).
# Ends with "N passed, N failed"; exit status 1 on any failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-test: SKIP: no NVIDIA GPU or driver on this machine (nothing run)"
  exit 0
fi
build=${H3C_GPU_BUILD_DIR:-$root/build-gpu}
extra=${H3C_EXTRA_INCLUDE:-}
[ -z "$extra" ] && [ -d "$root/carry/include" ] && extra=$root/carry/include
out=${H3C_GPU_OUT:-$build/gpu-test}
mkdir -p "$out"
. "$root/scripts/gpu-checks.sh"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
py=$(command -v python3 || true)
tinc=$([ -n "$py" ] && "$py" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))" 2>/dev/null || true)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3C_ENABLE_MLIR=OFF -DH3C_ENABLE_TESTS=OFF \
  ${extra:+-DH3C_EXTRA_INCLUDE=$extra} ${py:+-DPython3_EXECUTABLE=$py} \
  $([ ! -f "${extra:-/nonexistent}/pybind11/pybind11.h" ] && [ -f "$tinc/pybind11/pybind11.h" ] && echo "-DH3C_PYBIND11_INCLUDE=$tinc") >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; echo "0 passed, 1 failed"; exit 1; }
if ! cmake --build "$build" -j"$(nproc)" --target h3c_gpu_tests >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"; echo "0 passed, 1 failed"; exit 1
fi
have_h3c=0
if cmake --build "$build" -j"$(nproc)" --target h3c >"$out/build-h3c.log" 2>&1; then have_h3c=1; else
  echo "gpu-test: h3c did not build (end-to-end steps fail):"; tail -15 "$out/build-h3c.log"; fi

# 1. kernel checks: the PASS/FAIL lines the tests print (one per checked property), and the test binary's verdict.
"$build/bin/h3c_gpu_tests" ${H3C_GPU_FILTER:+--gtest_filter=$H3C_GPU_FILTER} 2>&1 | tee "$out/kernels.log"
kstatus=${PIPESTATUS[0]}
passed=$((passed + $(grep -c '^PASS ' "$out/kernels.log"))); failed=$((failed + $(grep -c '^FAIL ' "$out/kernels.log")))
[ "$kstatus" = 0 ] || bad "h3c_gpu_tests exited with status $kstatus"

# 2. end to end
if [ -f "$root/scripts/gpu-e2e.sh" ]; then
  if [ "$have_h3c" = 1 ]; then
    H3C="$build/bin/h3c" H3C_GPU_OUT="$out" bash "$root/scripts/gpu-e2e.sh" | tee "$out/e2e.log"
    e=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/e2e.log" | tail -1)
    if [ -n "$e" ]; then
      passed=$((passed + $(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$e"))); failed=$((failed + $(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$e")))
    else bad "end-to-end script ended without a summary"; fi
  else
    bad "end-to-end: h3c did not build"
  fi
fi
# 2b. unmerged LoRA (scripts/gpu-lora-check.sh: the -lora plans of scripts/gpu-plans.sh)
if [ "$have_h3c" = 1 ] && [ -f "${H3C_PLANS:-$root/carry/plans}/tiny-lora/plan.json" ]; then
  H3C="$build/bin/h3c" H3C_GPU_OUT="$out" bash "$root/scripts/gpu-lora-check.sh" | tee "$out/lora.log"
  e=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/lora.log" | tail -1)
  if [ -n "$e" ]; then
    passed=$((passed + ${e%% passed*})); failed=$((failed + $(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$e")))
  else bad "LoRA check ended without a summary"; fi
fi
# 3. against diffusers itself (when its source is carried in carry/diffusers; scripts/gpu-diffusers-check.sh)
if [ -d "${H3C_DIFFUSERS_SRC:-$root/carry/diffusers/src}" ] && [ "$have_h3c" = 1 ]; then
  H3C="$build/bin/h3c" H3C_GPU_OUT="$out" bash "$root/scripts/gpu-diffusers-check.sh" | tee "$out/diffusers.log"
  e=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/diffusers.log" | tail -1)
  if [ -n "$e" ]; then
    passed=$((passed + ${e%% passed*})); failed=$((failed + $(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$e")))
  else bad "diffusers check ended without a summary"; fi
else
  echo "gpu-test: diffusers checks skipped (no carry/diffusers/src)"
fi
# 4. the Python package against the CLI on the GPU
if [ "$have_h3c" = 1 ] && cmake --build "$build" -j"$(nproc)" --target h3c_python >"$out/build-python.log" 2>&1; then
  cfgs=tiny,small; [ "${H3C_GPU_FULL:-0}" = 1 ] && cfgs=tiny,small,full
  dsrc=${H3C_DIFFUSERS_SRC:-$root/carry/diffusers/src}
  PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$root/scripts/gpu-python-check.py" --h3c "$build/bin/h3c" \
    --plans "${H3C_PLANS:-$root/carry/plans}" --tmp "$out/python" --configs "$cfgs" --diffusers-src "$dsrc" | tee "$out/python.log"
  e=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/python.log" | tail -1)
  if [ -n "$e" ]; then
    passed=$((passed + ${e%% passed*})); failed=$((failed + $(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$e")))
  elif ! grep -q '^SKIP' "$out/python.log"; then bad "python check ended without a summary"; fi
else
  bad "the Python package did not build (Python headers, pybind11, dlpack: see $out/build-python.log and configure.log)"
  tail -8 "$out/build-python.log"; grep -i "python" "$out/configure.log" | tail -3
fi
# 5. training on the same bits (issue 22): the RL example's rollouts on the GPU (the fused tiny plan) against its
#    trainer (the --backward plan) on the GPU, then on the CPU reference, every step's log-probability byte for byte,
#    before and after the weight updates (plans and request from `examples/rl_flow_grpo.py --compile-only`, by scripts/gpu-plans.sh).
rl=${H3C_RL_PLANS:-$root/carry/rl}
if [ -f "$rl/train/plan.json" ] && [ -f "$build/python/h3c/__init__.py" ]; then
  for train in cuda cpu; do
    if PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$root/examples/rl_flow_grpo.py" --plans "$rl" \
         --rollout-device cuda --train-device $train >"$out/rl-$train.log" 2>&1 && grep -q "^OK: every recomputed" "$out/rl-$train.log"; then
      ok "RL example: GPU rollouts' log-probabilities == the $train trainer's recomputation, before and after updates"
    else
      bad "RL example (GPU rollouts, $train trainer): $(tail -3 "$out/rl-$train.log" | tr '\n' ' ')"
    fi
  done
else
  echo "gpu-test: RL example skipped (no $rl/train or no Python package)"
fi
echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
