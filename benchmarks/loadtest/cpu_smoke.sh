#!/usr/bin/env bash
# CPU smoke scenario (CI: tests/loadtest): serves a tiny fixture model on the CPU and loads it
# three ways, checking nothing about speed (tests/loadtest checks the reports' consistency):
#   smoke_sweep    closed loop at 1 and 4 in flight, synthetic uniform lengths
#   smoke_dataset  Poisson 20 req/s over data/smoke_prompts.jsonl (text when MODEL has a
#                  tokenizer), gamma arrivals with burstiness 0.5
#   smoke_sla      SLA search (P99 TTFT <= 2 s, P99 TPOT <= 200 ms) between 8 and 32 req/s
# Usage: benchmarks/loadtest/cpu_smoke.sh   (MODEL=DIR, BUILD_DIR=build, OUT_DIR=DIR)
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-$REPO/tests/data/models/llama-tiny}
need_binaries "$LLM" "$LLM_CLIENT"
start_server serve TERM "$LLM" serve --model "$MODEL" --host 127.0.0.1 --port 0 --http-port 0 --metrics-port -1 --threads 2 \
  --max-seqs 16
wait_serving
common=(--connections 2 --progress-interval 2 --seed 8)
loadtest smoke_sweep "${common[@]}" --concurrency 1,4 --num-requests 24 --warmup-requests 4 \
  --input-len uniform:16:64 --output-len uniform:8:32
loadtest smoke_dataset "${common[@]}" --rate 20 --burstiness 0.5 --num-requests 24 --warmup-requests 2 \
  --dataset "$REPO/benchmarks/loadtest/data/smoke_prompts.jsonl" --json-requests
loadtest smoke_sla "${common[@]}" --sla-ttft-p99 2s --sla-tpot-p99 200ms --sla-search --sla-start-rate 8 \
  --sla-max-rate 32 --sla-max-probes 4 --num-requests 24 --warmup-requests 2 --input-len 32 --output-len 16
stop_server
log "reports in $OUT_DIR"
