#!/usr/bin/env bash
# h3c against diffusers itself (issue 15), on the GPU machine. That machine has torch 2.11 but no diffusers and no
# internet: diffusers' source is carried in carry/diffusers (the lead: `git archive` of the fetched
# huggingface/diffusers mirror, so carry/diffusers/src/diffusers is the package) and put on PYTHONPATH here; nothing
# is installed. Needs $H3C (an h3c built with CUDA, default build-gpu/bin/h3c, as scripts/gpu-test.sh builds it) and
# the plans compiled elsewhere under $H3C_PLANS/{tiny,small} (scripts/gpu-plans.sh). Ends with "N passed, N failed".
#   1. layouts: scripts/diffusers_layout_check.py (h3c request make --layout vs diffusers' blocks, bit for bit)
#   2. for tiny and small, synthetic weights written as a diffusers folder (h3c checkpoint synth), and requests the
#      pipeline's own preparation blocks build (scripts/diffusers_request.py make: t2va, fl2va, ref2va; float64
#      position_ids, conditioning rows, several timesteps): h3c run on the CPU and on the GPU (strict) against
#      diffusers' float32 forward of the same weights on the GPU; each h3c output must lie within 2x the error of
#      diffusers' own bfloat16 forward (the released mixed precision) against its float32 one. Errors are printed.
#   3. h3c generate --noise (the pipeline's own initial noise, ODE) and --sampler sde on the GPU: the trajectories
#      verify, and scripts/h3c_sealed.py recomputes every step of them in Python.
#   4. gradients (issue 22; needs the backward plans $H3C_PLANS/{tiny,small}-backward): on the same requests, a fixed
#      random loss gradient of sample and audio_sample; h3c backward (the CPU reference; $H3C_DIFFUSERS_GRAD_DEVICES,
#      default cpu, adds gpu once its gradient kernels exist) against torch autograd of diffusers' model on the GPU
#      in float32 (the reference; float64 too, to show the reference's own error), every input and weight gradient
#      within 2x the error of diffusers' own bfloat16 autograd (scripts/diffusers_grad_check.py; a swap of fc1's
#      halves in h3c's gradients must fail it). H3C_DIFFUSERS_ONLY_GRAD=1 runs the requests and this part only.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
H3C=${H3C:-$root/build-gpu/bin/h3c}
plans=${H3C_PLANS:-$root/carry/plans}
out=${H3C_GPU_OUT:-$root/build-gpu/gpu-test}/diffusers
src=${H3C_DIFFUSERS_SRC:-$root/carry/diffusers/src}
mkdir -p "$out"
export PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}"
. "$root/scripts/gpu-checks.sh"
check() { local what=$1; shift; if "$@" >"$out/last.log" 2>&1; then ok "$what"; sed 's/^/    /' "$out/last.log" | tail -12; else bad "$what"; sed 's/^/    /' "$out/last.log" | tail -20; fi; }
finish() { echo "${passed} passed, ${failed} failed"; [ "$failed" = 0 ]; exit $?; }

[ -x "$H3C" ] || { bad "no h3c at $H3C (build it: bash scripts/gpu-test.sh, or cmake --build build-gpu --target h3c)"; finish; }
if ! python3 -c "import torch, numpy, diffusers; from diffusers import MiniMaxH3Transformer3DModel" >"$out/import.log" 2>&1; then
  bad "import diffusers from $src (carry diffusers' src; missing dependency?)"; tail -5 "$out/import.log"; finish
fi
python3 -c "import sys, torch, diffusers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'diffusers', diffusers.__version__, 'cuda', torch.cuda.is_available())"

