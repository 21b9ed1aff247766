#!/usr/bin/env bash
# The HTTP/SSE front end against gRPC on one engine (issue 19's target: within 5% of gRPC's served
# throughput at 256 concurrent streams). Llama-3-8B shape, bf16 dummy weights, one H100: the same
# closed-loop scenario (256 in flight, 1000 prompt tokens of random ids, 1000 output tokens, EOS
# ignored) through `--backend grpc` and `--backend openai` (streamed /v1/completions), alternated
# twice so that drift shows, then a chat round. Reports in $OUT_DIR; compare "steady" output tok/s.
# Usage (GPU machine, built with CUDA):  benchmarks/loadtest/run_device.sh http_vs_grpc_h100.sh
#   CONCURRENCY=256 REQUESTS=768 WARMUP=64 INPUT_LEN=1000 OUTPUT_LEN=1000 ROUNDS=2
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-$REPO/benchmarks/cuda/configs/llama3-8b}
PORT=${PORT:-50051}
HTTP_PORT=${HTTP_PORT:-8000}
CONCURRENCY=${CONCURRENCY:-256}
REQUESTS=${REQUESTS:-768}
WARMUP=${WARMUP:-64}
ROUNDS=${ROUNDS:-2}
need_binaries "$LLM" "$LLM_CLIENT"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
fi
start_server serve TERM "$LLM" serve --model "$MODEL" --dummy-weights --device "${DEVICE:-cuda}" --dtype bf16 \
  --host 127.0.0.1 --port "$PORT" --http-port "$HTTP_PORT" --max-context 4096 --max-seqs "${MAX_SEQS:-256}" \
  --max-tokens-per-step "${MAX_TOKENS_PER_STEP:-4096}" --max-queue 100000
wait_serving "127.0.0.1:$PORT"
shape=(--concurrency "$CONCURRENCY" --num-requests "$REQUESTS" --warmup-requests "$WARMUP" --connections 8
       --input-len "${INPUT_LEN:-1000}" --output-len "${OUTPUT_LEN:-1000}" --request-timeout 30m --seed 1)
for round in $(seq 1 "$ROUNDS"); do
  loadtest "grpc_c${CONCURRENCY}_r$round" "${shape[@]}"
  loadtest "openai_c${CONCURRENCY}_r$round" "${shape[@]}" --backend openai --target "http://127.0.0.1:$HTTP_PORT"
done
loadtest "openai_chat_c${CONCURRENCY}" "${shape[@]}" --backend openai-chat --target "http://127.0.0.1:$HTTP_PORT"
# /metrics and /health under 1,000 idle and 1,000 slow connections while the server holds the model.
python3 "$REPO/benchmarks/http/measure_connections.py" --port "$HTTP_PORT" --streams 0 --idle 1000 --slow 1000 \
  | tee "$OUT_DIR/connections.txt"
stop_server
grep -H "steady\|throughput" "$OUT_DIR"/*_c"$CONCURRENCY"*.txt | tee "$OUT_DIR/http_vs_grpc_summary.md"
log "reports in $OUT_DIR"
