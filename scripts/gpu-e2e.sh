#!/usr/bin/env bash
# End-to-end GPU checks (called by scripts/gpu-test.sh; needs $H3C = an h3c built with CUDA, plans compiled elsewhere
# under $H3C_PLANS/{tiny,small,full}, python3 with numpy + safetensors). Ends with "N passed, N failed".
#   tiny, small: GPU strict vs the CPU reference (outputs within H3C_E2E_BOUND, default 5e-2 relative Frobenius; the
#   per-kernel bitwise/fp64 checks are h3c_gpu_kernels_check's), GPU ledger verifies strict, 10 GPU repeats
#   byte-equal, batch 1 vs item 0 of batch 4 byte-equal, packed-row permutation byte-equal; the pipeline's fl2va and
#   ref2va layouts GPU vs CPU, and a GPU SDE trajectory recomputed in Python (scripts/h3c_sealed.py); --hash-nodes,
#   audit mode, the fp64 `reference` and the cuBLASLt `native` bindings (e2e_native; H3C_E2E_ONLY=native runs only
#   those, on tiny; H3C_E2E_ONLY=tiny or small one config alone).
#   tiny at sp 2 x tp 2 (4 ranks): the one-GPU executor refuses it (exit 2, nothing written); the CPU reference's
#   rank simulation gives the bytes of the sp = tp = 1 plan.
#   a plan with a backward (e2e_backward; H3C_E2E_ONLY=backward alone): its forward and its backward on the GPU
#   against the CPU reference, two GPU backwards byte-equal, and the --checkpoint blocks plans' GPU gradients
#   byte-equal to those of the plans without segments; H3C_E2E_ONLY=full_backward: the full config's LoRA backward
#   with the block segments at 8,349 tokens on one GPU (e2e_full_backward);
#   full (H3C_GPU_FULL=1, or H3C_E2E_ONLY=full_bench): 33B at 8,349 tokens (Nt 512 + Nv 8 x 30 x 32 + Na 157),
#   synthetic weights, strict, timed (H3C_GPU_PROFILE); then --mode off (every linear and attention on cuBLASLt,
#   attention in chunks of heads), timed, outputs within 5e-2 of the strict run's.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
H3C=${H3C:-$root/build-gpu/bin/h3c}
plans=${H3C_PLANS:-$root/carry/plans}
out=${H3C_GPU_OUT:-$root/build-gpu/gpu-test}/e2e
mkdir -p "$out"
cmp_py="$root/test/gpu/compare_outputs.py"
bound=${H3C_E2E_BOUND:-5e-2}
. "$root/scripts/gpu-checks.sh"
check() { local what=$1; shift; if "$@" >"$out/last.log" 2>&1; then ok "$what"; sed 's/^/    /' "$out/last.log" | head -70; else bad "$what"; sed 's/^/    /' "$out/last.log" | tail -15; fi; }
run() { # cfg plan req out ledger device [extra...]
  local cfg=$1 plan=$2 req=$3 o=$4 l=$5 dev=$6; shift 6
  "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$req" --out "$o" --device "$dev" --mode strict \
    --ledger "$l" "$@"
}
prun() { H3C_GPU_PROFILE=1 run "$@"; }  # with the executor's per-kind timing table on stderr

