#!/usr/bin/env bash
# One batched call on the GPU machine: CUDA tests, benchmark, transformers parity; logs in $OUT,
# a short table last. Usage (from the repo root, binaries in .device/bin, libraries in
# .device/bundle.tgz): benchmarks/cuda/run_device.sh [tests] [bench] [kernels] [int4] [parity] [parity_fp8]
set -uo pipefail
source "$(dirname "$0")/../device_prelude.sh"
modes="${*:-tests bench parity}"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
summary=""
for m in $modes; do
  case $m in
    tests)
      for spec in ${CUDA_TESTS:-cuda_memory_test:60 cuda_sampler_test:45 cuda_model_test:100 cuda_ops_test:200}; do
        t=${spec%%:*}; limit=${spec##*:}
        start=$(date +%s)
        timeout $limit $BIN/$t --gtest_brief=1 > "$OUT/$t.log" 2>&1
        rc=$?
        grep -E "^\[parity\]" "$OUT/$t.log" > "$OUT/parity_fixtures.txt.part" 2>/dev/null && cat "$OUT/parity_fixtures.txt.part" >> "$OUT/parity_fixtures.txt"
        rm -f "$OUT/parity_fixtures.txt.part"
        summary+="$t rc=$rc ($(( $(date +%s) - start )) s): $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$t.log" | tr '\n' ' ')\n"
        grep -E "Failure|FAILED|error|Expected|Which is|actual" "$OUT/$t.log" | head -40
      done ;;
    bench)
      start=$(date +%s)
      timeout 120 $BIN/llm_cuda_bench --model benchmarks/cuda/configs/llama3-8b --out "$OUT/bench.md" > "$OUT/bench.log" 2>&1
      summary+="bench rc=$? ($(( $(date +%s) - start )) s)\n"
      tail -5 "$OUT/bench.log" ;;
    kernels)
      # Decode attention and the decode linears in isolation, beside their floors.
      start=$(date +%s)
      [ -x $BIN/attention_bench ] && timeout 120 $BIN/attention_bench --out "$OUT/attention_bench.md" > "$OUT/attention_bench.log" 2>&1
      summary+="attention_bench rc=$? ($(( $(date +%s) - start )) s)\n"
      start=$(date +%s)
      timeout 200 $BIN/gemv_bench --out "$OUT/gemv_bench.md" > "$OUT/gemv_bench.log" 2>&1
      summary+="gemv_bench rc=$? ($(( $(date +%s) - start )) s)\n" ;;
    int4)
      # Issue 17: the W4A16 kernels against the CPU oracle, then the 8B shape in bf16 and in 4 bits
      # (decode at batch 1, 16 and 128, 2048-token prefill) for the speed targets.
      start=$(date +%s)
      timeout ${INT4_TEST_SECONDS:-500} $BIN/cuda_int4_test --gtest_brief=1 ${INT4_TEST_FILTER:+--gtest_filter=$INT4_TEST_FILTER} \
        > "$OUT/cuda_int4_test.log" 2>&1
      summary+="cuda_int4_test rc=$? ($(( $(date +%s) - start )) s): $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/cuda_int4_test.log" | tr '\n' ' ')\n"
      grep -E "^\[int4|Failure|Expected|Which is" "$OUT/cuda_int4_test.log" | head -40
      # INT4_BENCH_QUANT=int4 skips the bf16 baseline (the same on every build of the int4 kernels).
      for q in ${INT4_BENCH_QUANT:-none int4}; do
        start=$(date +%s)
        timeout ${INT4_BENCH_SECONDS:-180} $BIN/llm_cuda_bench --model benchmarks/cuda/configs/llama3-8b --quantization $q --batches 1,16,128 \
          --out "$OUT/bench_$q.md" > "$OUT/bench_$q.log" 2>&1
        summary+="bench $q rc=$? ($(( $(date +%s) - start )) s)\n"
      done ;;
    parity|parity_fp8)
      # parity_fp8 (issue 16): the same model as a block-FP8 checkpoint, against transformers'
      # float32 forward over the dequantized weights.
      start=$(date +%s)
      flags=""; [[ $m == parity_fp8 ]] && flags=--fp8
      PYTHONUNBUFFERED=1 timeout 200 python3 benchmarks/cuda/hf_parity.py --binary $BIN/llm_cuda_logits $flags \
        --workdir /tmp/hf_parity --out "$OUT/$m.md" > "$OUT/$m.log" 2>&1
      summary+="$m rc=$? ($(( $(date +%s) - start )) s)\n"
      tail -12 "$OUT/$m.log" ;;
  esac
done
echo "==== summary"
printf "$summary"
[ -f "$OUT/parity_fixtures.txt" ] && cat "$OUT/parity_fixtures.txt"
[ -f "$OUT/bench.md" ] && cat "$OUT/bench.md" | head -60
for f in attention_bench.md gemv_bench.md bench_none.md bench_int4.md; do [ -f "$OUT/$f" ] && cat "$OUT/$f"; done
