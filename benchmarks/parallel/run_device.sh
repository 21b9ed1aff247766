#!/usr/bin/env bash
# Tensor/pipeline parallelism on a multi-GPU machine, in one call: the device-communicator tests,
# TP/PP parity against one GPU, the all-reduce microbenchmark and the engine at TP1/TP2(/TP4) and
# PP1/PP2(/PP4). Logs and tables in $OUT; a summary last.
# From the repo root on the GPU machine (binaries in .device/bins.tgz, libraries in
# .device/bundle.tgz):   benchmarks/parallel/run_device.sh [tests] [parity] [allreduce] [engine|tp|pp]
# (engine = tp + pp: the TP decode latencies, the PP throughput)
set -uo pipefail
source "$(dirname "$0")/../device_prelude.sh"
export LLM_CUSTOM_ALLREDUCE=${LLM_CUSTOM_ALLREDUCE:-1}  # exported to every rank (-x) below
export LLM_FUSED_ALLREDUCE_NORM=${LLM_FUSED_ALLREDUCE_NORM:-1}
export LLM_PUSH_ALLREDUCE=${LLM_PUSH_ALLREDUCE:-1}
GPUS=$(nvidia-smi -L | grep -c "GPU ")
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x LLM_CUSTOM_ALLREDUCE -x LLM_FUSED_ALLREDUCE_NORM -x LLM_PUSH_ALLREDUCE -x LLM_GEMV_SMEM_RING -x LLM_GEMV_RING_KB -x LLM_LOG_LINEAR_CHOICE)
MODEL8B=benchmarks/cuda/configs/llama3-8b
modes="${*:-tests parity allreduce engine}"
modes=${modes//engine/tp pp}
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv; nvidia-smi topo -m; } > "$OUT/gpus.txt" 2>&1
head -3 "$OUT/gpus.txt"
summary=""
step() {  # step NAME LIMIT_S COMMAND...: runs, logs to $OUT/run.log, notes rc and time
  local name=$1 limit=$2
  shift 2
  local start=$(date +%s)
  echo "==== $name: $*" >> "$OUT/run.log"
  timeout "$limit" "$@" >> "$OUT/run.log" 2>&1
  local rc=$?
  summary+="$name rc=$rc ($(( $(date +%s) - start )) s)\n"
  return $rc
}
for m in $modes; do
  case $m in
    tests)
      step nvlink_communicator_test 120 "${MPI[@]}" -np 2 "$BIN/nvlink_communicator_test_np2" --gtest_brief=1
      step nccl_communicator_test_np2 120 "${MPI[@]}" -np 2 "$BIN/nccl_communicator_test_np2" --gtest_brief=1
      ;;
    parity)
      PYTHONUNBUFFERED=1 step parallel_parity 300 python3 benchmarks/cuda/parallel_parity.py \
        --binary "$BIN/llm_cuda_logits" --llama3-layers 2 --out "$OUT/parity.md" ;;
    allreduce)
      for n in 2 4; do
        (( GPUS >= n )) || continue
        step "allreduce_bench_np$n" 120 "${MPI[@]}" -np $n "$BIN/allreduce_bench" --out "$OUT/allreduce.md"
      done ;;
    tp)
      # Per-token decode latency at batch 1 and 16 (TP1 / TP2 / TP4).
      E=("$BIN/llm_engine_bench" --model "$MODEL8B" --dummy-weights --device cuda --dtype bf16 --out "$OUT/engine.md")
      lat=(--batch 1,16 --prompt-len 128 --output-len 128 --repeats 3)
      step engine_tp1 150 "${E[@]}" "${lat[@]}" --label "one GPU"
      step engine_tp2 150 "${MPI[@]}" -np 2 "${E[@]}" "${lat[@]}" --tp 2 --label "NVLink push all-reduce, then add + RMSNorm"
      LLM_PUSH_ALLREDUCE=0 step engine_tp2_one_shot 150 "${MPI[@]}" -np 2 "${E[@]}" "${lat[@]}" --tp 2 \
        --label "NVLink one-shot all-reduce (no push kernel), fused from 32 rows"
      LLM_CUSTOM_ALLREDUCE=0 step engine_tp2_nccl 150 "${MPI[@]}" -np 2 "${E[@]}" "${lat[@]}" --tp 2 --label "NCCL all-reduce"
      if (( GPUS >= 4 )); then
        step engine_tp4 150 "${MPI[@]}" -np 4 "${E[@]}" "${lat[@]}" --tp 4 --label "NVLink push all-reduce, then add + RMSNorm"
      fi ;;
    pp)
      # PP throughput at a saturating batch: PP1 at 128 sequences vs PPn with 128 per micro-batch.
      E=("$BIN/llm_engine_bench" --model "$MODEL8B" --dummy-weights --device cuda --dtype bf16 --out "$OUT/engine.md")
      thr=(--prompt-len 256 --output-len 256 --repeats 2 --max-tokens-per-step 8192)
      step engine_pp1 150 "${E[@]}" "${thr[@]}" --batch 128 --label "one stage, saturating batch"
      # Default split: balanced with the LM head counted (17/15 for this shape); then the even one.
      step engine_pp2 150 "${MPI[@]}" -np 2 "${E[@]}" "${thr[@]}" --batch 256 --pp 2 --label "2 stages, 128 per micro-batch"
      step engine_pp2_even 150 "${MPI[@]}" -np 2 "${E[@]}" "${thr[@]}" --batch 256 --pp 2 --layers-per-stage 16,16 \
        --label "2 stages of 16 layers, 128 per micro-batch"
      if (( GPUS >= 4 )); then
        step engine_pp4 150 "${MPI[@]}" -np 4 "${E[@]}" "${thr[@]}" --batch 512 --pp 4 --label "4 stages, 128 per micro-batch"
      fi ;;
  esac
done
grep -E "FAILED|Failure|error|Error" "$OUT/run.log" | head -30
grep -E "^==== |stage timeline" "$OUT/run.log"
echo "==== summary"
printf "$summary"
for f in parity.md allreduce.md engine.md; do [ -f "$OUT/$f" ] && { echo "== $f"; cat "$OUT/$f"; }; done