e2e_config() {
  local cfg=$1 plan=$plans/$1 d=$out/$1
  mkdir -p "$d"
  [ -f "$plan/plan.json" ] || { bad "[$cfg] no plan at $plan"; return; }
  check "[$cfg] request make" "$H3C" request make --config "$cfg" --text 7 --audio 5 --video 2,3,4 --timesteps 2 --seed 3 -o "$d/req.safetensors"
  check "[$cfg] request make --batch 4" "$H3C" request make --config "$cfg" --text 7 --audio 5 --video 2,3,4 --timesteps 2 --seed 3 --batch 4 -o "$d/req4.safetensors"
  check "[$cfg] request make --shuffle" "$H3C" request make --config "$cfg" --text 7 --audio 5 --video 2,3,4 --timesteps 2 --seed 3 --shuffle -o "$d/req_shuf.safetensors"
  check "[$cfg] CPU reference run" run "$cfg" "$plan" "$d/req.safetensors" "$d/cpu.safetensors" "$d/cpu_ledger.json" cpu
  check "[$cfg] GPU strict run" prun "$cfg" "$plan" "$d/req.safetensors" "$d/gpu.safetensors" "$d/gpu_ledger.json" gpu
  check "[$cfg] GPU ledger verifies (strict: every node row)" "$H3C" ledger verify "$d/gpu_ledger.json"
  check "[$cfg] GPU vs CPU reference outputs (rel_frob <= $bound)" python3 "$cmp_py" bound "$d/cpu.safetensors" "$d/gpu.safetensors" "$bound"
  local rep_ok=1
  for i in $(seq 1 10); do
    run "$cfg" "$plan" "$d/req.safetensors" "$d/rep$i.safetensors" "$d/rep_ledger.json" gpu >"$out/last.log" 2>&1 || { rep_ok=0; break; }
    cmp -s "$d/gpu.safetensors" "$d/rep$i.safetensors" || { rep_ok=0; echo "    repeat $i differs"; }
  done
  [ $rep_ok = 1 ] && ok "[$cfg] 10 GPU repeats byte-equal" || bad "[$cfg] 10 GPU repeats byte-equal"
  # A checkpoint of the same weights (issue 14): `checkpoint synth --seed 7` holds the synthetic generator's bits, so
  # the streamed GPU load of it (diffusers and native naming) gives the synthetic run's outputs byte for byte; the
  # load says what it checked, and the ledger's content hash is the snapshot's (computed by the load, not apart).
  check "[$cfg] checkpoint synth --seed 7, and mapped to native" bash -c "rm -rf '$d/ck7' '$d/ck7n' && '$H3C' checkpoint synth --config $cfg --seed 7 -o '$d/ck7' && '$H3C' checkpoint map '$d/ck7' -o '$d/ck7n' --to native"
  local ck
  for ck in ck7 ck7n; do
    check "[$cfg] GPU run --checkpoint $ck --progress: the load's line says what it checked, no hashing pass apart" bash -c "'$H3C' run --config $cfg --checkpoint '$d/$ck' --plan '$plan' --inputs '$d/req.safetensors' --out '$d/gpu_$ck.safetensors' --device gpu --mode strict --ledger '$d/gpu_$ck.json' --progress > '$d/run_$ck.log' 2>&1; rc=\$?; grep -v '^\[' '$d/run_$ck.log'; [ \$rc = 0 ] && grep -q 'checked while loading' '$d/run_$ck.log' && ! grep -q 'hashing its' '$d/run_$ck.log'"
    check "[$cfg] --checkpoint $ck outputs == --synthetic 7 outputs (byte-equal)" cmp "$d/gpu.safetensors" "$d/gpu_$ck.safetensors"
    check "[$cfg] ledger content_sha256 == h3c checkpoint snapshot's ($ck)" python3 -c "
import json, subprocess, sys
led = json.load(open(sys.argv[1]))['header']['checkpoint']['content_sha256']
snap = json.loads(subprocess.run([sys.argv[2], 'checkpoint', 'snapshot', sys.argv[3]], capture_output=True, check=True).stdout)['content_sha256']
print('ledger', led, 'snapshot', snap); sys.exit(led != snap)" "$d/gpu_$ck.json" "$H3C" "$d/$ck"
  done
  # --hash-nodes (issue 17): hashed on the device, the same bits, the output hashes equal a Python hash of the output
  # file, two hashed runs diff as the same, and where the CPU reference and the GPU part (informational).
  check "[$cfg] GPU run --hash-nodes" run "$cfg" "$plan" "$d/req.safetensors" "$d/gpu_h1.safetensors" "$d/gpu_h1.json" gpu --hash-nodes
  check "[$cfg] GPU run --hash-nodes again" run "$cfg" "$plan" "$d/req.safetensors" "$d/gpu_h2.safetensors" "$d/gpu_h2.json" gpu --hash-nodes
  check "[$cfg] hashing changes no output bit" cmp "$d/gpu.safetensors" "$d/gpu_h1.safetensors"
  check "[$cfg] GPU ledger hashes of the outputs == Python's hash of the file" python3 "$root/test/lit/Inputs/ledger_output_hashes.py" "$d/gpu_h1.json" "$d/gpu_h1.safetensors"
  check "[$cfg] ledger diff of two hashed GPU runs: same" "$H3C" ledger diff "$d/gpu_h1.json" "$d/gpu_h2.json"
  check "[$cfg] CPU run --hash-nodes" run "$cfg" "$plan" "$d/req.safetensors" "$d/cpu_h.safetensors" "$d/cpu_h.json" cpu --hash-nodes
  # Audit mode on the GPU (issue 17): every kernel op's outputs against the CPU's fp64 reference of the op on the
  # GPU's own inputs, recorded per node as the CPU executor records its own.
  check "[$cfg] GPU --mode audit run" "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_audit.safetensors" --device gpu --mode audit --ledger "$d/gpu_audit.json"
  check "[$cfg] CPU --mode audit run" "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/cpu_audit.safetensors" --device cpu --mode audit --ledger "$d/cpu_audit.json"
  check "[$cfg] GPU audit: the CPU's audited nodes, each within 5e-2 of the fp64 reference" python3 -c "
import json, math, sys
g, c = (json.load(open(f))['nodes'] for f in ('$d/gpu_audit.json', '$d/cpu_audit.json'))
ga = {n['id']: n['audit'] for n in g if 'audit' in n}
ca = {n['id']: n['audit'] for n in c if 'audit' in n}
worst = max(ga.items(), key=lambda kv: kv[1]['max_rel'] if math.isfinite(kv[1]['max_rel']) else math.inf)
print(f'{len(ga)} GPU nodes audited (CPU: {len(ca)}); worst {worst[0]}: max_rel {worst[1][\"max_rel\"]:.3e}')
same = sum(1 for k in ga if k in ca and ga[k] == ca[k])
print(f'{same} nodes with the CPU audit numbers exactly (the GPU computed the same bits on the same inputs)')
missing = sorted(set(n['id'] for n in g if n.get('kernel')) - set(ga))
sys.exit(1 if missing or not all(math.isfinite(a['max_rel']) and a['max_rel'] <= 5e-2 for a in ga.values()) else 0)"
  # Ablation on the GPU: block 0 bound to the fp64 reference changes the binding and the hashes from there on, and
  # `ledger diff` names the block's first node.
  check "[$cfg] GPU run with block 0 on the fp64 reference (audit mode)" "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_ref.safetensors" --device gpu --mode audit --bind 'transformer_blocks.0.*=reference' --hash-nodes --ledger "$d/gpu_ref.json"
  check "[$cfg] ledger diff names block 0's first node, and where the bits part" bash -c "'$H3C' ledger diff '$d/gpu_h1.json' '$d/gpu_ref.json' | tee /dev/stderr | grep -q \"first difference at node 'transformer_blocks.0.adaln_proj'\""
  e2e_native "$cfg" "$plan" "$d"
  "$H3C" ledger diff "$d/cpu_h.json" "$d/gpu_h1.json" --json > "$d/cpu_gpu_diff.json"
  echo "    CPU vs GPU (exit $?): $(python3 -c "import json; d = json.load(open('$d/cpu_gpu_diff.json')); f = d['first_output']; print(f'{d[\"differing\"]} of {d[\"compared\"]} nodes differ; first output difference: ' + (f'{f[\"id\"]} ({f[\"op\"]})' if f else 'none'))")"
  check "[$cfg] GPU batch-4 run" run "$cfg" "$plan" "$d/req4.safetensors" "$d/gpu4.safetensors" "$d/gpu4_ledger.json" gpu
  check "[$cfg] batch-4 request item 0 -> batch 1" python3 "$cmp_py" slice "$d/req4.safetensors" "$d/req4_0.safetensors" 0
  check "[$cfg] GPU run of item 0 alone" run "$cfg" "$plan" "$d/req4_0.safetensors" "$d/gpu4_0.safetensors" "$d/gpu40_ledger.json" gpu
  check "[$cfg] batch 1 vs item 0 of batch 4 byte-equal" python3 "$cmp_py" item "$d/gpu4_0.safetensors" "$d/gpu4.safetensors" 0
  check "[$cfg] GPU run, packed rows permuted" run "$cfg" "$plan" "$d/req_shuf.safetensors" "$d/gpu_shuf.safetensors" "$d/gpushuf_ledger.json" gpu
  check "[$cfg] packed-row permutation byte-equal" python3 "$cmp_py" equal "$d/gpu.safetensors" "$d/gpu_shuf.safetensors"
  # The pipeline's layouts (issue 15): float64 fractional positions, conditioning rows, vision rows, batch 2.
  check "[$cfg] request make --layout fl2va" "$H3C" request make --config "$cfg" --layout fl2va --text 6 --text-vision 1:3 --latent 5,4,6 --audio-latents 3 --keyframes first,last --batch 2 --t-video 0.3 --t-audio 0.6 --seed 4 -o "$d/req_fl2va.safetensors"
  check "[$cfg] request make --layout ref2va" "$H3C" request make --config "$cfg" --layout ref2va --text 5 --latent 2,4,6 --audio-latents 2 --ref image:4,6 --ref audio:3 --ref video:2,4,4+audio:2 --t-video 0.5 --t-audio 0.25 --seed 6 -o "$d/req_ref2va.safetensors"
  local lay
  for lay in fl2va ref2va; do
    check "[$cfg] $lay CPU reference run" run "$cfg" "$plan" "$d/req_$lay.safetensors" "$d/cpu_$lay.safetensors" "$d/cpu_${lay}_ledger.json" cpu
    check "[$cfg] $lay GPU strict run" run "$cfg" "$plan" "$d/req_$lay.safetensors" "$d/gpu_$lay.safetensors" "$d/gpu_${lay}_ledger.json" gpu
    check "[$cfg] $lay GPU vs CPU reference outputs (rel_frob <= $bound)" python3 "$cmp_py" bound "$d/cpu_$lay.safetensors" "$d/gpu_$lay.safetensors" "$bound"
  done
  # The SDE sampler on the GPU: sealed log-probabilities recomputed in Python from the saved tensors.
  rm -rf "$d/traj_sde"
  check "[$cfg] GPU generate --sampler sde (fl2va, batch 2)" "$H3C" generate --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req_fl2va.safetensors" --steps 5 --seeds 3,4 --sampler sde --save-tensors --device gpu --out "$d/traj_sde"
  check "[$cfg] SDE trajectory recomputed in Python" python3 "$root/scripts/h3c_sealed.py" trajectory "$d/traj_sde" --recompute
}

