#!/usr/bin/env bash
# Installs what h3c builds with, from Debian's packages, when it is missing. Idempotent: a machine that already has
# everything does no apt work at all. CUDA is not installed here: it is detected by CMake (see cmake/FindH3CCuda.cmake).
set -euo pipefail
pkgs=(llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools nlohmann-json3-dev libfmt-dev libgtest-dev
      libcli11-dev libssl-dev ninja-build cmake g++-12
      python3-dev pybind11-dev libdlpack-dev python3-numpy  # the Python package (python/) and its CPU tests
      python3-torch  # torch 1.13 (CPU): the package's torch tensors and autograd in those tests
      clang-14 libclang-rt-14-dev  # the sanitizer build of scripts/test.sh and the libFuzzer targets
      lld)  # the linker (CMakeLists.txt H3C_LLD): a tenth of GNU ld's time for the binaries that link MLIR
# One dpkg-query for all of them (one per package took ~0.9 s, at every build.sh call); a package it does not know
# prints nothing (and makes it exit non-zero).
installed=" $({ dpkg-query -W -f='${Status} ${Package}\n' "${pkgs[@]}" 2>/dev/null || true; } |
  sed -n 's/^install ok installed //p' | tr '\n' ' ')"
missing=()
for p in "${pkgs[@]}"; do
  [[ "$installed" == *" $p "* ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
