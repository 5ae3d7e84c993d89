#!/usr/bin/env bash
# Nsight Compute profiles of one bench linear in several forms side by side (one launch each at M = 8,349, clocks not
# locked): the plan's default form, cuBLASLt's plain GEMM of the same shape and each --variant, with the sections
# that tell a main loop's time apart (SpeedOfLight, WarpStateStats, InstructionStats, SchedulerStats,
# MemoryWorkloadAnalysis, SourceCounters), then each report's key metrics and its SASS lines with the most stall
# samples (bench/ncu_summary.py). Skips (exit 0) without a GPU; needs ncu (CUDA's Nsight Compute).
#
#   bash bench/profile_linear.sh "to_out plain" \
#     "tall=linear:gemm_bm=256,linear:gemm_bn=152,linear:gemm_stages=4,linear:gemm_cluster=2,linear:gemm_epi_smem=0" ...
#
# The first argument is a linear of h3c_kernel_bench ("qkv (fused to_q/k/v)", "to_out + gate_residual", "fc1 + swiglu",
# "fc2 + gate_residual", "to_out plain": to_out's GEMM without its epilogue, the same work as cuBLASLt's line), the
# others `h3c_kernel_bench --variant` texts (LABEL=[OP:]NAME=VALUE,...). Reports: $out/ncu/<form>.ncu-rep.
set -uo pipefail
# shellcheck source=bench/gpu_build.sh
source "$(dirname "$0")/gpu_build.sh" profile_linear h3c_kernel_bench
[ $# -ge 1 ] || { echo "usage: profile_linear.sh LINEAR [LABEL=SETTINGS ...]"; exit 2; }
linear=$1; shift
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$ncu" ] || { echo "profile_linear: no ncu on this machine"; exit 1; }
variants=()
forms=("default|$linear" "cublas|$linear [cuBLASLt plain]")
for v in "$@"; do
  variants+=(--variant "$v")
  forms+=("${v%%=*}|$linear [sm90 ${v%%=*}]")
done
mkdir -p "$out/ncu"
status=0
for f in "${forms[@]}"; do
  tag=${f%%|*} only=${f#*|}
  # --only matches by substring, so the default's filter also lets the bench's own variants of the linear run; the
  # default is benched first (3 warm-ups, then the timed launches), so --launch-skip 3 --launch-count 1 profiles its
  # first timed launch, as it does the one line a cuBLASLt or variant filter selects.
  args=("$out/ncu/$tag.jsonl" --only "$only")
  [ "$tag" = cublas ] && args+=(--vendor)
  [ "$tag" != default ] && [ "$tag" != cublas ] && args+=("${variants[@]}")
  rep=$out/ncu/$tag
  if ! "$ncu" --clock-control none --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
      --section InstructionStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
      -f -o "$rep" "$build/bin/h3c_kernel_bench" "${args[@]}" >"$rep.log" 2>&1 || [ ! -f "$rep.ncu-rep" ]; then
    echo "== $tag: ncu failed"; grep -E "==ERROR==|FAILED" "$rep.log" | head -5; status=1; continue
  fi
  echo "== $tag ($only): $(grep -m1 -oE '[0-9.]+ ms' "$rep.log" || true) under ncu"
  "$ncu" -i "$rep.ncu-rep" --page details --csv >"$rep-details.csv" 2>&1
  "$ncu" -i "$rep.ncu-rep" --page source --csv --print-source sass >"$rep-source.csv" 2>&1
  python3 "$root/bench/ncu_summary.py" "$rep-details.csv" "$rep-source.csv" 18
done
exit $status
