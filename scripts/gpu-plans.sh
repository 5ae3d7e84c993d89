#!/usr/bin/env bash
# Compiles the plans the GPU checks run (tiny, small, full; sm_90a, sp = tp = 1, fused; and tiny at sp 2 x tp 2, which
# the one-GPU executor must refuse and the CPU reference must run to the same bytes) into carry/plans/<name> with an h3c
# that has `compile` (MLIR build; default build/bin/h3c, or $H3C), and copies the header-only dependencies a GPU machine
# lacks into carry/include and GoogleTest's sources into carry/googletest (built in-tree there). Then: run tool `run` with carry ["carry"] and `bash scripts/gpu-test.sh` (H3C_GPU_FULL=1
# adds the full 33B run). carry/ is git-ignored.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
H3C=${H3C:-$root/build/bin/h3c}
# (grep without -q reads the whole help: -q exits at the first match, h3c then dies of SIGPIPE writing the rest and
# pipefail turned that into "no compile" once the --tune list grew past the pipe's first read)
"$H3C" compile --help 2>&1 | grep -- --arch >/dev/null || { echo "gpu-plans: $H3C has no compile (build with MLIR)"; exit 2; }
mkdir -p "$root/carry/plans" "$root/carry/include"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for c in tiny small full; do
  "$H3C" fingerprint derive --config "$c" -o "$tmp/$c.json"
  rm -rf "$root/carry/plans/$c"
  "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" -o "$root/carry/plans/$c" | tail -1
done
for c in tiny small full; do  # unmerged LoRA slots (docs/contract.md section 13): scripts/gpu-lora-check.sh, bench
  rm -rf "$root/carry/plans/$c-lora"
  "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" --lora-rank 64 -o "$root/carry/plans/$c-lora" | tail -1
done
for c in tiny small; do  # the backward (docs/contract.md section 14): gpu-e2e.sh e2e_backward, gpu-diffusers-check.sh
  rm -rf "$root/carry/plans/$c-backward"
  "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" --backward -o "$root/carry/plans/$c-backward" | tail -1
done
# The one-thread gradient kernels (grad.cuh, the CPU's model of a chunk sum): test/gpu/gpu_backward_test.cpp compares
# them with the CPU byte for byte, and the default plan's tensor-core forms with both
rm -rf "$root/carry/plans/tiny-backward-ref"
"$H3C" compile "$tmp/tiny.json" --arch "${H3C_ARCH:-sm_90a}" --backward --tune grad_mma=0 \
  -o "$root/carry/plans/tiny-backward-ref" | tail -1
# LoRA adapters only (the base frozen): gpu-e2e.sh e2e_backward
rm -rf "$root/carry/plans/tiny-backward-lora"
"$H3C" compile "$tmp/tiny.json" --arch "${H3C_ARCH:-sm_90a}" --backward --lora-rank 64 --trainable lora \
  -o "$root/carry/plans/tiny-backward-lora" | tail -1
# Activation checkpointing per block (docs/contract.md section 14): the two backward plans above with the segments;
# gpu_backward_test's GpuBackwardCheckpoint and gpu-e2e.sh e2e_backward compare them byte for byte.
for p in tiny-backward tiny-backward-lora; do
  rm -rf "$root/carry/plans/$p-ckpt"
  "$H3C" compile "$tmp/tiny.json" --arch "${H3C_ARCH:-sm_90a}" --backward \
    $([ $p = tiny-backward-lora ] && echo --lora-rank 64 --trainable lora) --checkpoint blocks \
    -o "$root/carry/plans/$p-ckpt" | tail -1
done
# Without h3-fuse-grad (every grad_add its own kernel): gpu-e2e.sh e2e_backward compares them byte for byte with the
# default plans, whose dX kernels add the sums in their epilogue.
for p in tiny-backward tiny-backward-lora; do
  rm -rf "$root/carry/plans/$p-nofusegrad"
  "$H3C" compile "$tmp/tiny.json" --arch "${H3C_ARCH:-sm_90a}" --backward \
    $([ $p = tiny-backward-lora ] && echo --lora-rank 64 --trainable lora) --no-fuse-grad \
    -o "$root/carry/plans/$p-nofusegrad" | tail -1
