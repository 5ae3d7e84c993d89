# Sourced by the GPU check scripts (gpu-test.sh, gpu-e2e.sh, gpu-lora-check.sh, gpu-diffusers-check.sh): the PASS /
# FAIL lines and their counts, which each script ends with as "N passed, N failed".
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "PASS $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
