# shellcheck shell=bash
# Sourced by the bench scripts: skips (exit 0) without an NVIDIA GPU, then builds the given targets into build-gpu
# ($H3C_GPU_BUILD_DIR) without MLIR (plans are compiled elsewhere) and sets $root, $build and $out ($H3C_BENCH_OUT,
# default build-gpu/bench-out). Usage: source bench/gpu_build.sh NAME TARGET...
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "$1: SKIP: no NVIDIA GPU or driver on this machine"; exit 0
fi
build=${H3C_GPU_BUILD_DIR:-$root/build-gpu}
out=${H3C_BENCH_OUT:-$build/bench-out}
mkdir -p "$out"
extra=${H3C_EXTRA_INCLUDE:-}
[ -z "$extra" ] && [ -d "$root/carry/include" ] && extra=$root/carry/include
# The Python package (target h3c_python) for the python3 that runs the benches (torch's), not /usr/bin/python3.
py=$(command -v python3 || true)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3C_ENABLE_MLIR=OFF -DH3C_ENABLE_TESTS=OFF \
  ${extra:+-DH3C_EXTRA_INCLUDE=$extra} ${py:+-DPython3_EXECUTABLE=$py} >/dev/null && cmake --build "$build" -j"$(nproc)" --target "${@:2}" >/dev/null || exit 1
