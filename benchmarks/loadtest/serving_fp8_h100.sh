#!/usr/bin/env bash
# 1000-in/1000-out requests sent all at once (the max-throughput case) against `llm serve` with the
# Llama-3-8B shape, bf16 then FP8 (weights and KV cache), same engine flags otherwise.
#   OUT_DIR=/tmp/out benchmarks/loadtest/serving_fp8_h100.sh     (env: ALL_AT_ONCE, MODES "bf16 fp8")
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-$REPO/benchmarks/cuda/configs/llama3-8b}
PORT=${PORT:-50051}
ALL_AT_ONCE=${ALL_AT_ONCE:-768}
need_binaries "$LLM" "$LLM_CLIENT"
for mode in ${MODES:-bf16 fp8}; do
  flags=()
  [[ $mode == fp8 ]] && flags=(--quantization fp8 --kv-cache-dtype fp8)
  start_server "serve_$mode" TERM "$LLM" serve --model "$MODEL" --dummy-weights --device cuda --dtype bf16 "${flags[@]}" \
    --host 127.0.0.1 --port "$PORT" --metrics-port -1 --max-context 4096 --max-seqs "${MAX_SEQS:-512}" \
    --max-tokens-per-step "${MAX_TOKENS_PER_STEP:-4096}" --max-queue 100000
  wait_serving "127.0.0.1:$PORT"
  loadtest "all_at_once_1000x1000_$mode" --rate inf --num-requests "$ALL_AT_ONCE" --input-len 1000 --output-len 1000 \
    --request-timeout 10m || true
  stop_server
done
log "reports in $OUT_DIR"
