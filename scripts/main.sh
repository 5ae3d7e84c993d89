#!/usr/bin/env bash
# The main job: build h3c, compile the pinned MiniMax-H3 fingerprint (33B, 50 + 2 blocks) into a plan, make a packed
# request, and run the plan on synthetic weights in strict mode: on the GPU when one is present (8,349 tokens, as in
# H3-FACTS.md), else with the CPU reference executor (a short request; weights are generated op by op, so memory
# stays bounded). Writes out/ (or $H3C_OUT): plan/, request.safetensors, output.safetensors, ledger.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
h3c="${H3C_BUILD_DIR:-$root/build}/bin/h3c"
out=${H3C_OUT:-$root/out}
mkdir -p "$out"
"$h3c" version

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  device=gpu; req=(--text 512 --video 8,30,32 --audio 157)
else
  device=cpu; req=(--text 16 --video 1,4,4 --audio 8)
  echo "main: no GPU here: running the CPU reference executor on a short request"
fi

rm -rf "$out/plan"
echo "main: h3c compile models/h3/fingerprint.json --arch sm_90a --tp 1"
time "$h3c" compile "$root/models/h3/fingerprint.json" --arch sm_90a --tp 1 -o "$out/plan"
"$h3c" request make --config full "${req[@]}" --seed 1 -o "$out/request.safetensors"
echo "main: h3c run --device $device --mode strict (full 33B config, synthetic weights, seed 0)"
time "$h3c" run --config full --synthetic 0 --plan "$out/plan" --inputs "$out/request.safetensors" \
  --out "$out/output.safetensors" --device "$device" --mode strict --ledger "$out/ledger.json"
"$h3c" ledger verify "$out/ledger.json"
"$h3c" ledger summary "$out/ledger.json"
echo "main: outputs in $out (output.safetensors: sample, audio_sample; ledger.json: the sealed operator ledger)"
