#!/usr/bin/env bash
# The main job: build h3c, compile the pinned MiniMax-H3 fingerprint into a plan, and run it on synthetic weights,
# on the GPU when one is present, else with the CPU reference executor. Outputs go to out/ (or $H3C_OUT).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
h3c="${H3C_BUILD_DIR:-$root/build}/bin/h3c"
out=${H3C_OUT:-$root/out}
mkdir -p "$out"
"$h3c" version
