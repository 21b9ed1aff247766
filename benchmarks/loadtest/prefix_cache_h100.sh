#!/usr/bin/env bash
# Prefix caching on one GPU (Llama-3-8B shape, bf16 dummy weights, prompts of random token ids),
# each scenario with caching on (the default) and off (--no-enable-prefix-caching):
#   nohit      closed loop of 256 streams, 128-token prompts of their own, 128 output tokens: the
#              cost of caching when nothing is shared (throughput within 1% of off)
#   prefix_ttft   2,000-token shared prefix + 100-token suffixes, 128 output tokens, 4 req/s:
#              TTFT P50
#   prefix_max    the same requests, 512 sent at once: max throughput
#   turns      8-turn conversations (100 new tokens and a 100-token answer a turn), 32 in flight:
#              TTFT P99 per turn
# Reports in $OUT_DIR. Usage (GPU machine): benchmarks/loadtest/run_device.sh prefix_cache_h100.sh
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-$REPO/benchmarks/cuda/configs/llama3-8b}
PORT=${PORT:-50051}
need_binaries "$LLM" "$LLM_CLIENT"
for mode in ${MODES:-on off}; do
  flags=()
  [[ $mode == off ]] && flags=(--no-enable-prefix-caching)
  start_server "serve_$mode" TERM "$LLM" serve --model "$MODEL" --dummy-weights --device cuda --dtype bf16 "${flags[@]}" \
    --host 127.0.0.1 --port "$PORT" --http-port -1 --metrics-port -1 --max-context 4096 --max-seqs 512 \
    --max-tokens-per-step "${MAX_TOKENS_PER_STEP:-4096}" --max-queue 100000
  wait_serving "127.0.0.1:$PORT"
  loadtest "nohit_$mode" --concurrency 256 --duration "${NOHIT_DURATION:-25s}" --warmup-requests 32 \
    --input-len 128 --output-len 128 || true
  loadtest "prefix_ttft_$mode" --rate 4 --num-requests "${TTFT_REQUESTS:-80}" --shared-prefix-len 2000 \
    --shared-prefixes 1 --input-len 100 --output-len 128 || true
  loadtest "prefix_max_$mode" --rate inf --num-requests "${MAX_REQUESTS:-512}" --shared-prefix-len 2000 \
    --shared-prefixes 1 --input-len 100 --output-len 128 || true
  loadtest "turns_$mode" --concurrency 32 --num-requests "${TURN_REQUESTS:-512}" --turns 8 --conversations 64 \
    --input-len 100 --output-len 100 || true
  stop_server
done
grep -H "^load\|^throughput\|^steady\|^tokens\|  TTFT" "$OUT_DIR"/*.txt > "$OUT_DIR/prefix_cache_summary.md" || true
log "reports in $OUT_DIR"