# The native binding (issue 17): linears on cuBLASLt with the runtime's epilogues, attention as softmax-then-matmul
# (runtime/cuda/native_ops.h), recorded `native`. Against an all-row audit run with hashes: block 0's fc2 (+ its
# gate_residual) and block 0's attention each within 1e-2 of the fp64 reference, every node before them with the row
# bits, `ledger diff` naming them first; the attention's outputs differ from the row bits (softmax normalized before
# the bf16 rounding, not after), and `ledger diff` says the bits part there. For fc2 the bit difference is only
# reported: a cuBLASLt GEMM may add in the contract's own k_chunks order (K = 32 on tiny: two chunks) and give the row
# bits; how many later ops differ is reported too (a few bf16 ulps can round away in a residual or norm). Strict
# refuses a native node; a kind without a native form runs row and says so; off mode runs every linear and attention
# native (but qkv_linear with the qk_norm_rope epilogue of sm_90a plans, which has no native form); without cuBLASLt a native request is an error naming the node.
native_case() { # cfg plan dir node tag [--bits-differ]
  local cfg=$1 plan=$2 d=$3 node=$4 tag=$5 bits=${6:-}
  check "[$cfg] GPU audit run, $node native" "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_native_$tag.safetensors" --device gpu --mode audit --bind "$node=native" --hash-nodes --ledger "$d/gpu_native_$tag.json"
  check "[$cfg] $node: recorded native, the nodes before it with the row bits, within 1e-2 of fp64" python3 "$root/test/gpu/check_native_ledger.py" "$d/gpu_audit_h.json" "$d/gpu_native_$tag.json" --native "$node" --audit-bound 1e-2 $bits
  "$H3C" ledger diff "$d/gpu_audit_h.json" "$d/gpu_native_$tag.json" --json > "$d/diff_native_$tag.json"
  check "[$cfg] ledger diff names $node first${bits:+ (and where the bits part)}" python3 -c "
import json, sys
d = json.load(open('$d/diff_native_$tag.json')); f, o = d['first'], d['first_output']
print('first difference:', f and f['id'], '| first output difference:', o and o['id'])
sys.exit(0 if f and f['id'] == '$node' and ('$bits' == '' or (o and o['id'] == '$node')) else 1)"
}

