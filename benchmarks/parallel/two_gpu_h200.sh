#!/usr/bin/env bash
# Issue 22's figures on 2 GPUs with NVLink, in one device call (Llama-3-8B shape, dummy weights):
#   latency  TP1 and TP2 per-token decode latency at batch 1 and 16, bf16 and FP8 (weights + KV)
#   served   closed loops of 256 streams (128/512) through the engine alone: TP1, TP2, PP2, bf16
#   served_fp8  the same, TP1 and TP2, FP8 weights and FP8 KV cache
# Logs and tables in $OUT. From the repo root on the GPU machine:
#   benchmarks/parallel/two_gpu_h200.sh [latency] [served] [served_fp8]
set -uo pipefail
source "$(dirname "$0")/../device_prelude.sh"
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH)
M=benchmarks/cuda/configs/llama3-8b
E=("$BIN/llm_engine_bench" --model "$M" --dummy-weights --device cuda --dtype bf16 --out "$OUT/engine.md")
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
run() {  # run NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "==== $name: $*" >> "$OUT/run.log"
  timeout "$limit" "$@" >> "$OUT/run.log" 2>&1
  echo "$name rc=$?"
}
for m in ${*:-latency served}; do
  case $m in
    latency)
      lat=(--batch 1,16 --prompt-len 128 --output-len 128 --repeats 2)
      for q in bf16 fp8; do
        f=(); [[ $q == fp8 ]] && f=(--quantization fp8 --kv-cache-dtype fp8)
        run "tp1_$q" 120 "${E[@]}" "${lat[@]}" "${f[@]}" --label "one GPU, $q"
        run "tp2_$q" 120 "${MPI[@]}" -np 2 "${E[@]}" "${lat[@]}" "${f[@]}" --tp 2 --label "TP2, $q"
      done ;;
    served)
      srv=(--concurrency 256 --duration 20 --prompt-len 128 --output-len 512 --max-seqs 256 --max-tokens-per-step 4096 --max-context 4096)
      run served_tp1 120 "${E[@]}" "${srv[@]}" --label "one GPU"
      run served_tp2 120 "${MPI[@]}" -np 2 "${E[@]}" "${srv[@]}" --tp 2 --label "TP2"
      run served_pp2 120 "${MPI[@]}" -np 2 "${E[@]}" "${srv[@]}" --pp 2 --label "PP2" ;;
    served_fp8)
      srv=(--concurrency 256 --duration 20 --prompt-len 128 --output-len 512 --max-seqs 256 --max-tokens-per-step 4096 --max-context 4096
           --quantization fp8 --kv-cache-dtype fp8)
      run served_fp8_tp1 120 "${E[@]}" "${srv[@]}" --label "one GPU, FP8 + FP8 KV"
      run served_fp8_tp2 120 "${MPI[@]}" -np 2 "${E[@]}" "${srv[@]}" --tp 2 --label "TP2, FP8 + FP8 KV" ;;
  esac
done
grep -E "FAILED|Failure|rror" "$OUT/run.log" | head -20
cat "$OUT/engine.md"
