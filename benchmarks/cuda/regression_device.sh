#!/usr/bin/env bash
# The GPU regression: every CUDA test binary one after another (each backend reserves
# most of the GPU), within one call's time; cuda_fp8_test without its slow all-formats case.
# Pack first: benchmarks/device_pack.sh cuda_memory_test cuda_sampler_test cuda_model_test cuda_int4_test cuda_fp8_test cuda_ops_test
# then, on the GPU machine: benchmarks/cuda/regression_device.sh   (BUDGET_S: seconds for all)
set -uo pipefail
source benchmarks/device_prelude.sh
end=$(( $(date +%s) + ${BUDGET_S:-520} ))
for spec in cuda_memory_test:60:'*' cuda_sampler_test:45:'*' cuda_model_test:150:'*' cuda_int4_test:150:'*' \
            cuda_fp8_test:240:'-*LinearEveryFormatShapeAndKernel*' cuda_ops_test:300:'*'; do
  IFS=: read -r t limit filter <<< "$spec"
  left=$(( end - $(date +%s) )); (( left < 20 )) && { echo "$t not run (time)" >> "$OUT/summary.txt"; continue; }
  (( limit > left )) && limit=$left
  s=$(date +%s); timeout $limit $BIN/$t --gtest_brief=1 --gtest_filter="$filter" > "$OUT/$t.log" 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$t.log" | tr '\n' ' ')" >> "$OUT/summary.txt"
done
cat "$OUT/summary.txt"
grep -h -B2 -A6 "Failure" "$OUT"/*.log | head -40
