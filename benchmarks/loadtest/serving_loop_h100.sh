#!/usr/bin/env bash
# The serving loop, served: Llama-3-8B shape (bf16 dummy weights) on one GPU behind `llm serve`,
# driven through gRPC by `llm loadtest`:
#   - closed loops of 128-token prompts and 512 output tokens at each concurrency of LEVELS
#     (DURATION per level, after a warm-up),
#   - 1000-in/1000-out requests sent all at once (ALL_AT_ONCE of them): the max-throughput case,
# with GPU utilization sampled by nvidia-smi and the server's metrics (step phases) saved after.
# Usage, from the repository root on the GPU machine (benchmarks/loadtest/run_device.sh wraps it):
#   OUT_DIR=/tmp/out benchmarks/loadtest/serving_loop_h100.sh     (env: EXTRA_SERVE_FLAGS, MAX_SEQS, ...)
# LOADTEST_FLAGS go to every load level, e.g. "--temperature 0.6 --top-p 0.9" for sampled requests (the
# default is greedy, which skips most of the sampler's work).
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-$REPO/benchmarks/cuda/configs/llama3-8b}
PORT=${PORT:-50051}
LEVELS=${LEVELS:-1,32,128,256,512}
DURATION=${DURATION:-25s}
ALL_AT_ONCE=${ALL_AT_ONCE:-768}
TAG=${TAG:-overlap}
need_binaries "$LLM" "$LLM_CLIENT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
start_server "serve_$TAG" TERM "$LLM" serve --model "$MODEL" --dummy-weights --device cuda --dtype bf16 \
  --host 127.0.0.1 --port "$PORT" --metrics-port 9090 --max-context 4096 --max-seqs "${MAX_SEQS:-512}" \
  --max-tokens-per-step "${MAX_TOKENS_PER_STEP:-4096}" --max-queue 100000 ${EXTRA_SERVE_FLAGS:-}
wait_serving "127.0.0.1:$PORT"
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 250 > "$OUT_DIR/util_$TAG.txt" &
SMI=$!
if [[ $LEVELS != none ]]; then
  loadtest "closed_128x512_$TAG" --concurrency "$LEVELS" --duration "$DURATION" --warmup-requests 16 \
    --input-len 128 --output-len 512 --request-timeout 10m ${LOADTEST_FLAGS:-} || true
fi
if [[ $ALL_AT_ONCE != 0 ]]; then
  loadtest "all_at_once_1000x1000_$TAG" --rate inf --num-requests "$ALL_AT_ONCE" --input-len 1000 --output-len 1000 \
    --request-timeout 10m ${LOADTEST_FLAGS:-} || true
fi
kill $SMI 2> /dev/null || true
curl -s "http://127.0.0.1:9090/metrics" > "$OUT_DIR/metrics_$TAG.txt" 2> /dev/null || true
stop_server
log "reports in $OUT_DIR"
