#!/usr/bin/env bash
# Issue 22's figures on 2 GPUs with NVLink, in one device call (Llama-3-8B shape, dummy weights):
#   latency  TP1 and TP2 per-token decode latency at batch 1 and 16, bf16 and FP8 (weights + KV)
#   served   closed loops of 256 streams (128/512) through the engine alone: TP1, TP2, PP2, bf16
#   served_fp8  the same, TP1 and TP2, FP8 weights and FP8 KV cache
#   parity   TP2 and PP2 against one GPU, teacher-forced: bf16, fp32 and FP8 (weights + KV)
#   all_at_once  `llm serve` (mpirun -np 2 for TP2/PP2) under 1000 requests of 1000/1000 sent at once:
#            TP1, TP2, PP2 in each format of ALL_AT_ONCE_MODES (default "bf16")
#   survival the front end over a TP2 group on the GPUs: overhead, then SIGKILL/SIGSTOP of a rank
# Logs and tables in $OUT. From the repo root on the GPU machine:
#   benchmarks/parallel/two_gpu_h200.sh [latency] [served] [served_fp8] [parity] [all_at_once] [survival]
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
    parity)
      PYTHONUNBUFFERED=1 run parity 300 python3 benchmarks/cuda/parallel_parity.py --binary "$BIN/llm_cuda_logits" \
        --llama3-layers 2 --fp8 --out "$OUT/parity.md"
      cat "$OUT/parity.md" ;;
    all_at_once)
      MODES=${ALL_AT_ONCE_MODES:-bf16} LAYOUTS="1x1 2x1 1x2" ALL_AT_ONCE=1000 BUILD_DIR=$PWD/.device \
        OUT_DIR=/tmp/all_at_once run all_at_once 540 bash benchmarks/loadtest/serving_fp8_h100.sh
      cp /tmp/all_at_once/*.json "$OUT/" 2> /dev/null
      python3 -c 'import json, sys
for f in sys.argv[1:]:
    r = json.load(open(f))["runs"][0]
    t = r["throughput"]
    print(f.split("/")[-1], r["requests"]["completed"], "done", r["requests"]["failed"], "failed,",
          round(t["output_tokens_per_s"]), "output tok/s, steady", round(t.get("steady_output_tokens_per_s", 0)))' \
        /tmp/all_at_once/*.json ;;
    survival)
      MODEL=$M DEVICE=cuda DUMMY=1 TP=2 OUTPUT_LEN=256 RECOVERY_OUTPUT_LEN=2000 KILL_AFTER_S=3 BUILD_DIR=$PWD/.device \
        OUT_DIR=/tmp/survival run survival 540 bash benchmarks/loadtest/front_end_survival.sh
      cp /tmp/survival/*_summary.md "$OUT/" 2> /dev/null
      cat /tmp/survival/*_summary.md ;;
  esac
done
grep -E "FAILED|Failure|rror" "$OUT/run.log" | head -20
cat "$OUT/engine.md"
