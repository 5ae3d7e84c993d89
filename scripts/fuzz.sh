#!/usr/bin/env bash
# Fuzzes h3c's readers of untrusted files (test/fuzz/h3c_fuzz.cpp) with libFuzzer under ASan + UBSan:
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]        (default 60 s each, every target)
# Builds build-fuzz/ with Debian's clang-14 (every library coverage-instrumented), seeds each target's corpus
# (build-fuzz/corpus/<target>) from files the h3c tool writes (the tiny config's request, checkpoint, index, config,
# fingerprint, compiled plan, ledger and trajectory; the plan needs a build/ with `h3c compile`, as scripts/test.sh
# leaves it), then runs each target for the given time. Findings (crash-*, leak-*, timeout-*, oom-*) land in
# build-fuzz/findings/; the exit status is non-zero when there are any. Corpora grow across runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors index config fingerprint plan request ledger trajectory lora)
fz=$root/build-fuzz
cmake -S "$root" -B "$fz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_COMPILER=clang-14 -DH3C_ENABLE_MLIR=OFF -DH3C_ENABLE_TESTS=OFF -DH3C_SANITIZE=ON -DH3C_FUZZ=ON \
  -DH3C_CUDA_ROOT=/nonexistent >/dev/null || exit 2
cmake --build "$fz" --target h3c_fuzz h3c -j"$(nproc)" >/dev/null || { echo "fuzz build failed"; exit 2; }

# Seeds: written once, by the tool itself (the fuzz build's h3c; `compile` from build/ where it exists).
seed=$fz/seed
if [ ! -f "$seed/done" ]; then
  rm -rf "$seed"; mkdir -p "$seed"
  h3c=$fz/bin/h3c
  $h3c request make --config tiny --text 3 --audio 2 --video 1,2,2 --seed 2 -o "$seed/r.safetensors" >/dev/null
  $h3c checkpoint synth --config tiny --seed 1 --shard-size 20000 --out "$seed/ck" >/dev/null
  $h3c fingerprint derive --config tiny -o "$seed/fp.json"
  if [ -x "$root/build/bin/h3c" ] && "$root/build/bin/h3c" compile "$seed/fp.json" -o "$seed/plan" >/dev/null 2>&1; then
    $h3c run --config tiny --synthetic 1 --plan "$seed/plan" --inputs "$seed/r.safetensors" --out "$seed/o.safetensors" \
      --ledger "$seed/ledger.json" >/dev/null
    $h3c generate --config tiny --synthetic 1 --plan "$seed/plan" --inputs "$seed/r.safetensors" --steps 2 --seed 1 \
      --out "$seed/traj" >/dev/null
  fi
  touch "$seed/done"
fi
add() {  # add TARGET FILE...: copies existing seed files into the target's corpus
  local t=$1; shift; mkdir -p "$fz/corpus/$t"
  for f in "$@"; do [ -f "$f" ] && cp -n "$f" "$fz/corpus/$t/seed-$(basename "$f")"; done
}
for t in "$root"/test/fuzz/seeds/*; do add "$(basename "$t")" "$t"/*; done  # the checked-in seeds (CI's)
add safetensors "$seed/r.safetensors" "$seed/o.safetensors" "$seed"/ck/*.safetensors
add request "$seed/r.safetensors"
add index "$seed"/ck/*.index.json
add config "$seed/ck/config.json"
add fingerprint "$seed/fp.json"
add plan "$seed/plan/plan.json"
add ledger "$seed/ledger.json"
if [ -f "$seed/traj/final.json" ] && [ ! -f "$fz/corpus/trajectory/seed-traj" ]; then
  mkdir -p "$fz/corpus/trajectory"
  { cat "$seed/traj/header.json"; printf '\n--8<--\n'; cat "$seed/traj/steps/step-00000.json"; printf '\n--8<--\n'
    cat "$seed/traj/final.json"; } > "$fz/corpus/trajectory/seed-traj"
fi

mkdir -p "$fz/findings"
status=0
for t in "${targets[@]}"; do
  mkdir -p "$fz/corpus/$t"
  log=$fz/findings/$t.log
  H3C_FUZZ_TARGET=$t ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$fz/bin/h3c_fuzz" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=262144 -print_final_stats=1 \
    -artifact_prefix="$fz/findings/$t-" "$fz/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}')
  echo "fuzz $t: ${secs}s, ${runs:-?} runs, corpus $(ls "$fz/corpus/$t" | wc -l), exit $rc"
  if [ "$rc" != 0 ]; then status=1; grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5; fi
done
exit $status