e2e_native() { # cfg plan dir
  local cfg=$1 plan=$2 d=$3
  check "[$cfg] GPU audit run --hash-nodes, all row" "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_audit_h.safetensors" --device gpu --mode audit --hash-nodes --ledger "$d/gpu_audit_h.json"
  native_case "$cfg" "$plan" "$d" transformer_blocks.0.ff.net.2 fc2
  native_case "$cfg" "$plan" "$d" transformer_blocks.0.attn.attention attn --bits-differ
  rm -f "$d/gpu_native_strict.safetensors"
  "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_native_strict.safetensors" --device gpu --mode strict --bind 'transformer_blocks.0.ff.net.2=native' --ledger "$d/gpu_native_strict.json" >"$out/last.log" 2>&1
  local rc=$?
  if [ $rc = 2 ] && grep -q "transformer_blocks.0.ff.net.2: actual native" "$out/last.log" && [ ! -e "$d/gpu_native_strict.safetensors" ]; then
    ok "[$cfg] strict refuses a native node (exit 2, the ledger names it, no outputs)"; sed 's/^/    /' "$out/last.log" | tail -4
  else bad "[$cfg] strict refuses a native node (exit $rc)"; sed 's/^/    /' "$out/last.log" | tail -5; fi
  check "[$cfg] GPU run, block 0's norm1 bound native (no native form)" "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_native_norm.safetensors" --device gpu --mode audit --bind 'transformer_blocks.0.norm1=native' --ledger "$d/gpu_native_norm.json"
  check "[$cfg] norm1: requested native, ran row, the row outputs" bash -c "cmp '$d/gpu.safetensors' '$d/gpu_native_norm.safetensors' && python3 -c \"
import json, sys
n = {e['id']: e for e in json.load(open('$d/gpu_native_norm.json'))['nodes']}['transformer_blocks.0.norm1']
print(n['requested'], n['actual']); sys.exit(0 if (n['requested'], n['actual']) == ('native', 'row') else 1)\""
  check "[$cfg] GPU --mode off (every linear and attention native)" "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_off.safetensors" --device gpu --mode off --ledger "$d/gpu_off.json"
  check "[$cfg] off mode: the linear and attention nodes native, the rest row" python3 -c "
import json, sys
nodes = json.load(open('$d/gpu_off.json'))['nodes']
native = {'linear', 'qkv_linear', 'adaln_table', 'attention'}
# qkv_linear with the qk_norm_rope epilogue (sm_90a plans of head_dim 128: small, full) has no native form: row.
nat = lambda n: n['op'] in native and '_qknr_' not in (n.get('kernel') or '')
wrong = [n['id'] for n in nodes if (n['actual'] == 'native') != nat(n) or n['requested'] != 'native']
print(sum(n['actual'] == 'native' for n in nodes), 'of', len(nodes), 'nodes native; wrong:', wrong[:5]); sys.exit(1 if wrong else 0)"
  check "[$cfg] off mode vs CPU reference outputs (rel_frob <= $bound)" python3 "$cmp_py" bound "$d/cpu.safetensors" "$d/gpu_off.safetensors" "$bound"
  rm -f "$d/gpu_nolt.safetensors"
  H3C_CUBLASLT_LIBRARY=/nonexistent/libcublasLt.so "$H3C" run --config "$cfg" --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_nolt.safetensors" --device gpu --mode audit --bind 'transformer_blocks.1.ff.net.2=native' --ledger "$d/gpu_nolt.json" >"$out/last.log" 2>&1
  rc=$?
  if [ $rc = 2 ] && grep -q "transformer_blocks.1.ff.net.2.*cuBLASLt" "$out/last.log" && [ ! -e "$d/gpu_nolt.safetensors" ]; then
    ok "[$cfg] without cuBLASLt a native node is an error naming it"; sed 's/^/    /' "$out/last.log" | tail -2
  else bad "[$cfg] without cuBLASLt a native node is an error naming it (exit $rc)"; sed 's/^/    /' "$out/last.log" | tail -5; fi
}

