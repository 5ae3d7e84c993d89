#!/usr/bin/env bash
# Configures and builds h3c into build/ (or $H3C_BUILD_DIR) with ninja. Extra CMake arguments pass through.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install-deps.sh"
build=${H3C_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${H3C_BUILD_TYPE:-Release} -DCMAKE_CXX_COMPILER=g++-12 \
  -DCMAKE_C_COMPILER=gcc-12 "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