# H3C_DIFFUSERS_ONLY_LORA=1: the request and the LoRA section only (a plan with unmerged LoRA slots, issue 21).
# H3C_DIFFUSERS_ONLY_GRAD=1: the requests and the gradient section only.
only_lora=${H3C_DIFFUSERS_ONLY_LORA:-0} only_grad=${H3C_DIFFUSERS_ONLY_GRAD:-0}
forwards=1; { [ "$only_lora" = 1 ] || [ "$only_grad" = 1 ]; } && forwards=0
# 1. layouts, bit for bit
if [ "$forwards" = 1 ]; then
python3 "$root/scripts/diffusers_layout_check.py" --h3c "$H3C" --tmp "$out" | tee "$out/layout.log"
l=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/layout.log" | tail -1)
if [ -n "$l" ]; then passed=$((passed + ${l%% passed*})); failed=$((failed + $(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$l"))); else bad "layout check ended without a summary"; fi
fi

# 2. forwards against diffusers
dreq() { python3 "$root/scripts/diffusers_request.py" "$@"; }
dgrad() { python3 "$root/scripts/diffusers_grad_check.py" "$@"; }
exits1() { "$@"; [ $? = 1 ]; }  # a check that must fail on its numbers (exit 1), not on its files (exit 2)
# The whole comparison table (worst gradients, summary), which check's tail would cut.
check_table() { local what=$1; shift; if "$@" >"$out/last.log" 2>&1; then ok "$what"; else bad "$what"; fi; sed 's/^/    /' "$out/last.log"; }
declare -A layouts=(
  [t2va]="--layout t2va --text 7 --latent 3,4,6 --audio-latents 3 --step 2"
  [fl2va]="--layout fl2va --text 6 --text-vision 1:3 --latent 5,4,6 --audio-latents 4 --keyframes first,last --step 3"
  [ref2va]="--layout ref2va --text 5 --latent 2,4,4 --audio-latents 2 --ref image:4,6 --ref audio:3 --ref video:2,4,4+audio:2 --step 1"
)
# H3C_DIFFUSERS_CONFIGS / H3C_DIFFUSERS_LAYOUTS narrow a run (default: all of them); the LoRA check uses t2va.
for cfg in ${H3C_DIFFUSERS_CONFIGS:-tiny small}; do
  plan=$plans/$cfg d=$out/$cfg
  mkdir -p "$d"
  [ -f "$plan/plan.json" ] || [ "$only_grad" = 1 ] || { bad "[$cfg] no plan at $plan"; continue; }
  rm -rf "$d/ckpt"
  check "[$cfg] synthetic weights as a diffusers folder" "$H3C" checkpoint synth --config "$cfg" --seed 11 --out "$d/ckpt"
  for name in ${H3C_DIFFUSERS_LAYOUTS:-t2va fl2va ref2va}; do
    r=$d/$name
    # shellcheck disable=SC2086
    check "[$cfg/$name] diffusers' pipeline blocks build the request" dreq make --checkpoint "$d/ckpt" ${layouts[$name]} --steps 8 --seed 5 -o "$r.req.safetensors" --noise-out "$r.noise.safetensors"
    [ "$forwards" = 1 ] || continue
    check "[$cfg/$name] h3c CPU reference run" "$H3C" run --config "$cfg" --checkpoint "$d/ckpt" --plan "$plan" --inputs "$r.req.safetensors" --out "$r.h3c_cpu.safetensors" --device cpu --mode strict --ledger "$r.cpu_ledger.json"
    check "[$cfg/$name] h3c GPU strict run" "$H3C" run --config "$cfg" --checkpoint "$d/ckpt" --plan "$plan" --inputs "$r.req.safetensors" --out "$r.h3c_gpu.safetensors" --device gpu --mode strict --ledger "$r.gpu_ledger.json"
    check "[$cfg/$name] diffusers float32 forward (GPU, no TF32)" dreq forward --checkpoint "$d/ckpt" --request "$r.req.safetensors" --dtype float32 --out "$r.ref32.safetensors"
    check "[$cfg/$name] diffusers bfloat16 forward (GPU, fp32 modules kept)" dreq forward --checkpoint "$d/ckpt" --request "$r.req.safetensors" --dtype bfloat16 --out "$r.ref16.safetensors"
    check "[$cfg/$name] h3c CPU and GPU within 2x diffusers' bf16 error of its fp32 forward" dreq compare --reference "$r.ref32.safetensors" --bf16 "$r.ref16.safetensors" "$r.h3c_cpu.safetensors" "$r.h3c_gpu.safetensors"
  done
  # A LoRA adapter in the original naming (fused qkv, fc1): h3c's conversion and merge (CPU host merge, GPU device
  # merge) against diffusers' conversion fused in float32, within 2x diffusers' own bf16 error.
  if [ "$only_grad" != 1 ]; then
  r=$d/t2va
  check "[$cfg/lora] an adapter in the original checkpoint naming" dreq lora-make --checkpoint "$d/ckpt" --rank 4 --seed 3 -o "$d/lora.safetensors"
  check "[$cfg/lora] h3c CPU run --lora" "$H3C" run --config "$cfg" --checkpoint "$d/ckpt" --plan "$plan" --inputs "$r.req.safetensors" --out "$r.lora_cpu.safetensors" --device cpu --ledger "$r.lora_cpu.json" --lora "$d/lora.safetensors:0.8"
  check "[$cfg/lora] h3c GPU run --lora" "$H3C" run --config "$cfg" --checkpoint "$d/ckpt" --plan "$plan" --inputs "$r.req.safetensors" --out "$r.lora_gpu.safetensors" --device gpu --ledger "$r.lora_gpu.json" --lora "$d/lora.safetensors:0.8"
  check "[$cfg/lora] merged weights: GPU identity equals CPU identity (device merge = host merge)" python3 -c "import json,sys; a,b=(json.load(open(p))['header']['weights'] for p in sys.argv[1:]); sys.exit(0 if a['sha256']==b['sha256'] and a['lora'] and a['lora'][0]['modules']>0 else 1)" "$r.lora_cpu.json" "$r.lora_gpu.json"
  check "[$cfg/lora] diffusers float32 forward with the adapter" dreq forward --checkpoint "$d/ckpt" --request "$r.req.safetensors" --dtype float32 --lora "$d/lora.safetensors:0.8" --out "$r.lora_ref32.safetensors"
  check "[$cfg/lora] diffusers bfloat16 forward with the adapter" dreq forward --checkpoint "$d/ckpt" --request "$r.req.safetensors" --dtype bfloat16 --lora "$d/lora.safetensors:0.8" --out "$r.lora_ref16.safetensors"
  check "[$cfg/lora] h3c CPU and GPU with the adapter within 2x diffusers' bf16 error" dreq compare --reference "$r.lora_ref32.safetensors" --bf16 "$r.lora_ref16.safetensors" "$r.lora_cpu.safetensors" "$r.lora_gpu.safetensors"
  fi
  if [ "$forwards" = 1 ]; then
  # 3. trajectories from the pipeline's noise, and the SDE, on the GPU; recomputed in Python
  r=$d/fl2va
  [ -f "$r.req.safetensors" ] || r=$d/t2va  # a run narrowed to t2va
  rm -rf "$r.traj_ode" "$r.traj_sde"
  check "[$cfg] h3c generate --noise (the pipeline's noise), ODE, GPU" "$H3C" generate --config "$cfg" --checkpoint "$d/ckpt" --plan "$plan" --inputs "$r.req.safetensors" --noise "$r.noise.safetensors" --steps 8 --save-tensors --device gpu --out "$r.traj_ode"
  check "[$cfg] h3c generate --sampler sde --seeds, GPU" "$H3C" generate --config "$cfg" --checkpoint "$d/ckpt" --plan "$plan" --inputs "$r.req.safetensors" --steps 8 --seeds 21 --sampler sde --noise-level 0.7 --save-tensors --device gpu --out "$r.traj_sde"
  for t in ode sde; do
    check "[$cfg] $t trajectory verifies" "$H3C" trajectory verify "$r.traj_$t"
    check "[$cfg] $t trajectory recomputed step by step in Python" python3 "$root/scripts/h3c_sealed.py" trajectory "$r.traj_$t" --recompute
  done
  fi
  # 4. gradients against diffusers' autograd
  [ "$only_lora" = 1 ] && continue
  bplan=$plans/$cfg-backward
  [ -f "$bplan/plan.json" ] || { bad "[$cfg/grad] no backward plan at $bplan (scripts/gpu-plans.sh)"; continue; }
  for name in ${H3C_DIFFUSERS_LAYOUTS:-t2va fl2va ref2va}; do
    r=$d/$name g=$d/$name.grad
    [ -f "$r.req.safetensors" ] || { bad "[$cfg/$name/grad] no request $r.req.safetensors"; continue; }
    check "[$cfg/$name/grad] a fixed random loss gradient of sample and audio_sample" dgrad grads --checkpoint "$d/ckpt" --request "$r.req.safetensors" --seed 17 -o "$g.dy.safetensors"
    check "[$cfg/$name/grad] diffusers' autograd on the GPU: float32 (no TF32), bfloat16 (fp32 modules kept), float64" dgrad backward --checkpoint "$d/ckpt" --request "$r.req.safetensors" --grads "$g.dy.safetensors" --dtype float32,bfloat16,float64 -o "$g.diffusers"
    devs=${H3C_DIFFUSERS_GRAD_DEVICES:-cpu}
    for dev in $devs; do
      check "[$cfg/$name/grad] h3c backward --device $dev" "$H3C" backward --config "$cfg" --checkpoint "$d/ckpt" --plan "$bplan" --inputs "$r.req.safetensors" --grads "$g.dy.safetensors" -o "$g.h3c_$dev.safetensors" --device "$dev"
      check_table "[$cfg/$name/grad] h3c ($dev): every input and weight gradient within 2x diffusers' own bf16 error of its fp32 autograd" dgrad compare --reference "$g.diffusers.float32.safetensors" --bf16 "$g.diffusers.bfloat16.safetensors" --float64 "$g.diffusers.float64.safetensors" "$g.h3c_$dev.safetensors"
    done
    check "[$cfg/$name/grad] the comparison fails when fc1's [value; gate] halves of h3c's gradients are swapped" exits1 dgrad compare --reference "$g.diffusers.float32.safetensors" --bf16 "$g.diffusers.bfloat16.safetensors" --mutate swap-swiglu-halves "$g.h3c_${devs%% *}.safetensors"
  done
done
finish