e2e_ranks() {
  local plan=$plans/tiny-sp2tp2 d=$out/tiny
  [ -f "$plan/plan.json" ] || { bad "[tiny sp2 x tp2] no plan at $plan"; return; }
  [ -f "$d/req_shuf.safetensors" ] || { bad "[tiny sp2 x tp2] no request (the tiny checks did not run)"; return; }
  check "[tiny sp2 x tp2] CPU reference, 4 simulated ranks" run tiny "$plan" "$d/req_shuf.safetensors" "$d/cpu_ranks.safetensors" "$d/cpu_ranks_ledger.json" cpu
  check "[tiny sp2 x tp2] CPU ranks byte-equal to CPU sp = tp = 1 (shuffled rows)" bash -c "
    '$H3C' run --config tiny --synthetic 7 --plan '$plans/tiny' --inputs '$d/req_shuf.safetensors' --out '$d/cpu_shuf.safetensors' --device cpu --ledger '$d/cpu_shuf_ledger.json' >/dev/null &&
    cmp '$d/cpu_shuf.safetensors' '$d/cpu_ranks.safetensors'"
  rm -f "$d/gpu_ranks.safetensors"
  "$H3C" run --config tiny --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_ranks.safetensors"     --device gpu --ledger "$d/gpu_ranks_ledger.json" >"$out/last.log" 2>&1
  local rc=$?
  if [ $rc = 2 ] && grep -q "single-rank plans" "$out/last.log" && [ ! -e "$d/gpu_ranks.safetensors" ]; then
    ok "[tiny sp2 x tp2] the one-GPU executor refuses a 4-rank plan (exit 2, nothing written)"; sed 's/^/    /' "$out/last.log"
  else bad "[tiny sp2 x tp2] the one-GPU executor refuses a 4-rank plan (exit $rc)"; sed 's/^/    /' "$out/last.log" | tail -5; fi
}

