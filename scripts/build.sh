#!/usr/bin/env bash
# Configures and builds h3c into build/ (or $H3C_BUILD_DIR) with ninja. Extra CMake arguments pass through.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install-deps.sh"
build=${H3C_BUILD_DIR:-$root/build}
# Unity build (CMakeLists.txt): about half the CPU time of a fresh build; H3C_UNITY_BUILD=OFF builds file by file
# (faster incremental rebuilds while editing one file).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${H3C_BUILD_TYPE:-Release} -DCMAKE_CXX_COMPILER=g++-12 \
  -DCMAKE_C_COMPILER=gcc-12 -DCMAKE_UNITY_BUILD=${H3C_UNITY_BUILD:-ON} "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