done
# Selective recompute (--keep attention): the checkpointed LoRA plan whose forward keeps every block's attention
# output; gpu-e2e.sh e2e_backward compares it byte for byte with the plans above.
rm -rf "$root/carry/plans/tiny-backward-lora-keep"
"$H3C" compile "$tmp/tiny.json" --arch "${H3C_ARCH:-sm_90a}" --backward --lora-rank 64 --trainable lora \
  --checkpoint blocks --keep attention -o "$root/carry/plans/tiny-backward-lora-keep" | tail -1
# Opt-in (H3C_PLANS_BACKWARD_FULL=1; ~7 MB a plan): the training step of bench/backward_bench.py at the full and
# small configs, with one checkpoint segment per block: LoRA rank 64 adapters only (<c>-backward-lora64-ckpt) and
# every tensor (<c>-backward-ckpt). --tokens sizes the slots (and the buffer report); gpu-e2e.sh H3C_E2E_ONLY=
# full_backward runs full-backward-lora64-ckpt, and the same with --keep attention (every block's attention output
# kept: 6.2 GB more at 8,349 rows, for a 141 GB H200) and with --keep-bytes 1536MiB (13 blocks: what an 80 GB H100
# has left beside the step) and with --keep all --keep-bytes 48GiB (27 whole blocks kept, for a 141 GB H200), each
# byte-equal to the first.
if [ "${H3C_PLANS_BACKWARD_FULL:-0}" = 1 ]; then
  for c in small full; do
    s=$([ $c = full ] && echo 8349 || echo 2048)
    rm -rf "$root/carry/plans/$c-backward-lora64-ckpt" "$root/carry/plans/$c-backward-ckpt"
    "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" --backward --lora-rank 64 --trainable lora \
      --checkpoint blocks --tokens $s -o "$root/carry/plans/$c-backward-lora64-ckpt" | tail -1
    if [ $c = full ]; then
      rm -rf "$root/carry/plans/full-backward-lora64-keep" "$root/carry/plans/full-backward-lora64-keep1536m" \
        "$root/carry/plans/full-backward-lora64-nofusegrad"
      "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" --backward --lora-rank 64 --trainable lora \
        --checkpoint blocks --no-fuse-grad --tokens $s -o "$root/carry/plans/full-backward-lora64-nofusegrad" | tail -1
      "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" --backward --lora-rank 64 --trainable lora \
        --checkpoint blocks --keep attention --tokens $s -o "$root/carry/plans/full-backward-lora64-keep" | tail -1
      "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" --backward --lora-rank 64 --trainable lora \
        --checkpoint blocks --keep attention --keep-bytes 1536MiB --tokens $s \
        -o "$root/carry/plans/full-backward-lora64-keep1536m" | tail -1
      rm -rf "$root/carry/plans/full-backward-lora64-keepall48g"
      "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" --backward --lora-rank 64 --trainable lora \
        --checkpoint blocks --keep all --keep-bytes 48GiB --tokens $s \
        -o "$root/carry/plans/full-backward-lora64-keepall48g" | tail -1
    fi
    "$H3C" compile "$tmp/$c.json" --arch "${H3C_ARCH:-sm_90a}" --backward --checkpoint blocks --tokens $s \
      -o "$root/carry/plans/$c-backward-ckpt" | tail -1
  done
fi
rm -rf "$root/carry/plans/tiny-sp2tp2"
"$H3C" compile "$tmp/tiny.json" --arch "${H3C_ARCH:-sm_90a}" --sp 2 --tp 2 -o "$root/carry/plans/tiny-sp2tp2" | tail -1
# The RL example's plans and request (scripts/gpu-test.sh step 5); needs the Python package built here.
if [ -f "$root/build/python/h3c/__init__.py" ]; then
  rm -rf "$root/carry/rl"
  PYTHONPATH="$root/build/python" python3 "$root/examples/rl_flow_grpo.py" --h3c "$H3C" --compile-only "$root/carry/rl"
fi
cp -r /usr/include/nlohmann /usr/include/fmt /usr/include/CLI /usr/include/openssl /usr/include/dlpack /usr/include/pybind11 "$root/carry/include/"
cp -r /usr/include/x86_64-linux-gnu/openssl/* "$root/carry/include/openssl/"
rm -rf "$root/carry/googletest" && cp -r /usr/src/googletest "$root/carry/googletest"
du -sh "$root/carry"