# A plan with a backward (h3c compile --backward, docs/contract.md section 14): its forward runs on the GPU as any
# unfused plan; its backward on the GPU (the gradient kernels, kernels/cuda/grad.cuh) against the CPU reference:
# every gradient within the bound (attention's ex2 / lg2 are the hardware's on the GPU, so the gradients upstream of
# an attention differ by rounding), two GPU runs byte-equal, a batch item's gradients byte-equal to its own run's.
e2e_backward() {
  local plan=$plans/tiny-backward d=$out/tiny-backward
  mkdir -p "$d"
  [ -f "$plan/plan.json" ] || { bad "[tiny backward] no plan at $plan"; return; }
  check "[tiny backward] request make" "$H3C" request make --config tiny --text 7 --audio 5 --video 2,3,4 --timesteps 2 --seed 3 -o "$d/req.safetensors"
  check "[tiny backward] CPU reference forward" run tiny "$plan" "$d/req.safetensors" "$d/cpu.safetensors" "$d/cpu_ledger.json" cpu
  check "[tiny backward] GPU strict forward" run tiny "$plan" "$d/req.safetensors" "$d/gpu.safetensors" "$d/gpu_ledger.json" gpu
  check "[tiny backward] GPU vs CPU forward (rel_frob <= $bound)" python3 "$cmp_py" bound "$d/cpu.safetensors" "$d/gpu.safetensors" "$bound"
  check "[tiny backward] CPU reference backward" "$H3C" backward --config tiny --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" -o "$d/grads_cpu.safetensors"
  check "[tiny backward] GPU backward" "$H3C" backward --config tiny --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" -o "$d/grads_gpu.safetensors" --device gpu
  check "[tiny backward] GPU vs CPU gradients, every tensor (rel_frob <= 1e-2)" python3 "$cmp_py" bound "$d/grads_cpu.safetensors" "$d/grads_gpu.safetensors" 1e-2
  check "[tiny backward] GPU backward again" "$H3C" backward --config tiny --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" -o "$d/grads_gpu2.safetensors" --device gpu
  check "[tiny backward] two GPU backwards byte-equal" python3 "$cmp_py" equal "$d/grads_gpu.safetensors" "$d/grads_gpu2.safetensors"
  # LoRA adapters only (--trainable lora): an adapter in the slots (scripts/lora_make.py, set by --lora as run does),
  # the adapters' gradients and the inputs' on the GPU against the CPU reference.
  local lp=$plans/tiny-backward-lora
  if [ -f "$lp/plan.json" ]; then
    check "[tiny backward lora] adapter" python3 "$root/scripts/lora_make.py" --plan "$lp" --rank 8 --seed 3 --std 0.1 -o "$d/adapter.safetensors"
    check "[tiny backward lora] CPU reference backward" "$H3C" backward --config tiny --synthetic 7 --plan "$lp" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" --lora "$d/adapter.safetensors" -o "$d/lora_cpu.safetensors"
    check "[tiny backward lora] GPU backward" "$H3C" backward --config tiny --synthetic 7 --plan "$lp" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" --lora "$d/adapter.safetensors" -o "$d/lora_gpu.safetensors" --device gpu
    check "[tiny backward lora] GPU vs CPU adapter and input gradients (rel_frob <= 1e-2)" python3 "$cmp_py" bound "$d/lora_cpu.safetensors" "$d/lora_gpu.safetensors" 1e-2
  fi
  # Activation checkpointing per block (--checkpoint blocks, section 14): the GPU executor walks the segments'
  # schedule (each block's ops rerun before its gradients) in the checkpointed plan's slots; the same kernels on the
  # same operands, so the gradients are byte-equal to the plan's without segments.
  local cp=$plans/tiny-backward-ckpt
  if [ -f "$cp/plan.json" ]; then
    check "[tiny backward --checkpoint blocks] GPU backward" "$H3C" backward --config tiny --synthetic 7 --plan "$cp" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" -o "$d/grads_gpu_ckpt.safetensors" --device gpu
    check "[tiny backward --checkpoint blocks] GPU gradients == the unsegmented plan's (byte-equal)" python3 "$cmp_py" equal "$d/grads_gpu.safetensors" "$d/grads_gpu_ckpt.safetensors"
  else bad "[tiny backward --checkpoint blocks] no plan at $cp"; fi
  local lcp=$plans/tiny-backward-lora-ckpt
  if [ -f "$lcp/plan.json" ] && [ -f "$d/lora_gpu.safetensors" ]; then
    check "[tiny backward lora --checkpoint blocks] GPU backward" "$H3C" backward --config tiny --synthetic 7 --plan "$lcp" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" --lora "$d/adapter.safetensors" -o "$d/lora_gpu_ckpt.safetensors" --device gpu
    check "[tiny backward lora --checkpoint blocks] GPU adapter and input gradients == the unsegmented plan's (byte-equal)" python3 "$cmp_py" equal "$d/lora_gpu.safetensors" "$d/lora_gpu_ckpt.safetensors"
  fi
  # h3-fuse-grad off (--no-fuse-grad): every grad_add its own kernel, where by default the dX kernels add them in
  # their epilogue; the same bytes.
  local nf=$plans/tiny-backward-nofusegrad lnf=$plans/tiny-backward-lora-nofusegrad
  if [ -f "$nf/plan.json" ]; then
    check "[tiny backward --no-fuse-grad] GPU backward" "$H3C" backward --config tiny --synthetic 7 --plan "$nf" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" -o "$d/grads_gpu_nofusegrad.safetensors" --device gpu
    check "[tiny backward --no-fuse-grad] GPU gradients == the default (fused) plan's (byte-equal)" python3 "$cmp_py" equal "$d/grads_gpu.safetensors" "$d/grads_gpu_nofusegrad.safetensors"
  else bad "[tiny backward --no-fuse-grad] no plan at $nf"; fi
  if [ -f "$lnf/plan.json" ] && [ -f "$d/lora_gpu.safetensors" ]; then
    check "[tiny backward lora --no-fuse-grad] GPU backward" "$H3C" backward --config tiny --synthetic 7 --plan "$lnf" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" --lora "$d/adapter.safetensors" -o "$d/lora_gpu_nofusegrad.safetensors" --device gpu
    check "[tiny backward lora --no-fuse-grad] GPU adapter and input gradients == the default (fused) plan's (byte-equal)" python3 "$cmp_py" equal "$d/lora_gpu.safetensors" "$d/lora_gpu_nofusegrad.safetensors"
  fi
  # Selective recompute (--keep attention): the forward's attention outputs kept instead of rerun, the same bytes.
  local lkp=$plans/tiny-backward-lora-keep
  if [ -f "$lkp/plan.json" ] && [ -f "$d/lora_gpu.safetensors" ]; then
    check "[tiny backward lora --keep attention] GPU backward" "$H3C" backward --config tiny --synthetic 7 --plan "$lkp" --inputs "$d/req.safetensors" --grads "$d/cpu.safetensors" --lora "$d/adapter.safetensors" -o "$d/lora_gpu_keep.safetensors" --device gpu
    check "[tiny backward lora --keep attention] GPU adapter and input gradients == the unsegmented plan's (byte-equal)" python3 "$cmp_py" equal "$d/lora_gpu.safetensors" "$d/lora_gpu_keep.safetensors"
  fi
}

