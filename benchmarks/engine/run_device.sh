#!/usr/bin/env bash
# The serving loop on one GPU, in one device call: the CUDA tests that cover sampling and the
# step path, then llm_engine_bench closed loops (the engine without RPC) with overlapped steps on
# and off, GPU utilization sampled by nvidia-smi meanwhile. Logs in $OUT, a short table last.
#   benchmarks/engine/run_device.sh [tests] [bench] [engine]
#   (env: CUDA_TESTS "name:limit_s ...", GTEST_FILTER, LEVELS, DURATION, PROMPT, OUTPUT, MAX_SEQS, OVERLAP "on off")
set -uo pipefail
source "$(dirname "$0")/../device_prelude.sh"
modes="${*:-tests engine}"
LEVELS=${LEVELS:-1,32,128,256}
DURATION=${DURATION:-20}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
summary=""
for m in $modes; do
  case $m in
    tests)
      for spec in ${CUDA_TESTS:-cuda_sampler_test:60 cuda_memory_test:60 cuda_model_test:150}; do
        t=${spec%%:*}; limit=${spec##*:}
        timeout $limit $BIN/$t --gtest_brief=1 --gtest_filter="${GTEST_FILTER:-*}" > "$OUT/$t.log" 2>&1
        summary+="$t rc=$?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$t.log" | tr '\n' ' ')\n"
        grep -E "Failure|FAILED|Expected|Which is|actual" "$OUT/$t.log" | head -30
      done ;;
    bench)
      timeout 150 $BIN/llm_cuda_bench --model benchmarks/cuda/configs/llama3-8b --out "$OUT/cuda_bench.md" > "$OUT/cuda_bench.log" 2>&1
      summary+="llm_cuda_bench rc=$?\n"
      grep -E "mixed step|batch|prefill" "$OUT/cuda_bench.log" | head -20 ;;
    engine)
      for overlap in ${OVERLAP:-on off}; do
        flag=""; [ $overlap = off ] && flag="--no-overlap"
        nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 250 > "$OUT/util_$overlap.txt" &
        smi=$!
        timeout 280 $BIN/llm_engine_bench --model benchmarks/cuda/configs/llama3-8b --dummy-weights --device cuda \
          --concurrency "$LEVELS" --duration "$DURATION" --prompt-len "${PROMPT:-128}" --output-len "${OUTPUT:-512}" \
          --max-seqs "${MAX_SEQS:-256}" --max-tokens-per-step "${MAX_TOKENS_PER_STEP:-4096}" --max-context 4096 $flag \
          --out "$OUT/engine_bench.md" > "$OUT/engine_$overlap.log" 2>&1
        summary+="engine bench overlap $overlap rc=$?\n"
        kill $smi 2> /dev/null
        tail -8 "$OUT/engine_$overlap.log"
      done ;;
  esac
done
echo "==== summary"
printf "$summary"
[ -f "$OUT/engine_bench.md" ] && grep -E "^\||^###" "$OUT/engine_bench.md"
