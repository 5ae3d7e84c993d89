#!/usr/bin/env bash
# Unmerged LoRA on the GPU (issue 21; docs/contract.md section 13), run by scripts/gpu-test.sh. Needs $H3C (an h3c
# built with CUDA) and the plans under $H3C_PLANS: tiny, small and their -lora forms (scripts/gpu-plans.sh). Per
# config, a rank-8 adapter on every module the slots serve (scripts/lora_make.py) through `h3c run --lora`:
#   - empty slots give the plain plan's bytes on the GPU (the LoRA chain adds exact zeros);
#   - tiny: GPU bytes == CPU bytes with and without the adapter (every GEMM of the contract, attention included at
#     these sizes); small (where the tensor core's chunk sums and attention's exp2 agree with the CPU within a bound,
#     section 4): in an audit run, every op with a LoRA path within 2^-7 of the fp64 reference on its own inputs
#     (the outputs' bf16 rounding is at most 2^-8 of the largest magnitude), and the adapter's effect on the outputs
#     far above the GPU's distance to the CPU. (A ratio to the plain plan's end-to-end distance is no test: the
#     adapter sharpens the attention logits, and the same exp2 and chunk-sum differences then move the outputs 1.9x
#     as far, measured 2026-12-05.)
#   - the weights identity with the adapter (slots hashed on the device) equals the CPU's.
# Ends with "N passed, N failed".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
H3C=${H3C:-$root/build-gpu/bin/h3c}
plans=${H3C_PLANS:-$root/carry/plans}
out=${H3C_GPU_OUT:-$root/build-gpu/gpu-test}/lora
mkdir -p "$out"
. "$root/scripts/gpu-checks.sh"
run() { "$H3C" run --synthetic 7 "$@" >>"$out/runs.log" 2>&1 || { bad "h3c run $*"; tail -3 "$out/runs.log"; }; }
for c in tiny small; do
  [ -f "$plans/$c-lora/plan.json" ] || { bad "[$c] no plan at $plans/$c-lora (scripts/gpu-plans.sh)"; continue; }
  python3 "$root/scripts/lora_make.py" --plan "$plans/$c-lora" --rank 8 --seed 3 --std 0.1 -o "$out/$c.lora.safetensors" >/dev/null ||
    { bad "[$c] lora_make.py"; continue; }
  "$H3C" request make --config $c --text 9 --audio 5 --video 2,4,6 --timesteps 2 --seed 4 --dtype BF16 -o "$out/$c.req.st" >/dev/null
  for d in cpu gpu; do
    run --config $c --plan "$plans/$c" --inputs "$out/$c.req.st" --out "$out/$c.$d.plain.st" --device $d --ledger "$out/$c.$d.plain.json"
    run --config $c --plan "$plans/$c-lora" --inputs "$out/$c.req.st" --out "$out/$c.$d.zero.st" --device $d --ledger "$out/$c.$d.zero.json"
    run --config $c --plan "$plans/$c-lora" --inputs "$out/$c.req.st" --out "$out/$c.$d.lora.st" --device $d --ledger "$out/$c.$d.lora.json" \
      --lora "$out/$c.lora.safetensors:0.7"
  done
  if [ $c = small ]; then
    run --config $c --plan "$plans/$c-lora" --inputs "$out/$c.req.st" --out "$out/$c.gpu.audit.st" --device gpu --mode audit \
      --ledger "$out/$c.gpu.audit.json" --lora "$out/$c.lora.safetensors:0.7"
    if python3 - "$out/$c.gpu.audit.json" <<'PY'; then ok "[$c] every op with a LoRA path within 2^-7 of the fp64 reference on its inputs (audit)"; else bad "[$c] an op with a LoRA path beyond 2^-7 of the fp64 reference (audit)"; fi
import json, sys
nodes = json.load(open(sys.argv[1]))["nodes"]
lora = {n["op_index"]: n["audit"] for n in nodes if any(i["value"].endswith(":lora_t") for i in n["inputs"])}
plain = [n["audit"]["max_rel"] for n in nodes if n["kind"] == "linear" and n["op_index"] not in lora and n.get("audit")]
worst = max(lora.values(), key=lambda a: a["max_rel"]) if lora else None
print(f"    small audit: {len(lora)} ops with a LoRA path, worst max_rel {worst['max_rel']:.3e} ({worst['output']}); "
      f"the other linears' worst {max(plain):.3e}" if worst else "    small audit: no op with a LoRA path")
sys.exit(0 if worst and all(a["max_rel"] <= 2.0 ** -7 for a in lora.values()) else 1)
PY
  fi
  cmp -s "$out/$c.gpu.zero.st" "$out/$c.gpu.plain.st" && ok "[$c] empty slots: the plain plan's bytes (GPU)" || bad "[$c] empty slots != plain plan (GPU)"
  if python3 - "$root" "$out" "$c" <<'PY'; then ok "[$c] GPU with the adapter against the CPU reference"; else bad "[$c] GPU with the adapter against the CPU reference"; fi
import sys
import numpy as np
root, out, c = sys.argv[1:4]
sys.path.insert(0, root + "/scripts")
import st_numpy  # noqa: E402
rd = lambda t, d, k: np.asarray(st_numpy.read(f"{out}/{c}.{d}.{t}.st")[0][k], np.float64)  # noqa: E731
rel = lambda x, y: np.linalg.norm(x - y) / np.linalg.norm(y)  # noqa: E731
good = True
for k in ("sample", "audio_sample"):
    plain, lora = rel(rd("plain", "gpu", k), rd("plain", "cpu", k)), rel(rd("lora", "gpu", k), rd("lora", "cpu", k))
    effect = rel(rd("lora", "cpu", k), rd("plain", "cpu", k))
    exact = open(f"{out}/{c}.gpu.lora.st", "rb").read() == open(f"{out}/{c}.cpu.lora.st", "rb").read()
    print(f"    {c} {k}: GPU vs CPU rel: plain {plain:.3e}, unmerged LoRA {lora:.3e}; the adapter's effect {effect:.3e}; "
          f"bytes equal: {exact}")
    good &= effect > 10 * lora and (c != "tiny" or exact)
sys.exit(0 if good else 1)
PY
  python3 -c "import json,sys;a,b=(json.load(open(p))['header']['weights'] for p in sys.argv[1:]);sys.exit(0 if a['sha256']==b['sha256'] and a['lora'][0]['mode']=='unmerged' else 1)" \
    "$out/$c.cpu.lora.json" "$out/$c.gpu.lora.json" && ok "[$c] weights identity with the adapter: GPU (device-hashed slots) == CPU" || bad "[$c] weights identity GPU != CPU"
done
echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