e2e_full() {
  local plan=$plans/full d=$out/full
  mkdir -p "$d"
  [ -f "$plan/plan.json" ] || { bad "[full] no plan at $plan"; return; }
  check "[full] request make (S = 8349)" "$H3C" request make --config full --text 512 --audio 157 --video 8,30,32 --timesteps 2 --seed 5 --dtype BF16 -o "$d/req.safetensors"
  local t0=$(date +%s.%N)
  check "[full] GPU strict run, 33B synthetic weights, 8349 tokens" prun full "$plan" "$d/req.safetensors" "$d/gpu.safetensors" "$d/gpu_ledger.json" gpu
  local t1=$(date +%s.%N)
  echo "    h3c run wall time (JIT + weight generation + forward): $(python3 -c "print(f'{$t1-$t0:.1f} s')")"
  check "[full] GPU ledger verifies (strict)" "$H3C" ledger verify "$d/gpu_ledger.json"
  check "[full] outputs finite" python3 -c "
from safetensors.numpy import load_file; import numpy as np, sys
o = load_file('$d/gpu.safetensors'); bad = [k for k, v in o.items() if not np.all(np.isfinite(v))]
print({k: (list(v.shape), float(np.sqrt(np.mean(v.astype(np.float64)**2)))) for k, v in o.items()}); sys.exit(1 if bad else 0)"
  check "[full] GPU --mode off: every linear and attention native (cuBLASLt)" env H3C_GPU_PROFILE=1 "$H3C" run --config full --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --out "$d/gpu_off.safetensors" --device gpu --mode off --ledger "$d/gpu_off.json"
  check "[full] off mode vs strict outputs (rel_frob <= 5e-2)" python3 "$cmp_py" bound "$d/gpu.safetensors" "$d/gpu_off.safetensors" 5e-2
}

# The full config's LoRA training step on one GPU (docs/contract.md section 14): the --backward --lora-rank 64
# --trainable lora --checkpoint blocks plan (H3C_PLANS_BACKWARD_FULL=1 bash scripts/gpu-plans.sh) at 8,349 tokens, an
# adapter in the slots; the forward, then the backward with its arena and device memory on stderr (H3C_PROFILE);
# every adapter and input gradient finite, the adapters' not all zero. Only with H3C_E2E_ONLY=full_backward.
e2e_full_backward() {
  local plan=$plans/full-backward-lora64-ckpt d=$out/full-backward
  mkdir -p "$d"
  [ -f "$plan/plan.json" ] || { bad "[full backward] no plan at $plan (H3C_PLANS_BACKWARD_FULL=1 bash scripts/gpu-plans.sh)"; return; }
  check "[full backward] request make (S = 8349)" "$H3C" request make --config full --text 512 --audio 157 --video 8,30,32 --timesteps 2 --seed 5 --dtype BF16 -o "$d/req.safetensors"
  check "[full backward] adapter (rank 8)" python3 "$root/scripts/lora_make.py" --plan "$plan" --rank 8 --seed 3 --std 0.01 -o "$d/adapter.safetensors"
  check "[full backward] GPU forward of the checkpointed plan" run full "$plan" "$d/req.safetensors" "$d/out.safetensors" "$d/ledger.json" gpu --lora "$d/adapter.safetensors"
  local t0=$(date +%s.%N)
  check "[full backward] GPU backward: 33B, LoRA r64 trained, 8349 tokens, 52 block segments" env H3C_PROFILE=1 "$H3C" backward --config full --synthetic 7 --plan "$plan" --inputs "$d/req.safetensors" --grads "$d/out.safetensors" --lora "$d/adapter.safetensors" -o "$d/grads.safetensors" --device gpu
  local t1=$(date +%s.%N)
  echo "    h3c backward wall time (JIT + weight generation + forward + backward): $(python3 -c "print(f'{$t1-$t0:.1f} s')")"
  check "[full backward] gradients finite, the adapters' not all zero" python3 -c "
from safetensors.numpy import load_file; import numpy as np, sys
g = load_file('$d/grads.safetensors'); bad = [k for k, v in g.items() if not np.all(np.isfinite(v))]
lora = [k for k in g if 'lora_' in k]; nz = sum(bool(np.any(g[k])) for k in lora)
print(len(g), 'gradients,', len(lora), 'adapter slots,', nz, 'not all zero; non-finite:', bad[:5]); sys.exit(1 if bad or nz == 0 else 0)"
  # The same plan without h3-fuse-grad (--no-fuse-grad: the grad_adds apart): every gradient byte-equal.
  if [ -f "$plans/full-backward-lora64-nofusegrad/plan.json" ]; then
    check "[full backward --no-fuse-grad] GPU backward" env H3C_PROFILE=1 "$H3C" backward --config full --synthetic 7 --plan "$plans/full-backward-lora64-nofusegrad" --inputs "$d/req.safetensors" --grads "$d/out.safetensors" --lora "$d/adapter.safetensors" -o "$d/grads-nofusegrad.safetensors" --device gpu
    [ -f "$d/grads-nofusegrad.safetensors" ] && check "[full backward --no-fuse-grad] gradients == the default (fused) plan's (byte-equal)" python3 "$cmp_py" equal "$d/grads.safetensors" "$d/grads-nofusegrad.safetensors"
  fi
  # Selective recompute (--keep attention, and capped; --keep all: whole blocks): the same request and adapter, every
  # gradient byte-equal to the checkpointed plan's. The plans keeping all 52 blocks' attention outputs (6.2 GB more)
  # or 27 whole blocks (--keep all --keep-bytes 48GiB, ~48 GB more) need a 141 GB H200: on an 80 GB GPU they are
  # skipped, saying so.
  local mib; mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  for k in ${H3C_E2E_KEEP_PLANS:-full-backward-lora64-keep1536m full-backward-lora64-keep full-backward-lora64-keepall48g}; do
    [ -f "$plans/$k/plan.json" ] || continue
    if { [ "$k" = full-backward-lora64-keep ] || [ "$k" = full-backward-lora64-keepall48g ]; } && [ "${mib:-0}" -lt 120000 ]; then
      echo "SKIP [full backward $k] needs a 141 GB GPU (this one has ${mib:-?} MiB)"; continue
    fi
    check "[full backward $k] GPU backward (kept values, not rerun)" env H3C_PROFILE=1 "$H3C" backward --config full --synthetic 7 --plan "$plans/$k" --inputs "$d/req.safetensors" --grads "$d/out.safetensors" --lora "$d/adapter.safetensors" -o "$d/grads-$k.safetensors" --device gpu
    [ -f "$d/grads-$k.safetensors" ] && check "[full backward $k] gradients == the checkpointed plan's (byte-equal)" python3 "$cmp_py" equal "$d/grads.safetensors" "$d/grads-$k.safetensors"
  done
}

case "${H3C_E2E_ONLY:-}" in
  full_bench) e2e_full ;;
  full_backward) e2e_full_backward ;;
  tiny) e2e_config tiny ;;  # one config's checks alone (audit, reference and native bindings among them)
  small) e2e_config small ;;
  native) # the native checks alone, on tiny (with the request and the CPU and GPU runs they compare with)
    d=$out/tiny; mkdir -p "$d"
    check "[tiny] request make" "$H3C" request make --config tiny --text 7 --audio 5 --video 2,3,4 --timesteps 2 --seed 3 -o "$d/req.safetensors"
    check "[tiny] CPU reference run" run tiny "$plans/tiny" "$d/req.safetensors" "$d/cpu.safetensors" "$d/cpu_ledger.json" cpu
    check "[tiny] GPU strict run" run tiny "$plans/tiny" "$d/req.safetensors" "$d/gpu.safetensors" "$d/gpu_ledger.json" gpu
    e2e_native tiny "$plans/tiny" "$d" ;;
  backward) e2e_backward ;;
  *) e2e_config tiny; e2e_ranks; e2e_backward; e2e_config small; [ "${H3C_GPU_FULL:-0}" = 1 ] && e2e_full ;;
esac
echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
